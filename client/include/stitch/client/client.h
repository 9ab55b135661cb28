// The thin client a training or inference job links to reach its node's stitchd.
//
// Fail-open: no call ever throws or hangs a training step. When the daemon is absent, slow,
// overloaded or refuses the input, Compile and Lookup return Outcome::kFallback within their
// deadline, with the reason, and the job runs its framework's own kernels.
//
// Bundles a client already has are served from an in-process cache (Outcome::kLocal)
// without an RPC; the cache is keyed by the request's bytes, so the daemon's key is never
// computed here.
//
// The gRPC channel is created on first use. gRPC state does not survive fork(), and jobs
// fork data-loader workers: a process forked from one that has used a Client never touches
// gRPC. Its Clients answer from the in-process cache they inherited (Outcome::kLocal) and
// fall back otherwise (reason "UNAVAILABLE: this process was forked ..."). A process forked
// before the first use is unaffected.
//
// Thread-safety: a Client may be used from many threads at once.
// Link line: stitch_rpc (protobuf, gRPC) and stitch_base; no LLVM, no RocksDB.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/v1/kernel_service.pb.h"

namespace stitch::client {

enum class Outcome {
  kLocal,     // this process already had the bundle
  kMemory,    // the daemon's memory tier
  kDisk,      // the daemon's RocksDB
  kCluster,   // the cluster tier: another node compiled it
  kCompiled,  // compiled for this request
  kFallback,  // no bundle: run the framework's kernels (see Result::reason)
};

// Returns "hit_local", "hit_memory", "hit_disk", "hit_cluster", "compiled" or "fallback".
const char* OutcomeName(Outcome outcome);

struct Result {
  Outcome outcome = Outcome::kFallback;
  std::shared_ptr<const v1::KernelBundle> bundle;  // null exactly when outcome is kFallback
  std::string key;                                 // the daemon's key, when known
  // What jobs measured for the key, as the daemon held it when it answered; null when it held
  // none, for fallbacks, and for in-process cache hits (which do not ask the daemon).
  std::shared_ptr<const v1::KernelRuntimes> runtimes;
  // For fallbacks: the gRPC status code and message ("DEADLINE_EXCEEDED: ...",
  // "UNAVAILABLE: ...", "RESOURCE_EXHAUSTED: ...", "INVALID_ARGUMENT: <verifier message>").
  std::string reason;
  bool ok() const { return outcome != Outcome::kFallback; }
};

struct ClientOptions {
  // gRPC target: "unix:///run/stitchd/stitchd.sock" or "host:port".
  std::string address = "unix:///run/stitchd/stitchd.sock";
  std::chrono::milliseconds lookup_deadline{50};
  std::chrono::milliseconds compile_deadline{10000};
  std::chrono::milliseconds admin_deadline{2000};  // Stats, ListEntries, GetEntry, usage
  size_t local_cache_entries = 4096;               // 0 disables the in-process cache
  // What this job runs without stitchd (XLA, Inductor, eager); usage reports carry it, and the
  // daemon prices the job's savings against that compiler's model.
  v1::Fallback fallback = v1::FALLBACK_UNSPECIFIED;
  // ShouldTimeFallback answers true on one step in this many (0: never). Running the
  // fallback costs the job what stitching saves, so it is sampled, not routine.
  uint32_t fallback_timing_period = 100;
  // TLS for a "host:port" address, used when tls_ca_file or tls_cert_file is set; unix
  // socket addresses ignore these (the daemon's socket is local and plaintext). PEM files,
  // read when the Client is made; one that cannot be read makes every call fall back with
  // FAILED_PRECONDITION naming it.
  std::string tls_ca_file;  // verifies the daemon's certificate; "" uses the system's roots
  // This client's certificate and key, for a daemon that requires them (mutual TLS); both or
  // neither.
  std::string tls_cert_file;
  std::string tls_key_file;
  // The name the daemon's certificate must carry, when it differs from the address's host
  // (e.g. dialling a node IP whose certificate names the Service).
  std::string tls_server_name;
};

// Whose kernels a measured time is for.
enum class TimedKernels {
  kStitched,  // the bundle's kernels
  kFallback,  // the job's own kernels for the same subgraph (XLA, Inductor, eager)
};

class Client {
 public:
  explicit Client(ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Returns the bundle for the request's subgraph, compiling on a miss, within
  // options.compile_deadline (or `deadline`).
  Result Compile(const v1::CompileRequest& request);
  Result Compile(const v1::CompileRequest& request, std::chrono::milliseconds deadline);

  // Returns the bundle only when the daemon has it cached; never compiles. A miss is a
  // fallback with reason "NOT_FOUND: ...". Deadline: options.lookup_deadline.
  Result Lookup(const v1::CompileRequest& request);

  // Asynchronous Compile: `done` runs once, on a gRPC thread (or inline, before this
  // returns, for a local hit or a fallback decided without an RPC). `done` must not destroy
  // this Client; destroying a Client waits for its calls in flight.
  void CompileAsync(const v1::CompileRequest& request, std::function<void(Result)> done);
  std::future<Result> CompileAsync(const v1::CompileRequest& request);

  // Adds `invocations` launches of the bundle `key` to the pending usage batch.
  void RecordInvocations(const std::string& key, uint64_t invocations);

  // Adds measured GPU time to the pending usage batch: `seconds` summed over `samples`
  // invocations of the subgraph `key` (CUDA events around its launches), for the bundle's
  // kernels or the job's fallback. The daemon prices the key's savings from measured times
  // once both sides have some, and keeps them. INVALID_ARGUMENT for an empty key, zero
  // samples, or seconds that are negative or not finite; nothing is recorded then.
  Status RecordMeasuredTime(const std::string& key, TimedKernels kernels, double seconds,
                            uint64_t samples = 1);

  // Returns true on one call in options.fallback_timing_period: a job calls it once per step
  // and, when true, runs and times its fallback kernels for that step as well.
  bool ShouldTimeFallback();

  // Sets what the job runs without stitchd, for the usage reports from now on (as
  // ClientOptions::fallback does at construction).
  void SetFallback(v1::Fallback fallback);

  // Sends the pending batch (ReportUsage: invocations and measured times), with the job's
  // fallback. On failure the batch is kept for the next flush.
  StatusOr<v1::ReportUsageResponse> FlushUsage();

  // Admin calls, for stitchctl; they return the RPC's error as a Status.
  StatusOr<v1::StatsResponse> Stats();
  StatusOr<v1::ListEntriesResponse> ListEntries(uint32_t limit);
  StatusOr<v1::CompileResponse> GetEntry(const std::string& key);
  StatusOr<v1::ListRuntimesResponse> ListRuntimes(uint32_t limit);

  // Returns the memory-intensive subgraphs of `hlo_text` (one or more HLO modules), split by
  // the daemon in extraction order, each named "<module>.sg<k>": the signatures to pass to
  // Compile or Lookup as CompileRequest::graph. Waits at most options.compile_deadline. Not
  // fail-open (there is nothing to fall back to): returns INVALID_ARGUMENT naming the line
  // for text that is not HLO, RESOURCE_EXHAUSTED for a subgraph past the daemon's limits or
  // a full queue, and the transport's error when the daemon cannot be reached. A job whose
  // batch varies passes it as `outer_extent`: each graph then names the parameters whose
  // dimension 0 it is (Graph.outer_parameters), and compiles once per bucket of it.
  StatusOr<std::vector<v1::Graph>> Extract(std::string_view hlo_text, int64_t outer_extent = 0);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stitch::client
