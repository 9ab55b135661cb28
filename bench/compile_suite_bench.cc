// suite_bench: the figures of the 30-subgraph benchmark suite, targeting sm_90.
//
// For every subgraph at its listed shape: the baseline (XLA-style) plan's kernel count, the
// global-memory bytes that plan implies next to the lower bound, and compile time to PTX
// and to cubin (median of --runs runs). Then, on a copy scaled for the host emulator (the
// corpus tests' rule, ~2^18 elements per tensor), the bytes the emulator counted next to the
// bytes the plan implies for that same scaled graph, and whether every output matched the
// reference interpreter.
//
// Usage: suite_bench [--csv PATH] [--runs N] [--only ID[,ID...]]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "stitch/compiler/baseline_planner.h"
#include "stitch/compiler/compile.h"
#include "stitch/compiler/emulated_run.h"
#include "stitch/compiler/emulator.h"
#include "stitch/compiler/interpreter.h"
#include "stitch/compiler/shape_scaling.h"
#include "stitch/compiler/tensor.h"
#include "stitch/compiler/tensor_compare.h"
#include "stitch/compiler/verifier.h"
#include "suite/suite.h"

namespace stitch::suite {
namespace {

struct Flags {
  std::string csv_path;
  int runs = 3;
  std::vector<int> only;
};

struct Result {
  int id = 0;
  std::string subgraph;  // "model / pattern, shape"
  int kernels = -1;
  int64_t plan_bytes = -1, lower_bound = -1;
  int64_t scale_factor = 0;  // 0: no emulation shape
  int64_t emulated_bytes = -1, scaled_plan_bytes = -1;
  double ptx_ms = -1, cubin_ms = -1;
  double max_rel_error = -1;  // over all outputs, as Compare measures it
  std::string match;          // "yes", "NO", or "-" when it could not run
  std::string error;          // the first failure, if any
  std::string cubin_note;
};

double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string Fixed(double v, int digits) {
  if (v < 0) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string Scientific(double v) {
  if (v < 0) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1e", v);
  return buf;
}

std::string Megabytes(int64_t bytes) { return bytes < 0 ? "-" : Fixed(bytes / 1e6, 1); }

std::string Count(int64_t v) { return v < 0 ? "-" : std::to_string(v); }

// Compiles `g` for sm_90 `runs` times; fills the plan figures and median timings.
void CompileFullShape(const Graph& g, int runs, Result& r) {
  CompileOptions options;
  options.codegen.target = "sm_90";
  std::vector<double> ptx, total;
  for (int i = 0; i < runs; ++i) {
    StatusOr<CompileResult> c = CompileGraph(g, options);
    if (!c.ok()) {
      r.error = "compile: " + c.status().ToString();
      return;
    }
    ptx.push_back(c->timings.to_ptx_ms());
    total.push_back(c->timings.total_ms());
    if (i == 0) {
      r.kernels = static_cast<int>(c->kernels.size());
      r.plan_bytes = EstimateTraffic(g, c->plan).total();
      r.cubin_note = c->cubin_note;
    }
  }
  r.ptx_ms = Median(ptx);
  r.cubin_ms = Median(total);
}

// Runs the scaled graph on the emulator and compares every output with the interpreter.
void Emulate(const Graph& full, int seed, Result& r) {
  std::optional<ScaledGraph> scaled = ScaleForEmulation(full);
  if (!scaled) {
    r.match = "-";
    if (r.error.empty()) r.error = "emulate: no shape within the emulation budget";
    return;
  }
  r.scale_factor = int64_t{1} << scaled->halvings;
  const Graph& g = scaled->graph;
  CompileOptions options;
  options.emit_ptx = false;  // the emulator runs the portable module
  StatusOr<CompileResult> compiled = CompileGraph(g, options);
  if (!compiled.ok()) {
    r.match = "-";
    if (r.error.empty()) r.error = "compile (scaled): " + compiled.status().ToString();
    return;
  }
  r.scaled_plan_bytes = EstimateTraffic(g, compiled->plan).total();
  std::mt19937_64 rng(seed);
  std::vector<Tensor> inputs;
  for (int p : g.Parameters()) inputs.push_back(RandomTensor(g.nodes[p].shape, rng));
  StatusOr<std::vector<Tensor>> expected = Evaluate(g, inputs);
  StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create();
  Status failed;
  if (!expected.ok()) failed = expected.status();
  if (failed.ok() && !emulator.ok()) failed = emulator.status();
  StatusOr<EmulatedRun> run = failed.ok() ? RunOnEmulator(g, compiled->kernels, inputs, **emulator)
                                          : StatusOr<EmulatedRun>(failed);
  if (!run.ok()) {
    r.match = "-";
    if (r.error.empty()) r.error = "emulate: " + run.status().ToString();
    return;
  }
  r.emulated_bytes = static_cast<int64_t>(run->global_bytes());
  r.match = "yes";
  for (size_t k = 0; k < expected->size(); ++k) {
    const Tensor& want = (*expected)[k];
    Comparison c = Compare(want, run->outputs[k], DefaultTolerance(want.shape.dtype));
    r.max_rel_error = std::max(r.max_rel_error, c.max_rel_error);
    if (!c.pass) {
      r.match = "NO";
      if (r.error.empty()) {
        r.error = "output " + std::to_string(k) + " " + want.shape.ToString() + ": " +
                  std::to_string(c.mismatches) + " mismatches, max_rel " +
                  std::to_string(c.max_rel_error) + "; " + c.message;
      }
    }
  }
}

Result Measure(const SuiteEntry& e, int runs) {
  Result r;
  r.id = e.id;
  r.subgraph = e.model + " / " + e.pattern + ", " + e.shape_text;
  r.lower_bound = TrafficLowerBound(e.graph).total();
  if (Status s = Verify(e.graph); !s.ok()) {
    r.error = "verify: " + s.ToString();
    r.match = "-";
    return r;
  }
  CompileFullShape(e.graph, runs, r);
  Emulate(e.graph, 1000 + e.id, r);
  return r;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" ", colon + 1));
    }
  }
  return "unknown";
}

