// gpu_bench: times the 30-subgraph suite on a real GPU, the stitched plan against the plans of
// the XLA and Inductor models (compiled by stitch's own codegen), through the CUDA driver API,
// and reports how far the cost model's estimate of each plan is from its measured time.
//
// For every subgraph at its listed shape, the three plans are compiled for the device's
// architecture (cubin where the toolkit exists; PTX goes to the driver's JIT otherwise), every
// kernel parameter gets a device buffer (random inputs, outputs, temporaries) and the whole
// plan is timed with CUDA events: --warmup runs, then the median of --repeats runs, each
// after an L2 flush. The same runs give the kernel time, the sum of the plan's kernel
// durations as CUPTI records them (kernel_activity.h; --profiler names the library, "none"
// turns it off), which leaves out the gaps where the GPU waits for the host's next launch. Achieved
// bandwidth is the lower-bound traffic (every input read once, every output written once) over the
// measured time, against the device's peak. Each plan also runs once at the emulation scale and is
// compared with the reference interpreter.
//
// Usage:
//   gpu_bench [--warmup N] [--repeats N] [--only ID,...] [--no-flush-l2] [--no-verify]
//             [--target sm_XX[/DEVICE]] [--device N] [--driver LIB] [--profiler LIB|none]
//             [--csv PATH] [--out-dir DIR]
//   gpu_bench --list [--target sm_XX[/DEVICE]] [--only ID,...] [--csv PATH]   (no GPU needed)
//   gpu_bench --buckets [--list] [flags as above]                    (shape classes)
//   gpu_bench --mappings [--list] [flags as above]                   (loop mappings)
//   gpu_bench --export-graphs FILE [--only ID,...]                   (for frameworks.py)
//   gpu_bench --export-reference DIR [--only ID,...]                 (frameworks.py check)
//
// --out-dir writes stitch.csv, device.json (the device and the run's settings) and
// graphs.json there, which `frameworks.py time/merge` read (scripts/bench gpu).
//
// --buckets replaces the three planners with shape classes (shape_class.h): each row names
// its outer parameters at its extent e (bucket_case.h) and, where the compile is
// shape-generic, stitch's plan is timed four ways: the exact bundle at e, the bucket's
// bundle at e, the exact bundle at e' and the bucket's bundle at e' (3/4 of the bucket's
// top, or the top when that is e). The bucket's kernels of the emulation-scale graph are
// checked against the interpreter at its e'. --out-dir then writes buckets.csv and
// device.json; with --list the plans are compiled and priced only.
//
// --mappings replaces the three planners with the mappings the scheduler chose among
// (mapping_sweep.h): every loop, row-stitched and column-phase global kernel of each row's
// stitched plan, timed under each, with the cost model's price; --out-dir then writes mappings.csv
// and device.json.
//
// Without --target it compiles for the GPU present as stitchd's --target auto would
// (sm_90/h200 on an H200), --list included, so a list names the kernels a run launches; with
// no GPU, for the default target.
//
// Exit status: 0 success; 1 a subgraph failed to compile or run, or its outputs did not
// match; 2 no usable GPU (one line on stderr says why); 3 bad flags.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/bucket_case.h"
#include "gpu/code_digest.h"
#include "gpu/gpu_runner.h"
#include "gpu/mapping_sweep.h"
#include "gpu/suite_export.h"
#include "stitch/driver/compile.h"
#include "stitch/ir/verifier.h"
#include "stitch/plan/baseline_planner.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/reference/interpreter.h"
#include "stitch/reference/shape_scaling.h"
#include "stitch/reference/tensor.h"
#include "stitch/reference/tensor_compare.h"
#include "suite/suite.h"

