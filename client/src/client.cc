#include "stitch/client/client.h"

#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "bundle_cache.h"
#include "client_internal.h"
#include "stitch/rpc/grpc_status.h"
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
    case Outcome::kCluster:
      return "hit_cluster";
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

}  // namespace internal

namespace {

using internal::BundleCache;
using Stub = v1::KernelService::Stub;
using TimePoint = std::chrono::system_clock::time_point;

constexpr int kMaxReceiveBytes = 256 << 20;
// gRPC's default reconnect backoff grows to two minutes; a restarted daemon should be found
// again within a second, and a connect to a node-local socket costs little.
constexpr int kInitialReconnectBackoffMs = 100;
constexpr int kMaxReconnectBackoffMs = 1000;

const char kForkedMessage[] =
    "this process was forked from one that had used the stitchd client, and gRPC cannot be "
    "used safely after fork(); use the client before forking (children get its bundles "
    "from the in-process cache) or in processes that have not inherited gRPC state";

std::string FallbackReason(const grpc::Status& status) {
  return std::string(rpc::GrpcCodeName(status.error_code())) + ": " + status.error_message();
}

Result Fallback(std::string reason) {
  Result r;
  r.outcome = Outcome::kFallback;
  r.reason = std::move(reason);
  return r;
}

Result LocalHit(BundleCache::Entry entry) {
  Result r;
  r.outcome = Outcome::kLocal;
  r.bundle = std::move(entry.bundle);
  r.key = std::move(entry.key);
  return r;
}

TimePoint DeadlineAfter(std::chrono::milliseconds timeout) {
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
    case v1::CompileResponse::CLUSTER:
      r.outcome = Outcome::kCluster;
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
  if (response.has_runtimes()) {
    r.runtimes =
        std::make_shared<const v1::KernelRuntimes>(std::move(*response.mutable_runtimes()));
  }
  if (cache != nullptr) cache->Insert(digest, BundleCache::Entry{r.bundle, r.key});
  return r;
}

Status ToStatus(const grpc::Status& status, const char* method, const std::string& address) {
  StatusCode code = rpc::FromGrpcCode(status.error_code());
  std::string message = std::string(method) + " at " + address + ": " + status.error_message();
  // Keep the gRPC code visible where the mapping loses it.
  const char* grpc_name = rpc::GrpcCodeName(status.error_code());
  if (std::string(grpc_name) != StatusCodeName(code)) {
    message += std::string(" (gRPC ") + grpc_name + ")";
  }
  return Status(code, std::move(message));
}

void RunDone(const std::function<void(Result)>& done, Result result) {
  // `done` may run on a gRPC thread, where an escaping exception would end the process.
  try {
    done(std::move(result));
  } catch (...) {
  }
}

// fork()
//
// gRPC 1.51 keeps process-wide state: one epoll set, timer, executor and poller threads,
// internal locks. A child after fork() shares the epoll set with its parent and inherits
// every lock and condition variable in the state the parent's threads left them, without
// those threads. Measured in this library's tests, a child of a process that had used gRPC
// blocked inside gRPC (grpc_init, the handshake's timer, the poller) or crashed in absl
// when gRPC signalled a condition variable a parent thread had been waiting on; its calls
// could also take the parent's events and make the parent abort. gRPC's own fork support
// (GRPC_ENABLE_FORK_SUPPORT=1 with grpc_prefork/grpc_postfork_child) deadlocked inside its
// post-fork handler. So a process forked from one that used gRPC through this library
// never touches gRPC: it answers from the in-process cache it inherited and falls back
// otherwise. A process forked before the first use is a fresh gRPC process.

std::atomic<pid_t> g_origin_pid{0};  // the process that first used gRPC through this library

bool InForkedChild() {
  pid_t origin = g_origin_pid.load(std::memory_order_relaxed);
  return origin != 0 && origin != getpid();
}

// Holds every client's mutexes across fork(), so that a child (which still uses the
// in-process cache and the usage counts) never inherits one locked by another thread.
struct ForkState {
  std::mutex mu;
  std::unordered_set<internal::ForkLockable*> clients;
};

ForkState& Fork() {
  static ForkState* state = [] {
    auto* st = new ForkState;  // never destroyed: fork handlers may run during exit
    auto unlock_all = [] {
      ForkState& f = Fork();
      for (internal::ForkLockable* c : f.clients) c->UnlockAfterFork();
      f.mu.unlock();
    };
    pthread_atfork(
        [] {
          ForkState& f = Fork();
          f.mu.lock();
          for (internal::ForkLockable* c : f.clients) c->LockForFork();
        },
        unlock_all, unlock_all);
    return st;
  }();
  return *state;
}

// How the channel authenticates the daemon (and itself), from ClientOptions' tls_* fields.
struct ChannelSecurity {
  bool tls = false;
  grpc::SslCredentialsOptions ssl;
  std::string server_name;  // overrides the name the daemon's certificate must carry
  grpc::Status error;       // a TLS file that could not be read: every call fails with it
};

// Returns `path`'s contents, or a FAILED_PRECONDITION status naming `field` and the path.
grpc::Status ReadTlsFile(const char* field, const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, std::string("ClientOptions::") +
                                                                   field + ": cannot read " + path +
                                                                   ": " + std::strerror(errno));
  }
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (out->empty()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        std::string("ClientOptions::") + field + ": " + path + " is empty");
  }
  return grpc::Status::OK;
}

