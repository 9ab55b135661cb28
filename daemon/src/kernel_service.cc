#include "kernel_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "savings.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/graph_proto.h"
#include "stitch/ir/shape_class.h"
#include "stitch/rpc/grpc_status.h"

namespace stitch::daemon {
namespace {

// A usage record past these is a client bug, not a workload.
constexpr uint64_t kMaxInvocationsPerRecord = uint64_t{1} << 40;
// A memory-intensive subgraph that takes a minute per invocation is not a measurement.
constexpr double kMaxMeasuredSecondsPerCall = 60;
constexpr uint32_t kDefaultListLimit = 100;
// Keys are SHA-256 digests in lowercase hex.
constexpr size_t kKeyHexDigits = 64;

bool IsHexKey(const std::string& key) {
  return key.size() == kKeyHexDigits && std::all_of(key.begin(), key.end(), [](char c) {
           return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
         });
}

RequestResult ResultOf(const Resolution& r) {
  if (r.status.ok()) {
    switch (r.source) {
      case v1::CompileResponse::MEMORY:
        return RequestResult::kHitMemory;
      case v1::CompileResponse::DISK:
        return RequestResult::kHitDisk;
      case v1::CompileResponse::CLUSTER:
        return RequestResult::kHitCluster;
      default:
        return RequestResult::kCompiled;
    }
  }
  // Answers that send the job to its own kernels without anything being wrong.
  switch (r.status.code()) {
    case StatusCode::kNotFound:
    case StatusCode::kResourceExhausted:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kUnavailable:
      return RequestResult::kFallback;
    default:
      return RequestResult::kError;
  }
}

RequestShape ShapeOf(const Resolution& r) {
  return r.bundle != nullptr && r.bundle->has_outer_extent() ? RequestShape::kBucket
                                                             : RequestShape::kExact;
}

// Returns what is wrong with a timing, or "" when it is well formed.
std::string InvalidTiming(const v1::MeasuredTime& t, const char* side) {
  const std::string where = std::string(side) + " timing: ";
  if (!std::isfinite(t.seconds()) || t.seconds() < 0) {
    return where + "seconds must be finite and not negative";
  }
  if (t.samples() > kMaxInvocationsPerRecord) return where + "at most 2^40 samples";
  if (t.samples() == 0) return t.seconds() == 0 ? "" : where + "seconds without samples";
  if (t.seconds() / static_cast<double>(t.samples()) > kMaxMeasuredSecondsPerCall) {
    return where + "more than 60 s per invocation is not a kernel's time";
  }
  return "";
}

// Returns what is wrong with a usage batch, naming the record, or "" when it is well formed.
std::string InvalidUsage(const v1::ReportUsageRequest& request, uint32_t max_records) {
  if (static_cast<uint32_t>(request.records_size()) > max_records) {
    return "usage batch has " + std::to_string(request.records_size()) +
           " records, over the limit of " + std::to_string(max_records) + " (max_usage_records)";
  }
  for (const v1::UsageRecord& r : request.records()) {
    const std::string record = "usage record for '" + r.key().substr(0, 80) + "': ";
    if (!IsHexKey(r.key()) || r.invocations() > kMaxInvocationsPerRecord) {
      return record +
             "keys are 64 lowercase hex digits and a record holds at most 2^40 "
             "invocations";
    }
    for (const std::string& bad :
         {InvalidTiming(r.stitched(), "stitched"), InvalidTiming(r.fallback(), "fallback")}) {
      if (!bad.empty()) return record + bad;
    }
  }
  return "";
}

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

}  // namespace

KernelServiceImpl::KernelServiceImpl(KernelResolver& resolver, cache::TieredStore& store,
                                     CompilePool& pool, DaemonMetrics& metrics,
                                     RuntimeLedger& runtimes, ServiceInfo info)
    : resolver_(resolver),
      store_(store),
      pool_(pool),
      metrics_(metrics),
      runtimes_(runtimes),
      info_(std::move(info)) {}

namespace {

std::string BytesOf(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (!buffer.Dump(&slices).ok()) return bytes;
  bytes.reserve(buffer.Length());
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return bytes;
}

}  // namespace

grpc::ServerUnaryReactor* KernelServiceImpl::Resolve(const char* method,
                                                     grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response,
                                                     bool compile_on_miss) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  pending_.fetch_add(1);
  resolver_.Resolve(
      BytesOf(*request), compile_on_miss, [this, method, reactor, response](Resolution r) {
        metrics_.CountRequest(method, ResultOf(r), ShapeOf(r));
        if (r.status.ok()) {
          const std::optional<v1::KernelRuntimes> measured = runtimes_.Find(r.key);
          responses_.Response(r.source, r.key, r.bundle, measured ? &*measured : nullptr)
              .Swap(response);
        } else if (r.status.code() == StatusCode::kInvalidArgument) {
          spdlog::info("{} rejected: {}", method, r.status.message());
        }
        // After the caller's deadline gRPC has already answered DEADLINE_EXCEEDED and
        // drops this; the compiled bundle is in the cache either way.
        reactor->Finish(rpc::ToGrpcStatus(r.status));
        pending_.fetch_sub(1);
      });
  return reactor;
}

