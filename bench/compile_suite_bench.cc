// suite_bench: the stitching compiler against models of XLA:GPU and TorchInductor
// (baseline_models.h) on the 30-subgraph benchmark suite, compiled for sm_90 and priced by
// the analytical cost model.
//
// For every subgraph at its listed shape:
//   * the stitching planner's plan and both baseline models' plans, priced on the pricing
//     device (H100 unless --device names another): kernel count, the cost model's
//     global-memory bytes next to the lower bound (every input read once, every output
//     written once), and modelled time; the plan the compiler ships (the stitched plan, or
//     the better baseline where the stitched plan is modelled slower), its modelled speedup
//     over the better baseline and its efficiency (lower-bound bytes over modelled time, as
//     a share of peak bandwidth);
//   * compile time of the stitched graph to PTX and to cubin for sm_90 (median of --runs);
//   * the kernels that ship for the listed shape, on the host emulator at their full launch
//     geometry: a sample of each launch's blocks (the first, the last, the boundary blocks
//     of every grid-stride loop and 8 seeded random ones) with every global access checked
//     against its buffer; the table gives the blocks sampled and whether all stayed in
//     bounds;
//   * on a copy scaled for the host emulator (the corpus tests' rule, ~2^18 elements per
//     tensor), the global-memory footprint the emulator counted (distinct 32-byte sectors
//     each launch loaded and stored) next to the bytes the cost model assumes for that same
//     scaled stitched plan, in all and kernel by kernel, and whether every output matched
//     the reference interpreter. The CSV also has every byte the kernels loaded and stored,
//     re-reads included.
// After the table, the suite's goals with their figures (PASS or MISS), then each subgraph
// that misses the one-kernel or the bytes goal with its kernels and the reason.
//
// Usage: suite_bench [--csv PATH] [--runs N] [--only ID[,ID...]] [--plans] [--device NAME]
//                    [--dump-dir DIR]
//   --plans        also print Describe() of the shipped plan, the stitched one where another
//                  ships, and both baseline models' plans
//   --dump-dir DIR write the PTX of every shipped kernel to DIR/<id>_<kernel>.ptx
//   --device NAME  price the plans on another device of the table (A100, H100, H200)
// Exit status: 0 when every subgraph verified, compiled and ran (mismatches and missed goals
// are figures, not failures), 1 otherwise, 2 for bad flags.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "stitch/codegen/code_checks.h"
#include "stitch/driver/compile.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/emulator/emulator.h"
#include "stitch/ir/aliasing.h"
#include "stitch/ir/verifier.h"
#include "stitch/plan/baseline_models.h"
#include "stitch/plan/baseline_planner.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/op_classes.h"
#include "stitch/plan/row_stitch.h"
#include "stitch/plan/schedule.h"
#include "stitch/plan/statistics_rewrite.h"
#include "stitch/plan/stitch_planner.h"
#include "stitch/plan/tanh_rewrite.h"
#include "stitch/reference/interpreter.h"
#include "stitch/reference/shape_scaling.h"
#include "stitch/reference/tensor.h"
#include "stitch/reference/tensor_compare.h"
#include "suite/suite.h"

namespace stitch::suite {
namespace {

// The compile target of every figure but the pricing: the default, sm_90.
const Target kTarget;

// The suite's goals.
constexpr double kOneKernelShare = 0.9;          // 27 of 30 subgraphs in one kernel
constexpr double kMaxBytesRatio = 1.10;          // stitched bytes over the lower bound
constexpr double kMinSpeedup = 1.5;              // modelled, the better baseline over what ships
constexpr double kLargeBytes = 64e6;             // rows whose lower bound exceeds this ...
constexpr double kMinLargeEfficiency = 0.70;     // ... reach this share of peak bandwidth
constexpr double kMaxBatchNormBytesRatio = 1.5;  // #17 and #20, bytes over the lower bound
constexpr double kMaxCubinMs = 100;              // median compile time to cubin per subgraph
constexpr double kEmulatorTolerance = 0.05;

struct Flags {
  std::string csv_path;
  int runs = 3;
  std::vector<int> only;
  bool plans = false;
  std::string device = "H100";
  std::string dump_dir;
};

// One plan's figures at full shapes on the pricing device.
struct PlanFigures {
  int kernels = -1;
  int64_t bytes = -1;   // the cost model's global bytes
  double seconds = -1;  // the cost model's time
};

struct Result {
  int id = 0;
  std::string subgraph;  // "model / pattern, shape"
  // The plan that ships, the stitching planner's own plan, and the baseline models'.
  PlanFigures shipped, stitched, xla, inductor;
  std::string shipped_by;  // "stitch", "xla" or "inductor"
  double peak_bytes_per_second = 0;
  int64_t lower_bound = -1;
  double ptx_ms = -1, cubin_ms = -1;
  std::string kinds;  // the stitched plan's kernels, e.g. "row_stitch(row_reduce) + loop"
  std::string why;    // the first line of why it misses a goal; empty when it meets both
  std::string plans;  // Describe() of the shipped plan, for --plans
  // The stitched plan on the emulator's scaled copy.
  int64_t scale_factor = 0;                       // 0: no emulation shape
  int64_t emulated_bytes = -1, model_bytes = -1;  // the emulator's footprint, the model's
  int64_t accessed_bytes = -1;     // every load and store the emulator counted, re-reads included
  int worst_kernel = -1;           // the kernel whose emulated bytes deviate most from the model
  double worst_kernel_ratio = -1;  // its emulated over modelled bytes
  int64_t worst_kernel_emulated = -1, worst_kernel_model = -1;
  // The shipped kernels at full geometry (RunSampledOnEmulator).
  uint64_t sampled_blocks = 0, grid_blocks = 0;
  std::string bounds = "-";   // "yes" when every sampled access stayed in its buffer
  double max_rel_error = -1;  // over all outputs, as Compare measures it
  std::string match;          // "yes", "NO", or "-" when it could not run
  std::string error;          // the first failure, if any
  std::string cubin_note;
  // The static checks of each shipped kernel's code (code_checks.h), in launch order.
  struct KernelCode {
    KernelCodeFacts facts;
    KernelCodeFigures figures;
    std::string failed;  // the failed checks' names, comma-separated; empty when all pass
    // On the emulator over a prefix of the launch (MeasureSectorTraffic): bytes fetched per
    // byte used, DRAM bytes per distinct byte, and the blocks run of the grid; -1 when the
    // run failed.
    double fetched_per_used = -1, dram_per_distinct = -1;
    uint64_t prefix_blocks = 0, grid_blocks = 0;
  };
  std::vector<KernelCode> code;

