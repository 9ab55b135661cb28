// cost_model_price: the cost model's price of every suite row's three plans (stitch's, the XLA
// model's, the Inductor model's), compiled once and priced under one or more sets of model
// constants. No GPU is needed: the plans are compiled for the target as stitchd compiles them
// (assembled with the CUDA toolkit where it exists, so that the model reads the cubin's
// registers), and only priced.
//
// Usage:
//   cost_model_price [--target sm_XX] [--device NAME] [--version NAME] [--parameters FILE]
//                    [--only ID,...] [--ptx DIR] [--features PATH] [--mappings PATH]
//                    --csv PATH
//
// --device prices the plans compiled for the target on another device of the table (H200
// for sm_90, whose compiles are planned as an H100): what a set measured on that device is
// compared with. The plans are the target's either way, as stitchd compiles them.
// --version names the model version whose constants are priced (default: the current one);
// --parameters names a JSON array of objects, each a candidate set of constants: its fields
// (those of CostModelParameters, e.g. {"launch_seconds": 2e-6}) replace the version's for
// the priced device, and each set is priced in turn. Two fields are shares of the priced
// device's table figures, so that one candidate means the same on every device:
// "bandwidth_fraction" of its datasheet bandwidth and "reuse_window_fraction" of its L2.
// tools/fit_cost_model.py fits the model's constants this way;
// tests/compiler/plan/cost_model_calibration_test.py compares the prices with measured
// kernel times.
//
// The CSV has one line per set, row and plan: set (0-based; 0 without --parameters), id,
// plan (stitch, xla_model, inductor_model), model_us, kernels, dram_bytes, the kernels'
// assembled registers and cubin instructions (each ';'-separated per kernel, '-' where the
// toolkit is missing), the plan's memory_us and issue_us (the kernels' memory and
// instruction-issue terms, summed; a kernel takes the longer of its two), and launches: each
// kernel's grid and block as GXxGYxGZ:BXxBYxBZ, ';'-separated, and cubin_bytes, the plan's
// cubins' bytes summed as gpu_bench sums them, and code, the digest of the plan's PTX
// (code_digest.h), so that a measured set's launches (Nsight Compute's), cubin sizes and code
// digests (gpu_bench.csv) tell whether it timed the same kernels.
//
// --features PATH writes, per set, row and plan, the figures the learned residual reads
// (stitch/plan/learned_residual.h: ResidualFeaturesOf, at full precision) beside set, id, plan
// and model_us; tools/train_cost_residual.py trains on them.
//
// --mappings PATH writes, per set, the price of every mapping `gpu_bench --mappings` times
// (mapping_variants.h: each loop, row-stitched and column-phase global kernel of the stitched
// plan under each candidate the scheduler chose among): set, id, kernel (its index in the
// plan), kernel_name, candidate (-1: the plan's own), shipped, mapping (MappingText), model_us
// (the re-mapped kernel alone, as the sweep's model_us), registers (the assembler's, empty
// where not assembled), code (the kernel's digest, code_digest.h), and what the static checks
// read of its loads in flight (code_checks.h): load_burst_bytes a thread, from its SASS or
// PTX (load_burst_from), and in_flight_per_sm against in_flight_needed on the priced device, and
// of its innermost loop slowest to issue (the "loop_issue" check): loop_instructions and
// loop_global_bytes a trip, loop_issue_share, its issue time over its bytes' time, and
// loop_issue_over, 1 where that is over the check's bound (kLoopIssueShareBound). Joined
// with a sweep's mappings.csv on id, kernel, mapping and code, the measured kernel times calibrate
// the choices the scheduler makes among them (tools/fit_cost_model.py).
//
// --ptx DIR writes each plan's kernels to DIR as <id>_<plan>_<kernel>.ptx, and .cubin where
// assembled, to study what the model reads from them; with --mappings, also each mapping's
// re-mapped kernel as <id>_mapping<candidate>_<kernel> (<id>_mapping_shipped_<kernel> for the
// plan's own).
//
// Exit status: 0 success; 1 a row did not compile, or the CSV could not be written; 3 bad
// flags or a malformed parameter file.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/code_digest.h"
#include "gpu/mapping_variants.h"
#include "stitch/codegen/code_checks.h"
#include "stitch/driver/compile.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/learned_residual.h"
#include "suite/suite.h"

