// The cost model: what a fusion plan should take on a named GPU.
//
// The analytical model prices each kernel from its thread mapping (plan.h):
//   * global-memory bytes (each buffer once per launch or phase, plus re-reads and partly
//     used sectors that miss L2) over the bandwidth the mapping can reach: the achievable
//     HBM bandwidth, or less when too few bytes are in flight to cover DRAM latency
//     (Little's law over resident threads and the loads each keeps in flight);
//   * the tail of partial waves when the grid does not fill the SMs evenly;
//   * one launch overhead per kernel;
//   * block barriers per row or tile, and grid-wide barriers per launch;
//   * from h100-fit-2 on, the issue of the cubin's instructions, when it takes longer than
//     moving the bytes: the SM's schedulers at their sustained rate, or, with too few
//     resident warps to cover a warp's dependent issues, each warp's chain of instructions.
// It sits behind CostModel so that a learned model (trained on runtimes measured on real
// GPUs) plugs in without changing callers.
//
// Thread-safety: CostModel implementations are immutable after construction and may be
// shared across threads.
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "stitch/ir/graph.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/plan.h"

namespace stitch {

// The modelled cost of one kernel of a plan, by term.
struct KernelCost {
  double seconds = 0;         // the total of the terms below
  double memory_seconds = 0;  // bytes over achieved bandwidth, stretched by wave tails
  double launch_seconds = 0;
  double barrier_seconds = 0;  // block and grid barriers
  // Issuing the kernel's instructions on the busiest SM (0 without an instruction count);
  // the kernel takes the longer of this and memory_seconds.
  double issue_seconds = 0;
  int64_t global_bytes = 0;
  // What the model moves through DRAM: global_bytes plus the re-reads and partly used
  // sectors that miss L2.
  int64_t dram_bytes = 0;
  int resident_blocks_per_sm = 0;
  double waves = 0;  // blocks over (SMs x resident blocks per SM)
  // The busiest slot's passes over the mean slot's, at least 1: what memory_seconds is
  // stretched by (a one-pass grid's partial last wave, a capped grid's uneven passes). 1 for
  // global kernels, whose phases are priced apart, and for unscheduled ones.
  double imbalance = 1;
  double bandwidth_fraction = 0;  // achieved over peak HBM bandwidth, in (0, 1]
};

struct PlanCost {
  double seconds = 0;
  int64_t global_bytes = 0;
  int kernels = 0;
  std::vector<KernelCost> per_kernel;  // in plan order
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  // Returns the modelled cost of running `plan` (scheduled: every kernel has its mapping)
  // for a verified graph `g` once.
  virtual PlanCost Estimate(const Graph& g, const FusionPlan& plan) const = 0;
  // Returns the modelled cost of one scheduled kernel.
  virtual KernelCost EstimateKernel(const Graph& g, const KernelSpec& kernel) const = 0;
};

// The versions of the analytical model's constants. A version names one set of constants
// and terms; bundles record the version they were priced with.
enum class CostModelVersion {
  // The device table's figures as published: datasheet bandwidth, re-reads inside a launch
  // free, occupancy from the scheduler's register estimate. What shipped before any GPU
  // measured stitch's kernels; kept to show what the calibration changed.
  kDatasheet,
  // Fitted to the H100 kernel times in testdata/gpu/h100_80gb_hbm3 by
  // tools/fit_cost_model.py (COST_MODEL_SOURCES.md, section 6): achievable bandwidth, loaded
  // DRAM latency, kernel overhead and barrier costs, with re-reads and strided reads charged
  // when they outgrow L2, and occupancy from the assembled cubin's registers.
  kH100Fit1,
  // h100-fit-1's terms with an instruction-issue bound read from the cubin (its
  // instruction count, registers and the mapping's resident warps), refitted to the same
  // measurements (COST_MODEL_SOURCES.md, section 6).
  kH100Fit2,
  // h100-fit-2's terms with each measured device's own constants: the H100's are
  // h100-fit-2's, the H200's fitted to testdata/gpu/h200/2026-11-28_afdf996
  // (COST_MODEL_SOURCES.md, section 6). Other devices price as under h100-fit-2. Since
  // added, unfitted: L2's bandwidth (the device table's) bounds a kernel whose strided
  // reads move a sector per element through L2, which changes no plan the sets measured.
  kFit3,
  // fit-3's constants with two terms read off its sets' kernels, not refitted: the blocks
  // each SM starts one after another (an SM takes a new block only so often, which bounds
  // kernels of many short blocks), and the bandwidth the last, partial wave's blocks still
  // draw (COST_MODEL_SOURCES.md, section 6). Not yet current: it prices the measured plans
  // closer than fit-3 (the calibration test checks it), but as the version the never-slower
  // choice is made on it would ship suite row #19's XLA-model plan, which the H200 ran 9%
  // slower; it becomes current with a GPU run of the plans it would choose.
  kFit4,
  // fit-4 with a grid of more blocks than slots priced as the GPU deals them: an SM takes a
  // new block whenever one of its slots frees, so after the first wave blocks no longer run
  // in lockstep rounds, and the kernel ends with its busiest SM's share of the blocks, not
  // after ceil(waves) rounds (COST_MODEL_SOURCES.md, section 6: the H200's mapping sweep
  // timed 38 loop grids of 1.5 to 388 waves, none stretched by its last partial wave). Read
  // off that sweep, not refitted. Not yet current: as the version the never-slower choice is
  // made on it would ship suite row #9's XLA-model loop, priced 0.08% below the stitched one
  // by the busiest SM's rounding, which the H200 ran 2-3% slower.
  kFit5,
};

// The version stitchd prices with: the cost of every plan it compares, the never-slower
// choice between them, and every figure it reports.
inline constexpr CostModelVersion kCurrentCostModel = CostModelVersion::kFit3;

// The version the planners and the scheduler search with when they build plans (thread
// mappings, merges, the baseline models' rules), on PlanningDevice's figures. It stays at the
// datasheet constants until a GPU run measures the plans the fitted constants would build:
// under them two suite rows plan differently (#12's Inductor model and #17's stitched plan),
// and the measurements the fit rests on are of today's plans.
inline constexpr CostModelVersion kPlanningCostModel = CostModelVersion::kDatasheet;

// Returns the device whose figures the planners and the scheduler search with, and the
// never-slower choice chooses with, for `device`: the device itself, but the H100 for the
// H200. The H200's plans are then the ones its fit rests on
// (testdata/gpu/h200/2026-11-28_afdf996 measured sm_90 plans, built for the H100). Its own
// fitted constants price them, and make the two choices that hang on its L2: a loop-mode row
// kernel's window (#12 keeps its whole grid, 1,214 us there where capped it took 1,373) and a
// transposed row tile. Searched on the H200's datasheet figures, #2's row kernel took a
// mapping its fit prices 65% slower; searched on its fitted constants, four rows' plans came
// out slower by the same fit once assembled; chosen on them, #19 and #26 would ship plans
// the H200 ran 9% and 72% slower. Until a GPU times the mappings on an H200 (gpu_bench
// --mappings), the H100's search and choice stand.
const GpuDevice& PlanningDevice(const GpuDevice& device);

// "datasheet", "h100-fit-1", "h100-fit-2", "fit-3", "fit-4", "fit-5"
std::string_view CostModelVersionName(CostModelVersion v);
// Returns the version named `name`, or nullopt for an unknown name.
std::optional<CostModelVersion> ParseCostModelVersion(std::string_view name);

// The constants one version prices a device with.
struct CostModelParameters {
  double bandwidth_bytes_per_second = 0;  // what streaming kernels reach, not the datasheet's
  double dram_latency_seconds = 0;        // a load's latency under load (Little's law)
  double launch_seconds = 0;              // per kernel: start-up, ramp and drain on the GPU
  double grid_barrier_seconds = 0;
  double block_barrier_seconds = 0;
  // The shortest a row kernel's pass over its rows can take (load, reduce, compute, store,
  // one after another): a floor per pass on the busiest slot. 0 in the datasheet version.
  double row_pass_seconds = 0;
  // A re-read inside a launch (a loop-mode row's later pass, the rest of a strided sector)
  // hits L2 while the bytes fetched between its two uses stay under this; beyond, it is
  // DRAM traffic. 0 takes every re-read as a hit.
  double reuse_window_bytes = 0;
  // Whether occupancy comes from the assembler's register count where a kernel has one.
  bool assembled_registers = false;
  // Instruction issue, for kernels whose cubin's instruction count is known. A warp issues
  // the kernel's instructions once per pass; an SM's schedulers (register_sub_partitions)
  // each issue one warp instruction per issue_seconds at best, and one warp issues at most
  // one per dependent_issue_seconds (its instructions wait on earlier results), so a
  // scheduler with fewer resident warps than dependent_issue_seconds / issue_seconds
  // issues below its rate. 0 leaves the term out (datasheet, h100-fit-1).
  double issue_seconds = 0;
  double dependent_issue_seconds = 0;
  // An SM starts its blocks one after another, at most one per block_dispatch_seconds, so a
  // kernel takes at least its blocks per SM times this, however few bytes each block moves.
  // 0 leaves the term out (before fit-4).
  double block_dispatch_seconds = 0;
  // What L2 serves the SMs, bytes per second (GpuDevice::l2_bytes_per_second): a kernel moves
  // every byte it loads or stores through L2, and a strided read a whole sector per element
  // whether or not the rest of the sector is used later from L2. 0 leaves the term out (the
  // versions before fit-3, and devices without a measurement).
  double l2_bytes_per_second = 0;
  // Whether the rounds of passes that keep only some slots busy (a last, partial wave) draw
  // what their own loads in flight allow, up to the bandwidth (fit-4), or take as long as a
  // round with every slot busy (before fit-4).
  bool partial_rounds_share_bandwidth = false;
  // Whether a grid of more blocks than slots takes its busiest SM's blocks, ceil(blocks /
  // SMs), over that SM's slots as fractional rounds, each SM taking a new block as a slot
  // frees (fit-5), or ceil(waves) whole rounds of every slot (before fit-5). Grids that fit
  // in one wave are priced alike either way.
  bool dealt_blocks = false;
};

// The time `device`'s SMs take to start a grid of `blocks` blocks, each SM starting its share
// one after another at p.block_dispatch_seconds (0 where the version has no such term): the
// least a launch takes however few bytes its blocks move.
double BlockStartSeconds(int64_t blocks, const GpuDevice& device, const CostModelParameters& p);

// Returns the constants of `version` for `device`.
CostModelParameters CostModelParametersFor(const GpuDevice& device, CostModelVersion version);

// Returns the analytical model for `device`, priced with `version`'s constants, or with
// `parameters` given outright (the fit tries candidates this way).
std::unique_ptr<CostModel> NewAnalyticalCostModel(const GpuDevice& device,
                                                  CostModelVersion version = kCurrentCostModel);
std::unique_ptr<CostModel> NewAnalyticalCostModel(const GpuDevice& device,
                                                  const CostModelParameters& parameters);

// Returns the model the planners and the scheduler search with for `device`: the analytical
// model of kPlanningCostModel on PlanningDevice(device).
std::unique_ptr<CostModel> NewPlanningCostModel(const GpuDevice& device);

}  // namespace stitch