  double BytesRatio() const {
    return shipped.bytes > 0 && lower_bound > 0
               ? static_cast<double>(shipped.bytes) / static_cast<double>(lower_bound)
               : -1;
  }
  // The better baseline model's time; -1 when neither could plan the graph.
  double BaselineSeconds() const {
    if (xla.seconds < 0) return inductor.seconds;
    if (inductor.seconds < 0) return xla.seconds;
    return std::min(xla.seconds, inductor.seconds);
  }
  // The shipped plan's modelled speedup over the better baseline; StitchedSpeedup is the
  // stitching planner's own plan's, which may be below 1 where a baseline ships instead.
  double Speedup() const {
    return shipped.seconds > 0 && BaselineSeconds() > 0 ? BaselineSeconds() / shipped.seconds : -1;
  }
  double StitchedSpeedup() const {
    return stitched.seconds > 0 && BaselineSeconds() > 0 ? BaselineSeconds() / stitched.seconds
                                                         : -1;
  }
  // Lower-bound bytes over the shipped plan's modelled time, as a share of peak bandwidth.
  double Efficiency() const {
    return shipped.seconds > 0 && lower_bound > 0 && peak_bytes_per_second > 0
               ? static_cast<double>(lower_bound) / shipped.seconds / peak_bytes_per_second
               : -1;
  }
  double EmulatedRatio() const {
    return emulated_bytes >= 0 && model_bytes > 0
               ? static_cast<double>(emulated_bytes) / static_cast<double>(model_bytes)
               : -1;
  }
  bool Compiled() const { return shipped.kernels >= 0 && BaselineSeconds() > 0; }
};

double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Geometric mean of the positive, finite values; -1 when there are none.
double Geomean(const std::vector<double>& v) {
  double logs = 0;
  int n = 0;
  for (double x : v) {
    if (x > 0 && std::isfinite(x)) {
      logs += std::log(x);
      ++n;
    }
  }
  return n > 0 ? std::exp(logs / n) : -1;
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

// "12.6 MB" or "24.6 KB".
std::string Size(int64_t bytes) {
  return bytes >= 1000000 ? Megabytes(bytes) + " MB" : Fixed(bytes / 1e3, 1) + " KB";
}

std::string Micros(double seconds) { return Fixed(seconds < 0 ? -1 : seconds * 1e6, 1); }

std::string Count(int64_t v) { return v < 0 ? "-" : std::to_string(v); }

std::string Verdict(bool pass) { return pass ? "PASS" : "MISS"; }

int64_t NodeBytes(const Graph& g, int id) { return g.nodes[id].shape.bytes(); }

PlanFigures Figures(const PlanCost& cost) {
  return {cost.kernels, cost.global_bytes, cost.seconds};
}

// The reduction class of a kernel's hero, as the planner's op classes name it.
std::string HeroClass(const Graph& g, const KernelSpec& k) {
  return k.hero >= 0 ? std::string(OpKindName(ClassifyNode(g, k.hero))) : "";
}

// "row_stitch(row_reduce) + column_reduce(column_reduce) + loop".
std::string KernelKinds(const Graph& g, const FusionPlan& plan) {
  std::string out;
  for (const KernelSpec& k : plan.kernels) {
    if (!out.empty()) out += " + ";
    out += KernelKindName(k.kind);
    if (k.hero >= 0) out += "(" + HeroClass(g, k) + ")";
  }
  return out;
}

// "%30 (reduce over {0} of f32[16384,768])".
std::string ReduceText(const Graph& g, int reduce) {
  const Node& n = g.nodes[reduce];
  std::string dims;
  for (int64_t d : n.dimensions) dims += (dims.empty() ? "" : ",") + std::to_string(d);
  return "%" + std::to_string(reduce) + " (reduce over {" + dims + "} of " +
         g.nodes[n.operands[0]].shape.ToString() + ")";
}

// What stops the whole graph from being one kernel, as the planner would build it: one
// kernel computing every output from the parameters, analysed as a row-stitched kernel (or a
// loop kernel when there is no reduce), scheduled and priced. Returns the first obstacle, or
// the price of the one-kernel plan when there is none.
std::string WhyNotOneKernel(const Graph& g, const GpuDevice& device, double plan_seconds) {
  std::vector<int> rank(g.nodes.size(), 0);
  const std::vector<int> topo = TopologicalOrder(g);
  for (size_t k = 0; k < topo.size(); ++k) rank[topo[k]] = static_cast<int>(k);
  auto by_rank = [&](int x, int y) { return rank[x] < rank[y]; };
  KernelSpec one;
  one.name = "whole_graph";
  std::set<int> outputs;
  for (int o : g.outputs) {
    if (!IsParameterView(g, o)) outputs.insert(o);
  }
  if (outputs.empty()) return "every output is a parameter's bytes";
  one.outputs.assign(outputs.begin(), outputs.end());
  std::sort(one.outputs.begin(), one.outputs.end(), by_rank);
  std::set<int> body, inputs;
  std::vector<int> stack(one.outputs.begin(), one.outputs.end());
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    if (g.nodes[id].op == OpCode::kParameter) {
      inputs.insert(id);
    } else if (body.insert(id).second) {
      stack.insert(stack.end(), g.nodes[id].operands.begin(), g.nodes[id].operands.end());
    }
  }
  one.nodes.assign(body.begin(), body.end());
  std::sort(one.nodes.begin(), one.nodes.end(), by_rank);
  one.inputs.assign(inputs.begin(), inputs.end());
  std::sort(one.inputs.begin(), one.inputs.end(), by_rank);
  for (int id : one.nodes) {
    if (g.nodes[id].op == OpCode::kReduce && one.hero < 0) one.hero = id;
  }
  if (one.hero < 0) {
    for (int o : one.outputs) {
      if (g.nodes[o].shape.elements() != g.nodes[one.outputs[0]].shape.elements()) {
        return "outputs of different element counts (%" + std::to_string(one.outputs[0]) + " " +
               g.nodes[one.outputs[0]].shape.ToString() + ", %" + std::to_string(o) + " " +
               g.nodes[o].shape.ToString() + ") in a kernel without a reduce";
      }
    }
  } else {
    one.kind = KernelKind::kRowStitch;
    if (Status s = AnalyzeRowStitch(g, one).status(); !s.ok()) {
      return "not one row-stitched kernel: " + s.message();
    }
  }
  if (Status s = ScheduleKernel(g, one, device); !s.ok()) {
    return "one kernel does not fit " + device.name + ": " + s.message();
  }
  const double seconds = NewAnalyticalCostModel(device)->EstimateKernel(g, one).seconds;
  std::string shape = std::to_string(one.mapping.launch.blocks()) + " blocks of " +
                      std::to_string(one.mapping.launch.block_threads()) + " threads";
  if (one.kind == KernelKind::kRowStitch) {
    std::optional<RowGeometry> geo = RowGeometryOf(g, one.hero);
    if (geo) shape += ", " + std::to_string(geo->rows) + " rows of " + std::to_string(geo->row_len);
  }
  return "one " + std::string(KernelKindName(one.kind)) + " kernel (" + shape + ") is legal " +
         (seconds >= plan_seconds ? "but modeled slower" : "and modeled faster") + ": " +
         Micros(seconds) + " µs against the plan's " + Micros(plan_seconds) + " µs" +
         (seconds >= plan_seconds ? "" : "; the planner's search did not reach it");
}

// Why the stitched plan is more than one kernel: the first kernel whose hero reduce is not a
// row reduction (it cannot share a row-stitched kernel), else what stops one kernel.
std::string WhySeveralKernels(const Graph& g, const FusionPlan& plan, const GpuDevice& device,
                              double plan_seconds) {
  const std::string n = std::to_string(plan.kernels.size()) + " kernels: ";
  for (const KernelSpec& k : plan.kernels) {
    if (k.hero < 0) continue;
    const std::string hero = k.name + "'s hero " + ReduceText(g, k.hero);
    switch (ClassifyNode(g, k.hero)) {
      case OpKind::kColumnReduce:
        return n + hero + " is a column reduction (it keeps the minor-most dimension)";
      case OpKind::kMixedReduce:
        return n + hero +
               " is a mixed reduction (its reduced dims are not the minor-most ones alone)";
      default:
        break;
    }
  }
  return n + WhyNotOneKernel(g, device, plan_seconds);
}

// Why the stitched plan moves more bytes than the lower bound: temporaries that round-trip
// global memory and inputs read by several kernels.
std::string WhyExtraBytes(const Graph& g, const FusionPlan& plan, double ratio) {
  std::ostringstream out;
  out << "bytes " << Fixed(ratio, 2) << "x the lower bound";
  std::vector<int> temporaries = TemporaryNodes(g, plan);
  if (!temporaries.empty()) {
    out << "; temporaries";
    for (int t : temporaries) out << " %" << t << " (" << Size(NodeBytes(g, t)) << ")";
    out << " go through global memory";
  }
  std::map<int, int> readers;  // parameter -> kernels reading it
  for (const KernelSpec& k : plan.kernels) {
    for (int i : k.inputs) {
      if (g.nodes[i].op == OpCode::kParameter) ++readers[i];
    }
  }
  bool first = true;
  for (const auto& [param, count] : readers) {
    if (count < 2) continue;
    out << (first ? "; inputs read by several kernels:" : ",") << " %" << param << " ("
        << Size(NodeBytes(g, param)) << " x" << count << ")";
    first = false;
  }
  if (temporaries.empty() && first) out << "; the kernels' own traffic exceeds the footprint";
  return out.str();
}

std::string WhyMiss(const Graph& g, const FusionPlan& plan, const GpuDevice& device,
                    double plan_seconds, double ratio) {
  std::string why;
  if (plan.kernels.size() > 1) why = WhySeveralKernels(g, plan, device, plan_seconds);
  if (ratio > kMaxBytesRatio) why += (why.empty() ? "" : "; ") + WhyExtraBytes(g, plan, ratio);
  return why;
}

// Compiles `g` for sm_90 `runs` times for the median timings, and prices every plan on
// `device`. When `device` is the one sm_90 compiles for, the plans priced are the ones the
// compile chose between; for another device the choice is made again there.
// Runs the shipped kernels at full geometry on sampled blocks, bounds-checked.
void RunShippedAtFullGeometry(const CompileResult& c, uint64_t seed, Result& r) {
  StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create();
  if (!emulator.ok()) {
    r.error = "full geometry: " + emulator.status().ToString();
    return;
  }
  BlockSampling sampling;
  sampling.seed = seed;
  StatusOr<SampledRun> run = RunSampledOnEmulator(c.graph, c.plan, c.kernels, sampling, **emulator);
  if (!run.ok()) {
    r.bounds = "NO";
    if (r.error.empty()) r.error = "full geometry: " + run.status().ToString();
    return;
  }
  r.bounds = "yes";
  r.sampled_blocks = run->blocks_run();
  r.grid_blocks = run->blocks_total();
}

// Runs the static checks (code_checks.h) on every kernel `c` ships, on the target's device.
void CheckShippedCode(const CompileResult& c, Result& r) {
  if (c.kernels.size() != c.plan.kernels.size()) return;
  for (size_t i = 0; i < c.kernels.size(); ++i) {
    Result::KernelCode k;
    k.facts = FactsOf(c.graph, c.plan.kernels[i], c.kernels[i]);
    k.figures = FiguresOf(k.facts, kTarget.device());
    for (const CodeCheck& check : CheckKernelCode(k.facts, k.figures)) {
      if (!check.ok) k.failed += (k.failed.empty() ? "" : ", ") + check.name;
    }
    k.facts.ptx.clear();  // read; not needed again
    r.code.push_back(std::move(k));
  }
  StatusOr<SampledRun> traffic =
      MeasureSectorTraffic(c.graph, c.plan, c.kernels, SectorTrafficOptionsFor(kTarget.device()));
  if (!traffic.ok()) {
    if (r.error.empty()) r.error = "sector traffic: " + traffic.status().ToString();
    return;
  }
  for (size_t i = 0; i < traffic->launches.size() && i < r.code.size(); ++i) {
    const SampledLaunch& l = traffic->launches[i];
    r.code[i].fetched_per_used = FetchedPerUsed(l.stats);
    r.code[i].dram_per_distinct = DramPerDistinct(l.stats);
    r.code[i].prefix_blocks = l.blocks.size();
    r.code[i].grid_blocks = l.launch.blocks();
  }
}

// Writes the PTX of every kernel `c` ships to `dir`/<id>_<kernel>.ptx.
Status DumpPtx(const CompileResult& c, int id, const std::string& dir) {
  for (const CompiledKernel& k : c.kernels) {
    const std::string path = dir + "/" + std::to_string(id) + "_" + k.name + ".ptx";
    std::ofstream out(path);
    out << k.ptx;
    if (!out) return InvalidArgument("cannot write " + path);
  }
  return Status::Ok();
}

void CompileAndPrice(const Graph& g, const GpuDevice& device, const Flags& flags, Result& r) {
  const bool describe = flags.plans;
  const int runs = flags.runs;
  CompileOptions options;
  options.codegen.target = kTarget;
  std::vector<double> ptx, total;
  PlanChoice choice;
  for (int i = 0; i < runs; ++i) {
    StatusOr<CompileResult> c = CompileGraph(g, options);
    if (!c.ok()) {
      r.error = "compile: " + c.status().ToString();
      return;
    }
    ptx.push_back(c->timings.to_ptx_ms());
    total.push_back(c->timings.total_ms());
    if (i == 0) {
      if (!flags.dump_dir.empty()) {
        if (Status s = DumpPtx(*c, r.id, flags.dump_dir); !s.ok()) r.error = s.ToString();
      }
      r.cubin_note = c->cubin_note;
      CheckShippedCode(*c, r);
      RunShippedAtFullGeometry(*c, 3000 + static_cast<uint64_t>(r.id), r);
      choice = static_cast<PlanChoice&&>(std::move(*c));
    }
  }
  r.ptx_ms = Median(ptx);
  r.cubin_ms = Median(total);
  if (kTarget.device().name != device.name) {
    StatusOr<PlanChoice> other = ChoosePlan(g, options, device);
    if (!other.ok()) {
      r.error = "plans for " + device.name + ": " + other.status().ToString();
      return;
    }
    choice = std::move(*other);
  }
  r.peak_bytes_per_second = device.hbm_bytes_per_second;
  r.shipped = Figures(choice.cost);
  r.stitched = Figures(choice.stitched_cost);
  for (const BaselineEstimate& b : choice.baselines) {
    (b.compiler == BaselineCompiler::kXla ? r.xla : r.inductor) = Figures(b.cost);
  }
  r.shipped_by = std::string(PlannerKindName(choice.shipped));
  r.kinds = KernelKinds(choice.graph, choice.plan);
  if (r.shipped.kernels != 1 || r.BytesRatio() > kMaxBytesRatio) {
    r.why = WhyMiss(choice.graph, choice.plan, device, r.shipped.seconds, r.BytesRatio());
  }
  if (!describe) return;
  r.plans = "shipped (" + r.shipped_by + ") " + Describe(choice.graph, choice.plan);
  if (choice.shipped != PlannerKind::kStitch) {
    CompileOptions stitched_only = options;
    stitched_only.never_slower = false;
    StatusOr<PlanChoice> s = ChoosePlan(g, stitched_only, device);
    if (s.ok()) r.plans += "stitched (not shipped) " + Describe(s->graph, s->plan);
  }
  for (BaselineCompiler compiler : {BaselineCompiler::kXla, BaselineCompiler::kInductor}) {
    StatusOr<BaselinePlan> b =
        PlanBaselineModel(compiler, OnePlusTanhAsLogistic(OnePassStatisticsRewrite(g)), device);
    if (b.ok()) r.plans += Describe(b->graph, b->plan);
  }
}

// The global bytes one launch moved as the emulator counts its footprint: the distinct
// 32-byte sectors it loaded and stored (DRAM's access unit), which is what the model's
// per-kernel bytes (each buffer read once, each output written once) stand for.
int64_t EmulatedBytes(const LaunchStats& s) {
  return static_cast<int64_t>(s.footprint_bytes_loaded + s.footprint_bytes_stored);
}

// Runs the stitched plan of the scaled graph on the emulator, compares its bytes with the
// cost model's and every output with the interpreter.
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
  options.codegen.target = kTarget;
  options.emit_ptx = false;  // the emulator runs the portable module
  options.max_persistent_grid_blocks = kEmulatorMaxPersistentGridBlocks;
  StatusOr<CompileResult> compiled = CompileGraph(g, options);
  if (!compiled.ok()) {
    r.match = "-";
    if (r.error.empty()) r.error = "compile (scaled): " + compiled.status().ToString();
    return;
  }
  const PlanCost& cost = compiled->cost;
  r.model_bytes = cost.global_bytes;
  std::mt19937_64 rng(seed);
  std::vector<Tensor> inputs;
  for (int p : g.Parameters()) inputs.push_back(RandomTensor(g.nodes[p].shape, rng));
  StatusOr<std::vector<Tensor>> expected = Evaluate(g, inputs);
  EmulatorOptions emulator_options;
  emulator_options.count_footprint = true;
  StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create(emulator_options);
  Status failed;
  if (!expected.ok()) failed = expected.status();
  if (failed.ok() && !emulator.ok()) failed = emulator.status();
  StatusOr<EmulatedRun> run =
      failed.ok() ? RunOnEmulator(compiled->graph, compiled->kernels, inputs, **emulator)
                  : StatusOr<EmulatedRun>(failed);
  if (!run.ok()) {
    r.match = "-";
    if (r.error.empty()) r.error = "emulate: " + run.status().ToString();
    return;
  }
  r.emulated_bytes = 0;
  r.accessed_bytes = static_cast<int64_t>(run->global_bytes());
  double worst = -1;
  for (size_t k = 0; k < run->per_kernel.size(); ++k) {
    const int64_t emulated = EmulatedBytes(run->per_kernel[k]);
    r.emulated_bytes += emulated;
    const int64_t modelled = k < cost.per_kernel.size() ? cost.per_kernel[k].global_bytes : 0;
    if (modelled <= 0) continue;
    const double ratio = static_cast<double>(emulated) / static_cast<double>(modelled);
    if (std::abs(ratio - 1) > worst) {
      worst = std::abs(ratio - 1);
      r.worst_kernel = static_cast<int>(k);
      r.worst_kernel_ratio = ratio;
      r.worst_kernel_emulated = emulated;
      r.worst_kernel_model = modelled;
    }
  }
  r.match = "yes";
  for (size_t k = 0; k < expected->size(); ++k) {
    const Tensor& want = (*expected)[k];
    Comparison c = Compare(want, run->outputs[k], OutputTolerance(g, want.shape.dtype));
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

Result Measure(const SuiteEntry& e, const GpuDevice& device, const Flags& flags) {
  Result r;
  r.id = e.id;
  r.subgraph = e.model + " / " + e.pattern + ", " + e.shape_text;
  r.lower_bound = TrafficLowerBound(e.graph).total();
  if (Status s = Verify(e.graph); !s.ok()) {
    r.error = "verify: " + s.ToString();
    r.match = "-";
    return r;
  }
  CompileAndPrice(e.graph, device, flags, r);
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

void PrintPlans(const std::vector<Result>& results) {
  for (const Result& r : results) {
    std::cout << "### #" << r.id << " " << r.subgraph << "\n\n```\n"
              << (r.plans.empty() ? "(no plans: " + r.error + ")\n" : r.plans) << "```\n\n";
  }
}

// "a / b / c" for the stitched, XLA and Inductor figures of a row.
std::string Triple(const std::string& a, const std::string& b, const std::string& c) {
  return a + " / " + b + " / " + c;
}

void PrintTable(const std::vector<Result>& results, const GpuDevice& device) {
  std::cout
      << "The stitched plan against models of XLA and Inductor, compiled for " << kTarget.name()
      << ", priced on " << device.name << " (" << device.sms << " SMs, "
      << Fixed(device.hbm_bytes_per_second / 1e12, 2)
      << " TB/s). Triples are stitched / XLA / Inductor; \"ships\" is the plan the compiler "
         "emits, the stitched one unless a baseline is modelled faster; speedup is the shipped "
         "plan's over the better baseline; efficiency is lower-bound bytes over the shipped "
         "plan's time, as a share of peak.\n\n"
      << "| id | subgraph | kernels | MB | MB lower bound | modeled µs | ships | speedup | "
         "stitched plan's speedup | efficiency | to PTX ms | to cubin ms | full geometry: blocks "
         "sampled / grid, in bounds | emu / model | emu = interp | max rel err |\n"
         "|---:|---|---:|---:|---:|---:|:---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|\n";
  for (const Result& r : results) {
    std::cout << "| " << r.id << " | " << r.subgraph << " | "
              << Triple(Count(r.stitched.kernels), Count(r.xla.kernels), Count(r.inductor.kernels))
              << " | "
              << Triple(Megabytes(r.stitched.bytes), Megabytes(r.xla.bytes),
                        Megabytes(r.inductor.bytes))
              << " | " << Megabytes(r.lower_bound) << " | "
              << Triple(Micros(r.stitched.seconds), Micros(r.xla.seconds),
                        Micros(r.inductor.seconds))
              << " | " << r.shipped_by << " | " << Fixed(r.Speedup(), 2) << " | "
              << Fixed(r.StitchedSpeedup(), 2) << " | " << Fixed(r.Efficiency() * 100, 0) << "% | "
              << Fixed(r.ptx_ms, 1) << " | " << Fixed(r.cubin_ms, 1) << " | " << r.sampled_blocks
              << " / " << r.grid_blocks << ", " << r.bounds << " | " << Fixed(r.EmulatedRatio(), 2)
              << " | " << r.match << " | " << Scientific(r.max_rel_error) << " |\n";
  }
}

// One row per shipped kernel: what its PTX and cubin do against what the plan promised
// and what the device needs (code_checks.h).
void PrintCodeChecks(const std::vector<Result>& results) {
  std::cout << "\nStatic checks of the shipped code (PTX and cubin for " << kTarget.name()
            << ", no GPU): the widest global load and store against the plan's vector "
               "promise, registers and the blocks per SM they allow against the plan's, local "
               "memory, load bytes in flight per busy SM (the widest burst of loads a thread "
               "issues before it waits on one, read from the SASS where nvdisasm is found, "
               "else from the PTX) against Little's law at the calibrated bandwidth and "
               "latency, instructions per element, and the issue time of the innermost loop "
               "slowest to issue against its global bytes' time at the fitted rates; then, on the "
               "emulator over a prefix of each launch in dispatch order (blocks run / grid), "
               "bytes fetched per byte used (32-byte sectors per warp access) and DRAM bytes "
               "per distinct byte through an LRU model of L2 at the fitted re-use window.\n\n"
            << "| id | kernel | kind | load / store B (promised) | registers | blocks/SM "
               "(planned) | local B | in flight B/SM (needed) | instructions/element | loop "
               "issue / bytes | failed checks | prefix blocks / grid | fetched / used | DRAM / "
               "distinct |\n"
               "|---:|---|---|---|---:|---|---:|---|---:|---:|---|---:|---:|---:|\n";
  int kernels = 0, clean = 0;
  for (const Result& r : results) {
    for (const Result::KernelCode& k : r.code) {
      const KernelCodeFacts& f = k.facts;
      const KernelCodeFigures& x = k.figures;
      ++kernels;
      if (k.failed.empty()) ++clean;
      std::cout << "| " << r.id << " | " << f.name << " | " << KernelKindName(f.kind) << " | "
                << x.ptx.widest_global_load << " / " << x.ptx.widest_global_store << " ("
                << f.promised_load_bytes << " / " << f.promised_store_bytes << ") | " << f.registers
                << " | " << x.assembled_blocks_per_sm << " (" << x.planned_blocks_per_sm << ") | "
                << f.local_bytes << " | " << x.bytes_in_flight_per_sm << " ("
                << x.bytes_in_flight_needed << ") | " << Fixed(x.instructions_per_element, 1)
                << " | " << (x.loop_global_bytes > 0 ? Fixed(x.loop_issue_share, 2) : "-") << " | "
                << (k.failed.empty() ? "-" : k.failed) << " | " << k.prefix_blocks << " / "
                << k.grid_blocks << " | " << Fixed(k.fetched_per_used, 2) << " | "
                << Fixed(k.dram_per_distinct, 2) << " |\n";
    }
  }
  int from_sass = 0;
  for (const Result& r : results) {
    for (const Result::KernelCode& k : r.code) from_sass += k.figures.load_burst_from_sass;
  }
  std::cout << "\nShipped kernels passing every static check: " << clean << "/" << kernels
            << "; loads in flight read from the SASS of " << from_sass << " of them.\n";
}

std::string CsvField(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

Status WriteCsv(const std::string& path, const std::vector<Result>& results,
                const GpuDevice& device) {
  std::ofstream out(path);
  if (!out) return InvalidArgument("cannot write " + path);
  out << "id,subgraph,device,shipped,kernels_stitched,kernels_xla,kernels_inductor,"
         "stitched_bytes,xla_bytes,inductor_bytes,lower_bound_bytes,shipped_lb_ratio,"
         "modeled_us_stitched,modeled_us_xla,modeled_us_inductor,modeled_us_shipped,"
         "speedup_over_better_baseline,stitched_plan_speedup,efficiency,to_ptx_ms,to_cubin_ms,"
         "emu_scale_factor,emulated_footprint_bytes,scaled_model_bytes,emu_model_ratio,"
         "emulated_accessed_bytes,worst_kernel,worst_kernel_emulated_bytes,"
         "worst_kernel_model_bytes,worst_kernel_emu_model_ratio,emu_matches_interp,"
         "max_rel_error,full_geometry_blocks_sampled,full_geometry_grid_blocks,"
         "full_geometry_in_bounds,shipped_kernel_kinds,miss_reason,error\n";
  auto us = [](const PlanFigures& p) { return Fixed(p.seconds < 0 ? -1 : p.seconds * 1e6, 3); };
  for (const Result& r : results) {
    out << r.id << "," << CsvField(r.subgraph) << "," << device.name << "," << r.shipped_by << ","
        << r.stitched.kernels << "," << r.xla.kernels << "," << r.inductor.kernels << ","
        << r.stitched.bytes << "," << r.xla.bytes << "," << r.inductor.bytes << "," << r.lower_bound
        << "," << Fixed(r.BytesRatio(), 4) << "," << us(r.stitched) << "," << us(r.xla) << ","
        << us(r.inductor) << "," << us(r.shipped) << "," << Fixed(r.Speedup(), 4) << ","
        << Fixed(r.StitchedSpeedup(), 4) << "," << Fixed(r.Efficiency(), 4) << ","
        << Fixed(r.ptx_ms, 3) << "," << Fixed(r.cubin_ms, 3) << "," << r.scale_factor << ","
        << r.emulated_bytes << "," << r.model_bytes << "," << Fixed(r.EmulatedRatio(), 4) << ","
        << r.accessed_bytes << "," << r.worst_kernel << "," << r.worst_kernel_emulated << ","
        << r.worst_kernel_model << "," << Fixed(r.worst_kernel_ratio, 4) << "," << r.match << ","
        << Scientific(r.max_rel_error) << "," << r.sampled_blocks << "," << r.grid_blocks << ","
        << r.bounds << "," << CsvField(r.kinds) << "," << CsvField(r.why) << ","
        << CsvField(r.error) << "\n";
  }
  out.close();
  if (!out) return Internal("error writing " + path);
  return Status::Ok();
}

// "#11, #26" or "none".
std::string IdList(const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) out += (out.empty() ? "#" : ", #") + std::to_string(id);
  return out.empty() ? "none" : out;
}

void PrintSummary(const std::vector<Result>& results, double wall_s) {
  std::vector<double> ratios, speedups, ptx, cubin;
  std::vector<int> stitched_slower, shipped_slower, batch_norm_over;
  std::string batch_norm_ratios;
  int compiled = 0, one_kernel = 0, emulated = 0, agree = 0, matched = 0, ran = 0;
  int in_bounds = 0;
  uint64_t sampled_blocks = 0, grid_blocks = 0;
  int large = 0, large_efficient = 0;
  const Result* worst_emu = nullptr;
  const Result* worst_kernel = nullptr;
  for (const Result& r : results) {
    if (r.Compiled()) {
      ++compiled;
      if (r.shipped.kernels == 1) ++one_kernel;
      ratios.push_back(r.BytesRatio());
      speedups.push_back(r.Speedup());
      if (r.StitchedSpeedup() < 1) stitched_slower.push_back(r.id);
      if (r.Speedup() < 1) shipped_slower.push_back(r.id);
      if (r.lower_bound > kLargeBytes) {
        ++large;
        if (r.Efficiency() >= kMinLargeEfficiency) ++large_efficient;
      }
      if (r.id == 17 || r.id == 20) {
        batch_norm_ratios += (batch_norm_ratios.empty() ? "#" : ", #") + std::to_string(r.id) +
                             " " + Fixed(r.BytesRatio(), 3) + "x";
        // To two decimals: the shift samples of the one-pass statistics (one element per
        // channel, a 32-byte sector each) add a few thousandths.
        if (std::round(r.BytesRatio() * 100) / 100 > kMaxBatchNormBytesRatio) {
          batch_norm_over.push_back(r.id);
        }
      }
      ptx.push_back(r.ptx_ms);
      cubin.push_back(r.cubin_ms);
    }
    if (r.EmulatedRatio() >= 0) {
      ++emulated;
      const double dev = std::abs(r.EmulatedRatio() - 1);
      if (dev <= kEmulatorTolerance) ++agree;
      if (!worst_emu || dev > std::abs(worst_emu->EmulatedRatio() - 1)) worst_emu = &r;
      if (r.worst_kernel >= 0 &&
          (!worst_kernel ||
           std::abs(r.worst_kernel_ratio - 1) > std::abs(worst_kernel->worst_kernel_ratio - 1))) {
        worst_kernel = &r;
      }
    }
    if (r.bounds == "yes") ++in_bounds;
    sampled_blocks += r.sampled_blocks;
    grid_blocks += r.grid_blocks;
    if (r.match != "-") ++ran;
    if (r.match == "yes") ++matched;
  }
  const int total = static_cast<int>(results.size());
  const int one_kernel_goal = static_cast<int>(std::ceil(kOneKernelShare * total - 1e-9));
  const double bytes_geomean = Geomean(ratios);
  const double speedup_geomean = Geomean(speedups);
  const double cubin_median = Median(cubin);
  std::cout << "\nCompiled " << compiled << "/" << total << " subgraphs for " << kTarget.name()
            << "; median compile time " << Fixed(Median(ptx), 1) << " ms to PTX.\n"
            << "Subgraphs in one kernel (stitched): " << one_kernel << "/" << total
            << " (goal >= " << one_kernel_goal
            << "): " << Verdict(compiled > 0 && one_kernel >= one_kernel_goal) << "\n"
            << "Geomean stitched bytes / lower bound: " << Fixed(bytes_geomean, 3)
            << " (goal <= " << Fixed(kMaxBytesRatio, 2)
            << "): " << Verdict(bytes_geomean > 0 && bytes_geomean <= kMaxBytesRatio) << "\n"
            << "Geomean modeled speedup over the better of XLA and Inductor: "
            << Fixed(speedup_geomean, 2) << "x (goal >= " << Fixed(kMinSpeedup, 1)
            << "x): " << Verdict(speedup_geomean >= kMinSpeedup) << "\n"
            << "Rows where what ships is modeled slower than the better baseline: "
            << IdList(shipped_slower) << " (goal: none): " << Verdict(shipped_slower.empty())
            << "; rows where the stitched plan alone would be: " << IdList(stitched_slower) << "\n"
            << "Rows above " << Fixed(kLargeBytes / 1e6, 0)
            << " MB at >= " << Fixed(kMinLargeEfficiency * 100, 0)
            << "% of peak: " << large_efficient << "/" << large << ": "
            << Verdict(large_efficient == large) << "\n"
            << "#17 and #20 within " << Fixed(kMaxBatchNormBytesRatio, 1)
            << "x the lower bound, to 0.01x (" << batch_norm_ratios
            << "): " << Verdict(batch_norm_over.empty())
            << (batch_norm_over.empty() ? "" : " (over: " + IdList(batch_norm_over) + ")") << "\n"
            << "Median compile time to cubin per subgraph: " << Fixed(cubin_median, 1)
            << " ms (goal <= " << Fixed(kMaxCubinMs, 0)
            << " ms): " << Verdict(cubin_median >= 0 && cubin_median <= kMaxCubinMs) << "\n"
            << "Emulator footprint vs model bytes (stitched, scaled shapes): " << agree << "/"
            << emulated << " subgraphs agree within " << Fixed(kEmulatorTolerance * 100, 0) << "%";
  if (worst_emu) {
    std::cout << "; worst #" << worst_emu->id << " at " << Fixed(worst_emu->EmulatedRatio(), 2)
              << "x";
  }
  if (worst_kernel) {
    std::cout << "; worst kernel #" << worst_kernel->id << " k" << worst_kernel->worst_kernel
              << " at " << Fixed(worst_kernel->worst_kernel_ratio, 2) << "x ("
              << worst_kernel->worst_kernel_emulated << " vs " << worst_kernel->worst_kernel_model
              << " bytes)";
  }
  std::cout << ".\n"
            << "Emulator matched the interpreter on " << matched << "/" << ran
            << " emulated subgraphs.\n"
            << "Shipped kernels at full geometry, every access bounds-checked: " << in_bounds << "/"
            << total << " subgraphs in bounds, " << sampled_blocks << " of " << grid_blocks
            << " blocks sampled (first, last, boundary and 8 random blocks per launch): "
            << Verdict(in_bounds == total) << "\n"
            << "Misses:";
  bool any_miss = false;
  for (const Result& r : results) {
    if (r.why.empty()) continue;
    std::cout << "\n  #" << r.id << " " << r.subgraph << ": " << r.kinds << ". " << r.why;
    any_miss = true;
  }
  std::cout << (any_miss ? "\n" : " none\n");
  for (const Result& r : results) {
    if (!r.error.empty()) std::cout << "Error #" << r.id << ": " << r.error << "\n";
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

constexpr const char* kUsage =
    "usage: suite_bench [--csv PATH] [--runs N] [--only ID[,ID...]] [--plans] [--device NAME] "
    "[--dump-dir DIR]";

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
    } else if (arg == "--plans") {
      flags.plans = true;
    } else if (arg == "--device" && has_value) {
      flags.device = argv[++i];
    } else if (arg == "--dump-dir" && has_value) {
      flags.dump_dir = argv[++i];
    } else {
      return InvalidArgument(kUsage);
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
  const GpuDevice* device = FindDevice(flags->device);
  if (!device) {
    std::cerr << "unknown device " << flags->device << "; known:";
    for (const GpuDevice& d : KnownDevices()) std::cerr << " " << d.name;
    std::cerr << "\n";
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<Result> results;
  for (const SuiteEntry& e : BuildSuite()) {
    if (!flags->only.empty() &&
        std::find(flags->only.begin(), flags->only.end(), e.id) == flags->only.end()) {
      continue;
    }
    results.push_back(Measure(e, *device, *flags));
    std::cerr << "#" << e.id << " done\n";
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (flags->plans) PrintPlans(results);
  PrintTable(results, *device);
  PrintCodeChecks(results);
  PrintSummary(results, wall_s);
  if (!flags->csv_path.empty()) {
    if (Status s = WriteCsv(flags->csv_path, results, *device); !s.ok()) {
      std::cerr << s.ToString() << "\n";
      return 1;
    }
  }
  // Mismatches and missed goals are figures (the table shows them); failing to verify,
  // compile or run is not.
  bool ok = true;
  for (const Result& r : results) ok = ok && r.Compiled() && r.match != "-";
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace stitch::suite

int main(int argc, char** argv) { return stitch::suite::Main(argc, argv); }
