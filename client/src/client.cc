#include "stitch/client/client.h"

#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <unistd.h>

#include <condition_variable>
#include <exception>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "bundle_cache.h"
#include "client_internal.h"
#include "stitch/v1/kernel_service.grpc.pb.h"

namespace stitch::client {

const char* OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kLocal:
      return "hit_local";
    case Outcome::kMemory:
      return "hit_memory";
    case Outcome::kDisk:
      return "hit_disk";
    case Outcome::kCompiled:
      return "compiled";
    case Outcome::kFallback:
      return "fallback";
  }
  return "fallback";
}

namespace internal {

std::string NormalizeAddress(const std::string& address) {
  if (!address.empty() && address[0] == '/') return "unix://" + address;
  return address;
}

const char* GrpcCodeName(int code) {
  switch (static_cast<grpc::StatusCode>(code)) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

StatusCode ToStatusCode(int code) {
  switch (static_cast<grpc::StatusCode>(code)) {
    case grpc::StatusCode::OK:
      return StatusCode::kOk;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      return StatusCode::kInvalidArgument;
    case grpc::StatusCode::UNIMPLEMENTED:
      return StatusCode::kUnimplemented;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return StatusCode::kResourceExhausted;
    case grpc::StatusCode::NOT_FOUND:
      return StatusCode::kNotFound;
    case grpc::StatusCode::FAILED_PRECONDITION:
      return StatusCode::kFailedPrecondition;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return StatusCode::kDeadlineExceeded;
    case grpc::StatusCode::DATA_LOSS:
      return StatusCode::kDataLoss;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
      // The daemon could not be used right now; a caller may retry later.
      return StatusCode::kUnavailable;
    default:
      return StatusCode::kInternal;
  }
}

}  // namespace internal

namespace {

using internal::BundleCache;
using internal::GrpcCodeName;

constexpr int kMaxReceiveBytes = 256 << 20;
// gRPC's default reconnect backoff grows to two minutes; a restarted daemon should be found
// again within a second, and a connect to a node-local socket costs little.
constexpr int kInitialReconnectBackoffMs = 100;
constexpr int kMaxReconnectBackoffMs = 1000;

std::string FallbackReason(const grpc::Status& status) {
  return std::string(GrpcCodeName(status.error_code())) + ": " + status.error_message();
}

Result Fallback(std::string reason) {
  Result r;
  r.outcome = Outcome::kFallback;
  r.reason = std::move(reason);
  return r;
}

// The channel and stub of one process. gRPC state must not be touched in a child after
// fork(), so a Connection dropped in a process other than its creator's is leaked rather
// than destroyed.
struct Connection {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::KernelService::Stub> stub;
};

std::shared_ptr<Connection> MakeConnection(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kInitialReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kInitialReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  // The daemon is node-local: an http_proxy meant for the outside world must not apply.
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  // Channels with equal targets and arguments share connections through a process-wide
  // pool. A child after fork() inherits that pool, and reusing the parent's connection
  // would interleave two processes' frames on one socket; a channel-local pool gives the
  // child's channel a connection of its own.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto* conn = new Connection;
  conn->channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  conn->stub = v1::KernelService::NewStub(conn->channel);
  pid_t owner = getpid();
  return std::shared_ptr<Connection>(conn, [owner](Connection* c) {
    if (getpid() == owner) delete c;
  });
}

std::chrono::system_clock::time_point DeadlineAfter(std::chrono::milliseconds timeout) {
  return std::chrono::system_clock::now() + timeout;
}

// Turns a Compile or Lookup answer into a Result and caches successful ones.
Result Finish(const grpc::Status& status, v1::CompileResponse& response, BundleCache* cache,
              const std::string& digest) {
  if (!status.ok()) return Fallback(FallbackReason(status));
  Result r;
  switch (response.source()) {
    case v1::CompileResponse::MEMORY:
      r.outcome = Outcome::kMemory;
      break;
    case v1::CompileResponse::DISK:
      r.outcome = Outcome::kDisk;
      break;
    case v1::CompileResponse::COMPILED:
      r.outcome = Outcome::kCompiled;
      break;
    default:
      return Fallback("INTERNAL: daemon answered without a bundle source (" +
                      std::to_string(static_cast<int>(response.source())) + ")");
  }
  r.key = response.key();
  r.bundle = std::make_shared<const v1::KernelBundle>(std::move(*response.mutable_bundle()));
  if (cache != nullptr) cache->Insert(digest, BundleCache::Entry{r.bundle, r.key});
  return r;
}

Result LocalHit(BundleCache::Entry entry) {
  Result r;
  r.outcome = Outcome::kLocal;
  r.bundle = std::move(entry.bundle);
  r.key = std::move(entry.key);
  return r;
}

Status ToStatus(const grpc::Status& status, const char* method, const std::string& address) {
  StatusCode code = internal::ToStatusCode(status.error_code());
  std::string message = std::string(method) + " at " + address + ": " + status.error_message();
  // Keep the gRPC code visible where the mapping loses it.
  if (code == StatusCode::kInternal || code == StatusCode::kUnavailable ||
      code == StatusCode::kInvalidArgument) {
    const char* grpc_name = GrpcCodeName(status.error_code());
    if (std::string(grpc_name) != StatusCodeName(code)) {
      message += std::string(" (gRPC ") + grpc_name + ")";
    }
  }
  return Status(code, std::move(message));
}

}  // namespace

struct Client::Impl final : internal::ForkLockable {
  explicit Impl(ClientOptions opts);
  ~Impl();

