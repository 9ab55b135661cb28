// The fleet replay's job driver. Each line on stdin is one training task, as JSON:
//
//   {"task": 7, "daemon": "unix:///.../stitchd.sock", "model": "/path/model.hlo",
//    "fallback": "xla", "busy_gpu_seconds": 5400.0, "compute_seconds_per_step": 0.012}
//
// The driver does what a framework integration does when the task starts: it splits the
// model's training step into memory-intensive subgraphs (once per model), asks the task's
// node daemon for each one's kernels, and, when the task ends, reports the invocations of its
// steps with the job's fallback. The task runs as many steps as its busy GPU time holds:
//   steps = busy_gpu_seconds / (compute_seconds_per_step + the fallback's modeled time of the
//           memory-intensive subgraphs per step).
// A training step repeats its patterns (12 identical layers), so the subgraphs are asked for
// once per distinct graph, all at once, as a framework compiling a step would; invocations
// count every occurrence. It answers each task with one JSON line on stdout: outcomes by
// tier per distinct key, the keys, the modeled seconds per step of the stitched plans and of
// every baseline, the steps, and the GPU seconds saved as the daemon will price them. Errors in a
// task line are answered as {"task": .., "error": ..} and the driver goes on; it exits 0 at end of
// input.
//
// A variable-shape task names the extents its steps ran at instead of running steps:
//
//   {"task": 8, "daemon": "unix:///...", "model": "/path/model.hlo", "rows": 32,
//    "extents": [58, 64, 96], "shapes": "bucketed"}
//
// `rows` is the model's outer extent as its HLO was written (batch, or batch x sequence folded
// into rows). A subgraph with parameters whose dimension 0 is `rows`
// (ParametersWithOuterExtent) that is shape-generic with them as its outer parameters
// (ClassifyShapes) is asked for at every extent of the task (AtExtent); every other subgraph
// does not follow the extent and is asked for once, as the HLO has it. "exact" asks for those
// graphs without outer parameters, so each extent is its own key; "bucketed" keeps the outer
// parameters, so the daemon keys one bundle per power-of-two bucket, and asks once per bucket
// (at the first extent of the task in it), as a job whose kernels serve the bucket would. The
// answer adds "asked": [[subgraph, extent], ...] (extent 0 for a subgraph that does not
// follow it). Such a task only asks for kernels: it runs no steps and reports no usage. An
// optional "subgraphs": [i, ...] limits it to those distinct subgraphs (numbered as --describe
// numbers them).
//
// `stitch_replay_driver --describe MODEL --rows N` prints, as one JSON line, each distinct
// subgraph of the model with its occurrences and whether it follows an outer extent of N, and
// why not.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "stitch/client/client.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/graph_proto.h"
#include "stitch/ir/shape_class.h"

