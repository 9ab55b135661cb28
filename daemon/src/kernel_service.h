// stitch.v1.KernelService on gRPC's callback API. Handlers never block a gRPC thread on a
// compile or an extraction: hits and errors finish inline, compiles and extractions finish
// from the compile pool.
//
// Thread-safety: gRPC calls the handlers concurrently; the service holds no mutable state
// of its own beyond what KernelResolver, the store and the metrics guard.
#pragma once

#include <atomic>
#include <chrono>

#include "daemon_metrics.h"
#include "kernel_resolver.h"
#include "response_bytes.h"
#include "runtime_ledger.h"
#include "stitch/cache/tiered_store.h"
#include "stitch/v1/kernel_service.grpc.pb.h"

namespace stitch::daemon {

// What Stats reports besides the metrics.
// The service's own limits on requests (the graph and HLO limits are the resolver's).
struct ServiceLimits {
  // Records of one ReportUsage request (max_usage_records); more is INVALID_ARGUMENT.
  uint32_t max_usage_records = 100000;
  // Entries of one ListEntries or ListRuntimes answer (max_list_entries); a larger requested
  // limit is capped, since `stitchctl cache export` asks for everything with UINT32_MAX.
  uint32_t max_list_entries = 100000;
};

struct ServiceInfo {
  std::string version;
  std::string target;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  ServiceLimits limits;
};

// Compile and Lookup take raw bytes: a payload that is not a CompileRequest at all gets
// INVALID_ARGUMENT like any other bad input (gRPC's own parser would answer INTERNAL), and
// the cached bundle is serialized straight into the response without a deep copy.
using KernelServiceBase = v1::KernelService::WithRawCallbackMethod_Compile<
    v1::KernelService::WithRawCallbackMethod_Lookup<v1::KernelService::CallbackService>>;

class KernelServiceImpl final : public KernelServiceBase {
 public:
  // Every reference must outlive the service.
  KernelServiceImpl(KernelResolver& resolver, cache::TieredStore& store, CompilePool& pool,
                    DaemonMetrics& metrics, RuntimeLedger& runtimes, ServiceInfo info);

  grpc::ServerUnaryReactor* Compile(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReportUsage(grpc::CallbackServerContext* context,
                                        const v1::ReportUsageRequest* request,
                                        v1::ReportUsageResponse* response) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context,
                                  const v1::StatsRequest* request,
                                  v1::StatsResponse* response) override;
  grpc::ServerUnaryReactor* ListEntries(grpc::CallbackServerContext* context,
                                        const v1::ListEntriesRequest* request,
                                        v1::ListEntriesResponse* response) override;
  grpc::ServerUnaryReactor* GetEntry(grpc::CallbackServerContext* context,
                                     const v1::GetEntryRequest* request,
                                     v1::CompileResponse* response) override;
  grpc::ServerUnaryReactor* ListRuntimes(grpc::CallbackServerContext* context,
                                         const v1::ListRuntimesRequest* request,
                                         v1::ListRuntimesResponse* response) override;
  // Extracts the request's HLO text on the compile pool (parsing a training step takes
  // seconds of CPU, too long for a gRPC thread); answers RESOURCE_EXHAUSTED when the pool's
  // queue is full.
  grpc::ServerUnaryReactor* Extract(grpc::CallbackServerContext* context,
                                    const v1::ExtractRequest* request,
                                    v1::ExtractResponse* response) override;

  // Requests whose answer waits for a compile; a draining daemon waits for this to reach
  // zero before it stops the server.
  int pending() const { return pending_.load(); }

 private:
  // Returns how many entries a list request for `requested` (0: the default 100) gets: at
  // most info_.limits.max_list_entries.
  uint32_t ListLimit(uint32_t requested) const;
  grpc::ServerUnaryReactor* Resolve(const char* method, grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
                                    bool compile_on_miss);

  KernelResolver& resolver_;
  cache::TieredStore& store_;
  CompilePool& pool_;
  DaemonMetrics& metrics_;
  RuntimeLedger& runtimes_;
  ServiceInfo info_;
  std::atomic<int> pending_{0};
  ResponseBytes responses_{64u << 20};
};

}  // namespace stitch::daemon