  std::shared_ptr<Connection> GetConnection();
  Result Unary(bool lookup, const v1::CompileRequest& request, std::chrono::milliseconds deadline);
  void StartAsync(const v1::CompileRequest& request, std::function<void(Result)> done);

  // Each returns after the RPC ends, with the gRPC status.
  template <typename Response, typename Call>
  StatusOr<Response> Admin(const char* method, Call call);

  void LockForFork() override;
  void UnlockAfterFork() override;

  ClientOptions options;
  std::string address;
  std::shared_ptr<BundleCache> cache;  // null when disabled; shared with in-flight calls

  std::mutex conn_mu;
  std::condition_variable conn_cv;
  std::shared_ptr<Connection> conn;
  pid_t conn_pid = 0;
  int async_in_flight = 0;  // callback calls of conn_pid's process still running

  std::mutex usage_mu;
  std::unordered_map<std::string, uint64_t> pending_usage;
};

namespace {

// Locks every client's mutexes across fork(), so that a child never inherits one locked
// by a thread that does not exist in it.
struct ForkRegistry {
  std::mutex mu;
  std::unordered_set<internal::ForkLockable*> clients;
};

ForkRegistry& Registry() {
  static ForkRegistry* registry = [] {
    auto* r = new ForkRegistry;  // never destroyed: fork handlers may run during exit
    pthread_atfork(
        [] {
          ForkRegistry& reg = Registry();
          reg.mu.lock();
          for (internal::ForkLockable* c : reg.clients) c->LockForFork();
        },
        [] {
          ForkRegistry& reg = Registry();
          for (internal::ForkLockable* c : reg.clients) c->UnlockAfterFork();
          reg.mu.unlock();
        },
        [] {
          ForkRegistry& reg = Registry();
          for (internal::ForkLockable* c : reg.clients) c->UnlockAfterFork();
          reg.mu.unlock();
        });
    return r;
  }();
  return *registry;
}

}  // namespace

Client::Impl::Impl(ClientOptions opts)
    : options(std::move(opts)), address(internal::NormalizeAddress(options.address)) {
  if (options.local_cache_entries > 0) {
    cache = std::make_shared<BundleCache>(options.local_cache_entries);
  }
  ForkRegistry& reg = Registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  reg.clients.insert(this);
}

Client::Impl::~Impl() {
  {
    ForkRegistry& reg = Registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    reg.clients.erase(this);
  }
  // A callback call must not drop the last reference to its channel: gRPC would then join
  // the thread running the callback. Every call has a deadline, so this wait is bounded.
  std::unique_lock<std::mutex> lock(conn_mu);
  if (conn_pid == getpid()) conn_cv.wait(lock, [this] { return async_in_flight == 0; });
}

void Client::Impl::LockForFork() {
  conn_mu.lock();
  usage_mu.lock();
  if (cache) cache->mutex().lock();
}

void Client::Impl::UnlockAfterFork() {
  if (cache) cache->mutex().unlock();
  usage_mu.unlock();
  conn_mu.unlock();
}

std::shared_ptr<Connection> Client::Impl::GetConnection() {
  std::lock_guard<std::mutex> lock(conn_mu);
  pid_t pid = getpid();
  if (conn == nullptr || conn_pid != pid) {
    // In a child after fork() the parent's connection and its in-flight calls belong to
    // threads that do not exist here; its deleter leaks it when the last copy goes.
    conn = MakeConnection(address);
    conn_pid = pid;
    async_in_flight = 0;
  }
  return conn;
}

Result Client::Impl::Unary(bool lookup, const v1::CompileRequest& request,
                           std::chrono::milliseconds deadline) {
  try {
    std::string digest;
    if (cache) {
      digest = internal::RequestDigest(request);
      if (!digest.empty()) {
        if (std::optional<BundleCache::Entry> hit = cache->Find(digest)) {
          return LocalHit(std::move(*hit));
        }
      }
    }
    std::shared_ptr<Connection> c = GetConnection();
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(deadline));
    v1::CompileResponse response;
    grpc::Status status = lookup ? c->stub->Lookup(&context, request, &response)
                                 : c->stub->Compile(&context, request, &response);
    return Finish(status, response, cache.get(), digest);
  } catch (const std::exception& e) {
    return Fallback(std::string("INTERNAL: ") + e.what());
  } catch (...) {
    return Fallback("INTERNAL: unknown exception");
  }
}