namespace {

using nlohmann::json;
using stitch::client::Client;

constexpr const char* kBaselines[] = {"xla", "inductor", "eager", "unreported"};

struct Task {
  int64_t id = 0;
  std::string daemon;
  std::string model;
  std::string fallback;
  double busy_gpu_seconds = 0;
  double compute_seconds_per_step = 0;
  // A variable-shape task (see the top of the file): the model's rows, the extents its steps
  // ran at, and whether it asks for bucketed (shape-class) or exact graphs.
  int64_t rows = 0;
  std::vector<int64_t> extents;
  bool bucketed = false;
  std::optional<std::set<size_t>> only;  // the distinct subgraphs asked for; all when unset
};

// Returns the task a line describes, or a message naming what is wrong with it.
std::variant<Task, std::string> ParseTask(const std::string& line) {
  const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::string("a task line is a JSON object");
  Task t;
  try {
    t.id = j.at("task").get<int64_t>();
    t.daemon = j.at("daemon").get<std::string>();
    t.model = j.at("model").get<std::string>();
    t.fallback = j.value("fallback", std::string("xla"));
    if (j.contains("extents")) {
      t.rows = j.at("rows").get<int64_t>();
      t.extents = j.at("extents").get<std::vector<int64_t>>();
      const std::string shapes = j.value("shapes", std::string("exact"));
      if (shapes != "exact" && shapes != "bucketed") {
        return std::string("shapes must be \"exact\" or \"bucketed\", got \"") + shapes + "\"";
      }
      t.bucketed = shapes == "bucketed";
      if (t.rows < 1 || t.extents.empty()) {
        return std::string("a variable-shape task needs rows >= 1 and at least one extent");
      }
      for (int64_t e : t.extents) {
        if (e < 1) return std::string("extents must be >= 1");
      }
      if (j.contains("subgraphs")) t.only = j.at("subgraphs").get<std::set<size_t>>();
      return t;
    }
    t.busy_gpu_seconds = j.at("busy_gpu_seconds").get<double>();
    t.compute_seconds_per_step = j.at("compute_seconds_per_step").get<double>();
  } catch (const json::exception& e) {
    return std::string("task line: ") + e.what();
  }
  if (!std::isfinite(t.busy_gpu_seconds) || t.busy_gpu_seconds < 0 ||
      !std::isfinite(t.compute_seconds_per_step) || t.compute_seconds_per_step < 0) {
    return std::string("busy_gpu_seconds and compute_seconds_per_step must be finite, >= 0");
  }
  return t;
}

stitch::v1::Fallback FallbackOf(const std::string& name) {
  if (name == "xla") return stitch::v1::FALLBACK_XLA;
  if (name == "inductor") return stitch::v1::FALLBACK_INDUCTOR;
  if (name == "eager") return stitch::v1::FALLBACK_EAGER;
  return stitch::v1::FALLBACK_UNSPECIFIED;
}

// The modeled seconds of one invocation under `planner`, as the daemon prices it: a missing
// or unpriced (infinite) estimate falls back to the better baseline's.
double PlanSeconds(const stitch::v1::CostEstimate& cost, const std::string& planner) {
  for (const stitch::v1::PlanEstimate& p : cost.plans()) {
    if (planner != "unreported" && p.planner() == planner && std::isfinite(p.seconds())) {
      return p.seconds();
    }
  }
  return cost.baseline_seconds();
}

// A distinct subgraph of a model's step, and how many times the step runs it.
struct Subgraph {
  stitch::v1::CompileRequest request;
  uint64_t occurrences = 0;
};

// How an outcome ranks when one key was asked for more than once in a task: a concurrent
// duplicate of a compile is answered from memory or as compiled, depending on timing, so the
// key's outcome is the first that happened to it.
int Rank(const std::string& outcome) {
  static const std::map<std::string, int> kRanks = {
      {"compiled", 0}, {"hit_cluster", 1}, {"hit_disk", 2}, {"hit_memory", 3}, {"hit_local", 4}};
  const auto it = kRanks.find(outcome);
  return it == kRanks.end() ? 5 : it->second;
}

struct KeyResult {
  std::string outcome;
  uint64_t occurrences = 0;
  stitch::v1::CostEstimate cost;

