// stitchctl warm: has a daemon compile every memory-intensive subgraph of a model ahead of
// the job that will ask for them, so that the job's first step finds them cached.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <future>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "graph_input.h"
#include "stitch/client/client.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/graph_proto.h"

namespace stitch::ctl {
namespace {

struct SubgraphResult {
  size_t index = 0;
  std::string graph;
  client::Result result;
  double ms = 0;
};

struct Tally {
  size_t compiled = 0;
  size_t memory = 0;
  size_t disk = 0;
  std::map<std::string, size_t> other;  // any other cache the daemon answered from, by name
  std::vector<const SubgraphResult*> failed;

  size_t others() const {
    size_t n = 0;
    for (const auto& [name, count] : other) n += count;
    return n;
  }
  size_t cached() const { return memory + disk + others(); }
  size_t done() const { return compiled + cached() + failed.size(); }

  void Count(const SubgraphResult& r) {
    const client::Outcome outcome = r.result.outcome;
    if (outcome == client::Outcome::kCompiled) {
      ++compiled;
    } else if (outcome == client::Outcome::kMemory) {
      ++memory;
    } else if (outcome == client::Outcome::kDisk) {
      ++disk;
    } else if (!r.result.ok()) {
      failed.push_back(&r);
    } else {
      ++other[client::OutcomeName(outcome)];
    }
  }
};

// Progress on stderr: one bar rewritten in place on a terminal, one line per subgraph
// otherwise (logs and pipes would keep every rewrite).
class Progress {
 public:
  explicit Progress(size_t total) : total_(total), tty_(::isatty(STDERR_FILENO) == 1) {}

  void Update(const SubgraphResult& r, const Tally& tally) {
    if (!tty_) {
      std::fprintf(stderr, "[%zu/%zu] %-10s %s", tally.done(), total_,
                   client::OutcomeName(r.result.outcome), r.graph.c_str());
      if (r.result.ok()) {
        std::fprintf(stderr, " %s %.1f ms\n", r.result.key.c_str(), r.ms);
      } else {
        std::fprintf(stderr, ": %s\n", r.result.reason.c_str());
      }
      return;
    }
    constexpr size_t kWidth = 30;
    const size_t filled = total_ == 0 ? kWidth : tally.done() * kWidth / total_;
    std::fprintf(stderr, "\r[%s%s] %zu/%zu  compiled %zu  cached %zu  failed %zu ",
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                 tally.done(), total_, tally.compiled, tally.cached(), tally.failed.size());
    if (tally.done() == total_) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  size_t total_;
  bool tty_;
};

void PrintSummary(const std::vector<SubgraphResult>& results, const Tally& tally) {
  std::printf("subgraphs       %zu\n", results.size());
  std::printf("compiled        %zu\n", tally.compiled);
  std::printf("already cached  %zu (memory %zu, disk %zu, other %zu", tally.cached(), tally.memory,
              tally.disk, tally.others());
  for (const auto& [name, count] : tally.other) std::printf(", %s %zu", name.c_str(), count);
  std::printf(")\n");
  std::printf("failed          %zu\n", tally.failed.size());
  for (const SubgraphResult* r : tally.failed) {
    std::printf("  %03zu %s: %s\n", r->index, r->graph.c_str(), r->result.reason.c_str());
  }
}

void PrintJson(const std::string& module, const std::vector<SubgraphResult>& results,
               const Tally& tally) {
  nlohmann::json failed = nlohmann::json::array();
  for (const SubgraphResult* r : tally.failed) {
    failed.push_back({{"index", r->index}, {"graph", r->graph}, {"reason", r->result.reason}});
  }
  nlohmann::json each = nlohmann::json::array();
  for (const SubgraphResult& r : results) {
    each.push_back({{"index", r.index},
                    {"graph", r.graph},
                    {"source", client::OutcomeName(r.result.outcome)},
                    {"key", r.result.key},
                    {"ms", r.ms}});
  }
  nlohmann::json j = {{"module", module},
                      {"subgraphs", results.size()},
                      {"compiled", tally.compiled},
                      {"cached",
                       {{"memory", tally.memory},
                        {"disk", tally.disk},
                        {"other", tally.others()},
                        {"other_sources", tally.other}}},
                      {"failed", failed},
                      {"results", each}};
  std::cout << j.dump(2) << "\n";
}

}  // namespace

int RunWarm(const WarmArgs& args) {
  if (args.timeout_seconds == 0) return Fail("--timeout must be at least 1 second");
  if (args.jobs == 0) return Fail("--jobs must be at least 1");
  StatusOr<std::string> text = ReadFile(args.module);
  if (!text.ok()) return Fail(text.status().ToString());
  HloImportOptions import;
  import.source_name = args.module;
  StatusOr<std::vector<Graph>> graphs = ExtractMemoryIntensiveSubgraphs(*text, import);
  if (!graphs.ok()) return Fail(graphs.status().ToString());

  client::ClientOptions options = DaemonClientOptions(args.daemon);
  options.local_cache_entries = 0;  // every answer must come from the daemon's cache
  options.compile_deadline = std::chrono::seconds(args.timeout_seconds);
  client::Client c(options);

  struct InFlight {
    size_t index;
    std::chrono::steady_clock::time_point start;
    std::future<client::Result> result;
  };
  std::vector<SubgraphResult> results(graphs->size());
  Tally tally;
  Progress progress(graphs->size());
  std::deque<InFlight> window;
  size_t next = 0;
  // Results are taken in submission order, so a slow subgraph holds back the report but not
  // the compiles behind it, which the daemon's workers run meanwhile.
  while (next < graphs->size() || !window.empty()) {
    while (next < graphs->size() && window.size() < args.jobs) {
      v1::CompileRequest request;
      *request.mutable_graph() = ToProto((*graphs)[next]);
      if (args.target) request.set_target(args.target->name());
      window.push_back({next, std::chrono::steady_clock::now(), c.CompileAsync(request)});
      ++next;
    }
    InFlight oldest = std::move(window.front());
    window.pop_front();
    SubgraphResult& r = results[oldest.index];
    r.index = oldest.index;
    r.graph = (*graphs)[oldest.index].name;
    r.result = oldest.result.get();
    r.ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - oldest.start)
            .count();
    tally.Count(r);
    progress.Update(r, tally);
  }
  if (args.json) {
    PrintJson(args.module, results, tally);
  } else {
    PrintSummary(results, tally);
  }
  return tally.failed.empty() ? 0 : 1;
}

}  // namespace stitch::ctl
