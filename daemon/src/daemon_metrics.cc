#include "daemon_metrics.h"

#include <algorithm>
#include <string_view>

namespace stitch::daemon {
namespace {

// The names persistent totals are saved under in the store.
constexpr const char* kCompiles = "compiles";
constexpr const char* kCompileSecondsSaved = "compile_seconds_saved";
// Per baseline: "<name>.<baseline>". Totals saved before savings carried a baseline were
// priced against the better model, so they restore as "unreported".
// The modeled and measured parts of the headline are saved apart; before measured savings
// existed every saving was modeled, so the model-only total restores from the modeled part
// of a store that lacks it.
constexpr const char* kGpuSecondsSaved = "gpu_seconds_saved";
constexpr const char* kGpuSecondsSavedMeasured = "gpu_seconds_saved_measured";
constexpr const char* kModelGpuSecondsSaved = "model_gpu_seconds_saved";
constexpr const char* kGpuSecondsLost = "gpu_seconds_lost";
constexpr const char* kInvocations = "invocations_reported";
constexpr const char* kMeasuredSamples = "measured_samples";
constexpr const char* kTimedKernels[] = {"stitched", "fallback"};
constexpr const char* kBaselines[] = {"xla", "inductor", "eager", "unreported"};
constexpr const char* kLegacyBaseline = "unreported";

constexpr RequestResult kAllResults[] = {RequestResult::kHitMemory,  RequestResult::kHitDisk,
                                         RequestResult::kHitCluster, RequestResult::kCompiled,
                                         RequestResult::kFallback,   RequestResult::kError};
constexpr const char* kServingMethods[] = {"Compile", "Lookup"};
constexpr RequestShape kAllShapes[] = {RequestShape::kExact, RequestShape::kBucket};

// A memory hit is tens of microseconds; a disk hit a few hundred; the top buckets catch
// lookups stuck behind a busy node.
std::vector<double> LookupBuckets() {
  return {25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1};
}

// Compiles take from ten milliseconds (one small kernel to PTX) to seconds (a large graph
// to cubin).
std::vector<double> CompileBuckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

// A cluster round trip on loopback or a rack is a fraction of a millisecond; the read
// deadline is tens of milliseconds, writes a few hundred.
std::vector<double> ClusterBuckets() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1, 0.25, 1};
}

// Moves counter `c` up to `value`, a count kept elsewhere since the process started.
void FollowCount(metrics::Counter& c, double value) {
  c.Increment(std::max(0.0, value - c.Value()));
}

// Counter values only go up, so restoring a saved total is an increment from zero.
void Restore(metrics::Counter& c, const std::map<std::string, double>& totals, const char* name) {
  auto it = totals.find(name);
  if (it != totals.end() && it->second > 0) c.Increment(it->second);
}

}  // namespace

const char* RequestResultName(RequestResult r) {
  switch (r) {
    case RequestResult::kHitMemory:
      return "hit_memory";
    case RequestResult::kHitDisk:
      return "hit_disk";
    case RequestResult::kHitCluster:
      return "hit_cluster";
    case RequestResult::kCompiled:
      return "compiled";
    case RequestResult::kFallback:
      return "fallback";
    case RequestResult::kError:
      return "error";
    case RequestResult::kOk:
      return "ok";
  }
  return "error";
}

const char* RequestShapeName(RequestShape s) {
  return s == RequestShape::kBucket ? "bucket" : "exact";
}