namespace stitch::gpu {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 3;

constexpr const char* kUsage =
    "usage: cost_model_price [--target sm_XX] [--device NAME] [--version NAME]\n"
    "                        [--parameters FILE] [--only ID,...] [--ptx DIR]\n"
    "                        [--features PATH] [--mappings PATH] --csv PATH\n";

struct Flags {
  Target target;
  const GpuDevice* device = nullptr;  // --device; the target's device without it
  const GpuDevice& priced_device() const { return device ? *device : target.device(); }
  CostModelVersion version = kCurrentCostModel;
  std::string parameters_path;
  std::vector<int> only;
  std::string csv_path;
  std::string ptx_dir;
  std::string features_path;
  std::string mappings_path;
};

struct CompiledPlan {
  int id = 0;
  std::string plan;  // "stitch", "xla_model", "inductor_model"
  CompileResult result;
};

StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return InvalidArgument(arg + " needs a value");
    const std::string v = argv[++i];
    if (arg == "--target") {
      STITCH_ASSIGN_OR_RETURN(f.target, Target::Parse(v));
    } else if (arg == "--device") {
      f.device = FindDevice(v);
      if (f.device == nullptr) {
        std::string known;
        for (const GpuDevice& d : KnownDevices()) known += (known.empty() ? "" : ", ") + d.name;
        return InvalidArgument("--device: no device '" + v + "' in the table (" + known + ")");
      }
    } else if (arg == "--version") {
      std::optional<CostModelVersion> version = ParseCostModelVersion(v);
      if (!version) return InvalidArgument("--version: no cost model version '" + v + "'");
      f.version = *version;
    } else if (arg == "--parameters") {
      f.parameters_path = v;
    } else if (arg == "--only") {
      STITCH_ASSIGN_OR_RETURN(f.only, suite::ParseSuiteIds(v));
    } else if (arg == "--csv") {
      f.csv_path = v;
    } else if (arg == "--ptx") {
      f.ptx_dir = v;
    } else if (arg == "--features") {
      f.features_path = v;
    } else if (arg == "--mappings") {
      f.mappings_path = v;
    } else {
      return InvalidArgument("unknown argument '" + arg + "'");
    }
  }
  if (f.csv_path.empty()) return InvalidArgument("--csv is required");
  return f;
}

// One candidate set: `base` with the object's fields in place of its own, the shares read
// against `device`'s figures.
StatusOr<CostModelParameters> Override(CostModelParameters p, const nlohmann::json& set,
                                       size_t index, const GpuDevice& device) {
  const std::string where = "--parameters: set " + std::to_string(index);
  if (!set.is_object()) return InvalidArgument(where + " is not a JSON object");
  for (const auto& [name, value] : set.items()) {
    bool* flag = name == "assembled_registers"              ? &p.assembled_registers
                 : name == "partial_rounds_share_bandwidth" ? &p.partial_rounds_share_bandwidth
                 : name == "dealt_blocks"                   ? &p.dealt_blocks
                                                            : nullptr;
    if (flag != nullptr) {
      if (!value.is_boolean()) return InvalidArgument(where + ": " + name + " is not a boolean");
      *flag = value.get<bool>();
      continue;
    }
    if (name == "bandwidth_fraction" || name == "reuse_window_fraction") {
      if (!value.is_number() || value.get<double>() <= 0 || value.get<double>() > 1) {
        return InvalidArgument(where + ": " + name + " is not a share in (0, 1]");
      }
      if (name == "bandwidth_fraction") {
        p.bandwidth_bytes_per_second = device.hbm_bytes_per_second * value.get<double>();
      } else {
        p.reuse_window_bytes = static_cast<double>(device.l2_bytes) * value.get<double>();
      }
      continue;
    }
    double* field = name == "bandwidth_bytes_per_second" ? &p.bandwidth_bytes_per_second
                    : name == "dram_latency_seconds"     ? &p.dram_latency_seconds
                    : name == "launch_seconds"           ? &p.launch_seconds
                    : name == "grid_barrier_seconds"     ? &p.grid_barrier_seconds
                    : name == "block_barrier_seconds"    ? &p.block_barrier_seconds
                    : name == "row_pass_seconds"         ? &p.row_pass_seconds
                    : name == "reuse_window_bytes"       ? &p.reuse_window_bytes
                    : name == "issue_seconds"            ? &p.issue_seconds
                    : name == "dependent_issue_seconds"  ? &p.dependent_issue_seconds
                    : name == "block_dispatch_seconds"   ? &p.block_dispatch_seconds
                    : name == "l2_bytes_per_second"      ? &p.l2_bytes_per_second
                                                         : nullptr;
    if (field == nullptr) return InvalidArgument(where + ": unknown field '" + name + "'");
    if (!value.is_number() || value.get<double>() < 0) {
      return InvalidArgument(where + ": " + name + " is not a non-negative number");
    }
    *field = value.get<double>();
  }
  if (p.bandwidth_bytes_per_second <= 0 || p.dram_latency_seconds <= 0) {
    return InvalidArgument(where + ": bandwidth and latency must be positive");
  }
  return p;
}

