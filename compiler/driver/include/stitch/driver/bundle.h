// Turns a compile result into the kernel bundle the cache stores and jobs load.
//
// Thread-safety: pure function.
#pragma once

#include "stitch/driver/compile.h"
#include "stitch/ir/graph.h"
#include "stitch/v1/kernel_bundle.pb.h"

namespace stitch {

// Returns the bundle for `result`, compiled with `options`: kernels with their parameter ABI,
// temporaries, the plan in words, the cost model's estimates for the plan that ships, the
// stitched plan and each baseline model on the target's device (those of `result`), which
// plan shipped, the compile time and the compiler version. format_version and digest are
// left for the cache to seal.
v1::KernelBundle ToBundle(const CompileResult& result, const CompileOptions& options);

}  // namespace stitch