DaemonMetrics::DaemonMetrics(metrics::Registry& registry, const std::string& version,
                             const std::string& compiler_version, const std::string& target)
    : requests_(registry.AddCounter("stitch_requests_total",
                                    "Requests served, by RPC method and result.")),
      compiles_(
          registry.AddCounter("stitch_compiles_total", "Compiles run by this daemon, by outcome.")),
      cache_entries_(registry.AddGauge("stitch_cache_entries", "Bundles held, by cache tier.")),
      cache_bytes_(registry.AddGauge("stitch_cache_bytes", "Bytes held, by cache tier.")),
      cache_capacity_(
          registry.AddGauge("stitch_cache_capacity_bytes", "Byte bound of each cache tier.")),
      evictions_(registry.AddCounter("stitch_cache_evictions_total",
                                     "Bundles evicted for space, by cache tier.")),
      corrupt_(registry.AddCounter(
          "stitch_cache_corrupt_entries_total",
          "Entries dropped for a bad digest, version or encoding, by cache tier.")),
      gpu_seconds_saved_(registry.AddCounter(
          "stitch_gpu_seconds_saved_total",
          "GPU time saved by fusion on the invocations jobs report, against each job's own "
          "fallback (baseline: xla, inductor, eager; unreported: the better of the XLA and "
          "Inductor models). basis=measured where jobs timed both the stitched kernels and "
          "their fallback for the key, basis=modeled (the cost model) elsewhere.")),
      model_gpu_seconds_saved_(registry.AddCounter(
          "stitch_model_gpu_seconds_saved_total",
          "What the cost model alone credits for the same invocations, measured or not: the "
          "gap to stitch_gpu_seconds_saved_total is the model's error where jobs measured.")),
      gpu_seconds_lost_(registry.AddCounter(
          "stitch_gpu_seconds_lost_total",
          "Measured GPU time lost on invocations whose stitched kernels jobs timed slower "
          "than their fallback.")),
      measured_samples_(
          registry.AddCounter("stitch_measured_samples_total",
                              "Timed invocations jobs reported, by kernels (stitched, fallback).")),
      key_seconds_(registry.AddGauge(
          "stitch_key_seconds_per_call",
          "Seconds per invocation of the most-measured keys: kernels=stitched or the fallback "
          "baseline, basis=measured (jobs' mean) or modeled (the cost model).")),
      invocations_(registry.AddCounter("stitch_kernel_invocations_reported_total",
                                       "Bundle invocations reported by jobs, by the baseline "
                                       "their savings are priced against.")),
      cluster_seconds_(registry.AddHistogram("stitch_cluster_call_duration_seconds",
                                             "Cluster tier round trips, by operation.",
                                             ClusterBuckets())),
      cluster_errors_(registry.AddCounter("stitch_cluster_errors_total",
                                          "Failed cluster calls, by kind (timeout, "
                                          "unavailable, auth, reply); each counts as a miss.")),
      cluster_rejected_(registry.AddCounter(
          "stitch_cluster_rejected_entries_total",
          "Cluster entries never served, by reason (truncated, hmac, version, digest, key).")),
      cluster_redirects_(registry.AddCounter("stitch_cluster_redirects_total",
                                             "MOVED and ASK redirects followed, by kind.")),
      cluster_breaker_(registry.AddGauge("stitch_cluster_breaker_state",
                                         "1 for the cluster circuit breaker's current state "
                                         "(closed, open, half_open), 0 for the others.")) {
  lookup_seconds_ = &registry
                         .AddHistogram("stitch_lookup_duration_seconds",
                                       "Time to answer a request from the cache.", LookupBuckets())
                         .Add();
  compile_seconds_ = &registry
                          .AddHistogram("stitch_compile_duration_seconds",
                                        "Time to compile one subgraph, to cubin where the "
                                        "CUDA toolkit is present.",
                                        CompileBuckets())
                          .Add();
  queue_depth_ =
      &registry.AddGauge("stitch_compile_queue_depth", "Compiles waiting for a worker thread.")
           .Add();
  in_flight_ = &registry.AddGauge("stitch_compiles_in_flight", "Compiles running now.").Add();
  write_errors_ = &registry.AddCounter(
      "stitch_cache_write_errors_total",
      "Cache writes that failed (a full disk, I/O errors), by cache tier; the bundle is still "
      "answered and kept in the tiers that took it.");
  compiles_ok_ = &compiles_.Add({{"result", "ok"}});
  compiles_failed_ = &compiles_.Add({{"result", "error"}});
  compile_seconds_saved_ =
      &registry
           .AddCounter("stitch_compile_seconds_saved_total",
                       "Compile time that cache hits saved: each hit credits the stored "
                       "compile time of its bundle.")
           .Add();
  for (const char* b : kBaselines) {
    gpu_seconds_saved_.Add({{"baseline", b}, {"basis", "modeled"}});
    gpu_seconds_saved_.Add({{"baseline", b}, {"basis", "measured"}});
    model_gpu_seconds_saved_.Add({{"baseline", b}});
    gpu_seconds_lost_.Add({{"baseline", b}});
    invocations_.Add({{"baseline", b}});
  }
  for (const char* k : kTimedKernels) measured_samples_.Add({{"kernels", k}});
  runtime_keys_ = &registry
                       .AddGauge("stitch_runtime_keys",
                                 "Keys with measured runtimes on record in this node's store.")
                       .Add();
  runtime_dropped_ = &registry
                          .AddCounter("stitch_runtime_records_dropped_total",
                                      "Timings not kept because the runtime records were full.")
                          .Add();
  cluster_breaker_trips_ = &registry
                                .AddCounter("stitch_cluster_breaker_trips_total",
                                            "Times the cluster circuit breaker opened.")
                                .Add();
  cluster_skipped_ = &registry
                          .AddCounter("stitch_cluster_skipped_calls_total",
                                      "Cluster calls answered as misses by the open breaker, "
                                      "without a round trip.")
                          .Add();
  cluster_writes_ =
      &registry.AddCounter("stitch_cluster_writes_total", "Bundles this node wrote to the cluster.")
           .Add();
  lease_waits_ = &registry
                      .AddCounter("stitch_cluster_lease_waits_total",
                                  "Compiles this node left to the node holding the key's lease.")
                      .Add();
  lease_takeovers_ =
      &registry
           .AddCounter("stitch_cluster_lease_takeovers_total",
                       "Waits that ended in a compile here: the lease holder let go without an "
                       "entry, ran past the lease time, or the cluster stopped answering.")
           .Add();
  compile_failures_ = &registry.AddCounter(
      "stitch_compile_failures_total",
      "Failed compiles by kind: crash (the worker died), cpu_limit, memory_limit, timeout "
      "(wall clock), error (the compiler's own error).");
  for (const char* kind : {"crash", "cpu_limit", "memory_limit", "timeout", "error"}) {
    compile_failures_->Add({{"kind", kind}});
  }
  worker_restarts_ = &registry
                          .AddCounter("stitch_compile_worker_restarts_total",
                                      "Compile worker processes started again after one died "
                                      "or was killed.")
                          .Add();
  negative_cache_hits_ =
      &registry
           .AddCounter("stitch_negative_cache_hits_total",
                       "Requests answered with a remembered compile failure, without compiling.")
           .Add();
  registry.AddGauge("stitch_build_info", "Build information; the value is always 1.")
      .Add({{"version", version}, {"compiler_version", compiler_version}, {"target", target}})
      .Set(1);
  // Children exist from the start, so rates over them are defined before the first request.
  for (const char* m : kServingMethods) {
    for (RequestResult r : kAllResults) {
      for (RequestShape shape : kAllShapes) {
        requests_.Add(
            {{"method", m}, {"result", RequestResultName(r)}, {"shape", RequestShapeName(shape)}});
      }
    }
  }
}

