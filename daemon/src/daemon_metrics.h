// The daemon's Prometheus metrics, registered in one place so their names, labels and
// buckets are reviewed together. Fleet totals (compile seconds and GPU seconds saved,
// compiles, reported invocations) are persistent: they start from the values saved in the
// node's store, so a restart does not reset what the fleet dashboards sum.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "savings.h"
#include "stitch/cache/cluster_store.h"
#include "stitch/metrics/registry.h"
#include "stitch/v1/runtimes.pb.h"

namespace stitch::daemon {

// What a request came to; the `result` label of stitch_requests_total.
// kOk is for methods that return no bundle (ReportUsage, Stats, ListEntries).
enum class RequestResult { kHitMemory, kHitDisk, kHitCluster, kCompiled, kFallback, kError, kOk };
const char* RequestResultName(RequestResult r);

// Which kind of entry answered a request; the `shape` label of stitch_requests_total. A
// bucket entry is a shape-generic bundle (shape_class.h) that serves every extent of a
// bucket; every other answer, and every request that returned no bundle, is exact.
enum class RequestShape { kExact, kBucket };
const char* RequestShapeName(RequestShape s);

// The metrics are also the cluster tier's observer, for its latency histogram.
class DaemonMetrics : public cache::ClusterObserver {
 public:
  // Registers the daemon's families in `registry`, which must outlive this object.
  DaemonMetrics(metrics::Registry& registry, const std::string& version,
                const std::string& compiler_version, const std::string& target);

  // Counts one request of `method` ("Compile", "Lookup", ...) that came to `result`.
  void CountRequest(const char* method, RequestResult result,
                    RequestShape shape = RequestShape::kExact);
  // Records the latency of a request answered without compiling.
  void ObserveLookupSeconds(double seconds);
  // Records one compile and its duration; `ok` false for a failed compile.
  void ObserveCompile(double seconds, bool ok);
  // Credits a cache hit with the compile time it saved.
  void AddCompileSecondsSaved(double seconds);
  // Credits reported invocations, priced by `price`: its accounted saving under its basis
  // (or, when negative, as time lost), and the model's saving beside it.
  void AddUsage(uint64_t invocations, const UsagePrice& price);
  // Counts timed invocations jobs reported.
  void AddMeasuredSamples(uint64_t stitched, uint64_t fallback);
  // Sets the runtime-record gauges: `keys` on record, `dropped` timings so far, and the
  // per-key seconds of `top` (the family is rebuilt, so keys that left the top disappear).
  void SetRuntimeRecords(const std::vector<v1::KernelRuntimes>& top, size_t keys, uint64_t dropped);

  // Counts a flight that found another node compiling its key and waited for it.
  void CountLeaseWait();
  // Counts a flight that compiled after all: the lease holder let go without an entry, ran
  // past the lease time, or the cluster stopped answering.
  void CountLeaseTakeover();
  // Counts a failed compile of `kind` (CompileFailureKindName: "crash", "cpu_limit", ...).
  void CountCompileFailure(const char* kind);
  // Counts a compile worker started again after its predecessor died or was killed.
  void CountWorkerRestart();
  // Counts a request answered from the negative cache, without compiling.
  void CountNegativeCacheHit();
  // Records one cluster round trip (cache::ClusterObserver).
  void OnCall(std::string_view operation, double seconds, const Status& status) override;
  // Sets the cluster tier's counters and breaker state from the store's own counts.
  void SetClusterStats(const cache::ClusterStoreStats& stats);

  metrics::Gauge& queue_depth() { return *queue_depth_; }
  metrics::Gauge& compiles_in_flight() { return *in_flight_; }
  // Cache occupancy gauges for `tier` ("memory", "disk").
  void SetCacheStats(const std::string& tier, double entries, double bytes, double capacity,
                     double evictions, double corrupt);
  // Sets the count of writes to `tier` that failed (a full disk, I/O errors) since the store
  // was opened.
  void SetCacheWriteErrors(const std::string& tier, double write_errors);

  // The persistent totals, by the names they are saved under.
  std::map<std::string, double> PersistentTotals() const;
  // Adds previously saved totals (at start, before serving).
  void RestoreTotals(const std::map<std::string, double>& totals);

  // Values for the Stats RPC.
  double RequestCount(const char* method, RequestResult result);
  // The count of `result` over the bundle-serving methods, Compile and Lookup.
  double ServingCount(RequestResult result);
  double compiles() const { return compiles_ok_->Value(); }
  double compile_seconds_saved() const { return compile_seconds_saved_->Value(); }
  // Summed over baselines (and, for the first, over both bases).
  double gpu_seconds_saved() const;
  double gpu_seconds_saved_measured() const;
  double gpu_seconds_lost() const;
  double invocations() const;

 private:
  metrics::Family<metrics::Counter>& requests_;
  metrics::Family<metrics::Counter>& compiles_;
  metrics::Family<metrics::Gauge>& cache_entries_;
  metrics::Family<metrics::Gauge>& cache_bytes_;
  metrics::Family<metrics::Gauge>& cache_capacity_;
  metrics::Family<metrics::Counter>& evictions_;
  metrics::Family<metrics::Counter>& corrupt_;
  metrics::Family<metrics::Counter>* write_errors_ = nullptr;
  metrics::Histogram* lookup_seconds_;
  metrics::Histogram* compile_seconds_;
  metrics::Gauge* queue_depth_;
  metrics::Gauge* in_flight_;
  metrics::Counter* compiles_ok_;
  metrics::Counter* compiles_failed_;
  metrics::Counter* compile_seconds_saved_;
  metrics::Family<metrics::Counter>& gpu_seconds_saved_;
  metrics::Family<metrics::Counter>& model_gpu_seconds_saved_;
  metrics::Family<metrics::Counter>& gpu_seconds_lost_;
  metrics::Family<metrics::Counter>& measured_samples_;
  metrics::Family<metrics::Gauge>& key_seconds_;
  metrics::Gauge* runtime_keys_;
  metrics::Counter* runtime_dropped_;
  metrics::Family<metrics::Counter>& invocations_;
  metrics::Family<metrics::Histogram>& cluster_seconds_;
  metrics::Family<metrics::Counter>& cluster_errors_;
  metrics::Family<metrics::Counter>& cluster_rejected_;
  metrics::Family<metrics::Counter>& cluster_redirects_;
  metrics::Family<metrics::Gauge>& cluster_breaker_;
  metrics::Counter* cluster_breaker_trips_;
  metrics::Counter* cluster_skipped_;
  metrics::Counter* cluster_writes_;
  metrics::Counter* lease_waits_;
  metrics::Counter* lease_takeovers_;
  metrics::Family<metrics::Counter>* compile_failures_;
  metrics::Counter* worker_restarts_;
  metrics::Counter* negative_cache_hits_;
};

}  // namespace stitch::daemon