namespace {

void RunDone(const std::function<void(Result)>& done, Result result) {
  // `done` may run on a gRPC thread, where an escaping exception would end the process.
  try {
    done(std::move(result));
  } catch (...) {
  }
}

}  // namespace

void Client::Impl::StartAsync(const v1::CompileRequest& request, std::function<void(Result)> done) {
  if (!done) return;
  struct Call {
    grpc::ClientContext context;
    v1::CompileRequest request;
    v1::CompileResponse response;
    std::function<void(Result)> done;
    std::shared_ptr<Connection> conn;
    std::shared_ptr<BundleCache> cache;
    std::string digest;
    Impl* owner = nullptr;
  };
  std::unique_ptr<Call> call;
  try {
    std::string digest;
    if (cache) {
      digest = internal::RequestDigest(request);
      if (!digest.empty()) {
        if (std::optional<BundleCache::Entry> hit = cache->Find(digest)) {
          RunDone(done, LocalHit(std::move(*hit)));
          return;
        }
      }
    }
    call = std::make_unique<Call>();
    call->request = request;
    call->conn = GetConnection();
    call->cache = cache;
    call->digest = std::move(digest);
    call->owner = this;
    call->context.set_deadline(DeadlineAfter(options.compile_deadline));
    call->done = std::move(done);
    {
      std::lock_guard<std::mutex> lock(conn_mu);
      ++async_in_flight;
    }
  } catch (const std::exception& e) {
    if (call && call->done) done = std::move(call->done);
    RunDone(done, Fallback(std::string("INTERNAL: ") + e.what()));
    return;
  }
  Call* raw = call.release();
  raw->conn->stub->async()->Compile(
      &raw->context, &raw->request, &raw->response, [raw](grpc::Status status) {
        std::unique_ptr<Call> owned(raw);
        Result result = Fallback("INTERNAL: result not built");
        try {
          result = Finish(status, owned->response, owned->cache.get(), owned->digest);
        } catch (const std::exception& e) {
          result = Fallback(std::string("INTERNAL: ") + e.what());
        }
        std::function<void(Result)> done_fn = std::move(owned->done);
        Impl* impl = owned->owner;
        // Drop this call's channel reference while the client still holds one.
        owned.reset();
        {
          std::lock_guard<std::mutex> lock(impl->conn_mu);
          --impl->async_in_flight;
          impl->conn_cv.notify_all();
        }
        // From here the client may already be gone.
        RunDone(done_fn, std::move(result));
      });
}

