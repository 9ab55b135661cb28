// The daemon's core, free of gRPC: a request's subgraph in, a bundle out. It imports and
// verifies the subgraph, computes the key itself, asks the cache, and on a miss compiles
// once per key on the compile pool, however many requests are waiting for it.
//
// With a cluster tier, a miss compiles once per cluster: the node takes the key's lease
// before compiling; a node that finds the lease taken waits for the holder's entry on the
// poller (checking the entry and the lease together, with backoff) and compiles itself when
// the lease is gone without an entry (the holder died or failed; a live holder renews its
// lease while it compiles), when its wait passes `cluster_wait`, or when the cluster stops
// answering. A request never waits past its own
// deadline: the client falls back, and the flight still lands in the cache.
//
// A compile that fails (the compiler's error, or its worker's crash or limit) is remembered
// for `negative_ttl`: requests for the key within it get that error at once, so that a graph
// that kills its worker cannot keep the node compiling it.
//
// Thread-safety: Resolve may be called from any thread. `done` runs exactly once: inline on
// the caller's thread when the answer needs no compile, else on a compile-pool or poller
// thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "compile_pool.h"
#include "compile_worker.h"
#include "daemon_metrics.h"
#include "key_memo.h"
#include "poller.h"
#include "single_flight.h"
#include "stitch/base/status.h"
#include "stitch/cache/cluster_store.h"
#include "stitch/cache/tiered_store.h"
#include "stitch/driver/compile.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/graph.h"
#include "stitch/ir/key.h"
#include "stitch/plan/target.h"
#include "stitch/v1/kernel_service.pb.h"

namespace stitch::daemon {

struct ResolverOptions {
  Target default_target;
  std::string salt;
  bool ptx_only = false;
  GraphLimits limits;
  // The longest HLO text a request may carry (max_hlo_text_bytes).
  size_t max_hlo_text_bytes = kMaxHloTextBytes;
  // With a cluster tier: the longest a flight waits for another node's compile before it
  // compiles itself, even while the holder keeps renewing its lease.
  std::chrono::milliseconds cluster_wait{std::chrono::minutes(10)};
  // Where compiles run: worker processes (must outlive the resolver), or this process's
  // compile-pool threads when null (compile_isolation: thread).
  CompileWorkers* workers = nullptr;
  // How long a failed compile's error answers repeat requests for its key without compiling
  // (negative_cache_seconds); zero compiles every request again.
  std::chrono::seconds negative_ttl{60};
};

// The answer to one request.
struct Resolution {
  // OK with a bundle; INVALID_ARGUMENT for a malformed subgraph (the importer's or the
  // verifier's message), NOT_FOUND for a Lookup miss, RESOURCE_EXHAUSTED when the compile
  // queue is full, UNIMPLEMENTED or INTERNAL when the compile fails.
  Status status;
  v1::CompileResponse::Source source = v1::CompileResponse::SOURCE_UNSPECIFIED;
  std::string key;
  cache::BundlePtr bundle;
};

// Returns the response source that names `tier`.
v1::CompileResponse::Source SourceOf(cache::Tier tier);

class KernelResolver {
 public:
  // `store`, `pool`, `metrics` and `cluster` (null without a cluster tier; else also a tier
  // of `store`) must outlive the resolver.
  KernelResolver(ResolverOptions options, cache::TieredStore& store, CompilePool& pool,
                 DaemonMetrics& metrics, cache::ClusterStore* cluster = nullptr);
  ~KernelResolver();

  // Resolves the serialized CompileRequest `request_bytes`; on a cache miss compiles when
  // `compile_on_miss`, else answers NOT_FOUND. Bytes that are not a CompileRequest are
  // INVALID_ARGUMENT.
  void Resolve(std::string_view request_bytes, bool compile_on_miss,
               std::function<void(Resolution)> done);

  // Answers every request still waiting on another node's compile with UNAVAILABLE (their
  // clients fall back) and stops waiting. Call before draining the compile pool.
  void StopWaiting();

  // Keys this node is waiting on another node to compile.
  size_t waiting() const { return poller_.pending(); }

  // Returns the node limits every graph this daemon accepts must stay within; extraction
  // applies the same ones, so that an extracted signature is never refused by Compile.
  const GraphLimits& limits() const { return options_.limits; }

  // Returns the options every HLO text from a request is read with: the graph limits, the
  // text limit, and "request" naming the source in messages.
  HloImportOptions HloOptions() const;

 private:
  struct Prepared;
  StatusOr<Prepared> Prepare(const v1::CompileRequest& request);
  // Answers from the cache when it holds `key`; returns false on a miss.
  bool AnswerFromCache(const std::string& key, std::chrono::steady_clock::time_point start,
                       const std::function<void(Resolution)>& done);
  // The compile options of requests for `target`, and the key context built from them, made
  // once per target and cubin choice: every request's key and compile use these.
  struct Profile {
    CompileOptions options;
    KeyContext key_context;
  };
  const Profile& ProfileFor(const Target& target, bool ptx_only);
  void StartCompile(std::shared_ptr<Prepared> prepared);
  // The compile-pool task of a flight: a last cache look, the lease, then a compile or a wait.
  void RunFlight(const std::shared_ptr<Prepared>& prepared);
  // Compiles on this thread, stores the bundle, gives up the lease if held, and finishes the
  // flight. Holding the lease, it first looks once more for an entry published meanwhile.
  void CompileAndFinish(const Prepared& prepared, bool holds_lease);
  // Back-fills the node's tiers with an entry another node published and answers the flight.
  void FinishFromCluster(const std::string& key, cache::Hit hit);
  // Waits on the poller for the entry another node is compiling under its lease.
  void WaitForCluster(std::shared_ptr<Prepared> prepared);
  // One look at the cluster for a waited-on key; true when the wait is over.
  bool CheckCluster(const std::shared_ptr<Prepared>& prepared,
                    std::chrono::steady_clock::time_point give_up_at);
  Resolution CompileNow(const Prepared& prepared);
  // Returns the remembered error of a failed compile of `key` while its TTL lasts.
  std::optional<Status> NegativeHit(const std::string& key);
  // Remembers that compiling `key` failed with `status`.
  void RememberFailure(const std::string& key, const Status& status);

  ResolverOptions options_;
  cache::TieredStore& store_;
  CompilePool& pool_;
  DaemonMetrics& metrics_;
  cache::ClusterStore* const cluster_;
  Poller poller_;
  SingleFlight<Resolution> flights_;
  KeyMemo memo_{1 << 16};
  std::mutex profiles_mu_;
  std::map<std::pair<std::string, bool>, Profile> profiles_;
  struct Failure {
    Status status;
    std::chrono::steady_clock::time_point until;
  };
  std::mutex failures_mu_;
  std::map<std::string, Failure> failures_;  // the negative cache, by key
};

}  // namespace stitch::daemon