StatusOr<std::vector<CostModelParameters>> ParameterSets(const Flags& flags) {
  const CostModelParameters base = CostModelParametersFor(flags.priced_device(), flags.version);
  if (flags.parameters_path.empty()) return std::vector<CostModelParameters>{base};
  std::ifstream in(flags.parameters_path);
  if (!in) return InvalidArgument("--parameters: cannot read " + flags.parameters_path);
  nlohmann::json sets = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (sets.is_discarded() || !sets.is_array() || sets.empty()) {
    return InvalidArgument("--parameters: " + flags.parameters_path +
                           " is not a non-empty JSON array");
  }
  std::vector<CostModelParameters> out;
  for (size_t i = 0; i < sets.size(); ++i) {
    STITCH_ASSIGN_OR_RETURN(CostModelParameters p,
                            Override(base, sets[i], i, flags.priced_device()));
    out.push_back(p);
  }
  return out;
}

StatusOr<std::vector<CompiledPlan>> CompileSuite(const Flags& flags) {
  std::vector<CompiledPlan> plans;
  for (const suite::SuiteEntry& e : suite::SelectSuite(flags.only)) {
    for (auto [planner, name] :
         {std::pair{PlannerKind::kStitch, "stitch"}, std::pair{PlannerKind::kXla, "xla_model"},
          std::pair{PlannerKind::kInductor, "inductor_model"}}) {
      CompileOptions options;
      options.planner = planner;
      options.codegen.target = flags.target;
      options.never_slower = false;  // each planner's own plan, as gpu_bench times them
      StatusOr<CompileResult> compiled = CompileGraph(e.graph, options);
      if (!compiled.ok()) {
        return Status(compiled.status().code(),
                      "#" + std::to_string(e.id) + " " + name + ": " + compiled.status().message());
      }
      plans.push_back({e.id, name, std::move(*compiled)});
    }
  }
  return plans;
}

// One mapping `gpu_bench --mappings` times: row `id`'s stitched plan with kernel
// `variant.kernel` under one of the scheduler's candidates (or its own).
struct SweptMapping {
  int id = 0;
  std::string mapping;  // MappingText
  std::string code;     // the re-mapped kernel's digest
  MappingVariant variant;
  KernelCodeFigures figures;  // the re-mapped kernel's code figures on the priced device
};

// The mappings of every stitched plan in `plans`, as gpu_bench --mappings compiles them; not
// the regroupings of kernels it times too, whose times are sums of kernels.
StatusOr<std::vector<SweptMapping>> CompileMappings(const Flags& flags,
                                                    const std::vector<CompiledPlan>& plans) {
  CodegenOptions codegen;
  codegen.target = flags.target;
  std::vector<SweptMapping> out;
  for (const CompiledPlan& p : plans) {
    if (p.plan != "stitch") continue;
    StatusOr<std::vector<MappingVariant>> variants = SweptVariants(p.result, codegen);
    if (!variants.ok()) {
      return Status(variants.status().code(),
                    "#" + std::to_string(p.id) + " mappings: " + variants.status().message());
    }
    for (MappingVariant& v : *variants) {
      if (v.regrouped()) continue;
      const size_t k = static_cast<size_t>(v.kernel);
      const KernelCodeFacts facts =
          FactsOf(v.compiled.graph, v.compiled.plan.kernels[k], v.compiled.kernels[k]);
      SweptMapping m{p.id, MappingText(v.compiled.plan.kernels[k]),
                     CodeDigest({v.compiled.kernels[k]}), std::move(v),
                     FiguresOf(facts, flags.priced_device())};
      out.push_back(std::move(m));
    }
  }
  return out;
}

