// Turns a compile result into the kernel bundle the cache stores and jobs load.
//
// Thread-safety: pure function.
#pragma once

#include "stitch/driver/compile.h"
#include "stitch/ir/graph.h"
#include "stitch/v1/kernel_bundle.pb.h"

namespace stitch {

// Returns the bundle for `result`, compiled from the verified graph `g` with `options`:
// kernels with their parameter ABI, temporaries, the plan in words, the cost model's
// estimates for the plan and for the XLA-style baseline on the target's device (those of
// `result`), the compile time and the compiler version. format_version and digest are left for the
// cache to seal.
v1::KernelBundle ToBundle(const Graph& g, const CompileResult& result,
                          const CompileOptions& options);

}  // namespace stitch