void DaemonMetrics::CountLeaseWait() { lease_waits_->Increment(); }

void DaemonMetrics::CountLeaseTakeover() { lease_takeovers_->Increment(); }

void DaemonMetrics::CountCompileFailure(const char* kind) {
  compile_failures_->Add({{"kind", kind}}).Increment();
}

void DaemonMetrics::CountWorkerRestart() { worker_restarts_->Increment(); }

void DaemonMetrics::CountNegativeCacheHit() { negative_cache_hits_->Increment(); }

void DaemonMetrics::OnCall(std::string_view operation, double seconds, const Status&) {
  cluster_seconds_.Add({{"operation", std::string(operation)}}).Observe(seconds);
}

void DaemonMetrics::SetClusterStats(const cache::ClusterStoreStats& s) {
  for (int i = 0; i < cache::kClusterErrorKinds; ++i) {
    const std::string kind(cache::ClusterErrorName(static_cast<cache::ClusterError>(i)));
    FollowCount(cluster_errors_.Add({{"kind", kind}}), static_cast<double>(s.errors[i]));
  }
  for (int i = 0; i < cache::kRejectionKinds; ++i) {
    const std::string reason(cache::RejectionName(static_cast<cache::Rejection>(i)));
    FollowCount(cluster_rejected_.Add({{"reason", reason}}), static_cast<double>(s.rejected[i]));
  }
  FollowCount(cluster_redirects_.Add({{"kind", "moved"}}), static_cast<double>(s.routing.moved));
  FollowCount(cluster_redirects_.Add({{"kind", "ask"}}), static_cast<double>(s.routing.ask));
  FollowCount(*cluster_breaker_trips_, static_cast<double>(s.breaker_trips));
  FollowCount(*cluster_skipped_, static_cast<double>(s.skipped_by_breaker));
  FollowCount(*cluster_writes_, static_cast<double>(s.writes));
  const std::pair<cache::BreakerState, const char*> states[] = {
      {cache::BreakerState::kClosed, "closed"},
      {cache::BreakerState::kOpen, "open"},
      {cache::BreakerState::kHalfOpen, "half_open"}};
  for (const auto& [state, name] : states) {
    cluster_breaker_.Add({{"state", name}}).Set(s.breaker == state ? 1 : 0);
  }
}