namespace stitch::gpu {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitNoGpu = 2;
constexpr int kExitUsage = 3;

constexpr const char* kUsage =
    "usage: gpu_bench [--warmup N] [--repeats N] [--only ID,...] [--no-flush-l2] [--no-verify]\n"
    "                 [--target sm_XX[/DEVICE]] [--device N] [--driver LIB] [--profiler LIB|none]\n"
    "                 [--csv PATH] [--out-dir DIR]\n"
    "       gpu_bench --list [--target sm_XX[/DEVICE]] [--only ID,...] [--csv PATH]\n"
    "       gpu_bench --buckets [--list] [run flags as above]\n"
    "       gpu_bench --mappings [--list] [run flags as above]\n"
    "       gpu_bench --export-graphs FILE [--only ID,...]\n"
    "       gpu_bench --export-reference DIR [--only ID,...]\n";

enum class Mode { kRun, kList, kExportGraphs, kExportReference };

struct Flags {
  Mode mode = Mode::kRun;
  std::string export_path;
  TimingOptions timing;
  bool verify = true;
  std::vector<int> only;
  std::optional<Target> target;  // none: the GPU present's (TargetForDevice), else Target()
  int device = 0;
  std::string driver = "libcuda.so.1";
  std::string profiler;  // CUPTI for kernel times: empty for the usual names, "none" for none
  std::string csv_path;
  std::string out_dir;
  bool buckets = false;   // the shape-class comparison instead of the three planners
  bool mappings = false;  // the mappings' sweep instead of the three planners
};

// One plan's figures; -1 (or "-") where not measured.
struct PlanFigures {
  int kernels = -1;
  int64_t plan_bytes = -1;
  int64_t cubin_bytes = -1;
  std::string code;         // CodeDigest of the plan's kernels; "" where not compiled
  double us = -1;           // the CUDA events' span, the host's launch gaps included
  double kernel_us = -1;    // the sum of the kernels' own durations
  std::string kernel_note;  // why kernel_us is missing
  std::string loaded_from = "-";
  std::string matches = "-";  // "yes", "NO" or "-"
  double max_rel_error = -1;
  double model_us = -1;  // the cost model's estimate on this GPU's entry of the device table
};

// Measured over modelled time, minus one: +0.25 means the plan ran 25% slower than modelled.
double ModelError(const PlanFigures& p) {
  return p.us > 0 && p.model_us > 0 ? p.us / p.model_us - 1 : std::nan("");
}

struct Row {
  int id = 0;
  std::string subgraph;
  int64_t lower_bound = -1;
  // The lower bound plus what a statistic over a whole tensor makes every plan read again on
  // the pricing device (ForcedRereadBytes): the bytes the 80%-of-peak goal is counted on.
  int64_t schedule_bound = -1;
  PlanFigures stitch, baseline, inductor;  // baseline: the XLA model's plan
  std::string error;                       // the first failure, if any
};

std::string Fixed(double v, int digits) {
  if (v < 0 || !std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string Count(int64_t v) { return v < 0 ? "-" : std::to_string(v); }

double GigabytesPerSecond(int64_t bytes, double us) {
  return bytes > 0 && us > 0 ? bytes / (us * 1e-6) / 1e9 : -1;
}

double PercentOfPeak(int64_t bytes, double us, double peak) {
  return bytes > 0 && us > 0 && peak > 0 ? 100.0 * bytes / (us * 1e-6) / peak : -1;
}

double Speedup(const Row& r) {
  return r.stitch.us > 0 && r.baseline.us > 0 ? r.baseline.us / r.stitch.us : -1;
}

// The faster of two times where both are measured, else the one that is.
double Faster(double a, double b) {
  if (a <= 0) return b;
  return b > 0 && b < a ? b : a;
}

// Over the faster of the two baseline models' plans, as measured.
double SpeedupOverBetterBaseline(const Row& r) {
  const double better = Faster(r.baseline.us, r.inductor.us);
  return r.stitch.us > 0 && better > 0 ? better / r.stitch.us : -1;
}

// The same in kernel time.
double KernelSpeedupOverBetterBaseline(const Row& r) {
  const double better = Faster(r.baseline.kernel_us, r.inductor.kernel_us);
  return r.stitch.kernel_us > 0 && better > 0 ? better / r.stitch.kernel_us : -1;
}

std::string Percent(double v) {
  if (!std::isfinite(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%+.0f%%", 100 * v);
  return buf;
}

// The device-table entry the cost model prices on: the GPU's own, read from its name as
// stitchd reads it (Target::ForGpu: "NVIDIA H100 80GB HBM3" -> H100), else the compile
// target's. The device table outlives the Target.
const GpuDevice& PricingDevice(const Gpu* gpu, const Target& target) {
  if (gpu != nullptr) {
    StatusOr<Target> own = Target::ForGpu(gpu->info().arch(), gpu->info().name);
    if (own.ok()) return own->device();
  }
  return target.device();
}

CompileOptions OptionsFor(PlannerKind planner, const Target& target) {
  CompileOptions options;
  options.planner = planner;
  options.codegen.target = target;
  // Each planner's own plan is timed, also where the compiler would ship another.
  options.never_slower = false;
  return options;
}

// Runs `planner`'s plan of the scaled graph `g` on the GPU (with cubin, or PTX only where the
// full-shape compile had to do without) and compares it with the interpreter.
void VerifyOnGpu(Gpu& gpu, const Graph& g, int seed, PlannerKind planner, const Target& target,
                 bool cubin, PlanFigures& p, std::string& error) {
  CompileOptions options = OptionsFor(planner, target);
  options.codegen.emit_cubin = cubin;
  StatusOr<CompileResult> compiled = CompileGraph(g, options);
  if (!compiled.ok()) {
    if (error.empty()) error = "compile (scaled): " + compiled.status().ToString();
    return;
  }
  std::mt19937_64 rng(seed);
  std::vector<Tensor> inputs;
  for (int node : g.Parameters()) inputs.push_back(RandomTensor(g.nodes[node].shape, rng));
  StatusOr<std::vector<Tensor>> want = Evaluate(g, inputs);
  if (!want.ok()) {
    if (error.empty()) error = "interpreter: " + want.status().ToString();
    return;
  }
  StatusOr<std::vector<Tensor>> got = gpu.RunPlan(compiled->graph, *compiled, inputs);
  if (!got.ok()) {
    if (error.empty()) error = "run (scaled): " + got.status().ToString();
    return;
  }
  p.matches = "yes";
  p.max_rel_error = 0;
  for (size_t k = 0; k < want->size(); ++k) {
    const Tensor& expected = (*want)[k];
    Comparison c = Compare(expected, (*got)[k], OutputTolerance(g, expected.shape.dtype));
    p.max_rel_error = std::max(p.max_rel_error, c.max_rel_error);
    if (!c.pass) {
      p.matches = "NO";
      if (error.empty()) {
        error = "output " + std::to_string(k) + " " + expected.shape.ToString() + ": " + c.message;
      }
    }
  }
}

// Compiles `planner`'s plan of `g`, for a GPU when `on_gpu`.
StatusOr<CompileResult> CompileForDevice(const Graph& g, PlannerKind planner, const Target& target,
                                         bool on_gpu) {
  StatusOr<CompileResult> compiled = CompileGraph(g, OptionsFor(planner, target));
  if (!compiled.ok() && on_gpu) {
    // The toolkit may not assemble for this GPU (CUDA 13 dropped sm_70 and older); its PTX
    // can still go to the driver's JIT.
    CompileOptions ptx_only = OptionsFor(planner, target);
    ptx_only.codegen.emit_cubin = false;
    if (StatusOr<CompileResult> retry = CompileGraph(g, ptx_only); retry.ok()) {
      compiled = std::move(retry);
    }
  }
  return compiled;
}

// Compiles (and, given a GPU, times and verifies) one plan of one entry.
void MeasurePlan(const suite::SuiteEntry& e, PlannerKind planner, const Target& target, Gpu* gpu,
                 const Flags& flags, PlanFigures& p, std::string& error) {
  const std::string which(PlannerKindName(planner));
  StatusOr<CompileResult> compiled = CompileForDevice(e.graph, planner, target, gpu != nullptr);
  if (!compiled.ok()) {
    if (error.empty()) error = which + " compile: " + compiled.status().ToString();
    return;
  }
  p.kernels = static_cast<int>(compiled->kernels.size());
  p.model_us = NewAnalyticalCostModel(PricingDevice(gpu, target))
                   ->Estimate(compiled->graph, compiled->plan)
                   .seconds *
               1e6;
  p.plan_bytes = EstimateTraffic(compiled->graph, compiled->plan).total();
  p.cubin_bytes = 0;
  for (const CompiledKernel& k : compiled->kernels) {
    p.cubin_bytes += static_cast<int64_t>(k.cubin.size());
  }
  p.code = CodeDigest(compiled->kernels);
  if (gpu == nullptr) return;
  TimingOptions timing = flags.timing;
  timing.seed = static_cast<uint64_t>(e.id);
  StatusOr<PlanTiming> t = gpu->TimePlan(compiled->graph, *compiled, timing);
  if (!t.ok()) {
    if (error.empty()) error = which + " run: " + t.status().ToString();
    return;
  }
  p.us = t->median_us;
  p.kernel_us = t->kernel_median_us;
  p.kernel_note = t->kernel_note;
  p.loaded_from = t->loaded_from;
  if (!flags.verify) return;
  std::optional<ScaledGraph> scaled = ScaleForEmulation(e.graph);
  if (!scaled) return;
  std::string verify_error;
  VerifyOnGpu(*gpu, scaled->graph, 1000 + e.id, planner, target, p.cubin_bytes > 0, p,
              verify_error);
  if (!verify_error.empty() && error.empty()) error = which + " " + verify_error;
}

Row Measure(const suite::SuiteEntry& e, const Target& target, Gpu* gpu, const Flags& flags) {
  Row r;
  r.id = e.id;
  r.subgraph = e.model + " / " + e.pattern + ", " + e.shape_text;
  if (Status s = Verify(e.graph); !s.ok()) {
    r.error = "verify: " + s.ToString();
    return r;
  }
  r.lower_bound = TrafficLowerBound(e.graph).total();
  r.schedule_bound =
      r.lower_bound + ForcedRereadBytes(e.graph, OnChipBytes(PricingDevice(gpu, target)));
  MeasurePlan(e, PlannerKind::kStitch, target, gpu, flags, r.stitch, r.error);
  MeasurePlan(e, PlannerKind::kXla, target, gpu, flags, r.baseline, r.error);
  MeasurePlan(e, PlannerKind::kInductor, target, gpu, flags, r.inductor, r.error);
  return r;
}

std::string Pair(const std::string& a, const std::string& b) { return a + " / " + b; }

void PrintTable(const std::vector<Row>& rows, double peak) {
  std::cout << "| id | subgraph | kernels (stitch / base) | lower bound MB | plan MB (stitch / "
               "base) | cubin KB (stitch / base) | stitch µs | base µs | speedup | stitch GB/s | "
               "stitch % peak | base % "
               "peak | gpu = interp (stitch / base) | inductor µs | speedup over better | "
               "model error (stitch / xla / inductor) | kernel µs (stitch / base / inductor) | "
               "kernel speedup over better |\n"
               "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|---:|---:|--"
               "-:|---:|"
               "\n";
  for (const Row& r : rows) {
    const double kb_s = r.stitch.cubin_bytes < 0 ? -1 : r.stitch.cubin_bytes / 1024.0;
    const double kb_b = r.baseline.cubin_bytes < 0 ? -1 : r.baseline.cubin_bytes / 1024.0;
    std::cout << "| " << r.id << " | " << r.subgraph << " | "
              << Pair(Count(r.stitch.kernels), Count(r.baseline.kernels)) << " | "
              << Fixed(r.lower_bound / 1e6, 1) << " | "
              << Pair(Fixed(r.stitch.plan_bytes / 1e6, 1), Fixed(r.baseline.plan_bytes / 1e6, 1))
              << " | " << Pair(Fixed(kb_s, 1), Fixed(kb_b, 1)) << " | " << Fixed(r.stitch.us, 1)
              << " | " << Fixed(r.baseline.us, 1) << " | " << Fixed(Speedup(r), 2) << " | "
              << Fixed(GigabytesPerSecond(r.lower_bound, r.stitch.us), 0) << " | "
              << Fixed(PercentOfPeak(r.lower_bound, r.stitch.us, peak), 1) << " | "
              << Fixed(PercentOfPeak(r.lower_bound, r.baseline.us, peak), 1) << " | "
              << Pair(r.stitch.matches, r.baseline.matches) << " | " << Fixed(r.inductor.us, 1)
              << " | " << Fixed(SpeedupOverBetterBaseline(r), 2) << " | "
              << Pair(Pair(Percent(ModelError(r.stitch)), Percent(ModelError(r.baseline))),
                      Percent(ModelError(r.inductor)))
              << " | "
              << Pair(Pair(Fixed(r.stitch.kernel_us, 1), Fixed(r.baseline.kernel_us, 1)),
                      Fixed(r.inductor.kernel_us, 1))
              << " | " << Fixed(KernelSpeedupOverBetterBaseline(r), 2) << " |\n";
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

// A signed ratio for the CSV, empty where not measured.
std::string Signed(double v) {
  if (!std::isfinite(v)) return "";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", v);
  return buf;
}

std::string Scientific(double v) {
  if (v < 0) return "";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2e", v);
  return buf;
}

Status WriteCsv(const std::string& path, const std::vector<Row>& rows, double peak) {
  std::ofstream out(path);
  if (!out) return InvalidArgument("cannot write " + path);
  out << "id,subgraph,lower_bound_bytes,stitch_kernels,baseline_kernels,stitch_plan_bytes,"
         "baseline_plan_bytes,stitch_cubin_bytes,baseline_cubin_bytes,stitch_us,baseline_us,"
         "speedup,stitch_gbps,stitch_pct_peak,baseline_gbps,baseline_pct_peak,stitch_loaded,"
         "baseline_loaded,stitch_matches,baseline_matches,stitch_max_rel_error,"
         "baseline_max_rel_error,error,inductor_kernels,inductor_plan_bytes,"
         "inductor_cubin_bytes,inductor_us,inductor_matches,inductor_max_rel_error,"
         "speedup_over_better_baseline,stitch_model_us,baseline_model_us,inductor_model_us,"
         "stitch_model_error,baseline_model_error,inductor_model_error,stitch_kernel_us,"
         "baseline_kernel_us,inductor_kernel_us,kernel_speedup_over_better_baseline,"
         "stitch_code,baseline_code,inductor_code,schedule_bound_bytes\n";
  auto num = [](double v, int digits) { return v < 0 ? std::string() : Fixed(v, digits); };
  auto cnt = [](int64_t v) { return v < 0 ? std::string() : std::to_string(v); };
  for (const Row& r : rows) {
    out << r.id << "," << CsvField(r.subgraph) << "," << cnt(r.lower_bound) << ","
        << cnt(r.stitch.kernels) << "," << cnt(r.baseline.kernels) << ","
        << cnt(r.stitch.plan_bytes) << "," << cnt(r.baseline.plan_bytes) << ","
        << cnt(r.stitch.cubin_bytes) << "," << cnt(r.baseline.cubin_bytes) << ","
        << num(r.stitch.us, 2) << "," << num(r.baseline.us, 2) << "," << num(Speedup(r), 3) << ","
        << num(GigabytesPerSecond(r.lower_bound, r.stitch.us), 1) << ","
        << num(PercentOfPeak(r.lower_bound, r.stitch.us, peak), 2) << ","
        << num(GigabytesPerSecond(r.lower_bound, r.baseline.us), 1) << ","
        << num(PercentOfPeak(r.lower_bound, r.baseline.us, peak), 2) << "," << r.stitch.loaded_from
        << "," << r.baseline.loaded_from << "," << r.stitch.matches << "," << r.baseline.matches
        << "," << Scientific(r.stitch.max_rel_error) << "," << Scientific(r.baseline.max_rel_error)
        << "," << CsvField(r.error) << "," << cnt(r.inductor.kernels) << ","
        << cnt(r.inductor.plan_bytes) << "," << cnt(r.inductor.cubin_bytes) << ","
        << num(r.inductor.us, 2) << "," << r.inductor.matches << ","
        << Scientific(r.inductor.max_rel_error) << "," << num(SpeedupOverBetterBaseline(r), 3)
        << "," << num(r.stitch.model_us, 2) << "," << num(r.baseline.model_us, 2) << ","
        << num(r.inductor.model_us, 2) << "," << Signed(ModelError(r.stitch)) << ","
        << Signed(ModelError(r.baseline)) << "," << Signed(ModelError(r.inductor)) << ","
        << num(r.stitch.kernel_us, 2) << "," << num(r.baseline.kernel_us, 2) << ","
        << num(r.inductor.kernel_us, 2) << "," << num(KernelSpeedupOverBetterBaseline(r), 3) << ","
        << r.stitch.code << "," << r.baseline.code << "," << r.inductor.code << ","
        << cnt(r.schedule_bound) << "\n";
  }
  out.close();
  if (!out) return Internal("error writing " + path);
  return Status::Ok();
}

Status WriteDeviceJson(const std::string& path, const DeviceInfo& d, const Target& target,
                       const Flags& flags, const std::vector<int>& ids) {
  nlohmann::json j;
  j["name"] = d.name;
  j["slug"] = DeviceSlug(d.name);
  j["arch"] = d.arch();
  j["target"] = target.name();
  j["sms"] = d.sms;
  j["l2_bytes"] = d.l2_bytes;
  j["memory_bytes"] = d.memory_bytes;
  j["peak_bytes_per_second"] = d.peak_bytes_per_second;
  j["peak_source"] = d.peak_source;
  j["kernel_timing"] = d.kernel_timing;
  j["driver_version"] =
      std::to_string(d.driver_version / 1000) + "." + std::to_string(d.driver_version % 1000 / 10);
  j["warmup"] = flags.timing.warmup;
  j["repeats"] = flags.timing.repeats;
  j["flush_l2"] = flags.timing.flush_l2;
  j["ids"] = ids;
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  j["date"] = date;
  return WriteJsonFile(path, j);
}

double Median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double GeometricMean(const std::vector<double>& v) {
  if (v.empty()) return -1;
  double log_sum = 0;
  for (double x : v) log_sum += std::log(x);
  return std::exp(log_sum / v.size());
}

// Kernel time against kernel time, and how much of the events' span the kernels fill.
void PrintKernelTimeSummary(const std::vector<Row>& rows, const DeviceInfo& d) {
  std::vector<double> over_better, busy;
  std::string note;
  for (const Row& r : rows) {
    if (KernelSpeedupOverBetterBaseline(r) > 0) {
      over_better.push_back(KernelSpeedupOverBetterBaseline(r));
    }
    for (const PlanFigures* p : {&r.stitch, &r.baseline, &r.inductor}) {
      if (p->kernel_us > 0 && p->us > 0) busy.push_back(p->kernel_us / p->us);
      if (note.empty() && p->us > 0 && p->kernel_us < 0) note = p->kernel_note;
    }
  }
  if (busy.empty()) {
    std::cout << "Kernel time: " << (note.empty() ? d.kernel_timing : note) << ".\n";
    return;
  }
  std::cout << "Kernel time (" << d.kernel_timing << ") of " << busy.size()
            << " plans: geometric-mean speedup of stitched over the faster of XLA and Inductor "
            << Fixed(GeometricMean(over_better), 2) << "x; kernels fill a median "
            << Fixed(100 * Median(busy), 0) << "% of the events' span.\n";
  if (!note.empty()) std::cout << "Kernel time missing for some plans: " << note << ".\n";
}

void PrintSummary(const std::vector<Row>& rows, const Target& target, const Gpu* gpu) {
  int compiled = 0, timed = 0, matched = 0, verified = 0;
  int64_t stitch_kernels = 0, baseline_kernels = 0;
  std::vector<double> speedups, over_better, model_errors;
  bool all_cubin = true;
  for (const Row& r : rows) {
    if (SpeedupOverBetterBaseline(r) > 0) over_better.push_back(SpeedupOverBetterBaseline(r));
    for (const PlanFigures* p : {&r.stitch, &r.baseline, &r.inductor}) {
      if (std::isfinite(ModelError(*p))) model_errors.push_back(std::abs(ModelError(*p)));
    }
    if (r.stitch.kernels >= 0 && r.baseline.kernels >= 0) {
      ++compiled;
      stitch_kernels += r.stitch.kernels;
      baseline_kernels += r.baseline.kernels;
      all_cubin = all_cubin && r.stitch.cubin_bytes > 0 && r.baseline.cubin_bytes > 0;
    }
    if (Speedup(r) > 0) {
      ++timed;
      speedups.push_back(Speedup(r));
    }
    for (const PlanFigures* p : {&r.stitch, &r.baseline, &r.inductor}) {
      if (p->matches != "-") ++verified;
      if (p->matches == "yes") ++matched;
    }
  }
  std::cout << "\nCompiled " << compiled << "/" << rows.size() << " subgraphs for " << target.name()
            << " with all three planners: " << stitch_kernels << " stitched kernels, "
            << baseline_kernels << " XLA-model kernels; cubin "
            << (all_cubin && compiled > 0 ? "for every kernel" : "missing (PTX only)") << ".\n";
  if (gpu == nullptr) {
    std::cout << "Not run: this listing only compiles (no GPU used).\n";
  } else {
    const DeviceInfo& d = gpu->info();
    std::cout << "Timed " << timed << "/" << rows.size() << " subgraphs; geometric-mean speedup "
              << "of stitched over baseline: " << Fixed(GeometricMean(speedups), 2)
              << "x; over the "
              << "faster of XLA and Inductor: " << Fixed(GeometricMean(over_better), 2) << "x.\n"
              << "Cost model error (|measured / modelled - 1|) over " << model_errors.size()
              << " timed plans: median " << Percent(Median(model_errors)) << ".\n"
              << (verified == 0 ? std::string("Outputs not verified.\n")
                                : "Outputs matched the reference interpreter for " +
                                      std::to_string(matched) + "/" + std::to_string(verified) +
                                      " verified plans (emulation-scale shapes).\n")
              << "Device: " << d.name << " (" << d.arch() << ", " << d.sms << " SMs, "
              << Fixed(d.memory_bytes / 1073741824.0, 0) << " GiB), peak "
              << Fixed(d.peak_bytes_per_second / 1e9, 0) << " GB/s (" << d.peak_source
              << "), driver " << d.driver_version / 1000 << "." << d.driver_version % 1000 / 10
              << ".\n";
    PrintKernelTimeSummary(rows, d);
  }
  for (const Row& r : rows) {
    if (!r.error.empty()) std::cout << "  #" << r.id << ": " << r.error << "\n";
  }
}

// --buckets: each row's stitched plan as an exact bundle and as its bucket's bundle
// (bucket_case.h), at the row's own extent e and at e' inside the same bucket.
enum Way { kExactAtE, kBucketAtE, kExactAtOther, kBucketAtOther, kWays };

struct BucketRow {
  int id = 0;
  std::string subgraph;
  int64_t extent = -1, other = -1;  // e and e'
  Bucket served{0, 0};
  bool generic = false;
  std::string not_generic;  // why the row compiles exact only
  int bucket_kernels = -1, exact_kernels = -1;
  double us[kWays] = {-1, -1, -1, -1};
  // The same runs' kernel time (PlanTiming::kernel_median_us), -1 where not measured.
  double kernel_us[kWays] = {-1, -1, -1, -1};
  std::string kernel_note;  // why kernel time is missing
  // The cost model's estimates: each exact plan on its own graph, and the bucket's plan as it
  // ships, scheduled at the bucket's planning extent; the model has no term for the blocks a
  // run below it masks off, so that one figure prices the bundle at every extent it serves.
  double model_exact_us = -1, model_exact_other_us = -1, model_bucket_us = -1;
  std::string loaded_from = "-";
  std::string matches = "-";  // the bucket's kernels at e' against the interpreter
  double max_rel_error = -1;
  std::string verify_note;  // why the check at e' did not run
  std::string error;
};

double Ratio(double a, double b) { return a > 0 && b > 0 ? a / b : -1; }

std::string BucketText(const BucketRow& r) {
  if (r.served.hi <= 0) return "-";
  return std::to_string(r.served.lo) + ".." + std::to_string(r.served.hi);
}

double ModelUs(const Graph& g, const FusionPlan& plan, const Gpu* gpu, const Target& target) {
  return NewAnalyticalCostModel(PricingDevice(gpu, target))->Estimate(g, plan).seconds * 1e6;
}

// Times `compiled`, run on `g` at `extent`, as way `way` of `r`; the first failure goes to
// `r.error`.
void TimeWay(Gpu& gpu, const Graph& g, const CompileResult& compiled, int64_t extent,
             const Flags& flags, const char* what, Way way, BucketRow& r) {
  TimingOptions timing = flags.timing;
  timing.seed = static_cast<uint64_t>(r.id);
  StatusOr<PlanTiming> t = gpu.TimePlan(g, compiled, timing, extent);
  if (!t.ok()) {
    if (r.error.empty()) r.error = std::string(what) + " run: " + t.status().ToString();
    return;
  }
  r.us[way] = t->median_us;
  r.kernel_us[way] = t->kernel_median_us;
  if (t->kernel_median_us < 0 && r.kernel_note.empty()) r.kernel_note = t->kernel_note;
  r.loaded_from = t->loaded_from;
}

// Runs the bucket's kernels of the row's emulation-scale graph at its e' on the GPU and
// compares them with the interpreter, as the default run checks each plan.
void VerifyBucketOnGpu(Gpu& gpu, const suite::SuiteEntry& e, const OuterNamed& named,
                       const Target& target, bool cubin, BucketRow& r) {
  std::optional<ScaledGraph> scaled = ScaleForEmulation(e.graph);
  if (!scaled) {
    r.verify_note = "no emulation-scale shape";
    return;
  }
  CompileOptions options = OptionsFor(PlannerKind::kStitch, target);
  options.codegen.emit_cubin = cubin;
  StatusOr<BucketCheck> check = PrepareBucketCheck(scaled->graph, named.graph.outer_parameters,
                                                   options, 1000 + static_cast<uint64_t>(e.id));
  if (!check.ok()) {
    if (check.status().code() == StatusCode::kFailedPrecondition) {
      r.verify_note = "emulation-scale graph " + check.status().message();
    } else if (r.error.empty()) {
      r.error = "bucket check (scaled): " + check.status().ToString();
    }
    return;
  }
  StatusOr<std::vector<Tensor>> got =
      gpu.RunPlan(check->run_graph, check->compiled, check->inputs, check->extent);
  if (!got.ok()) {
    if (r.error.empty()) r.error = "bucket run (scaled): " + got.status().ToString();
    return;
  }
  const CheckOutcome outcome = CompareWithReference(*check, *got);
  r.matches = outcome.pass ? "yes" : "NO";
  r.max_rel_error = outcome.max_rel_error;
  if (!outcome.pass && r.error.empty()) r.error = "bucket (scaled) " + outcome.message;
}

// Compiles the exact bundles at e and e' and prices all three plans.
Status CompileExactWays(const suite::SuiteEntry& e, const OuterNamed& named, const Target& target,
                        const Gpu* gpu, CompileResult& exact, CompileResult& exact_other,
                        BucketRow& r) {
  const bool on_gpu = gpu != nullptr;
  STITCH_ASSIGN_OR_RETURN(exact, CompileForDevice(e.graph, PlannerKind::kStitch, target, on_gpu));
  STITCH_ASSIGN_OR_RETURN(Graph at_other, ExactAt(named.graph, r.other));
  STITCH_ASSIGN_OR_RETURN(exact_other,
                          CompileForDevice(at_other, PlannerKind::kStitch, target, on_gpu));
  r.exact_kernels = static_cast<int>(exact.kernels.size());
  r.model_exact_us = ModelUs(exact.graph, exact.plan, gpu, target);
  r.model_exact_other_us = ModelUs(exact_other.graph, exact_other.plan, gpu, target);
  return Status::Ok();
}

BucketRow MeasureBuckets(const suite::SuiteEntry& e, const Target& target, Gpu* gpu,
                         const Flags& flags) {
  BucketRow r;
  r.id = e.id;
  r.subgraph = e.model + " / " + e.pattern + ", " + e.shape_text;
  StatusOr<OuterNamed> named = NameOuterParameters(e.graph);
  if (!named.ok()) {
    r.not_generic = named.status().message();
    return r;
  }
  r.extent = named->extent;
  StatusOr<CompileResult> bucket =
      CompileForDevice(named->graph, PlannerKind::kStitch, target, gpu != nullptr);
  if (!bucket.ok()) {
    r.error = "bucket compile: " + bucket.status().ToString();
    return r;
  }
  r.served = bucket->served;
  r.bucket_kernels = static_cast<int>(bucket->kernels.size());
  if (!bucket->shape_generic()) {
    r.not_generic = NotGenericReason(named->graph, *bucket);
    return r;
  }
  r.generic = true;
  r.other = SecondExtent(r.served, r.extent);
  r.model_bucket_us = ModelUs(bucket->graph, bucket->plan, gpu, target);
  CompileResult exact, exact_other;
  if (Status s = CompileExactWays(e, *named, target, gpu, exact, exact_other, r); !s.ok()) {
    r.error = "exact compile: " + s.ToString();
    return r;
  }
  if (gpu == nullptr) return r;
  TimeWay(*gpu, exact.graph, exact, 0, flags, "exact at e", kExactAtE, r);
  TimeWay(*gpu, RunGraphAt(*bucket, r.extent), *bucket, r.extent, flags, "bucket at e", kBucketAtE,
          r);
  TimeWay(*gpu, exact_other.graph, exact_other, 0, flags, "exact at e'", kExactAtOther, r);
  TimeWay(*gpu, RunGraphAt(*bucket, r.other), *bucket, r.other, flags, "bucket at e'",
          kBucketAtOther, r);
  if (flags.verify) {
    const bool cubin = !bucket->kernels.empty() && !bucket->kernels[0].cubin.empty();
    VerifyBucketOnGpu(*gpu, e, *named, target, cubin, r);
  }
  return r;
}

void PrintBucketTable(const std::vector<BucketRow>& rows) {
  std::cout << "| id | subgraph | e | e' | bucket | kernels (bucket / exact) | exact e µs | "
               "bucket e µs | exact e' µs | bucket e' µs | bucket / exact at e | at e' | "
               "kernel µs (exact e / bucket e / exact e' / bucket e') | kernel bucket / exact at "
               "e / e' | bucket = interp at e' | model µs (exact e / bucket / exact e') | model "
               "bucket / exact at e / e' |\n"
               "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|"
               "---:|\n";
  for (const BucketRow& r : rows) {
    std::cout << "| " << r.id << " | " << r.subgraph << " | " << Count(r.extent) << " | "
              << Count(r.other) << " | " << (r.generic ? BucketText(r) : "exact only") << " | "
              << Pair(Count(r.bucket_kernels), Count(r.exact_kernels)) << " | "
              << Fixed(r.us[kExactAtE], 1) << " | " << Fixed(r.us[kBucketAtE], 1) << " | "
              << Fixed(r.us[kExactAtOther], 1) << " | " << Fixed(r.us[kBucketAtOther], 1) << " | "
              << Fixed(Ratio(r.us[kBucketAtE], r.us[kExactAtE]), 3) << " | "
              << Fixed(Ratio(r.us[kBucketAtOther], r.us[kExactAtOther]), 3) << " | "
              << Pair(Pair(Fixed(r.kernel_us[kExactAtE], 1), Fixed(r.kernel_us[kBucketAtE], 1)),
                      Pair(Fixed(r.kernel_us[kExactAtOther], 1),
                           Fixed(r.kernel_us[kBucketAtOther], 1)))
              << " | "
              << Pair(Fixed(Ratio(r.kernel_us[kBucketAtE], r.kernel_us[kExactAtE]), 3),
                      Fixed(Ratio(r.kernel_us[kBucketAtOther], r.kernel_us[kExactAtOther]), 3))
              << " | " << r.matches << " | "
              << Pair(Pair(Fixed(r.model_exact_us, 1), Fixed(r.model_bucket_us, 1)),
                      Fixed(r.model_exact_other_us, 1))
              << " | "
              << Pair(Fixed(Ratio(r.model_bucket_us, r.model_exact_us), 3),
                      Fixed(Ratio(r.model_bucket_us, r.model_exact_other_us), 3))
              << " |\n";
  }
}

// Geometric mean of a / b over the rows where both are positive, and how many rows that is.
std::pair<double, int> RatioGeomean(const std::vector<BucketRow>& rows,
                                    double (*a)(const BucketRow&), double (*b)(const BucketRow&)) {
  std::vector<double> ratios;
  for (const BucketRow& r : rows) {
    if (Ratio(a(r), b(r)) > 0) ratios.push_back(Ratio(a(r), b(r)));
  }
  return {GeometricMean(ratios), static_cast<int>(ratios.size())};
}

// RatioGeomean of one of a row's times of the four ways (BucketRow::us or kernel_us): the
// bucket's run `bucket` over the exact run `exact`.
std::pair<double, int> BucketOverExact(const std::vector<BucketRow>& rows,
                                       double (BucketRow::*times)[kWays], Way bucket, Way exact) {
  std::vector<double> ratios;
  for (const BucketRow& r : rows) {
    const double ratio = Ratio((r.*times)[bucket], (r.*times)[exact]);
    if (ratio > 0) ratios.push_back(ratio);
  }
  return {GeometricMean(ratios), static_cast<int>(ratios.size())};
}

// Rows whose bucket / exact ratio is at most 1.10, of those measured.
int WithinTenPercent(const std::vector<BucketRow>& rows, Way bucket, Way exact) {
  int n = 0;
  for (const BucketRow& r : rows)
    n += Ratio(r.us[bucket], r.us[exact]) > 0 && Ratio(r.us[bucket], r.us[exact]) <= 1.10;
  return n;
}

void PrintBucketSummary(const std::vector<BucketRow>& rows, const Target& target, const Gpu* gpu) {
  int generic = 0, verified = 0, matched = 0;
  for (const BucketRow& r : rows) {
    generic += r.generic;
    verified += r.matches != "-";
    matched += r.matches == "yes";
  }
  const auto model_e = RatioGeomean(
      rows, [](const BucketRow& r) { return r.model_bucket_us; },
      [](const BucketRow& r) { return r.model_exact_us; });
  const auto model_other = RatioGeomean(
      rows, [](const BucketRow& r) { return r.model_bucket_us; },
      [](const BucketRow& r) { return r.model_exact_other_us; });
  std::cout << "\nShape-generic: " << generic << "/" << rows.size() << " rows compiled for "
            << target.name() << " as one bundle per power-of-two bucket of their outer extent.\n"
            << "Cost model, bucket's plan as shipped over the exact plan (geometric mean over "
            << model_e.second << " rows): " << Fixed(model_e.first, 3) << " at e, "
            << Fixed(model_other.first, 3) << " at e'.\n";
  if (gpu == nullptr) {
    std::cout << "Not run: this listing only compiles (no GPU used).\n";
  } else {
    const auto at_e = BucketOverExact(rows, &BucketRow::us, kBucketAtE, kExactAtE);
    const auto at_other = BucketOverExact(rows, &BucketRow::us, kBucketAtOther, kExactAtOther);
    const auto kernel_e = BucketOverExact(rows, &BucketRow::kernel_us, kBucketAtE, kExactAtE);
    const auto kernel_other =
        BucketOverExact(rows, &BucketRow::kernel_us, kBucketAtOther, kExactAtOther);
    std::cout << "Timed " << at_e.second << "/" << generic
              << " shape-generic rows; geometric-mean bucket / exact: " << Fixed(at_e.first, 3)
              << " at e, " << Fixed(at_other.first, 3)
              << " at e'; within 10%: " << WithinTenPercent(rows, kBucketAtE, kExactAtE)
              << " rows at e, " << WithinTenPercent(rows, kBucketAtOther, kExactAtOther)
              << " at e'.\n";
    if (kernel_e.second > 0) {
      std::cout << "Kernel time of the same runs, bucket / exact (geometric mean over "
                << kernel_e.second << " rows): " << Fixed(kernel_e.first, 3) << " at e, "
                << Fixed(kernel_other.first, 3) << " at e'.\n";
    } else {
      std::string note;
      for (const BucketRow& r : rows) {
        if (note.empty()) note = r.kernel_note;
      }
      std::cout << "Kernel time not measured" << (note.empty() ? "" : ": " + note) << ".\n";
    }
    std::cout << (verified == 0 ? std::string("Outputs not verified.\n")
                                : "Outputs of the bucket's kernels at e' matched the reference "
                                  "interpreter for " +
                                      std::to_string(matched) + "/" + std::to_string(verified) +
                                      " rows (emulation-scale shapes).\n")
              << "Device: " << gpu->info().name << " (" << gpu->info().arch() << ").\n";
  }
  for (const BucketRow& r : rows) {
    if (!r.not_generic.empty())
      std::cout << "  #" << r.id << " exact only: " << r.not_generic << "\n";
    if (!r.verify_note.empty())
      std::cout << "  #" << r.id << " not verified: " << r.verify_note << "\n";
    if (!r.error.empty()) std::cout << "  #" << r.id << ": " << r.error << "\n";
  }
}

Status WriteBucketCsv(const std::string& path, const std::vector<BucketRow>& rows) {
  std::ofstream out(path);
  if (!out) return InvalidArgument("cannot write " + path);
  out << "id,subgraph,extent,other_extent,bucket_lo,bucket_hi,generic,not_generic,"
         "bucket_kernels,exact_kernels,exact_us,bucket_us,exact_other_us,bucket_other_us,"
         "bucket_over_exact,bucket_over_exact_other,exact_model_us,bucket_model_us,"
         "exact_other_model_us,model_bucket_over_exact,model_bucket_over_exact_other,loaded,"
         "matches_other,max_rel_error_other,exact_kernel_us,bucket_kernel_us,"
         "exact_other_kernel_us,bucket_other_kernel_us,kernel_bucket_over_exact,"
         "kernel_bucket_over_exact_other,error\n";
  auto num = [](double v, int digits) { return v < 0 ? std::string() : Fixed(v, digits); };
  auto cnt = [](int64_t v) { return v < 0 ? std::string() : std::to_string(v); };
  for (const BucketRow& r : rows) {
    out << r.id << "," << CsvField(r.subgraph) << "," << cnt(r.extent) << "," << cnt(r.other) << ","
        << (r.generic ? cnt(r.served.lo) : "") << "," << (r.generic ? cnt(r.served.hi) : "") << ","
        << (r.generic ? "yes" : "no") << "," << CsvField(r.not_generic) << ","
        << cnt(r.bucket_kernels) << "," << cnt(r.exact_kernels) << "," << num(r.us[kExactAtE], 2)
        << "," << num(r.us[kBucketAtE], 2) << "," << num(r.us[kExactAtOther], 2) << ","
        << num(r.us[kBucketAtOther], 2) << "," << num(Ratio(r.us[kBucketAtE], r.us[kExactAtE]), 4)
        << "," << num(Ratio(r.us[kBucketAtOther], r.us[kExactAtOther]), 4) << ","
        << num(r.model_exact_us, 2) << "," << num(r.model_bucket_us, 2) << ","
        << num(r.model_exact_other_us, 2) << ","
        << num(Ratio(r.model_bucket_us, r.model_exact_us), 4) << ","
        << num(Ratio(r.model_bucket_us, r.model_exact_other_us), 4) << "," << r.loaded_from << ","
        << r.matches << "," << Scientific(r.max_rel_error) << "," << num(r.kernel_us[kExactAtE], 2)
        << "," << num(r.kernel_us[kBucketAtE], 2) << "," << num(r.kernel_us[kExactAtOther], 2)
        << "," << num(r.kernel_us[kBucketAtOther], 2) << ","
        << num(Ratio(r.kernel_us[kBucketAtE], r.kernel_us[kExactAtE]), 4) << ","
        << num(Ratio(r.kernel_us[kBucketAtOther], r.kernel_us[kExactAtOther]), 4) << ","
        << CsvField(r.error) << "\n";
  }
  out.close();
  if (!out) return Internal("error writing " + path);
  return Status::Ok();
}

// Exit status of a --buckets run: a row that is not shape-generic is a finding, not a
// failure; a compile error, a generic row not timed four ways on a GPU, or a mismatch is.
bool BucketRunOk(const std::vector<BucketRow>& rows, const Gpu* gpu) {
  for (const BucketRow& r : rows) {
    if (!r.error.empty() || r.matches == "NO") return false;
    if (gpu == nullptr || !r.generic) continue;
    for (double us : r.us) {
      if (us <= 0) return false;
    }
  }
  return true;
}

// Where a mode writes its CSV: --csv, else `name` in --out-dir (created here), else nowhere
// (empty).
std::string CsvPath(const Flags& flags, const std::string& name) {
  if (flags.out_dir.empty()) return flags.csv_path;
  std::error_code ec;
  std::filesystem::create_directories(flags.out_dir, ec);
  return flags.csv_path.empty() ? flags.out_dir + "/" + name : flags.csv_path;
}

int RunBuckets(const std::vector<suite::SuiteEntry>& entries, const Target& target, Gpu* gpu,
               const Flags& flags) {
  std::vector<BucketRow> rows;
  for (const suite::SuiteEntry& e : entries) {
    rows.push_back(MeasureBuckets(e, target, gpu, flags));
    std::cerr << "#" << e.id << " done\n";
  }
  PrintBucketTable(rows);
  PrintBucketSummary(rows, target, gpu);
  const std::string csv_path = CsvPath(flags, "buckets.csv");
  Status s = csv_path.empty() ? Status::Ok() : WriteBucketCsv(csv_path, rows);
  if (s.ok() && !flags.out_dir.empty() && gpu != nullptr) {
    std::vector<int> ids;
    for (const BucketRow& r : rows) ids.push_back(r.id);
    s = WriteDeviceJson(flags.out_dir + "/device.json", gpu->info(), target, flags, ids);
  }
  if (!s.ok()) {
    std::cerr << "gpu_bench: " << s.ToString() << "\n";
    return kExitFailed;
  }
  return BucketRunOk(rows, gpu) ? 0 : kExitFailed;
}

// mappings.csv, and with --out-dir on a GPU device.json, as far as the sweep got.
Status WriteMappingFiles(const std::string& csv_path, const std::vector<MappingRow>& rows, Gpu* gpu,
                         const Target& target, const Flags& flags, const std::vector<int>& ids) {
  if (!csv_path.empty()) STITCH_RETURN_IF_ERROR(WriteMappingCsv(csv_path, rows));
  if (flags.out_dir.empty() || gpu == nullptr) return Status::Ok();
  return WriteDeviceJson(flags.out_dir + "/device.json", gpu->info(), target, flags, ids);
}

int RunMappings(const std::vector<suite::SuiteEntry>& entries, const Target& target, Gpu* gpu,
                const Flags& flags) {
  MappingSweepOptions options;
  options.target = target;
  options.priced_on = &PricingDevice(gpu, target);
  options.timing = flags.timing;
  options.verify = flags.verify;
  std::vector<MappingRow> rows;
  std::vector<int> ids;
  const std::string csv_path = CsvPath(flags, "mappings.csv");
  Status s = Status::Ok();
  PrintMappingTable({}, std::cout);
  // Each suite row's lines and the CSV so far are out as soon as the row finishes: a run cut
  // short by a time limit keeps what it measured.
  for (const suite::SuiteEntry& e : entries) {
    std::vector<MappingRow> some = SweepMappings(e, options, gpu);
    PrintMappingTable(some, std::cout, /*header=*/false);
    std::cout.flush();
    rows.insert(rows.end(), some.begin(), some.end());
    ids.push_back(e.id);
    if (s.ok()) s = WriteMappingFiles(csv_path, rows, gpu, target, flags, ids);
    std::cerr << "#" << e.id << " done\n";
  }
  if (s.ok() && entries.empty()) s = WriteMappingFiles(csv_path, rows, gpu, target, flags, ids);
  PrintMappingSummary(rows, gpu != nullptr, std::cout);
  if (!s.ok()) {
    std::cerr << "gpu_bench: " << s.ToString() << "\n";
    return kExitFailed;
  }
  return MappingSweepOk(rows, gpu != nullptr) ? 0 : kExitFailed;
}

// The target to compile for on a device: the one stitchd's --target auto takes on it
// (sm_90/h200 on an H200), else the default target, whose PTX the driver JIT-compiles for
// newer GPUs.
Target TargetForDevice(const DeviceInfo& d) {
  StatusOr<Target> own = Target::ForGpu(d.arch(), d.name);
  return own.ok() ? *own : Target();
}

StatusOr<int> ParseCount(const std::string& flag, const std::string& text, int min) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < min || v > 1000000) {
    return InvalidArgument(flag + " takes a number >= " + std::to_string(min) + ", got '" + text +
                           "'");
  }
  return static_cast<int>(v);
}

StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> StatusOr<std::string> {
      if (i + 1 >= argc) return InvalidArgument(arg + " needs a value");
      return std::string(argv[++i]);
    };
    if (arg == "--list" || arg == "--dry-run") {
      f.mode = Mode::kList;
    } else if (arg == "--no-flush-l2") {
      f.timing.flush_l2 = false;
    } else if (arg == "--no-verify") {
      f.verify = false;
    } else if (arg == "--buckets") {
      f.buckets = true;
    } else if (arg == "--mappings") {
      f.mappings = true;
    } else if (arg == "--export-graphs" || arg == "--export-reference" || arg == "--warmup" ||
               arg == "--repeats" || arg == "--only" || arg == "--target" || arg == "--device" ||
               arg == "--driver" || arg == "--profiler" || arg == "--csv" || arg == "--out-dir") {
      STITCH_ASSIGN_OR_RETURN(std::string v, value());
      if (arg == "--export-graphs") {
        f.mode = Mode::kExportGraphs;
        f.export_path = v;
      } else if (arg == "--export-reference") {
        f.mode = Mode::kExportReference;
        f.export_path = v;
      } else if (arg == "--warmup") {
        STITCH_ASSIGN_OR_RETURN(f.timing.warmup, ParseCount(arg, v, 0));
      } else if (arg == "--repeats") {
        STITCH_ASSIGN_OR_RETURN(f.timing.repeats, ParseCount(arg, v, 1));
      } else if (arg == "--only") {
        STITCH_ASSIGN_OR_RETURN(f.only, suite::ParseSuiteIds(v));
      } else if (arg == "--target") {
        STITCH_ASSIGN_OR_RETURN(f.target, Target::Parse(v));
      } else if (arg == "--device") {
        STITCH_ASSIGN_OR_RETURN(f.device, ParseCount(arg, v, 0));
      } else if (arg == "--driver") {
        f.driver = v;
      } else if (arg == "--profiler") {
        f.profiler = v;
      } else if (arg == "--csv") {
        f.csv_path = v;
      } else {
        f.out_dir = v;
      }
    } else {
      return InvalidArgument("unknown argument '" + arg + "'");
    }
  }
  if (f.buckets && f.mappings) {
    return InvalidArgument("--buckets and --mappings each replace the three planners; give one");
  }
  return f;
}

int Main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::cout << kUsage;
      return 0;
    }
  }
  StatusOr<Flags> parsed = ParseFlags(argc, argv);
  if (!parsed.ok()) {
    std::cerr << "gpu_bench: " << parsed.status().message() << "\n" << kUsage;
    return kExitUsage;
  }
  Flags& flags = *parsed;
  // A CUDA tool attached to the process takes CUPTI for itself; kernel times are then its to
  // report. Nsight Systems and compute-sanitizer attach through CUDA's injection hook. Nsight
  // Compute preloads its own libraries instead and names its perfworks folder; with gpu_bench
  // subscribing to CUPTI beside it, the process exited with status 11 under ncu 2025.3 on the
  // H200 (testdata/gpu/h200/2026-11-28_afdf996).
  if (flags.profiler.empty()) {
    for (const char* variable : {"CUDA_INJECTION64_PATH", "NV_COMPUTE_PROFILER_PERFWORKS_DIR"}) {
      const char* tool = std::getenv(variable);
      if (tool == nullptr || *tool == '\0') continue;
      flags.profiler = "none";
      std::cerr << "gpu_bench: a CUDA tool is attached (" << variable
                << "), so kernel times are left to it\n";
      break;
    }
  }

