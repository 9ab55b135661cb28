// Finds the compute capability of the node's first GPU without linking against CUDA, so
// stitchd runs (and compiles PTX) on machines without a driver.
#pragma once

#include <optional>
#include <string>

namespace stitch::daemon {

// CUDA device 0 as its driver describes it.
struct DetectedGpu {
  std::string arch;  // "sm_90"
  std::string name;  // "NVIDIA H200"; empty where the driver gives none
};

// Returns CUDA device 0 (as numbered under CUDA_VISIBLE_DEVICES), or nullopt with the reason
// in *why_not (when non-null), e.g. "no CUDA driver (libcuda.so.1 not found)". Loads
// libcuda.so.1 and calls cuInit; the library stays loaded, since unloading an initialised
// driver is unsafe. Call once, early, before starting threads.
std::optional<DetectedGpu> DetectGpu(std::string* why_not);

}  // namespace stitch::daemon