template <typename Response, typename Call>
StatusOr<Response> Client::Impl::Admin(const char* method, Call call) {
  try {
    std::shared_ptr<Connection> c = GetConnection();
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(options.admin_deadline));
    Response response;
    grpc::Status status = call(*c->stub, &context, &response);
    if (!status.ok()) return ToStatus(status, method, address);
    return response;
  } catch (const std::exception& e) {
    return Internal(std::string(method) + ": " + e.what());
  }
}

Client::Client(ClientOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Client::~Client() = default;

Result Client::Compile(const v1::CompileRequest& request) {
  return impl_->Unary(false, request, impl_->options.compile_deadline);
}

Result Client::Compile(const v1::CompileRequest& request, std::chrono::milliseconds deadline) {
  return impl_->Unary(false, request, deadline);
}

Result Client::Lookup(const v1::CompileRequest& request) {
  return impl_->Unary(true, request, impl_->options.lookup_deadline);
}

void Client::CompileAsync(const v1::CompileRequest& request, std::function<void(Result)> done) {
  impl_->StartAsync(request, std::move(done));
}

std::future<Result> Client::CompileAsync(const v1::CompileRequest& request) {
  auto promise = std::make_shared<std::promise<Result>>();
  std::future<Result> future = promise->get_future();
  impl_->StartAsync(request, [promise](Result r) { promise->set_value(std::move(r)); });
  return future;
}

void Client::RecordInvocations(const std::string& key, uint64_t invocations) {
  if (key.empty() || invocations == 0) return;
  try {
    std::lock_guard<std::mutex> lock(impl_->usage_mu);
    impl_->pending_usage[key] += invocations;
  } catch (...) {
    // Usage is advisory: losing a count must not fail a training step.
  }
}

StatusOr<v1::ReportUsageResponse> Client::FlushUsage() {
  std::unordered_map<std::string, uint64_t> batch;
  {
    std::lock_guard<std::mutex> lock(impl_->usage_mu);
    batch.swap(impl_->pending_usage);
  }
  if (batch.empty()) return v1::ReportUsageResponse();
  v1::ReportUsageRequest request;
  for (const auto& [key, n] : batch) {
    v1::UsageRecord* record = request.add_records();
    record->set_key(key);
    record->set_invocations(n);
  }
  StatusOr<v1::ReportUsageResponse> response = impl_->Admin<v1::ReportUsageResponse>(
      "ReportUsage",
      [&](v1::KernelService::Stub& stub, grpc::ClientContext* ctx, v1::ReportUsageResponse* out) {
        return stub.ReportUsage(ctx, request, out);
      });
  if (!response.ok()) {
    // Counts recorded meanwhile were added to the fresh map; add the batch back to them.
    std::lock_guard<std::mutex> lock(impl_->usage_mu);
    for (const auto& [key, n] : batch) impl_->pending_usage[key] += n;
  }
  return response;
}

StatusOr<v1::StatsResponse> Client::Stats() {
  return impl_->Admin<v1::StatsResponse>(
      "Stats", [](v1::KernelService::Stub& stub, grpc::ClientContext* ctx, v1::StatsResponse* out) {
        return stub.Stats(ctx, v1::StatsRequest(), out);
      });
}

StatusOr<v1::ListEntriesResponse> Client::ListEntries(uint32_t limit) {
  v1::ListEntriesRequest request;
  request.set_limit(limit);
  return impl_->Admin<v1::ListEntriesResponse>(
      "ListEntries",
      [&](v1::KernelService::Stub& stub, grpc::ClientContext* ctx, v1::ListEntriesResponse* out) {
        return stub.ListEntries(ctx, request, out);
      });
}

StatusOr<v1::CompileResponse> Client::GetEntry(const std::string& key) {
  v1::GetEntryRequest request;
  request.set_key(key);
  return impl_->Admin<v1::CompileResponse>(
      "GetEntry", [&](v1::KernelService::Stub& stub, grpc::ClientContext* ctx,
                      v1::CompileResponse* out) { return stub.GetEntry(ctx, request, out); });
}

}  // namespace stitch::client