  // Counts `occurrences` more of the key, answered by `r`; the outcome kept is the best
  // tier any of them was answered from.
  void Add(const stitch::client::Result& r, uint64_t more) {
    const std::string tier = stitch::client::OutcomeName(r.outcome);
    if (occurrences == 0 || Rank(tier) < Rank(outcome)) outcome = tier;
    occurrences += more;
  }
};

// A model's distinct subgraphs: the requests, and the graphs they were made from.
struct Model {
  std::vector<Subgraph> subgraphs;
  std::vector<stitch::Graph> graphs;
};

// How one distinct subgraph follows the model's outer extent: where it does, its graph with
// the outer parameters named and its shape class; where it does not, why.
struct Follows {
  stitch::Graph graph;
  std::optional<stitch::ShapeClass> shape_class;
  std::string why;
};

// The most requests a variable-shape task has in flight at once: well under the daemon's
// compile queue (max_queue, 256 by default) and its per-connection stream limit.
constexpr size_t kWindow = 64;

std::string DimZeros(const stitch::Graph& g) {
  std::string out;
  for (int p : g.Parameters()) {
    const stitch::Shape& s = g.nodes[static_cast<size_t>(p)].shape;
    if (!out.empty()) out += ", ";
    out += s.rank() > 0 ? std::to_string(s.dims[0]) : std::string("scalar");
  }
  return out;
}

class Driver {
 public:
  json Run(const Task& task) {
    if (!task.extents.empty()) return RunVariable(task);
    const auto started = std::chrono::steady_clock::now();
    const Model* model = ModelOf(task.model);
    if (model == nullptr) return {{"task", task.id}, {"error", model_errors_[task.model]}};
    const std::vector<Subgraph>* subgraphs = &model->subgraphs;
    Client& client = ClientFor(task.daemon);
    client.SetFallback(FallbackOf(task.fallback));

    std::vector<std::future<stitch::client::Result>> pending;
    for (const Subgraph& s : *subgraphs) pending.push_back(client.CompileAsync(s.request));
    std::map<std::string, KeyResult> keys;
    json fallbacks = json::array();
    for (size_t i = 0; i < pending.size(); ++i) {
      stitch::client::Result r = pending[i].get();
      if (!r.ok()) {
        fallbacks.push_back(r.reason);
        continue;
      }
      KeyResult& k = keys[r.key];
      k.Add(r, (*subgraphs)[i].occurrences);
      k.cost = r.bundle->cost();
    }
    json outcomes = json::object(), key_list = json::array(), per_step = json::object();
    double stitched = 0;
    for (const char* b : kBaselines) per_step[b] = 0.0;
    for (const auto& [key, k] : keys) {
      outcomes[k.outcome] = outcomes.value(k.outcome, 0) + 1;
      key_list.push_back(key);
      const double n = static_cast<double>(k.occurrences);
      stitched += n * k.cost.stitched_seconds();
      for (const char* b : kBaselines) {
        per_step[b] = per_step[b].get<double>() + n * PlanSeconds(k.cost, b);
      }
    }
    const std::string priced = task.fallback.empty() ? "unreported" : task.fallback;
    const double step_seconds = task.compute_seconds_per_step + per_step[priced].get<double>();
    const uint64_t steps =
        step_seconds > 0 ? static_cast<uint64_t>(task.busy_gpu_seconds / step_seconds) : 0;
    double saved = 0;
    for (const auto& [key, k] : keys) {
      if (steps == 0) break;
      client.RecordInvocations(key, steps * k.occurrences);
      const double per_call = PlanSeconds(k.cost, priced) - k.cost.stitched_seconds();
      if (std::isfinite(per_call) && per_call > 0) {
        saved += static_cast<double>(steps * k.occurrences) * per_call;
      }
    }
    json out = {{"task", task.id},
                {"keys", key_list},
                {"outcomes", outcomes},
                {"fallbacks", fallbacks},
                {"stitched_seconds_per_step", stitched},
                {"baseline_seconds_per_step", per_step},
                {"steps", steps},
                {"saved_gpu_seconds", saved}};
    stitch::StatusOr<stitch::v1::ReportUsageResponse> report = client.FlushUsage();
    if (report.ok()) {
      out["report"] = {{"accepted", report->accepted()}, {"unknown_keys", report->unknown_keys()}};
    } else {
      out["report_error"] = report.status().ToString();
    }
    out["wall_seconds"] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return out;
  }