  if (flags.mode == Mode::kExportGraphs || flags.mode == Mode::kExportReference) {
    const std::vector<suite::SuiteEntry> entries = suite::SelectSuite(flags.only);
    Status s = flags.mode == Mode::kExportGraphs ? WriteGraphsJson(flags.export_path, entries)
                                                 : WriteReference(flags.export_path, entries);
    if (!s.ok()) {
      std::cerr << "gpu_bench: " << s.ToString() << "\n";
      return kExitFailed;
    }
    return 0;
  }

  std::unique_ptr<Gpu> gpu;
  Target target = flags.target.value_or(Target());
  if (flags.mode == Mode::kRun) {
    StatusOr<std::unique_ptr<Gpu>> opened = OpenGpu(flags.driver, flags.device, flags.profiler);
    if (!opened.ok()) {
      std::cerr << "gpu_bench: no usable CUDA GPU: " << opened.status().message()
                << " (gpu_bench --list compiles the suite without one)\n";
      return kExitNoGpu;
    }
    gpu = std::move(*opened);
    if (!flags.target) target = TargetForDevice(gpu->info());
    std::cerr << "gpu_bench: " << gpu->info().name << " (" << gpu->info().arch()
              << "), compiling for " << target.name() << "\n";
  } else if (!flags.target) {
    // The list names the kernels a run on this machine launches (Nsight Compute's kernels are
    // matched to plans by it), so it plans for the GPU present, where there is one.
    StatusOr<std::unique_ptr<Gpu>> present = OpenGpu(flags.driver, flags.device, "none");
    if (present.ok()) target = TargetForDevice((*present)->info());
  }

