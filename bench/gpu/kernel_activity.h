// Kernel time as the GPU records it: the start and end timestamps of every kernel, from
// CUPTI's activity API, the source torch.profiler and Nsight Systems read.
//
// CUDA events around a plan measure the stream's time, so a plan of several kernels also pays
// the gaps where the GPU waits for the host's next launch. Frameworks are compared kernel time
// against kernel time (Nsight Compute for one, the profiler for the other), so gpu_bench reports
// both: the events' span and the sum of the kernels' own durations.
//
// CUPTI is opened at run time (dlopen, entry points by dlsym), like the driver, so gpu_bench
// starts where it is missing; the kernel time is then absent and says why. Builds without
// cupti.h get an OpenKernelActivity that always fails, saying so.
//
// Thread-safety: CUPTI's activity buffers are per process, so every KernelActivity shares them;
// Start and Stop are called from one thread, with no two recordings overlapping.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stitch/base/status.h"

namespace stitch::gpu {

// One kernel's execution on the GPU, in nanoseconds of the device's clock.
struct KernelSpan {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
};

class KernelActivity {
 public:
  virtual ~KernelActivity() = default;

  // Where the records come from, for reports: "CUPTI activity records (libcupti.so.13)".
  virtual const std::string& source() const = 0;

  // Starts recording every kernel launched from now on, forgetting earlier records.
  // Returns UNAVAILABLE naming CUPTI's error when the recording cannot start (another tool,
  // such as a profiler, may hold CUPTI).
  virtual Status Start() = 0;

  // Stops recording and returns the kernels that ran since Start, in the order CUPTI delivered
  // their records (KernelMicrosecondsPerLaunch orders them). Call it after the device has finished
  // them (a synchronize): kernels still running are lost.
  // Returns UNAVAILABLE naming CUPTI's error, or DATA_LOSS when CUPTI dropped records.
  virtual StatusOr<std::vector<KernelSpan>> Stop() = 0;
};

// Opens CUPTI from `library` (a name or path for dlopen), or from the first of the usual names
// and CUDA toolkit paths that loads when it is empty. Call it after the CUDA driver is
// initialized. Returns UNAVAILABLE with a one-line reason when no library loads or one lacks an
// entry point.
StatusOr<std::unique_ptr<KernelActivity>> OpenKernelActivity(const std::string& library);

// The duration of each launch of each of `runs` runs of `kernels_per_run` launches, in
// microseconds, by run and then by launch: each run's launches are the next `kernels_per_run`
// spans by start time. Returns DATA_LOSS when `spans` does not hold exactly
// runs x kernels_per_run kernels, and INVALID_ARGUMENT for a span that ends before it starts.
StatusOr<std::vector<std::vector<double>>> KernelMicrosecondsPerLaunch(
    std::vector<KernelSpan> spans, int kernels_per_run, int runs);

// Each run's kernel time: the sum of its launches' durations (KernelMicrosecondsPerLaunch).
std::vector<double> KernelMicrosecondsPerRun(const std::vector<std::vector<double>>& launches);

}  // namespace stitch::gpu