// Writes `k`'s PTX to <dir>/<stem>_<kernel>.ptx, and its cubin beside it where assembled.
Status WriteKernelFiles(const std::string& dir, const std::string& stem, const CompiledKernel& k) {
  const std::string path = dir + "/" + stem + "_" + k.name;
  std::ofstream ptx(path + ".ptx");
  ptx << k.ptx;
  if (!k.cubin.empty()) {
    std::ofstream cubin(path + ".cubin", std::ios::binary);
    cubin << k.cubin;
    if (!cubin) return InvalidArgument("cannot write " + path + ".cubin");
  }
  if (!ptx) return InvalidArgument("cannot write " + path + ".ptx");
  return Status::Ok();
}

// The --mappings CSV: each mapping priced under each set of constants.
Status WriteMappingPrices(const std::string& path, const std::vector<SweptMapping>& mappings,
                          const std::vector<CostModelParameters>& sets, const GpuDevice& device) {
  std::ofstream csv(path);
  csv << "set,id,kernel,kernel_name,candidate,shipped,mapping,model_us,registers,code,"
         "load_burst_bytes,load_burst_from,in_flight_per_sm,in_flight_needed,loop_instructions,"
         "loop_global_bytes,loop_issue_share,loop_issue_over\n";
  for (size_t s = 0; s < sets.size(); ++s) {
    std::unique_ptr<CostModel> model = NewAnalyticalCostModel(device, sets[s]);
    for (const SweptMapping& m : mappings) {
      const MappingVariant& v = m.variant;
      const KernelSpec& k = v.compiled.plan.kernels[static_cast<size_t>(v.kernel)];
      const KernelCost cost = model->EstimateKernel(v.compiled.graph, k);
      const int registers = k.mapping.assembled_registers;
      // MappingText has commas, never quotes.
      csv << s << "," << m.id << "," << v.kernel << "," << k.name << "," << v.candidate << ","
          << (v.shipped() ? 1 : 0) << ",\"" << m.mapping << "\"," << cost.seconds * 1e6 << ","
          << (registers > 0 ? std::to_string(registers) : "") << "," << m.code << ","
          << m.figures.load_burst_bytes << "," << (m.figures.load_burst_from_sass ? "sass" : "ptx")
          << "," << m.figures.bytes_in_flight_per_sm << "," << m.figures.bytes_in_flight_needed
          << "," << m.figures.loop_instructions << "," << m.figures.loop_global_bytes << ","
          << m.figures.loop_issue_share << ","
          << (m.figures.loop_issue_share > kLoopIssueShareBound ? 1 : 0) << "\n";
    }
  }
  csv.close();
  if (!csv) return InvalidArgument("cannot write " + path);
  return Status::Ok();
}

// --mappings: the swept mappings of `plans` priced under `sets`, and with --ptx their kernels.
Status WriteMappings(const Flags& flags, const std::vector<CompiledPlan>& plans,
                     const std::vector<CostModelParameters>& sets) {
  STITCH_ASSIGN_OR_RETURN(const std::vector<SweptMapping> mappings, CompileMappings(flags, plans));
  STITCH_RETURN_IF_ERROR(
      WriteMappingPrices(flags.mappings_path, mappings, sets, flags.priced_device()));
  if (flags.ptx_dir.empty()) return Status::Ok();
  for (const SweptMapping& m : mappings) {
    const MappingVariant& v = m.variant;
    const std::string stem = std::to_string(m.id) + "_mapping" +
                             (v.shipped() ? "_shipped" : std::to_string(v.candidate));
    STITCH_RETURN_IF_ERROR(
        WriteKernelFiles(flags.ptx_dir, stem, v.compiled.kernels[static_cast<size_t>(v.kernel)]));
  }
  return Status::Ok();
}

// One figure of each kernel of `plan`, ';'-separated, '-' where it is 0 (not assembled).
int64_t CubinBytes(const CompileResult& r) {
  int64_t bytes = 0;
  for (const CompiledKernel& k : r.kernels) bytes += static_cast<int64_t>(k.cubin.size());
  return bytes;
}