void PrintTable(const std::vector<Result>& results) {
  std::cout << "| id | subgraph | kernels | plan MB | lower bound MB | ratio | emu scale | "
               "emulated bytes | plan bytes (scaled) | to PTX ms | to cubin ms | emu = interp | "
               "max rel err |\n"
               "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|\n";
  for (const Result& r : results) {
    const double ratio = r.plan_bytes > 0 && r.lower_bound > 0
                             ? static_cast<double>(r.plan_bytes) / r.lower_bound
                             : -1;
    const std::string scale = r.scale_factor == 0   ? "-"
                              : r.scale_factor == 1 ? "1"
                                                    : "1/" + std::to_string(r.scale_factor);
    std::cout << "| " << r.id << " | " << r.subgraph << " | " << Count(r.kernels) << " | "
              << Megabytes(r.plan_bytes) << " | " << Megabytes(r.lower_bound) << " | "
              << Fixed(ratio, 2) << " | " << scale << " | " << Count(r.emulated_bytes) << " | "
              << Count(r.scaled_plan_bytes) << " | " << Fixed(r.ptx_ms, 1) << " | "
              << Fixed(r.cubin_ms, 1) << " | " << r.match << " | " << Scientific(r.max_rel_error)
              << " |\n";
  }
}

std::string CsvField(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

Status WriteCsv(const std::string& path, const std::vector<Result>& results) {
  std::ofstream out(path);
  if (!out) return InvalidArgument("cannot write " + path);
  out << "id,subgraph,kernels,plan_bytes,lower_bound_bytes,ratio,emu_scale_factor,"
         "emulated_bytes,scaled_plan_bytes,to_ptx_ms,to_cubin_ms,emu_matches_interp,max_rel_error,"
         "error\n";
  for (const Result& r : results) {
    const double ratio = r.plan_bytes > 0 && r.lower_bound > 0
                             ? static_cast<double>(r.plan_bytes) / r.lower_bound
                             : -1;
    out << r.id << "," << CsvField(r.subgraph) << "," << r.kernels << "," << r.plan_bytes << ","
        << r.lower_bound << "," << Fixed(ratio, 4) << "," << r.scale_factor << ","
        << r.emulated_bytes << "," << r.scaled_plan_bytes << "," << Fixed(r.ptx_ms, 3) << ","
        << Fixed(r.cubin_ms, 3) << "," << r.match << "," << Scientific(r.max_rel_error) << ","
        << CsvField(r.error) << "\n";
  }
  out.close();
  if (!out) return Internal("error writing " + path);
  return Status::Ok();
}

void PrintSummary(const std::vector<Result>& results, double wall_s) {
  std::vector<double> ptx, cubin;
  int64_t kernels = 0, plan = 0, bound = 0;
  int matched = 0, emulated = 0;
  double ptx_total = 0, cubin_total = 0;
  for (const Result& r : results) {
    if (r.ptx_ms >= 0) {
      ptx.push_back(r.ptx_ms);
      cubin.push_back(r.cubin_ms);
      ptx_total += r.ptx_ms;
      cubin_total += r.cubin_ms;
      kernels += r.kernels;
      plan += r.plan_bytes;
      bound += r.lower_bound;
    }
    if (r.match != "-") ++emulated;
    if (r.match == "yes") ++matched;
  }
  std::cout << "\nCompiled " << ptx.size() << "/" << results.size() << " subgraphs (sm_90), "
            << kernels << " kernels.\n"
            << "Median compile time: " << Fixed(Median(ptx), 1) << " ms to PTX, "
            << Fixed(Median(cubin), 1) << " ms to cubin (per subgraph, median of runs).\n"
            << "Total compile time: " << Fixed(ptx_total / 1000, 2) << " s to PTX, "
            << Fixed(cubin_total / 1000, 2) << " s to cubin.\n"
            << "Total global traffic of the baseline plans: " << Megabytes(plan)
            << " MB vs lower bound " << Megabytes(bound) << " MB ("
            << Fixed(bound > 0 ? static_cast<double>(plan) / bound : -1, 2) << "x).\n"
            << "Emulator matched the interpreter on " << matched << "/" << emulated
            << " emulated subgraphs.\n";
  for (const Result& r : results) {
    if (!r.error.empty()) std::cout << "  #" << r.id << ": " << r.error << "\n";
  }
  for (const Result& r : results) {
    if (!r.cubin_note.empty()) {
      std::cout << "Note: " << r.cubin_note << "\n";
      break;
    }
  }
  std::cout << "Machine: " << std::thread::hardware_concurrency() << " CPUs (nproc), " << CpuModel()
            << ". Bench wall time " << Fixed(wall_s, 1) << " s.\n";
}

StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--csv" && has_value) {
      flags.csv_path = argv[++i];
    } else if (arg == "--runs" && has_value) {
      flags.runs = std::atoi(argv[++i]);
      if (flags.runs < 1) return InvalidArgument("--runs needs a positive count");
    } else if (arg == "--only" && has_value) {
      std::stringstream ids(argv[++i]);
      std::string id;
      while (std::getline(ids, id, ',')) flags.only.push_back(std::atoi(id.c_str()));
    } else {
      return InvalidArgument("usage: suite_bench [--csv PATH] [--runs N] [--only ID[,ID...]]");
    }
  }
  return flags;
}

int Main(int argc, char** argv) {
  StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::cerr << flags.status().message() << "\n";
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<Result> results;
  for (const SuiteEntry& e : BuildSuite()) {
    if (!flags->only.empty() &&
        std::find(flags->only.begin(), flags->only.end(), e.id) == flags->only.end()) {
      continue;
    }
    results.push_back(Measure(e, flags->runs));
    std::cerr << "#" << e.id << " done\n";
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  PrintTable(results);
  PrintSummary(results, wall_s);
  if (!flags->csv_path.empty()) {
    if (Status s = WriteCsv(flags->csv_path, results); !s.ok()) {
      std::cerr << s.ToString() << "\n";
      return 1;
    }
  }
  // Mismatches are figures (the table shows them); failing to verify, compile or run is not.
  bool ok = true;
  for (const Result& r : results) ok = ok && r.kernels >= 0 && r.match != "-";
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace stitch::suite

int main(int argc, char** argv) { return stitch::suite::Main(argc, argv); }