void DaemonMetrics::CountRequest(const char* method, RequestResult result, RequestShape shape) {
  requests_
      .Add({{"method", method},
            {"result", RequestResultName(result)},
            {"shape", RequestShapeName(shape)}})
      .Increment();
}

void DaemonMetrics::ObserveLookupSeconds(double seconds) { lookup_seconds_->Observe(seconds); }

void DaemonMetrics::ObserveCompile(double seconds, bool ok) {
  compile_seconds_->Observe(seconds);
  (ok ? compiles_ok_ : compiles_failed_)->Increment();
}

void DaemonMetrics::AddCompileSecondsSaved(double seconds) {
  compile_seconds_saved_->Increment(seconds);
}

void DaemonMetrics::AddUsage(uint64_t invocations, const UsagePrice& price) {
  const metrics::Labels labels = {{"baseline", price.baseline}};
  const double n = static_cast<double>(invocations);
  invocations_.Add(labels).Increment(n);
  model_gpu_seconds_saved_.Add(labels).Increment(price.modeled_per_call * n);
  const double saved = price.per_call * n;
  if (saved > 0) {
    gpu_seconds_saved_
        .Add({{"baseline", price.baseline}, {"basis", price.measured ? "measured" : "modeled"}})
        .Increment(saved);
  } else if (saved < 0) {
    gpu_seconds_lost_.Add(labels).Increment(-saved);
  }
}

void DaemonMetrics::AddMeasuredSamples(uint64_t stitched, uint64_t fallback) {
  measured_samples_.Add({{"kernels", "stitched"}}).Increment(static_cast<double>(stitched));
  measured_samples_.Add({{"kernels", "fallback"}}).Increment(static_cast<double>(fallback));
}

void DaemonMetrics::SetRuntimeRecords(const std::vector<v1::KernelRuntimes>& top, size_t keys,
                                      uint64_t dropped) {
  runtime_keys_->Set(static_cast<double>(keys));
  FollowCount(*runtime_dropped_, static_cast<double>(dropped));
  key_seconds_.Clear();
  for (const v1::KernelRuntimes& r : top) {
    const auto set = [&](const std::string& kernels, const char* basis, double seconds) {
      key_seconds_.Add({{"key", r.key()}, {"kernels", kernels}, {"basis", basis}}).Set(seconds);
    };
    if (r.stitched().samples() > 0) {
      set("stitched", "measured", r.stitched().seconds_sum() / r.stitched().samples());
      set("stitched", "modeled", r.modeled_stitched_seconds());
    }
    for (const auto& [baseline, timing] : r.fallback()) {
      if (timing.samples() == 0) continue;
      set(baseline, "measured", timing.seconds_sum() / timing.samples());
      const auto modeled = r.modeled_fallback_seconds().find(baseline);
      if (modeled != r.modeled_fallback_seconds().end()) set(baseline, "modeled", modeled->second);
    }
  }
}

double DaemonMetrics::gpu_seconds_saved() const {
  double total = 0;
  gpu_seconds_saved_.ForEach(
      [&](const metrics::Labels&, const metrics::Counter& c) { total += c.Value(); });
  return total;
}

double DaemonMetrics::gpu_seconds_saved_measured() const {
  double total = 0;
  gpu_seconds_saved_.ForEach([&](const metrics::Labels& labels, const metrics::Counter& c) {
    if (labels.at("basis") == "measured") total += c.Value();
  });
  return total;
}

double DaemonMetrics::gpu_seconds_lost() const {
  double total = 0;
  gpu_seconds_lost_.ForEach(
      [&](const metrics::Labels&, const metrics::Counter& c) { total += c.Value(); });
  return total;
}

double DaemonMetrics::invocations() const {
  double total = 0;
  invocations_.ForEach(
      [&](const metrics::Labels&, const metrics::Counter& c) { total += c.Value(); });
  return total;
}

void DaemonMetrics::SetCacheStats(const std::string& tier, double entries, double bytes,
                                  double capacity, double evictions, double corrupt) {
  metrics::Labels labels = {{"tier", tier}};
  cache_entries_.Add(labels).Set(entries);
  cache_bytes_.Add(labels).Set(bytes);
  cache_capacity_.Add(labels).Set(capacity);
  // The stores count since they were opened; the counters follow them.
  metrics::Counter& ev = evictions_.Add(labels);
  ev.Increment(std::max(0.0, evictions - ev.Value()));
  metrics::Counter& co = corrupt_.Add(labels);
  co.Increment(std::max(0.0, corrupt - co.Value()));
}

