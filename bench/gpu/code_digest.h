// The digest of a plan's code, which tells the kernels a measured set timed from the ones a
// checkout compiles: 64-bit FNV-1a over each kernel's name and PTX in plan order, as 16 hex
// digits. PTX, not the cubin: the same PTX is the same kernel whichever ptxas assembles it,
// and it holds what a cubin's size, launch and registers may not show, such as the chunk
// count of a split reduction, an immediate. gpu_bench writes it per plan (stitch_code,
// baseline_code, inductor_code) and cost_model_price per row (code); the calibration and the
// residual trainer leave out a plan whose digests differ (tools/train_cost_residual.py).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "stitch/codegen/codegen.h"

namespace stitch::gpu {

// Returns the digest of `kernels`, or "" when none has PTX (nothing to tell them by).
inline std::string CodeDigest(const std::vector<CompiledKernel>& kernels) {
  uint64_t h = 14695981039346656037ull;
  bool any = false;
  auto mix = [&h](std::string_view bytes) {
    for (unsigned char c : bytes) {
      h ^= c;
      h *= 1099511628211ull;
    }
    // A separator, so that ("ab", "c") and ("a", "bc") differ.
    h ^= 0xff;
    h *= 1099511628211ull;
  };
  for (const CompiledKernel& k : kernels) {
    any = any || !k.ptx.empty();
    mix(k.name);
    mix(k.ptx);
  }
  if (!any) return "";
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

}  // namespace stitch::gpu
