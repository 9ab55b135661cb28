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
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "stitch/client/client.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/graph_proto.h"

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
};

class Driver {
 public:
  json Run(const Task& task) {
    const auto started = std::chrono::steady_clock::now();
    const std::vector<Subgraph>* subgraphs = Subgraphs(task.model);
    if (subgraphs == nullptr) return {{"task", task.id}, {"error", model_errors_[task.model]}};
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
      const std::string outcome = stitch::client::OutcomeName(r.outcome);
      if (k.occurrences == 0 || Rank(outcome) < Rank(k.outcome)) k.outcome = outcome;
      k.occurrences += (*subgraphs)[i].occurrences;
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

 private:
  // The model's distinct subgraphs, extracted on first use; null when the model cannot be
  // read or split (the reason is in model_errors_). Subgraphs that differ only in names are
  // one (the daemon's key ignores names too).
  const std::vector<Subgraph>* Subgraphs(const std::string& path) {
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
    std::vector<Subgraph> distinct;
    std::map<std::string, size_t> index;  // the graph's bytes without names -> distinct entry
    for (const stitch::Graph& g : *graphs) {
      stitch::v1::Graph proto = stitch::ToProto(g);
      stitch::v1::Graph anonymous = proto;
      anonymous.clear_name();
      for (stitch::v1::Node& n : *anonymous.mutable_nodes()) n.clear_name();
      const auto [it, added] = index.emplace(anonymous.SerializeAsString(), distinct.size());
      if (added) {
        distinct.emplace_back();
        *distinct.back().request.mutable_graph() = std::move(proto);
      }
      ++distinct[it->second].occurrences;
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

  std::map<std::string, std::vector<Subgraph>> models_;
  std::map<std::string, std::string> model_errors_;
  std::map<std::string, std::unique_ptr<Client>> clients_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Play fleet-replay tasks (JSON lines on stdin) against stitchd daemons"};
  CLI11_PARSE(app, argc, argv);
  Driver driver;
  for (std::string line; std::getline(std::cin, line);) {
    if (line.empty()) continue;
    std::variant<Task, std::string> task = ParseTask(line);
    json out = std::holds_alternative<Task>(task) ? driver.Run(std::get<Task>(task))
                                                  : json{{"error", std::get<std::string>(task)}};
    std::cout << out.dump() << std::endl;
  }
  return 0;
}