void DaemonMetrics::SetCacheWriteErrors(const std::string& tier, double write_errors) {
  metrics::Counter& c = write_errors_->Add({{"tier", tier}});
  c.Increment(std::max(0.0, write_errors - c.Value()));
}

std::map<std::string, double> DaemonMetrics::PersistentTotals() const {
  std::map<std::string, double> totals = {{kCompiles, compiles_ok_->Value()},
                                          {kCompileSecondsSaved, compile_seconds_saved_->Value()}};
  // Each child is saved as "<prefix>.<its `label` value>"; `prefix` names the total.
  const auto save = [&](const metrics::Family<metrics::Counter>& family, const char* label,
                        const auto& prefix) {
    family.ForEach([&](const metrics::Labels& labels, const metrics::Counter& c) {
      totals[std::string(prefix(labels)) + "." + labels.at(label)] = c.Value();
    });
  };
  const auto named = [](const char* name) {
    return [name](const metrics::Labels&) { return name; };
  };
  // The measured part of the savings is saved apart from the modeled one.
  save(gpu_seconds_saved_, "baseline", [](const metrics::Labels& labels) {
    return labels.at("basis") == "measured" ? kGpuSecondsSavedMeasured : kGpuSecondsSaved;
  });
  save(model_gpu_seconds_saved_, "baseline", named(kModelGpuSecondsSaved));
  save(gpu_seconds_lost_, "baseline", named(kGpuSecondsLost));
  save(invocations_, "baseline", named(kInvocations));
  save(measured_samples_, "kernels", named(kMeasuredSamples));
  return totals;
}

void DaemonMetrics::RestoreTotals(const std::map<std::string, double>& totals) {
  Restore(*compiles_ok_, totals, kCompiles);
  Restore(*compile_seconds_saved_, totals, kCompileSecondsSaved);
  const auto name = [](const char* total, std::string_view label) {
    return std::string(total) + "." + std::string(label);
  };
  for (const char* b : kBaselines) {
    const metrics::Labels baseline = {{"baseline", b}};
    Restore(gpu_seconds_saved_.Add({{"baseline", b}, {"basis", "modeled"}}), totals,
            name(kGpuSecondsSaved, b).c_str());
    Restore(gpu_seconds_saved_.Add({{"baseline", b}, {"basis", "measured"}}), totals,
            name(kGpuSecondsSavedMeasured, b).c_str());
    const bool has_model_total = totals.contains(name(kModelGpuSecondsSaved, b));
    Restore(model_gpu_seconds_saved_.Add(baseline), totals,
            name(has_model_total ? kModelGpuSecondsSaved : kGpuSecondsSaved, b).c_str());
    Restore(gpu_seconds_lost_.Add(baseline), totals, name(kGpuSecondsLost, b).c_str());
    Restore(invocations_.Add(baseline), totals, name(kInvocations, b).c_str());
  }
  for (const char* k : kTimedKernels) {
    Restore(measured_samples_.Add({{"kernels", k}}), totals, name(kMeasuredSamples, k).c_str());
  }
  // A store saved before the labels holds only the plain names; once the labelled totals
  // are saved they include it, and the plain names (never rewritten) are ignored.
  if (!totals.contains(name(kGpuSecondsSaved, kLegacyBaseline))) {
    Restore(gpu_seconds_saved_.Add({{"baseline", kLegacyBaseline}, {"basis", "modeled"}}), totals,
            kGpuSecondsSaved);
    Restore(model_gpu_seconds_saved_.Add({{"baseline", kLegacyBaseline}}), totals,
            kGpuSecondsSaved);
    Restore(invocations_.Add({{"baseline", kLegacyBaseline}}), totals, kInvocations);
  }
}

double DaemonMetrics::RequestCount(const char* method, RequestResult result) {
  double total = 0;
  for (RequestShape shape : kAllShapes) {
    total += requests_
                 .Add({{"method", method},
                       {"result", RequestResultName(result)},
                       {"shape", RequestShapeName(shape)}})
                 .Value();
  }
  return total;
}

double DaemonMetrics::ServingCount(RequestResult result) {
  double total = 0;
  for (const char* m : kServingMethods) total += RequestCount(m, result);
  return total;
}

}  // namespace stitch::daemon
