// KernelLoader::Open for builds without cuda.h: the loader cannot call the driver, so every
// Open reports why instead of failing later.
#include "stitch/loader/kernel_loader.h"

namespace stitch::loader {

StatusOr<std::unique_ptr<KernelLoader>> KernelLoader::Open(const LoaderOptions& options) {
  return Unavailable(
      "stitchd was built without the CUDA driver header (cuda.h), so the kernel loader cannot "
      "use " +
      options.driver_library + "; rebuild with the CUDA toolkit installed");
}

}  // namespace stitch::loader
