// Running compiled plans on a real GPU through the CUDA driver API.
//
// The driver is opened at run time (dlopen of libcuda.so.1, entry points by dlsym), so the
// benchmark starts, and can compile and export the suite, on machines without a driver or a
// GPU; only OpenGpu fails there, with a one-line reason. Builds without the CUDA headers
// (cuda.h) get an OpenGpu that always fails, saying so.
//
// Buffers follow the bundle's ABI (codegen.h): one buffer per graph node that some kernel
// takes as a parameter, `g.nodes[id].shape.bytes()` long; kernel arguments are the device
// pointers in CompiledKernel::param_nodes order; kernels run in plan order on one stream.
// A kernel with CompiledKernel::workspace_bytes > 0 also gets its own workspace as the last
// argument, zero-filled once before its first launch and reused by its later launches. A
// CompiledKernel::cooperative one (it has grid-wide barriers) is launched with
// cuLaunchCooperativeKernel: when its grid cannot be resident at once on this GPU
// (cuOccupancyMaxActiveBlocksPerMultiprocessor x SMs) it is not launched and the plan fails
// with FAILED_PRECONDITION naming it, as it does when the driver lacks
// cuLaunchCooperativeKernel.
//
// A shape-generic compile (CompileResult::shape_generic(), shape_class.h) runs at an outer
// extent inside the bucket it serves: `g` is then the compiled graph at that extent
// (AtExtent), which sizes every buffer, and each kernel with
// CompiledKernel::takes_outer_extent gets the extent as its last argument, an int64 by value
// after its pointers and workspace. An exact compile runs at outer extent 0.
//
// Thread-safety: a Gpu is used from one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/driver/compile.h"
#include "stitch/ir/graph.h"
#include "stitch/reference/tensor.h"

namespace stitch::gpu {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;  // as the driver reports it, e.g. "NVIDIA H100 80GB HBM3"
  int cc_major = 0, cc_minor = 0;
  int sms = 0;
  int64_t l2_bytes = 0;
  int64_t memory_bytes = 0;
  // Peak DRAM bandwidth, and where the figure came from ("memory clock x bus width" or
  // "device table: H100").
  double peak_bytes_per_second = 0;
  std::string peak_source;
  int driver_version = 0;  // e.g. 12080 for 12.8
  // How kernel time is measured ("CUPTI activity records (libcupti.so.13)"), or why it is not
  // ("not measured: cannot load CUPTI: ...").
  std::string kernel_timing;

  // "sm_90" for compute capability 9.0.
  std::string arch() const { return "sm_" + std::to_string(cc_major * 10 + cc_minor); }
};

// Returns the part of a device name fit for a file name: "NVIDIA H100 80GB HBM3" gives
// "h100_80gb_hbm3".
std::string DeviceSlug(const std::string& name);

struct TimingOptions {
  int warmup = 10;    // whole-plan runs before timing
  int repeats = 100;  // timed whole-plan runs; the median is reported
  // Evict the L2 cache before every timed run (a memset of twice its size), so small
  // subgraphs are timed reading DRAM as they would inside a model.
  bool flush_l2 = true;
  uint64_t seed = 1;  // for the random contents of parameter buffers
};

struct PlanTiming {
  // The CUDA events' span of each run: the plan's kernels and the gaps between them.
  double median_us = 0, min_us = 0, max_us = 0;
  // The sum of each run's kernel durations as the GPU recorded them (kernel_activity.h), the
  // figure profilers give the frameworks' kernels; -1 where not measured, `kernel_note` says why.
  double kernel_median_us = -1, kernel_min_us = -1, kernel_max_us = -1;
  // The median duration of each of the plan's kernels, in plan order; empty where kernel
  // time is not measured.
  std::vector<double> kernel_each_median_us;
  std::string kernel_note;
  // How the kernels were loaded: "cubin", "ptx" (JIT by the driver) or "cubin+ptx".
  std::string loaded_from;
};

class Gpu {
 public:
  virtual ~Gpu() = default;

  virtual const DeviceInfo& info() const = 0;

  // Loads the kernels of `compiled` (cubin when it was built for this device's arch, PTX
  // otherwise or when the cubin does not load), fills parameter buffers with random values
  // of their dtype and times the whole plan with CUDA events: `warmup` runs, then `repeats`
  // timed runs. The same timed runs give the kernel time where the GPU was opened with a
  // kernel profiler (OpenGpu); its failure leaves the kernel time out, not the plan.
  // `outer_extent` is the run's extent for a shape-generic compile (above);
  // INVALID_ARGUMENT when it is missing or outside the bucket compiled.served, when an exact
  // compile is given one, or when `g` is not the compiled graph at that extent.
  virtual StatusOr<PlanTiming> TimePlan(const Graph& g, const CompileResult& compiled,
                                        const TimingOptions& options, int64_t outer_extent = 0) = 0;

  // Runs the plan once on `params` (ordered by parameter number) and returns one tensor per
  // graph output. Output and temporary buffers start as 0xff bytes, so an element no kernel
  // writes shows up as NaN or all-ones. `outer_extent` as TimePlan's.
  virtual StatusOr<std::vector<Tensor>> RunPlan(const Graph& g, const CompileResult& compiled,
                                                const std::vector<Tensor>& params,
                                                int64_t outer_extent = 0) = 0;

  // As RunPlan, with each parameter given in device storage bytes (ToDeviceBytes) and each
  // output returned so: a caller that runs one set of full-size inputs through many plans
  // converts them once, and compares outputs as bytes (CompareDeviceBytes).
  // INVALID_ARGUMENT when a parameter's byte count is not its shape's.
  virtual StatusOr<std::vector<std::vector<uint8_t>>> RunPlanOnBytes(
      const Graph& g, const CompileResult& compiled,
      const std::vector<std::vector<uint8_t>>& params, int64_t outer_extent = 0) = 0;
};

// Opens device `ordinal` through the driver library `driver_library` (a name for dlopen,
// normally "libcuda.so.1"), and CUPTI from `profiler_library` for kernel times (empty: the
// usual names, OpenKernelActivity; "none": no kernel times). Returns UNAVAILABLE with a
// one-line reason when no GPU can be used: the library does not load, cuInit fails, or the
// driver sees no (or too few) devices. A profiler that does not open is no failure:
// DeviceInfo::kernel_timing says why kernel times are missing.
StatusOr<std::unique_ptr<Gpu>> OpenGpu(const std::string& driver_library, int ordinal,
                                       const std::string& profiler_library = "");

}  // namespace stitch::gpu
