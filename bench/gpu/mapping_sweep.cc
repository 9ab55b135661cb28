#include "gpu/mapping_sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <tuple>
#include <utility>

#include "gpu/code_digest.h"
#include "gpu/mapping_variants.h"
#include "stitch/driver/compile.h"
#include "stitch/plan/cost_model.h"
#include "stitch/reference/tensor.h"
#include "stitch/reference/tensor_compare.h"

namespace stitch::gpu {
namespace {

// A variant measured this much faster than the shipped mapping counts as faster: two H100
// runs of the suite timed stitch's kernels within 1.6% of each other.
constexpr double kFaster = 0.97;

std::string Fixed(double v, int digits) {
  if (v < 0 || !std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

StatusOr<CompileResult> CompileStitched(const Graph& g, const Target& target, bool cubin) {
  CompileOptions options;
  options.codegen.target = target;
  options.codegen.emit_cubin = cubin;
  options.never_slower = false;  // stitch's own plan, as gpu_bench times it
  return CompileGraph(g, options);
}

// The model's figures of the variant's re-mapped kernel, or its regrouping's sums.
void Price(const MappingVariant& v, const GpuDevice& device, MappingRow& row) {
  std::unique_ptr<CostModel> planning = NewPlanningCostModel(device);
  std::unique_ptr<CostModel> current = NewAnalyticalCostModel(device);
  row.planning_us = row.model_us = row.model_unstretched_us = 0;
  for (int i = v.kernel; i < v.kernel + v.kernels; ++i) {
    const KernelSpec& k = v.compiled.plan.kernels[static_cast<size_t>(i)];
    const KernelCost c = current->EstimateKernel(v.compiled.graph, k);
    row.planning_us += planning->EstimateKernel(v.compiled.graph, k).seconds * 1e6;
    row.model_us += c.seconds * 1e6;
    row.model_unstretched_us +=
        (std::max(c.memory_seconds / std::max(c.imbalance, 1.0), c.issue_seconds) +
         c.launch_seconds + c.barrier_seconds) *
        1e6;
    if (v.regrouped()) continue;
    row.waves = c.waves;
    row.imbalance = c.imbalance;
    row.registers_planned = k.mapping.registers_per_thread;
    row.registers = k.mapping.assembled_registers;
    row.instructions = k.mapping.assembled_instructions;
  }
  if (v.regrouped()) row.waves = row.imbalance = -1;
}

// The assembler's registers over the scheduler's estimate, for every mapping that has both:
// the median, and the furthest above 1 with its mapping. Empty when none has both.
std::string RegisterEstimateSummary(const std::vector<MappingRow>& rows) {
  std::vector<double> ratios;
  const MappingRow* worst = nullptr;
  for (const MappingRow& r : rows) {
    if (r.registers <= 0 || r.registers_planned <= 0) continue;
    const double ratio = static_cast<double>(r.registers) / r.registers_planned;
    ratios.push_back(ratio);
    if (!worst || ratio > static_cast<double>(worst->registers) / worst->registers_planned) {
      worst = &r;
    }
  }
  if (ratios.empty()) return "";
  std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
  return "The assembler's registers over the scheduler's estimate, " +
         std::to_string(ratios.size()) + " mappings: median " +
         Fixed(ratios[ratios.size() / 2], 2) + "x, at most " +
         Fixed(static_cast<double>(worst->registers) / worst->registers_planned, 2) + "x (#" +
         std::to_string(worst->id) + " " + worst->kernel_name + ", " + worst->mapping + ": " +
         std::to_string(worst->registers) + " against " + std::to_string(worst->registers_planned) +
         ").\n";
}

// The rows a variant is compared with: those of the same plan kernels (suite row, first
// kernel, span), the shipped one among them.
using GroupKey = std::tuple<int, int, int>;
GroupKey GroupOf(const MappingRow& r) { return {r.id, r.kernel, r.span}; }

// Inputs and outputs stay in device storage bytes: a full-size row's tensors of doubles would
// take twice their memory and most of the sweep's time to convert, per variant.
using DeviceBytes = std::vector<std::vector<uint8_t>>;

// Times `v` (its buffers filled from `seed`, as gpu_bench fills a row's) and, given the shipped
// plan's inputs and outputs, compares its outputs with them.
void TimeAndVerify(Gpu& gpu, const MappingVariant& v, const MappingSweepOptions& options,
                   uint64_t seed, const DeviceBytes* inputs, const DeviceBytes* shipped_outputs,
                   MappingRow& row) {
  TimingOptions timing = options.timing;
  timing.seed = seed;
  StatusOr<PlanTiming> t = gpu.TimePlan(v.compiled.graph, v.compiled, timing);
  if (!t.ok()) {
    row.error = "run: " + t.status().ToString();
    return;
  }
  const size_t first = static_cast<size_t>(v.kernel);
  const size_t end = first + static_cast<size_t>(v.kernels);
  if (end <= t->kernel_each_median_us.size()) {
    row.kernel_us = 0;
    for (size_t k = first; k < end; ++k) row.kernel_us += t->kernel_each_median_us[k];
  } else {
    row.error = "kernel time not measured: " + t->kernel_note;
  }
  if (v.shipped() || inputs == nullptr || shipped_outputs == nullptr) return;
  StatusOr<DeviceBytes> got = gpu.RunPlanOnBytes(v.compiled.graph, v.compiled, *inputs);
  if (!got.ok()) {
    row.error = "run (verify): " + got.status().ToString();
    return;
  }
  row.matches = "yes";
  const Graph& g = v.compiled.graph;
  for (size_t o = 0; o < shipped_outputs->size() && o < got->size(); ++o) {
    const Shape& shape = g.nodes[g.outputs[o]].shape;
    const Comparison c = CompareDeviceBytes(shape, (*shipped_outputs)[o], (*got)[o],
                                            OutputTolerance(g, shape.dtype));
    if (!c.pass) {
      row.matches = "NO";
      if (row.error.empty()) row.error = "output " + std::to_string(o) + ": " + c.message;
    }
  }
}

}  // namespace

std::vector<MappingRow> SweepMappings(const suite::SuiteEntry& e,
                                      const MappingSweepOptions& options, Gpu* gpu) {
  std::vector<MappingRow> rows;
  StatusOr<CompileResult> compiled = CompileStitched(e.graph, options.target, true);
  if (!compiled.ok() && gpu != nullptr) {
    // As gpu_bench: the toolkit may not assemble for this GPU; the driver JITs the PTX.
    compiled = CompileStitched(e.graph, options.target, false);
  }
  CodegenOptions codegen;
  codegen.target = options.target;
  StatusOr<std::vector<MappingVariant>> variants =
      compiled.ok() ? SweptVariants(*compiled, codegen)
                    : StatusOr<std::vector<MappingVariant>>(compiled.status());
  if (!variants.ok()) {
    MappingRow failed;
    failed.id = e.id;
    failed.error = "compile: " + variants.status().ToString();
    rows.push_back(std::move(failed));
    return rows;
  }
  // The inputs and the shipped plan's outputs every variant is compared with.
  DeviceBytes inputs;
  DeviceBytes shipped_outputs;
  std::string verify_error;
  const bool verify = gpu != nullptr && options.verify && !variants->empty();
  if (verify) {
    std::mt19937_64 rng(static_cast<uint64_t>(e.id));
    for (int node : compiled->graph.Parameters()) {
      inputs.push_back(RandomDeviceBytes(compiled->graph.nodes[node].shape, rng));
    }
    StatusOr<DeviceBytes> out = gpu->RunPlanOnBytes(compiled->graph, *compiled, inputs);
    if (out.ok()) {
      shipped_outputs = std::move(out).value();
    } else {
      verify_error = "run (shipped): " + out.status().ToString();
    }
  }
  for (const MappingVariant& v : *variants) {
    const KernelSpec& k = v.compiled.plan.kernels[static_cast<size_t>(v.kernel)];
    MappingRow row;
    row.id = e.id;
    row.kernel = v.kernel;
    row.kernel_name = compiled->plan.kernels[static_cast<size_t>(v.kernel)].name;
    row.candidate = v.candidate;
    row.span = v.span;
    row.kernels = v.kernels;
    row.mapping = VariantText(v);
    const auto first = v.compiled.kernels.begin() + v.kernel;
    row.code = CodeDigest(std::vector<CompiledKernel>(first, first + v.kernels));
    row.blocks = static_cast<int64_t>(k.mapping.launch.blocks());
    row.vector_width = std::max(k.mapping.vector_width, 1);
    Price(v, options.priced_on != nullptr ? *options.priced_on : options.target.device(), row);
    if (gpu != nullptr) {
      const bool compare = verify && verify_error.empty();
      TimeAndVerify(*gpu, v, options, static_cast<uint64_t>(e.id), compare ? &inputs : nullptr,
                    compare ? &shipped_outputs : nullptr, row);
      if (row.error.empty()) row.error = verify_error;
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

void PrintMappingTable(const std::vector<MappingRow>& rows, std::ostream& out, bool header) {
  if (header) {
    out << "| id | kernel | mapping | ships | waves | stretch | planning µs | model µs | model µs "
           "unstretched | kernel µs | / shipped | = shipped |\n"
           "|---:|---|---|:---:|---:|---:|---:|---:|---:|---:|---:|:---:|\n";
  }
  std::map<GroupKey, double> shipped_us;
  for (const MappingRow& r : rows) {
    if (r.candidate < 0) shipped_us[GroupOf(r)] = r.kernel_us;
  }
  for (const MappingRow& r : rows) {
    if (!r.error.empty() && r.kernel_name.empty()) {
      out << "| " << r.id << " | - | " << r.error << " | | | | | | | | | |\n";
      continue;
    }
    const double base = shipped_us.count(GroupOf(r)) ? shipped_us[GroupOf(r)] : -1;
    const double ratio = r.kernel_us > 0 && base > 0 ? r.kernel_us / base : -1;
    out << "| " << r.id << " | " << r.kernel_name << " | " << r.mapping << " | "
        << (r.candidate < 0 ? "yes" : "") << " | " << Fixed(r.waves, 1) << " | "
        << Fixed(r.imbalance, 3) << " | " << Fixed(r.planning_us, 1) << " | "
        << Fixed(r.model_us, 1) << " | " << Fixed(r.model_unstretched_us, 1) << " | "
        << Fixed(r.kernel_us, 1) << " | " << Fixed(ratio, 3) << " | " << r.matches << " |\n";
  }
}

void PrintMappingSummary(const std::vector<MappingRow>& rows, bool timed, std::ostream& out) {
  // Per kernel: the shipped row, the fastest measured, and the current model's cheapest.
  std::map<GroupKey, std::vector<const MappingRow*>> kernels;
  for (const MappingRow& r : rows) {
    if (!r.kernel_name.empty()) kernels[GroupOf(r)].push_back(&r);
  }
  int variants = 0, faster = 0, model_right = 0, measured = 0;
  std::string faster_list;
  for (const auto& [key, group] : kernels) {
    variants += static_cast<int>(group.size());
    const MappingRow* shipped = nullptr;
    const MappingRow* fastest = nullptr;
    const MappingRow* cheapest = nullptr;
    for (const MappingRow* r : group) {
      if (r->candidate < 0) shipped = r;
      if (r->kernel_us > 0 && (!fastest || r->kernel_us < fastest->kernel_us)) fastest = r;
      if (!cheapest || r->model_us < cheapest->model_us) cheapest = r;
    }
    if (!timed || !shipped || !fastest || shipped->kernel_us <= 0) continue;
    ++measured;
    if (fastest->kernel_us < kFaster * shipped->kernel_us) {
      ++faster;
      faster_list += " #" + std::to_string(std::get<0>(key)) + " " + shipped->kernel_name + " (" +
                     fastest->mapping + ": " + Fixed(fastest->kernel_us, 1) + " against " +
                     Fixed(shipped->kernel_us, 1) + " µs);";
    }
    if (cheapest->kernel_us > 0 && cheapest->kernel_us <= fastest->kernel_us / kFaster) {
      ++model_right;
    }
  }
  out << "\nLoop, row-stitched and global kernels with candidates, and regroupings of global "
         "kernels' phases: "
      << kernels.size() << " in the stitched plans, " << variants
      << " variants (the shipped one and the other candidates).\n"
      << RegisterEstimateSummary(rows);
  if (!timed) {
    out << "Not run: this listing only compiles and prices (no GPU used).\n";
    return;
  }
  out << "Timed " << measured << " kernels. A mapping at least " << Fixed(100 * (1 - kFaster), 0)
      << "% faster than the shipped one: " << faster << faster_list << "\n"
      << "The current model's cheapest mapping is within " << Fixed(100 * (1 - kFaster), 0)
      << "% of the fastest measured: " << model_right << "/" << measured << " kernels.\n";
}

Status WriteMappingCsv(const std::string& path, const std::vector<MappingRow>& rows) {
  // Written aside and renamed over `path`, so that a run killed mid-write leaves the last
  // whole file.
  const std::string partial = path + ".partial";
  std::ofstream out(partial);
  if (!out) return InvalidArgument("cannot write " + partial);
  out << "id,kernel,kernel_name,candidate,shipped,mapping,blocks,vector_width,waves,stretch,"
         "registers_planned,registers,instructions,"
         "planning_us,model_us,model_unstretched_us,kernel_us,matches,code,error,span,kernels\n";
  auto count = [](int v) { return v > 0 ? std::to_string(v) : std::string(); };
  auto num = [](double v, int digits) { return v < 0 ? std::string() : Fixed(v, digits); };
  auto quoted = [](const std::string& s) {
    std::string q = "\"";
    for (char c : s) {
      if (c == '"') q += '"';
      q += c;
    }
    return q + "\"";
  };
  for (const MappingRow& r : rows) {
    out << r.id << "," << r.kernel << "," << r.kernel_name << "," << r.candidate << ","
        << (r.candidate < 0 ? 1 : 0) << "," << quoted(r.mapping) << "," << r.blocks << ","
        << r.vector_width << "," << num(r.waves, 3) << "," << num(r.imbalance, 4) << ","
        << count(r.registers_planned) << "," << count(r.registers) << "," << count(r.instructions)
        << "," << num(r.planning_us, 3) << "," << num(r.model_us, 3) << ","
        << num(r.model_unstretched_us, 3) << "," << num(r.kernel_us, 3) << "," << r.matches << ","
        << r.code << "," << quoted(r.error) << "," << r.span << "," << r.kernels << "\n";
  }
  out.close();
  if (!out) return Internal("error writing " + partial);
  std::error_code ec;
  std::filesystem::rename(partial, path, ec);
  if (ec) return Internal("cannot rename " + partial + " to " + path + ": " + ec.message());
  return Status::Ok();
}

bool MappingSweepOk(const std::vector<MappingRow>& rows, bool timed) {
  return std::all_of(rows.begin(), rows.end(), [&](const MappingRow& r) {
    if (r.kernel_name.empty() || (!timed && !r.error.empty())) return false;
    return !timed || (r.error.empty() && r.kernel_us > 0 && r.matches != "NO");
  });
}

}  // namespace stitch::gpu