// Returns the security of a channel to `address`: TLS for a TCP address when a CA or a
// client certificate is configured, plaintext for unix sockets (local, guarded by the
// socket's mode) and otherwise.
ChannelSecurity LoadChannelSecurity(const ClientOptions& o, const std::string& address) {
  ChannelSecurity s;
  const bool unix_socket =
      address.rfind("unix:", 0) == 0 || address.rfind("unix-abstract:", 0) == 0;
  if (unix_socket || (o.tls_ca_file.empty() && o.tls_cert_file.empty())) return s;
  s.tls = true;
  s.server_name = o.tls_server_name;
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    s.error = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                           "ClientOptions: tls_cert_file and tls_key_file go together (" +
                               (o.tls_cert_file.empty() ? o.tls_key_file : o.tls_cert_file) +
                               " is alone)");
    return s;
  }
  if (!o.tls_ca_file.empty()) {
    s.error = ReadTlsFile("tls_ca_file", o.tls_ca_file, &s.ssl.pem_root_certs);
    if (!s.error.ok()) return s;
  }
  if (!o.tls_cert_file.empty()) {
    s.error = ReadTlsFile("tls_cert_file", o.tls_cert_file, &s.ssl.pem_cert_chain);
    if (!s.error.ok()) return s;
    s.error = ReadTlsFile("tls_key_file", o.tls_key_file, &s.ssl.pem_private_key);
  }
  return s;
}

// The channel and stub of the process that made them; never destroyed in another process.
struct Connection {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<Stub> stub;
};

std::shared_ptr<Connection> MakeConnection(const std::string& address,
                                           const ChannelSecurity& security) {
  pid_t unset = 0;
  g_origin_pid.compare_exchange_strong(unset, getpid());
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kInitialReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  // The daemon is node-local: an http_proxy meant for the outside world must not apply.
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  auto* conn = new Connection;
  if (!security.server_name.empty()) args.SetSslTargetNameOverride(security.server_name);
  conn->channel = grpc::CreateCustomChannel(
      address,
      security.tls ? grpc::SslCredentials(security.ssl) : grpc::InsecureChannelCredentials(), args);
  conn->stub = v1::KernelService::NewStub(conn->channel);
  pid_t owner = getpid();
  return std::shared_ptr<Connection>(conn, [owner](Connection* c) {
    if (getpid() == owner) delete c;
  });
}

template <typename Request, typename Response>
using StubMethod = grpc::Status (Stub::*)(grpc::ClientContext*, const Request&, Response*);

}  // namespace

struct Client::Impl final : internal::ForkLockable {
  explicit Impl(ClientOptions opts);
  ~Impl();

  // Returns this process's connection, or null with `error` set in a process forked from
  // one that used gRPC, or when the TLS files could not be read.
  std::shared_ptr<Connection> GetConnection(grpc::Status* error);
  // Returns the in-process cache's entry for `request`, and its digest in `digest` ("" when
  // the cache is off).
  std::optional<BundleCache::Entry> FindLocal(const v1::CompileRequest& request,
                                              std::string* digest);
  Result Unary(bool lookup, const v1::CompileRequest& request, std::chrono::milliseconds deadline);
  void StartAsync(const v1::CompileRequest& request, std::function<void(Result)> done);
  // Calls `method` within `deadline` (options.admin_deadline when unset) and returns its
  // response, or its error as a Status naming `name` and the address.
  template <typename Request, typename Response>
  StatusOr<Response> Admin(const char* name, StubMethod<Request, Response> method,
                           const Request& request,
                           std::optional<std::chrono::milliseconds> deadline = std::nullopt);

  void LockForFork() override;
  void UnlockAfterFork() override;

  ClientOptions options;
  std::string address;
  ChannelSecurity security;            // read once, at construction
  std::shared_ptr<BundleCache> cache;  // null when disabled; shared with calls in flight
  std::atomic<int> fallback{v1::FALLBACK_UNSPECIFIED};  // options.fallback, or SetFallback's

  std::mutex conn_mu;
  std::condition_variable conn_cv;
  std::shared_ptr<Connection> conn;
  pid_t conn_pid = 0;
  int async_in_flight = 0;  // CompileAsync calls of conn_pid's process not finished yet

