// A kernel assembled with and without fused multiply-adds, and how each fares, for the tests
// that check the compile driver's (and the mapping sweep's) choice between the two
// (AssembleKernel, stitch/driver/compile.h).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "stitch/codegen/codegen.h"
#include "stitch/driver/compile.h"
#include "stitch/plan/gpu_device.h"

namespace stitch::testing {

// How an assembled kernel of `mapping` fares on `device`: its local memory a thread, then its
// blocks per SM negated, so that the smaller pair is the better kernel.
inline std::pair<int, int> AssemblyCost(const CompiledKernel& kernel, ThreadMapping mapping,
                                        const GpuDevice& device) {
  mapping.registers_per_thread = kernel.assembly.registers;
  return {kernel.assembly.stack_bytes + kernel.assembly.spill_store_bytes,
          -ResidentBlocksPerSm(device, mapping)};
}

// `kernel` lowered and assembled again with fused multiply-adds and without.
struct ContractionForms {
  CompiledKernel fused;
  CompiledKernel unfused;
};

// Returns `kernel` emitted again both ways under `options`, or the first error.
inline StatusOr<ContractionForms> AssembleBothWays(const CompiledKernel& kernel,
                                                   const CodegenOptions& options) {
  ContractionForms forms{kernel, kernel};
  for (bool contract : {true, false}) {
    CodegenOptions o = options;
    o.contract_products = contract;
    CompiledKernel& k = contract ? forms.fused : forms.unfused;
    STITCH_RETURN_IF_ERROR(LowerToPtx(k, o));
    STITCH_RETURN_IF_ERROR(AssembleCubin(k, o));
  }
  return forms;
}

// Expects `assembled` (a kernel of `mapping` the driver or the sweep assembled) to be one of
// `forms`, never the worse of the two by AssemblyCost, and the fused one wherever that fares as
// well, as AssembleKernel chooses. Returns whether it is the fused one.
inline bool ExpectAssembledAsTheDriverChooses(const CompiledKernel& assembled,
                                              const ContractionForms& forms,
                                              const ThreadMapping& mapping, const GpuDevice& device,
                                              const std::string& what) {
  auto cost = [&](const CompiledKernel& k) { return AssemblyCost(k, mapping, device); };
  const bool fused = assembled.ptx == forms.fused.ptx;
  EXPECT_TRUE(fused || assembled.ptx == forms.unfused.ptx) << what;
  EXPECT_LE(cost(assembled), cost(forms.fused)) << what;
  EXPECT_LE(cost(assembled), cost(forms.unfused)) << what;
  EXPECT_EQ(fused, !(cost(forms.unfused) < cost(forms.fused))) << what;
  return fused;
}

}  // namespace stitch::testing