  // A variable-shape task: asks for the model's kernels at each of the task's extents (see
  // the top of the file) and answers what it asked and how each key was served.
  json RunVariable(const Task& task) {
    const auto started = std::chrono::steady_clock::now();
    const Model* model = ModelOf(task.model);
    if (model == nullptr) return {{"task", task.id}, {"error", model_errors_[task.model]}};
    const std::vector<Follows>& follows = FollowsOf(task.model, *model, task.rows);
    Client& client = ClientFor(task.daemon);
    client.SetFallback(FallbackOf(task.fallback));

    std::vector<int64_t> extents;
    std::set<int64_t> seen, tops;
    for (int64_t e : task.extents) {
      if (!seen.insert(e).second) continue;
      if (task.bucketed && !tops.insert(stitch::BucketOf(e).hi).second) continue;
      extents.push_back(e);
    }
    struct Ask {
      size_t subgraph;
      int64_t extent;  // 0: the subgraph does not follow the extent
      const stitch::v1::CompileRequest* request;
    };
    std::vector<Ask> asks;
    auto wanted = [&](size_t i) { return !task.only || task.only->contains(i); };
    for (size_t i = 0; i < follows.size(); ++i) {
      if (wanted(i) && !follows[i].shape_class) {
        asks.push_back({i, 0, &model->subgraphs[i].request});
      }
    }
    for (int64_t e : extents) {
      for (size_t i = 0; i < follows.size(); ++i) {
        if (wanted(i) && follows[i].shape_class) {
          asks.push_back(
              {i, e, &RequestAt(task.model, task.rows, follows[i], i, e, task.bucketed)});
        }
      }
    }
    std::map<std::string, KeyResult> keys;
    json fallbacks = json::array(), asked = json::array();
    for (size_t begin = 0; begin < asks.size(); begin += kWindow) {
      const size_t end = std::min(asks.size(), begin + kWindow);
      std::vector<std::future<stitch::client::Result>> pending;
      for (size_t i = begin; i < end; ++i) pending.push_back(client.CompileAsync(*asks[i].request));
      for (size_t i = begin; i < end; ++i) {
        stitch::client::Result r = pending[i - begin].get();
        asked.push_back({asks[i].subgraph, asks[i].extent});
        if (!r.ok()) {
          fallbacks.push_back(r.reason);
          continue;
        }
        keys[r.key].Add(r, 1);
      }
    }
    json outcomes = json::object(), key_list = json::array();
    for (const auto& [key, k] : keys) {
      outcomes[k.outcome] = outcomes.value(k.outcome, 0) + 1;
      key_list.push_back(key);
    }
    return {{"task", task.id},
            {"shapes", task.bucketed ? "bucketed" : "exact"},
            {"keys", key_list},
            {"outcomes", outcomes},
            {"fallbacks", fallbacks},
            {"asked", asked},
            {"steps", 0},
            {"saved_gpu_seconds", 0.0},
            {"wall_seconds",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()}};
  }

  // Each distinct subgraph of the model, and whether it follows an outer extent of `rows`.
  json Describe(const std::string& path, int64_t rows) {
    const Model* model = ModelOf(path);
    if (model == nullptr) return {{"model", path}, {"error", model_errors_[path]}};
    json subgraphs = json::array();
    const std::vector<Follows>& follows = FollowsOf(path, *model, rows);
    for (size_t i = 0; i < follows.size(); ++i) {
      const stitch::Graph& g = model->graphs[i];
      subgraphs.push_back({{"subgraph", i},
                           {"occurrences", model->subgraphs[i].occurrences},
                           {"nodes", g.nodes.size()},
                           {"parameter_dim0", DimZeros(g)},
                           {"outer_parameters", follows[i].graph.outer_parameters},
                           {"follows", follows[i].shape_class.has_value()},
                           {"why_not", follows[i].why}});
    }
    return {{"model", path}, {"rows", rows}, {"subgraphs", subgraphs}};
  }

 private:
  // Whether each distinct subgraph of `model` follows an outer extent of `rows`, worked out
  // once per model and rows.
  const std::vector<Follows>& FollowsOf(const std::string& path, const Model& model, int64_t rows) {
    const auto [it, added] = follows_.try_emplace({path, rows});
    if (!added) return it->second;
    for (const stitch::Graph& g : model.graphs) {
      Follows f;
      f.graph = g;
      f.graph.outer_parameters = stitch::ParametersWithOuterExtent(g, rows);
      if (f.graph.outer_parameters.empty()) {
        f.why = "no parameter has dimension 0 = " + std::to_string(rows) +
                " (dimension 0 of its parameters: " + DimZeros(g) + ")";
      } else if (stitch::StatusOr<stitch::ShapeClass> c = stitch::ClassifyShapes(f.graph); c.ok()) {
        f.shape_class = *c;
      } else {
        f.why = "not shape-generic: " + c.status().message();
        f.graph.outer_parameters.clear();
      }
      it->second.push_back(std::move(f));
    }
    return it->second;
  }

