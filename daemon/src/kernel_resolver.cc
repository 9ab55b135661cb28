#include "kernel_resolver.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <regex>

#include "stitch/cache/entry.h"
#include "stitch/compiler/bundle.h"
#include "stitch/compiler/compile.h"
#include "stitch/compiler/graph_proto.h"
#include "stitch/compiler/hlo_import.h"
#include "stitch/compiler/verifier.h"

namespace stitch::daemon {

struct KernelResolver::Prepared {
  Graph graph;
  CompileOptions options;
  std::string key;
};

namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Every failure to turn the payload into a valid graph is the caller's input, whatever
// code the importer chose (RESOURCE_EXHAUSTED for size limits, UNIMPLEMENTED for an op
// outside stitch's scope): the job cannot retry its way out of it.
Status AsInvalidArgument(const Status& s) {
  if (s.ok()) return s;
  return InvalidArgument(s.message());
}

StatusOr<Graph> GraphOf(const v1::CompileRequest& request, const GraphLimits& limits) {
  switch (request.subgraph_case()) {
    case v1::CompileRequest::kGraph: {
      StatusOr<Graph> g = FromProto(request.graph());
      if (!g.ok()) return AsInvalidArgument(g.status());
      Status verified = Verify(*g, limits);
      if (!verified.ok()) return AsInvalidArgument(verified);
      return g;
    }
    case v1::CompileRequest::kHloText: {
      HloImportOptions o;
      o.limits = limits;
      o.source_name = "request";
      StatusOr<Graph> g = ImportHloModule(request.hlo_text(), o);
      if (!g.ok()) return AsInvalidArgument(g.status());
      return g;
    }
    case v1::CompileRequest::SUBGRAPH_NOT_SET:
      break;
  }
  return InvalidArgument("the request carries neither a graph nor hlo_text");
}

v1::CompileResponse::Source SourceOf(cache::Tier tier) {
  return tier == cache::Tier::kMemory ? v1::CompileResponse::MEMORY : v1::CompileResponse::DISK;
}

}  // namespace

Status ValidateTarget(const std::string& target) {
  static const std::regex kTarget("sm_[0-9]{2,3}[a-z]?");
  if (std::regex_match(target, kTarget)) return Status::Ok();
  return InvalidArgument("target '" + target + "' is not a GPU target like sm_80 or sm_90");
}

KernelResolver::KernelResolver(ResolverOptions options, cache::KernelStore& store,
                               CompilePool& pool, DaemonMetrics& metrics)
    : options_(std::move(options)), store_(store), pool_(pool), metrics_(metrics) {}

const KeyContext& KernelResolver::KeyContextFor(const std::string& target, bool ptx_only) {
  std::lock_guard lock(key_contexts_mu_);
  auto [it, inserted] = key_contexts_.try_emplace({target, ptx_only});
  if (inserted) {
    CompileOptions o;
    o.codegen.target = target;
    o.codegen.emit_cubin = !ptx_only;
    o.salt = options_.salt;
    // Building the context probes the toolkit; do it once per target, not per request.
    it->second = stitch::KeyContextFor(o);
  }
  return it->second;
}

StatusOr<KernelResolver::Prepared> KernelResolver::Prepare(const v1::CompileRequest& request) {
  Prepared p;
  std::string target = request.target().empty() ? options_.default_target : request.target();
  STITCH_RETURN_IF_ERROR(ValidateTarget(target));
  STITCH_ASSIGN_OR_RETURN(p.graph, GraphOf(request, options_.limits));
  bool ptx_only = options_.ptx_only || request.ptx_only();
  p.options.codegen.target = target;
  p.options.codegen.emit_cubin = !ptx_only;
  p.options.salt = options_.salt;
  p.options.limits = options_.limits;
  p.key = ComputeKey(p.graph, KeyContextFor(target, ptx_only)).hex;
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
  memo_.Remember(digest, prepared->key);
  if (AnswerFromCache(prepared->key, start, done)) return;
  if (!compile_on_miss) {
    metrics_.ObserveLookupSeconds(SecondsSince(start));
    done(Resolution{NotFound("no cached kernels for key " + prepared->key), {}, prepared->key, {}});
    return;
  }
  auto shared = std::make_shared<Prepared>(std::move(*prepared));
  if (flights_.Join(shared->key, std::move(done))) StartCompile(std::move(shared));
}

void KernelResolver::StartCompile(std::shared_ptr<Prepared> prepared) {
  // The queue-depth and in-flight gauges are read from the pool at scrape time.
  bool queued =
      pool_.TrySubmit([this, prepared] { flights_.Finish(prepared->key, CompileNow(*prepared)); });
  if (!queued) {
    flights_.Finish(prepared->key,
                    Resolution{ResourceExhausted("the compile queue is full; retry later or "
                                                 "fall back"),
                               {},
                               prepared->key,
                               {}});
  }
}

Resolution KernelResolver::CompileNow(const Prepared& p) {
  // A request that missed just before the previous flight for this key stored its bundle
  // leads a new flight; finding the bundle here keeps it at one compile per key.
  StatusOr<std::optional<cache::Hit>> hit = store_.Get(p.key);
  if (hit.ok() && hit->has_value()) {
    return Resolution{Status::Ok(), SourceOf((*hit)->tier), p.key, (*hit)->bundle};
  }
  auto start = std::chrono::steady_clock::now();
  StatusOr<CompileResult> result = CompileGraph(p.graph, p.options);
  double seconds = SecondsSince(start);
  metrics_.ObserveCompile(seconds, result.ok());
  if (!result.ok()) {
    spdlog::warn("compile failed key={} graph={}: {}", p.key, p.graph.name,
                 result.status().ToString());
    return Resolution{result.status(), {}, p.key, {}};
  }
  auto bundle = std::make_shared<v1::KernelBundle>(ToBundle(p.graph, *result, p.options));
  cache::SealBundle(*bundle);
  Status stored = store_.Put(p.key, bundle);
  if (!stored.ok()) spdlog::error("cache write failed for {}: {}", p.key, stored.ToString());
  spdlog::info("compiled key={} graph={} kernels={} ms={:.1f}", p.key, p.graph.name,
               bundle->kernels_size(), seconds * 1e3);
  return Resolution{Status::Ok(), v1::CompileResponse::COMPILED, p.key, std::move(bundle)};
}

}  // namespace stitch::daemon