grpc::ServerUnaryReactor* KernelServiceImpl::Compile(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) {
  return Resolve("Compile", context, request, response, /*compile_on_miss=*/true);
}

grpc::ServerUnaryReactor* KernelServiceImpl::Lookup(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* request,
                                                    grpc::ByteBuffer* response) {
  return Resolve("Lookup", context, request, response, /*compile_on_miss=*/false);
}

grpc::ServerUnaryReactor* KernelServiceImpl::ReportUsage(grpc::CallbackServerContext* context,
                                                         const v1::ReportUsageRequest* request,
                                                         v1::ReportUsageResponse* response) {
  const std::string invalid = InvalidUsage(*request, info_.limits.max_usage_records);
  if (!invalid.empty()) {
    metrics_.CountRequest("ReportUsage", RequestResult::kError);
    return FinishNow(context, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, invalid));
  }
  const std::string baseline = BaselineName(request->fallback());
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  uint32_t accepted = 0, unknown = 0, measured = 0;
  for (const v1::UsageRecord& r : request->records()) {
    StatusOr<std::optional<cache::Hit>> hit = store_.Get(r.key());
    if (!hit.ok() || !hit->has_value()) {
      ++unknown;
      continue;
    }
    const v1::KernelBundle& bundle = *(*hit)->bundle;
    // The record's own timings count towards its pricing: a job that reports both sides in
    // one batch is priced from them at once.
    const std::optional<v1::KernelRuntimes> runtimes =
        runtimes_.Merge(r, baseline, bundle.cost(), bundle.target(), now);
    metrics_.AddMeasuredSamples(r.stitched().samples(), r.fallback().samples());
    const UsagePrice price =
        PriceUsage(bundle.cost(), request->fallback(), runtimes.has_value() ? &*runtimes : nullptr);
    metrics_.AddUsage(r.invocations(), price);
    ++accepted;
    if (price.measured && r.invocations() > 0) ++measured;
  }
  response->set_accepted(accepted);
  response->set_unknown_keys(unknown);
  response->set_measured(measured);
  metrics_.CountRequest("ReportUsage", RequestResult::kOk);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* KernelServiceImpl::Stats(grpc::CallbackServerContext* context,
                                                   const v1::StatsRequest* /*request*/,
                                                   v1::StatsResponse* response) {
  response->set_version(info_.version);
  response->set_target(info_.target);
  response->set_uptime_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - info_.started).count());
  auto count = [this](RequestResult r) { return static_cast<uint64_t>(metrics_.ServingCount(r)); };
  response->set_hits_memory(count(RequestResult::kHitMemory));
  response->set_hits_disk(count(RequestResult::kHitDisk));
  response->set_hits_cluster(count(RequestResult::kHitCluster));
  response->set_compiles(static_cast<uint64_t>(metrics_.compiles()));
  response->set_misses(
      static_cast<uint64_t>(metrics_.RequestCount("Lookup", RequestResult::kFallback)));
  response->set_errors(count(RequestResult::kError));
  response->set_rejected(
      static_cast<uint64_t>(metrics_.RequestCount("Compile", RequestResult::kFallback)));
  cache::StoreStats s = store_.Stats();
  response->set_entries(s.entries);
  response->set_bytes(s.bytes);
  response->set_capacity_bytes(s.capacity_bytes);
  response->set_evictions(s.evictions);
  response->set_queue_depth(pool_.queued());
  response->set_compiles_in_flight(pool_.running());
  response->set_compile_seconds_saved(metrics_.compile_seconds_saved());
  response->set_gpu_seconds_saved(metrics_.gpu_seconds_saved());
  response->set_invocations_reported(static_cast<uint64_t>(metrics_.invocations()));
  response->set_gpu_seconds_saved_measured(metrics_.gpu_seconds_saved_measured());
  response->set_gpu_seconds_lost(metrics_.gpu_seconds_lost());
  response->set_runtime_keys(runtimes_.size());
  return FinishNow(context, grpc::Status::OK);
}

uint32_t KernelServiceImpl::ListLimit(uint32_t requested) const {
  const uint32_t wanted = requested == 0 ? kDefaultListLimit : requested;
  return std::min(wanted, info_.limits.max_list_entries);
}

