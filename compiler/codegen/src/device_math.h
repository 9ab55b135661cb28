// stitch's own definitions of the libdevice functions the emitters call, for PTX-only mode
// (no CUDA toolkit, hence no libdevice.10.bc). Accuracy is about 1e-7 relative in the
// normal range, which is what the tests' tolerances need; special values (NaN, infinities,
// zeros) follow C's libm.
#pragma once

#include <llvm/IR/Module.h>

#include "stitch/base/status.h"

namespace stitch::codegen {

// Gives a body to every declared `__nv_*` function of `m` with internal linkage. Returns
// UNIMPLEMENTED naming the first function stitch has no definition for.
Status DefineFallbackMath(llvm::Module& m);

}  // namespace stitch::codegen
