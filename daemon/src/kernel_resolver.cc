#include "kernel_resolver.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "request_graph.h"
#include "stitch/cache/entry.h"
#include "stitch/driver/bundle.h"
#include "stitch/driver/compile.h"
#include "stitch/hlo/hlo_import.h"

namespace stitch::daemon {

struct KernelResolver::Prepared {
  Graph graph;  // verified
  const Profile* profile = nullptr;
  CacheKey key;
};

namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

v1::CompileResponse::Source SourceOf(cache::Tier tier) {
  switch (tier) {
    case cache::Tier::kMemory:
      return v1::CompileResponse::MEMORY;
    case cache::Tier::kDisk:
      return v1::CompileResponse::DISK;
    case cache::Tier::kCluster:
      return v1::CompileResponse::CLUSTER;
  }
  return v1::CompileResponse::SOURCE_UNSPECIFIED;
}

// A waiting node first looks soon (small kernels compile in tens of milliseconds), then backs
// off so that many waiting keys cost the cluster little.
constexpr std::chrono::milliseconds kFirstClusterCheck{5};
constexpr std::chrono::milliseconds kLongestClusterCheckInterval{100};

KernelResolver::KernelResolver(ResolverOptions options, cache::TieredStore& store,
                               CompilePool& pool, DaemonMetrics& metrics,
                               cache::ClusterStore* cluster)
    : options_(std::move(options)),
      store_(store),
      pool_(pool),
      metrics_(metrics),
      cluster_(cluster),
      poller_(kFirstClusterCheck, kLongestClusterCheckInterval) {}

KernelResolver::~KernelResolver() { StopWaiting(); }

void KernelResolver::StopWaiting() { poller_.Stop(); }

HloImportOptions KernelResolver::HloOptions() const {
  HloImportOptions o;
  o.limits = options_.limits;
  o.max_text_bytes = options_.max_hlo_text_bytes;
  o.source_name = "request";
  return o;
}

const KernelResolver::Profile& KernelResolver::ProfileFor(const Target& target, bool ptx_only) {
  std::lock_guard lock(profiles_mu_);
  auto [it, inserted] = profiles_.try_emplace({target.name(), ptx_only});
  if (inserted) {
    CompileOptions& o = it->second.options;
    o.codegen.target = target;
    o.codegen.emit_cubin = !ptx_only;
    o.salt = options_.salt;
    o.limits = options_.limits;
    // Building the context probes the toolkit; do it once per target, not per request.
    it->second.key_context = KeyContextFor(o);
  }
  // std::map never moves its elements, so the reference outlives the lock.
  return it->second;
}

StatusOr<KernelResolver::Prepared> KernelResolver::Prepare(const v1::CompileRequest& request) {
  Target target = options_.default_target;
  if (!request.target().empty()) {
    STITCH_ASSIGN_OR_RETURN(target, Target::Parse(request.target()));
    // Frameworks know their GPU's compute capability, not its device ("sm_90" from PyTorch on
    // an H200). On a node planned for a device of that architecture, that device is the one
    // the job runs on; a device named outright ("sm_90/h100") is kept.
    const bool names_device = request.target().find('/') != std::string::npos;
    if (!names_device && target.arch() == options_.default_target.arch()) {
      target = options_.default_target;
    }
  }
  Prepared p;
  STITCH_ASSIGN_OR_RETURN(const Graph graph, GraphOfRequest(request, HloOptions()));
  // A graph whose outer dimension varies is keyed and compiled for its bucket, so every
  // extent of the bucket shares one entry, here and in the cluster tier.
  Bucket served;
  Status not_generic;
  p.graph = ToShapeClass(graph, &served, &not_generic);
  if (!not_generic.ok()) {
    spdlog::debug("compiling exact shapes: {}", not_generic.message());
  }
  p.profile = &ProfileFor(target, options_.ptx_only || request.ptx_only());
  p.key = ComputeKey(p.graph, p.profile->key_context);
  return p;
}

bool KernelResolver::AnswerFromCache(const std::string& key,
                                     std::chrono::steady_clock::time_point start,
                                     const std::function<void(Resolution)>& done) {
  StatusOr<std::optional<cache::Hit>> hit = store_.Get(key);
  if (!hit.ok()) {
    spdlog::warn("cache read failed for {}: {}", key, hit.status().ToString());
    return false;
  }
  if (!hit->has_value()) return false;
  metrics_.ObserveLookupSeconds(SecondsSince(start));
  metrics_.AddCompileSecondsSaved((*hit)->bundle->compile_seconds());
  done(Resolution{Status::Ok(), SourceOf((*hit)->tier), key, (*hit)->bundle});
  return true;
}

void KernelResolver::Resolve(std::string_view request_bytes, bool compile_on_miss,
                             std::function<void(Resolution)> done) {
  auto start = std::chrono::steady_clock::now();
  std::string digest = KeyMemo::Digest(request_bytes);
  std::optional<std::string> known = memo_.Find(digest);
  if (known && AnswerFromCache(*known, start, done)) return;

  v1::CompileRequest request;
  if (!request.ParseFromArray(request_bytes.data(), static_cast<int>(request_bytes.size()))) {
    done(Resolution{
        InvalidArgument("the payload is not a serialized stitch.v1.CompileRequest"), {}, {}, {}});
    return;
  }
  StatusOr<Prepared> prepared = Prepare(request);
  if (!prepared.ok()) {
    done(Resolution{prepared.status(), {}, {}, {}});
    return;
  }
  memo_.Remember(digest, prepared->key.hex);
  if (AnswerFromCache(prepared->key.hex, start, done)) return;
  if (!compile_on_miss) {
    metrics_.ObserveLookupSeconds(SecondsSince(start));
    done(Resolution{
        NotFound("no cached kernels for key " + prepared->key.hex), {}, prepared->key.hex, {}});
    return;
  }
  if (std::optional<Status> failed = NegativeHit(prepared->key.hex)) {
    metrics_.CountNegativeCacheHit();
    done(Resolution{*failed, {}, prepared->key.hex, {}});
    return;
  }
  auto shared = std::make_shared<Prepared>(std::move(*prepared));
  if (flights_.Join(shared->key.hex, std::move(done))) StartCompile(std::move(shared));
}

void KernelResolver::StartCompile(std::shared_ptr<Prepared> prepared) {
  // The queue-depth and in-flight gauges are read from the pool at scrape time.
  bool queued = pool_.TrySubmit([this, prepared] { RunFlight(prepared); });
  if (!queued) {
    flights_.Finish(prepared->key.hex,
                    Resolution{ResourceExhausted("the compile queue is full; retry later or "
                                                 "fall back"),
                               {},
                               prepared->key.hex,
                               {}});
  }
}

void KernelResolver::RunFlight(const std::shared_ptr<Prepared>& prepared) {
  // A request that missed just before the previous flight for this key stored its bundle
  // leads a new flight; finding the bundle here keeps it at one compile per key.
  const std::string& key = prepared->key.hex;
  StatusOr<std::optional<cache::Hit>> hit = store_.Get(key);
  if (hit.ok() && hit->has_value()) {
    flights_.Finish(key, Resolution{Status::Ok(), SourceOf((*hit)->tier), key, (*hit)->bundle});
    return;
  }
  if (cluster_ == nullptr) {
    CompileAndFinish(*prepared, /*holds_lease=*/false);
    return;
  }
  const cache::LeaseResult lease = cluster_->TryLease(key);
  if (lease.state == cache::LeaseResult::State::kHeldElsewhere) {
    spdlog::debug("waiting for {} to compile key={}", lease.holder, key);
    metrics_.CountLeaseWait();
    WaitForCluster(prepared);
    return;
  }
  // Acquired, or the cluster did not answer: then this node compiles (fail-open).
  CompileAndFinish(*prepared, lease.state == cache::LeaseResult::State::kAcquired);
}

void KernelResolver::CompileAndFinish(const Prepared& prepared, bool holds_lease) {
  if (!holds_lease) {
    flights_.Finish(prepared.key.hex, CompileNow(prepared));
    return;
  }
  const std::string key = prepared.key.hex;
  // The previous holder may have published and let go between this node's miss and its
  // lease; one more look keeps the count at one compile per key.
  cache::LeaseProbe published = cluster_->Probe(key);
  if (published.hit) {
    cluster_->ReleaseLease(key);
    FinishFromCluster(key, std::move(*published.hit));
    return;
  }
  // A live holder renews its lease a few times per lease time, so only a dead one's runs
  // out, however long the compile takes on a busy node.
  auto compiling = std::make_shared<std::atomic<bool>>(true);
  const auto every = std::max(std::chrono::milliseconds(1), cluster_->lease_time() / 3);
  poller_.Add(
      [this, compiling, key] {
        if (!compiling->load()) return true;
        cluster_->RenewLease(key);
        return false;
      },
      [] {}, every, every);
  Resolution r = CompileNow(prepared);
  compiling->store(false);
  cluster_->ReleaseLease(key);
  flights_.Finish(key, r);
}

void KernelResolver::FinishFromCluster(const std::string& key, cache::Hit hit) {
  store_.Promote(key, hit);
  metrics_.AddCompileSecondsSaved(hit.bundle->compile_seconds());
  flights_.Finish(
      key, Resolution{Status::Ok(), v1::CompileResponse::CLUSTER, key, std::move(hit.bundle)});
}

void KernelResolver::WaitForCluster(std::shared_ptr<Prepared> prepared) {
  const auto give_up_at = std::chrono::steady_clock::now() + options_.cluster_wait;
  const std::string key = prepared->key.hex;
  poller_.Add([this, prepared, give_up_at] { return CheckCluster(prepared, give_up_at); },
              [this, key] {
                flights_.Finish(key, Resolution{Unavailable("stitchd is shutting down while "
                                                            "another node compiles this key"),
                                                {},
                                                key,
                                                {}});
              });
}

bool KernelResolver::CheckCluster(const std::shared_ptr<Prepared>& prepared,
                                  std::chrono::steady_clock::time_point give_up_at) {
  const std::string& key = prepared->key.hex;
  cache::LeaseProbe probe = cluster_->Probe(key);
  if (probe.hit) {
    FinishFromCluster(key, std::move(*probe.hit));
    return true;
  }
  const bool timed_out = std::chrono::steady_clock::now() >= give_up_at;
  if (probe.status.ok() && probe.lease_held && !timed_out) return false;
  // The holder let go without an entry (it died, or its compile failed), it kept renewing
  // past the longest wait, or the cluster stopped answering: compile here.
  bool holds_lease = false;
  if (probe.status.ok()) {
    const cache::LeaseResult lease = cluster_->TryLease(key);
    if (lease.state == cache::LeaseResult::State::kHeldElsewhere && !timed_out) return false;
    holds_lease = lease.state == cache::LeaseResult::State::kAcquired;
  }
  spdlog::info("taking over the compile of key={} ({})", key,
               !probe.status.ok() ? "the cluster does not answer"
               : timed_out        ? "the lease holder took longer than the longest wait"
                                  : "the lease holder let go without an entry");
  metrics_.CountLeaseTakeover();
  const bool queued =
      pool_.TrySubmit([this, prepared, holds_lease] { CompileAndFinish(*prepared, holds_lease); });
  if (!queued) {
    if (holds_lease) cluster_->ReleaseLease(key);
    flights_.Finish(key, Resolution{ResourceExhausted("the compile queue is full; retry later "
                                                      "or fall back"),
                                    {},
                                    key,
                                    {}});
  }
  return true;
}

std::optional<Status> KernelResolver::NegativeHit(const std::string& key) {
  std::lock_guard lock(failures_mu_);
  auto it = failures_.find(key);
  if (it == failures_.end()) return std::nullopt;
  if (std::chrono::steady_clock::now() >= it->second.until) {
    failures_.erase(it);
    return std::nullopt;
  }
  return it->second.status;
}

void KernelResolver::RememberFailure(const std::string& key, const Status& status) {
  // UNAVAILABLE is the node's fault (no worker could be started), not the graph's.
  if (options_.negative_ttl.count() <= 0 || status.code() == StatusCode::kUnavailable) return;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(failures_mu_);
  // Bounded by the keys that failed within one TTL; expired entries go when the map grows.
  if (failures_.size() >= 4096) {
    std::erase_if(failures_, [&](const auto& entry) { return entry.second.until <= now; });
  }
  failures_[key] =
      Failure{Status(status.code(), status.message() + " (this key is not compiled again for " +
                                        std::to_string(options_.negative_ttl.count()) + " s)"),
              now + options_.negative_ttl};
}

Resolution KernelResolver::CompileNow(const Prepared& p) {
  const std::string& key = p.key.hex;
  auto start = std::chrono::steady_clock::now();
  const CompileOptions& options = p.profile->options;
  Status failed;
  CompileFailureKind kind = CompileFailureKind::kNone;
  std::shared_ptr<v1::KernelBundle> bundle;
  if (options_.workers != nullptr) {
    WorkerCompileResult r = options_.workers->Compile(p.graph, p.key, options);
    if (r.worker_restarted) metrics_.CountWorkerRestart();
    if (r.status.ok()) {
      bundle = std::make_shared<v1::KernelBundle>(std::move(r.bundle));
    } else {
      failed = r.status;
      kind = r.kind;
    }
  } else {
    StatusOr<CompileResult> result = CompileVerifiedGraph(p.graph, p.key, options);
    if (result.ok()) {
      bundle = std::make_shared<v1::KernelBundle>(ToBundle(*result, options));
    } else {
      failed = result.status();
      kind = CompileFailureKind::kError;
    }
  }
  double seconds = SecondsSince(start);
  metrics_.ObserveCompile(seconds, bundle != nullptr);
  if (bundle == nullptr) {
    metrics_.CountCompileFailure(CompileFailureKindName(kind));
    spdlog::warn("compile failed key={} graph={} kind={}: {}", key, p.graph.name,
                 CompileFailureKindName(kind), failed.ToString());
    RememberFailure(key, failed);
    return Resolution{failed, {}, key, {}};
  }
  cache::SealBundle(*bundle);
  Status stored = store_.Put(key, bundle);
  if (!stored.ok()) spdlog::error("cache write failed for {}: {}", key, stored.ToString());
  spdlog::info("compiled key={} graph={} kernels={} ms={:.1f}", key, p.graph.name,
               bundle->kernels_size(), seconds * 1e3);
  return Resolution{Status::Ok(), v1::CompileResponse::COMPILED, key, std::move(bundle)};
}

}  // namespace stitch::daemon