grpc::ServerUnaryReactor* KernelServiceImpl::ListEntries(grpc::CallbackServerContext* context,
                                                         const v1::ListEntriesRequest* request,
                                                         v1::ListEntriesResponse* response) {
  const uint32_t limit = ListLimit(request->limit());
  for (const cache::EntryInfo& e : store_.List(limit)) {
    v1::EntrySummary& s = *response->add_entries();
    s.set_key(e.key);
    s.set_target(e.target);
    s.set_kernels(e.kernels);
    s.set_bytes(e.bytes);
    s.set_compile_seconds(e.compile_seconds);
    s.set_plan(e.plan);
  }
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* KernelServiceImpl::GetEntry(grpc::CallbackServerContext* context,
                                                      const v1::GetEntryRequest* request,
                                                      v1::CompileResponse* response) {
  if (!IsHexKey(request->key())) {
    metrics_.CountRequest("GetEntry", RequestResult::kError);
    return FinishNow(
        context,
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     "a key is 64 lowercase hex digits, got '" + request->key().substr(0, 80) +
                         "' (" + std::to_string(request->key().size()) + " characters)"));
  }
  StatusOr<std::optional<cache::Hit>> hit = store_.Get(request->key());
  if (!hit.ok()) return FinishNow(context, rpc::ToGrpcStatus(hit.status()));
  if (!hit->has_value()) {
    metrics_.CountRequest("GetEntry", RequestResult::kFallback);
    return FinishNow(
        context, grpc::Status(grpc::StatusCode::NOT_FOUND, "no entry for key " + request->key()));
  }
  response->set_source(SourceOf((*hit)->tier));
  metrics_.CountRequest("GetEntry", ResultOf(Resolution{Status::Ok(), response->source(), {}, {}}));
  response->set_key(request->key());
  *response->mutable_bundle() = *(*hit)->bundle;
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* KernelServiceImpl::ListRuntimes(grpc::CallbackServerContext* context,
                                                          const v1::ListRuntimesRequest* request,
                                                          v1::ListRuntimesResponse* response) {
  const uint32_t limit = ListLimit(request->limit());
  for (v1::KernelRuntimes& r : runtimes_.Top(limit)) *response->add_runtimes() = std::move(r);
  metrics_.CountRequest("ListRuntimes", RequestResult::kOk);
  return FinishNow(context, grpc::Status::OK);
}

namespace {

// Extraction fails only on its input: a subgraph past the node limits keeps its
// RESOURCE_EXHAUSTED (the job may split its program differently), every other failure is
// text the daemon cannot read, whatever code the parser chose.
Status ExtractionError(const Status& s) {
  if (s.code() == StatusCode::kResourceExhausted) return s;
  return InvalidArgument(s.message());
}

// The subgraphs an Extract request asks for, each naming the parameters that carry the
// request's outer extent when it gives one.
StatusOr<std::vector<Graph>> ExtractRequested(const v1::ExtractRequest& request,
                                              const HloImportOptions& options) {
  if (request.outer_extent() < 0) {
    return InvalidArgument("outer_extent is " + std::to_string(request.outer_extent()) +
                           " (0 for fixed shapes, or the job's batch size)");
  }
  StatusOr<std::vector<Graph>> graphs =
      ExtractMemoryIntensiveSubgraphs(request.hlo_text(), options);
  if (!graphs.ok() || request.outer_extent() == 0) return graphs;
  for (Graph& g : *graphs)
    g.outer_parameters = ParametersWithOuterExtent(g, request.outer_extent());
  return graphs;
}

}  // namespace

grpc::ServerUnaryReactor* KernelServiceImpl::Extract(grpc::CallbackServerContext* context,
                                                     const v1::ExtractRequest* request,
                                                     v1::ExtractResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  pending_.fetch_add(1);
  // `request` and `response` stay valid until Finish, so the task reads and fills them in
  // place.
  const bool queued = pool_.TrySubmit([this, reactor, request, response] {
    StatusOr<std::vector<Graph>> graphs = ExtractRequested(*request, resolver_.HloOptions());
    Status status = graphs.ok() ? Status::Ok() : ExtractionError(graphs.status());
    if (status.ok()) {
      response->mutable_graphs()->Reserve(static_cast<int>(graphs->size()));
      for (const Graph& g : *graphs) *response->add_graphs() = ToProto(g);
      metrics_.CountRequest("Extract", RequestResult::kOk);
    } else {
      spdlog::info("Extract rejected: {}", status.message());
      metrics_.CountRequest("Extract", status.code() == StatusCode::kResourceExhausted
                                           ? RequestResult::kFallback
                                           : RequestResult::kError);
    }
    reactor->Finish(rpc::ToGrpcStatus(status));
    pending_.fetch_sub(1);
  });
  if (!queued) {
    metrics_.CountRequest("Extract", RequestResult::kFallback);
    reactor->Finish(rpc::ToGrpcStatus(
        ResourceExhausted("the compile queue is full; retry the extraction later")));
    pending_.fetch_sub(1);
  }
  return reactor;
}

}  // namespace stitch::daemon
