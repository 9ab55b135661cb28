// OpenGpu for builds without the CUDA driver header: compiling and exporting the suite work,
// timing does not.
#include "gpu/gpu_runner.h"

namespace stitch::gpu {

StatusOr<std::unique_ptr<Gpu>> OpenGpu(const std::string&, int, const std::string&) {
  return Unavailable(
      "this build has no CUDA driver support (cuda.h was not found at configure time; "
      "reconfigure with the CUDA toolkit installed)");
}

}  // namespace stitch::gpu