std::string Launches(const FusionPlan& plan) {
  std::string out;
  for (const KernelSpec& k : plan.kernels) {
    const LaunchDims& l = k.mapping.launch;
    if (!out.empty()) out += ";";
    out += std::to_string(l.grid[0]) + "x" + std::to_string(l.grid[1]) + "x" +
           std::to_string(l.grid[2]) + ":" + std::to_string(l.block[0]) + "x" +
           std::to_string(l.block[1]) + "x" + std::to_string(l.block[2]);
  }
  return out;
}

std::string PerKernel(const FusionPlan& plan, int ThreadMapping::*field) {
  std::string out;
  for (const KernelSpec& k : plan.kernels) {
    if (!out.empty()) out += ";";
    out += k.mapping.*field > 0 ? std::to_string(k.mapping.*field) : "-";
  }
  return out;
}

int Main(int argc, char** argv) {
  StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::cerr << "cost_model_price: " << flags.status().message() << "\n" << kUsage;
    return kExitUsage;
  }
  StatusOr<std::vector<CostModelParameters>> sets = ParameterSets(*flags);
  if (!sets.ok()) {
    std::cerr << "cost_model_price: " << sets.status().message() << "\n";
    return kExitUsage;
  }
  StatusOr<std::vector<CompiledPlan>> plans = CompileSuite(*flags);
  if (!plans.ok()) {
    std::cerr << "cost_model_price: " << plans.status().ToString() << "\n";
    return kExitFailed;
  }
  if (!flags->mappings_path.empty()) {
    if (Status s = WriteMappings(*flags, *plans, *sets); !s.ok()) {
      std::cerr << "cost_model_price: --mappings: " << s.ToString() << "\n";
      return kExitFailed;
    }
  }
  std::ofstream csv(flags->csv_path);
  csv << "set,id,plan,model_us,kernels,dram_bytes,registers,instructions,memory_us,issue_us,"
         "launches,cubin_bytes,code\n";
  std::ofstream features;
  if (!flags->features_path.empty()) {
    features.open(flags->features_path);
    features << "set,id,plan,model_us";
    for (std::string_view name : ResidualFeatureNames()) features << "," << name;
    features << "\n";
    features.precision(17);
  }
  const GpuDevice& device = flags->priced_device();
  for (size_t s = 0; s < sets->size(); ++s) {
    std::unique_ptr<CostModel> model = NewAnalyticalCostModel(device, (*sets)[s]);
    for (const CompiledPlan& p : *plans) {
      const PlanCost cost = model->Estimate(p.result.graph, p.result.plan);
      int64_t dram = 0;
      double memory = 0, issue = 0;
      for (const KernelCost& k : cost.per_kernel) {
        dram += k.dram_bytes;
        memory += k.memory_seconds;
        issue += k.issue_seconds;
      }
      csv << s << "," << p.id << "," << p.plan << "," << cost.seconds * 1e6 << "," << cost.kernels
          << "," << dram << "," << PerKernel(p.result.plan, &ThreadMapping::assembled_registers)
          << "," << PerKernel(p.result.plan, &ThreadMapping::assembled_instructions) << ","
          << memory * 1e6 << "," << issue * 1e6 << "," << Launches(p.result.plan) << ","
          << CubinBytes(p.result) << "," << CodeDigest(p.result.kernels) << "\n";
      if (features.is_open()) {
        features << s << "," << p.id << "," << p.plan << "," << cost.seconds * 1e6;
        for (double value : ResidualFeaturesOf(p.result.plan, cost)) features << "," << value;
        features << "\n";
      }
    }
  }
  csv.close();
  if (!flags->ptx_dir.empty()) {
    for (const CompiledPlan& p : *plans) {
      for (const CompiledKernel& k : p.result.kernels) {
        Status s = WriteKernelFiles(flags->ptx_dir, std::to_string(p.id) + "_" + p.plan, k);
        if (!s.ok()) {
          std::cerr << "cost_model_price: " << s.message() << "\n";
          return kExitFailed;
        }
      }
    }
  }
  if (!csv) {
    std::cerr << "cost_model_price: cannot write " << flags->csv_path << "\n";
    return kExitFailed;
  }
  if (features.is_open()) {
    features.close();
    if (!features) {
      std::cerr << "cost_model_price: cannot write " << flags->features_path << "\n";
      return kExitFailed;
    }
  }
  return 0;
}

}  // namespace
}  // namespace stitch::gpu

int main(int argc, char** argv) { return stitch::gpu::Main(argc, argv); }
