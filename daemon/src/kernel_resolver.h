// The daemon's core, free of gRPC: a request's subgraph in, a bundle out. It imports and
// verifies the subgraph, computes the key itself, asks the cache, and on a miss compiles
// once per key on the compile pool, however many requests are waiting for it.
//
// Thread-safety: Resolve may be called from any thread. `done` runs exactly once: inline on
// the caller's thread when the answer needs no compile, else on a compile-pool thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "compile_pool.h"
#include "daemon_metrics.h"
#include "key_memo.h"
#include "single_flight.h"
#include "stitch/base/status.h"
#include "stitch/cache/tiered_store.h"
#include "stitch/driver/compile.h"
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

class KernelResolver {
 public:
  // `store`, `pool` and `metrics` must outlive the resolver.
  KernelResolver(ResolverOptions options, cache::KernelStore& store, CompilePool& pool,
                 DaemonMetrics& metrics);

  // Resolves the serialized CompileRequest `request_bytes`; on a cache miss compiles when
  // `compile_on_miss`, else answers NOT_FOUND. Bytes that are not a CompileRequest are
  // INVALID_ARGUMENT.
  void Resolve(std::string_view request_bytes, bool compile_on_miss,
               std::function<void(Resolution)> done);

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
  Resolution CompileNow(const Prepared& prepared);

  ResolverOptions options_;
  cache::KernelStore& store_;
  CompilePool& pool_;
  DaemonMetrics& metrics_;
  SingleFlight<Resolution> flights_;
  KeyMemo memo_{1 << 16};
  std::mutex profiles_mu_;
  std::map<std::pair<std::string, bool>, Profile> profiles_;
};

}  // namespace stitch::daemon