  std::mutex usage_mu;
  std::unordered_map<std::string, v1::UsageRecord> pending_usage;  // by key, key field unset
  std::atomic<uint64_t> steps{0};                                  // ShouldTimeFallback calls
};

namespace {

void AddTime(v1::MeasuredTime& into, const v1::MeasuredTime& from) {
  into.set_samples(into.samples() + from.samples());
  into.set_seconds(into.seconds() + from.seconds());
}

// Adds `from`'s counts and times into `into`.
void MergeUsage(v1::UsageRecord& into, const v1::UsageRecord& from) {
  into.set_invocations(into.invocations() + from.invocations());
  if (from.has_stitched()) AddTime(*into.mutable_stitched(), from.stitched());
  if (from.has_fallback()) AddTime(*into.mutable_fallback(), from.fallback());
}

}  // namespace

Client::Impl::Impl(ClientOptions opts)
    : options(std::move(opts)),
      address(internal::NormalizeAddress(options.address)),
      security(LoadChannelSecurity(options, address)) {
  if (options.local_cache_entries > 0) {
    cache = std::make_shared<BundleCache>(options.local_cache_entries);
  }
  ForkState& f = Fork();
  std::lock_guard<std::mutex> lock(f.mu);
  f.clients.insert(this);
}

Client::Impl::~Impl() {
  {
    ForkState& f = Fork();
    std::lock_guard<std::mutex> lock(f.mu);
    f.clients.erase(this);
  }
  // A callback must not drop the last reference to its channel: gRPC would then join the
  // thread running it. Every call has a deadline, so this wait is bounded. In a child the
  // parent's calls are not this process's to wait for.
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

std::shared_ptr<Connection> Client::Impl::GetConnection(grpc::Status* error) {
  if (InForkedChild()) {
    *error = grpc::Status(grpc::StatusCode::UNAVAILABLE, kForkedMessage);
    return nullptr;
  }
  if (!security.error.ok()) {
    *error = security.error;
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(conn_mu);
  if (conn == nullptr) {
    conn = MakeConnection(address, security);
    conn_pid = getpid();
  }
  return conn;
}

std::optional<BundleCache::Entry> Client::Impl::FindLocal(const v1::CompileRequest& request,
                                                          std::string* digest) {
  if (!cache) return std::nullopt;
  *digest = internal::RequestDigest(request);
  if (digest->empty()) return std::nullopt;
  return cache->Find(*digest);
}

Result Client::Impl::Unary(bool lookup, const v1::CompileRequest& request,
                           std::chrono::milliseconds deadline) {
  try {
    std::string digest;
    if (std::optional<BundleCache::Entry> hit = FindLocal(request, &digest)) {
      return LocalHit(std::move(*hit));
    }
    grpc::Status error;
    std::shared_ptr<Connection> c = GetConnection(&error);
    if (c == nullptr) return Fallback(FallbackReason(error));
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

void Client::Impl::StartAsync(const v1::CompileRequest& request, std::function<void(Result)> done) {
  if (!done) return;
  // The state of one call, owned by gRPC's callback from the moment the call starts.
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
    if (std::optional<BundleCache::Entry> hit = FindLocal(request, &digest)) {
      RunDone(done, LocalHit(std::move(*hit)));
      return;
    }
    grpc::Status error;
    std::shared_ptr<Connection> c = GetConnection(&error);
    if (c == nullptr) {
      RunDone(done, Fallback(FallbackReason(error)));
      return;
    }
    call = std::make_unique<Call>();
    call->request = request;
    call->conn = std::move(c);
    call->cache = cache;
    call->digest = std::move(digest);
    call->owner = this;
    call->context.set_deadline(DeadlineAfter(options.compile_deadline));
    call->done = std::move(done);
    std::lock_guard<std::mutex> lock(conn_mu);
    ++async_in_flight;
  } catch (const std::exception& e) {
    if (call && call->done) done = std::move(call->done);
    RunDone(done, Fallback(std::string("INTERNAL: ") + e.what()));
    return;
  }
  Call* raw = call.release();
  raw->conn->stub->async()->Compile(
      &raw->context, &raw->request, &raw->response, [raw](grpc::Status status) {
        std::unique_ptr<Call> owned(raw);
        Result result;
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
        // From here on the client may be gone.
        RunDone(done_fn, std::move(result));
      });
}

template <typename Request, typename Response>
StatusOr<Response> Client::Impl::Admin(const char* name, StubMethod<Request, Response> method,
                                       const Request& request,
                                       std::optional<std::chrono::milliseconds> deadline) {
  try {
    grpc::Status error;
    std::shared_ptr<Connection> c = GetConnection(&error);
    if (c == nullptr) return ToStatus(error, name, address);
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(deadline.value_or(options.admin_deadline)));
    Response response;
    grpc::Status status = (c->stub.get()->*method)(&context, request, &response);
    if (!status.ok()) return ToStatus(status, name, address);
    return response;
  } catch (const std::exception& e) {
    return Internal(std::string(name) + ": " + e.what());
  }
}

Client::Client(ClientOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->fallback = impl_->options.fallback;
}

void Client::SetFallback(v1::Fallback fallback) { impl_->fallback = fallback; }

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
    v1::UsageRecord& r = impl_->pending_usage[key];
    r.set_invocations(r.invocations() + invocations);
  } catch (...) {
    // Usage is advisory: losing a count must not fail a training step.
  }
}