  // The request for subgraph `index` (which follows the extent) at `extent`: with its outer
  // parameters when `bucketed`, without (exact shapes) otherwise. Built once and kept.
  const stitch::v1::CompileRequest& RequestAt(const std::string& path, int64_t rows,
                                              const Follows& f, size_t index, int64_t extent,
                                              bool bucketed) {
    const auto [it, added] = at_extent_.try_emplace({path, rows, index, extent, bucketed});
    if (added) {
      stitch::Graph g = stitch::AtExtent(f.graph, *f.shape_class, extent);
      if (!bucketed) g.outer_parameters.clear();
      *it->second.mutable_graph() = stitch::ToProto(g);
    }
    return it->second;
  }

  // The model's distinct subgraphs, extracted on first use; null when the model cannot be
  // read or split (the reason is in model_errors_). Subgraphs that differ only in names are
  // one (the daemon's key ignores names too).
  const Model* ModelOf(const std::string& path) {
    if (auto it = models_.find(path); it != models_.end()) return &it->second;
    if (model_errors_.contains(path)) return nullptr;
    std::ifstream in(path);
    if (!in) {
      model_errors_[path] = "cannot read model " + path;
      return nullptr;
    }
    std::stringstream text;
    text << in.rdbuf();
    stitch::HloImportOptions options;
    options.source_name = path;
    auto graphs = stitch::ExtractMemoryIntensiveSubgraphs(text.str(), options);
    if (!graphs.ok()) {
      model_errors_[path] = graphs.status().ToString();
      return nullptr;
    }
    Model distinct;
    std::map<std::string, size_t> index;  // the graph's bytes without names -> distinct entry
    for (const stitch::Graph& g : *graphs) {
      stitch::v1::Graph proto = stitch::ToProto(g);
      stitch::v1::Graph anonymous = proto;
      anonymous.clear_name();
      for (stitch::v1::Node& n : *anonymous.mutable_nodes()) n.clear_name();
      const auto [it, added] =
          index.emplace(anonymous.SerializeAsString(), distinct.subgraphs.size());
      if (added) {
        distinct.subgraphs.emplace_back();
        *distinct.subgraphs.back().request.mutable_graph() = std::move(proto);
        distinct.graphs.push_back(g);
      }
      ++distinct.subgraphs[it->second].occurrences;
    }
    return &models_.emplace(path, std::move(distinct)).first->second;
  }

  // One client per daemon, without the in-process cache: every task is its own process in a
  // real fleet, and starts with nothing cached.
  Client& ClientFor(const std::string& address) {
    std::unique_ptr<Client>& c = clients_[address];
    if (c == nullptr) {
      stitch::client::ClientOptions o;
      o.address = address;
      o.local_cache_entries = 0;
      o.compile_deadline = std::chrono::minutes(10);
      o.lookup_deadline = std::chrono::seconds(10);
      o.admin_deadline = std::chrono::seconds(30);
      c = std::make_unique<Client>(o);
    }
    return *c;
  }

  std::map<std::string, Model> models_;
  std::map<std::pair<std::string, int64_t>, std::vector<Follows>> follows_;
  std::map<std::tuple<std::string, int64_t, size_t, int64_t, bool>, stitch::v1::CompileRequest>
      at_extent_;
  std::map<std::string, std::string> model_errors_;
  std::map<std::string, std::unique_ptr<Client>> clients_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Play fleet-replay tasks (JSON lines on stdin) against stitchd daemons"};
  std::string describe;
  int64_t rows = 0;
  app.add_option("--describe", describe,
                 "print the model's distinct subgraphs and whether each follows --rows, and exit");
  app.add_option("--rows", rows, "the model's outer extent, for --describe")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  Driver driver;
  if (!describe.empty()) {
    if (rows < 1) {
      std::cerr << "--describe needs --rows\n";
      return 2;
    }
    const json out = driver.Describe(describe, rows);
    std::cout << out.dump() << std::endl;
    return out.contains("error") ? 1 : 0;
  }
  for (std::string line; std::getline(std::cin, line);) {
    if (line.empty()) continue;
    std::variant<Task, std::string> task = ParseTask(line);
    json out = std::holds_alternative<Task>(task) ? driver.Run(std::get<Task>(task))
                                                  : json{{"error", std::get<std::string>(task)}};
    std::cout << out.dump() << std::endl;
  }
  return 0;
}