  const std::vector<suite::SuiteEntry> entries = suite::SelectSuite(flags.only);
  if (flags.buckets) return RunBuckets(entries, target, gpu.get(), flags);
  if (flags.mappings) return RunMappings(entries, target, gpu.get(), flags);
  std::vector<Row> rows;
  for (const suite::SuiteEntry& e : entries) {
    rows.push_back(Measure(e, target, gpu.get(), flags));
    std::cerr << "#" << e.id << " done\n";
  }
  const double peak = gpu ? gpu->info().peak_bytes_per_second : 0;
  PrintTable(rows, peak);
  PrintSummary(rows, target, gpu.get());

  const std::string csv_path = CsvPath(flags, "stitch.csv");
  if (!csv_path.empty()) {
    if (Status s = WriteCsv(csv_path, rows, peak); !s.ok()) {
      std::cerr << "gpu_bench: " << s.ToString() << "\n";
      return kExitFailed;
    }
  }
  if (!flags.out_dir.empty()) {
    Status s = WriteGraphsJson(flags.out_dir + "/graphs.json", entries);
    if (s.ok() && gpu) {
      std::vector<int> ids;
      for (const Row& r : rows) ids.push_back(r.id);
      s = WriteDeviceJson(flags.out_dir + "/device.json", gpu->info(), target, flags, ids);
    }
    if (!s.ok()) {
      std::cerr << "gpu_bench: " << s.ToString() << "\n";
      return kExitFailed;
    }
  }

  bool ok = true;
  for (const Row& r : rows) {
    ok = ok && r.stitch.kernels >= 0 && r.baseline.kernels >= 0;
    if (gpu) {
      ok = ok && r.stitch.us > 0 && r.baseline.us > 0 && r.stitch.matches != "NO" &&
           r.baseline.matches != "NO";
    }
  }
  return ok ? 0 : kExitFailed;
}

}  // namespace
}  // namespace stitch::gpu

int main(int argc, char** argv) { return stitch::gpu::Main(argc, argv); }