Status Client::RecordMeasuredTime(const std::string& key, TimedKernels kernels, double seconds,
                                  uint64_t samples) {
  if (key.empty()) return InvalidArgument("RecordMeasuredTime: empty key");
  if (samples == 0) return InvalidArgument("RecordMeasuredTime: zero samples");
  if (!std::isfinite(seconds) || seconds < 0) {
    return InvalidArgument("RecordMeasuredTime: seconds must be finite and not negative");
  }
  try {
    std::lock_guard<std::mutex> lock(impl_->usage_mu);
    v1::UsageRecord& r = impl_->pending_usage[key];
    v1::MeasuredTime& t =
        kernels == TimedKernels::kStitched ? *r.mutable_stitched() : *r.mutable_fallback();
    t.set_samples(t.samples() + samples);
    t.set_seconds(t.seconds() + seconds);
  } catch (...) {
    return ResourceExhausted("RecordMeasuredTime: out of memory");
  }
  return Status::Ok();
}

bool Client::ShouldTimeFallback() {
  const uint32_t period = impl_->options.fallback_timing_period;
  if (period == 0) return false;
  // The last step of each period, so a short job that never reaches one is not slowed.
  return impl_->steps.fetch_add(1) % period == period - 1;
}

StatusOr<v1::ReportUsageResponse> Client::FlushUsage() {
  std::unordered_map<std::string, v1::UsageRecord> batch;
  {
    std::lock_guard<std::mutex> lock(impl_->usage_mu);
    batch.swap(impl_->pending_usage);
  }
  if (batch.empty()) return v1::ReportUsageResponse();
  v1::ReportUsageRequest request;
  request.set_fallback(static_cast<v1::Fallback>(impl_->fallback.load()));
  for (const auto& [key, usage] : batch) {
    v1::UsageRecord* record = request.add_records();
    *record = usage;
    record->set_key(key);
  }
  StatusOr<v1::ReportUsageResponse> response =
      impl_->Admin("ReportUsage", &Stub::ReportUsage, request);
  if (!response.ok()) {
    // Counts recorded meanwhile went to the fresh map; add the batch back to them.
    std::lock_guard<std::mutex> lock(impl_->usage_mu);
    for (const auto& [key, usage] : batch) MergeUsage(impl_->pending_usage[key], usage);
  }
  return response;
}

StatusOr<v1::StatsResponse> Client::Stats() {
  return impl_->Admin("Stats", &Stub::Stats, v1::StatsRequest());
}

StatusOr<v1::ListEntriesResponse> Client::ListEntries(uint32_t limit) {
  v1::ListEntriesRequest request;
  request.set_limit(limit);
  return impl_->Admin("ListEntries", &Stub::ListEntries, request);
}

StatusOr<v1::CompileResponse> Client::GetEntry(const std::string& key) {
  v1::GetEntryRequest request;
  request.set_key(key);
  return impl_->Admin("GetEntry", &Stub::GetEntry, request);
}

StatusOr<v1::ListRuntimesResponse> Client::ListRuntimes(uint32_t limit) {
  v1::ListRuntimesRequest request;
  request.set_limit(limit);
  return impl_->Admin("ListRuntimes", &Stub::ListRuntimes, request);
}

StatusOr<std::vector<v1::Graph>> Client::Extract(std::string_view hlo_text, int64_t outer_extent) {
  v1::ExtractRequest request;
  request.set_hlo_text(std::string(hlo_text));
  request.set_outer_extent(outer_extent);
  // Extracting a whole training step is seconds of parsing on the daemon, like a compile.
  StatusOr<v1::ExtractResponse> response =
      impl_->Admin("Extract", &Stub::Extract, request, impl_->options.compile_deadline);
  if (!response.ok()) return response.status();
  std::vector<v1::Graph> graphs;
  graphs.reserve(static_cast<size_t>(response->graphs_size()));
  for (v1::Graph& g : *response->mutable_graphs()) graphs.push_back(std::move(g));
  return graphs;
}

}  // namespace stitch::client
