// The LLVM pieces that both codegen and the host emulator use. This header names LLVM
// types, so only layers that link LLVM themselves include it.
//
// Thread safety: RunModulePipeline touches only `module` and reads `machine`; calls on
// different modules may run concurrently.
#pragma once

#include "stitch/base/status.h"

namespace llvm {
class Module;
class TargetMachine;
}  // namespace llvm

namespace stitch::codegen {

// The LLVM target triple every kernel module is built for.
inline constexpr char kNvptxTriple[] = "nvptx64-nvidia-cuda";

// How hard RunModulePipeline optimises: O3 for device code (ptxas optimises again), O2 for
// the emulator, whose JIT time counts against every test.
enum class PipelineLevel { kO2, kO3 };

// Runs LLVM's default per-module pipeline at `level` over `module`, with the passes
// `machine` registers (NVPTX adds NVVMReflect for libdevice at the start). Never fails;
// the caller verifies the module afterwards if it needs to.
void RunModulePipeline(llvm::Module& module, llvm::TargetMachine* machine, PipelineLevel level);

// Marks each floating-point multiply whose one use is an add or subtract, and that add, as
// contractable, so that the backend computes the pair as one fused multiply-add, rounded once
// (SEMANTICS.md), as XLA, Triton and nvcc do. Without it NVPTX writes mul.rn and add.rn, which
// ptxas may not fuse, and a layer norm's scale and shift or a swish gradient's terms take two
// instructions where the frameworks' kernels take one. A product with several uses stays a
// multiply: fused into each, it would keep both its factors live until the last, and the
// registers that costs took occupancy (#1) or spilled (#20's grid-barrier kernel). Run it
// after RunModulePipeline, whose value numbering can give a product more uses.
void ContractSingleUseProducts(llvm::Module& module);

// For kernels too large for the NVPTX backend's optimising IR passes: casts every kernel
// pointer parameter to the global address space (as the backend's argument lowering does),
// infers the address space of every access from it and merges adjacent accesses into vector
// ones. Keeps what those two backend passes give, loads and stores that are global and as
// wide as the emitters laid them out, at a cost linear in the kernel's size.
void RunGlobalAccessPasses(llvm::Module& module, llvm::TargetMachine* machine);

// The portable IR's machine functions (codegen.h): operations whose best form depends on the
// GPU. Kernels call them; each consumer of the portable IR gives them the bodies its machine
// runs best.
//   i16 @stitch.f32.to.bf16(float): the bf16 bits of an f32, rounded to nearest even, a NaN
//     kept a NaN;
//   float @stitch.f32.max(float, float), float @stitch.f32.min(float, float): a NaN when
//     either operand is one, else the larger (smaller) operand;
//   void @stitch.prefetch.l2(ptr): a hint that the bytes at an address in a global buffer
//     will be read soon, which changes no value.
inline constexpr char kBf16RoundingFunction[] = "stitch.f32.to.bf16";
inline constexpr char kF32MaxFunction[] = "stitch.f32.max";
inline constexpr char kF32MinFunction[] = "stitch.f32.min";
inline constexpr char kL2PrefetchFunction[] = "stitch.prefetch.l2";

// Gives each machine function `module` declares its body, internal and always inlined: where
// `native` (sm_80 and later), one instruction each (cvt.rn.bf16.f32, max.NaN.f32,
// min.NaN.f32, prefetch.global.L2); elsewhere the same results from compares, selects and the
// f32 bits, and no prefetch. The two differ only in a NaN's payload and in which zero a max or
// min of -0 and +0 returns.
// INVALID_ARGUMENT when the module defines one or declares it with another type.
Status DefineMachineFunctions(llvm::Module& module, bool native);

// Gives libdevice's approximate exp and division, where `module` declares them,
// flush-to-zero bodies: __nv_fast_expf(x) = ex2.approx.ftz.f32(x * log2(e)), and
// __nv_fast_fdividef(x, y) = x * rcp.approx.ftz.f32(y), the two instructions ptxas assembles
// div.approx.ftz.f32 into (MUFU.RCP, FMUL), written out so that LLVM takes the reciprocal of a
// loop-invariant divisor once, before the loop (suite row #19's per-channel divisions: four
// MUFU.RCP a trip of four elements), drops the multiply for a dividend of 1 and fuses it with
// an add that alone takes the quotient (ContractSingleUseProducts; the multiply is an ordinary
// one and keeps a subnormal dividend: only the reciprocal flushes). libdevice's own take the
// .ftz forms only under __nvvm_reflect("__CUDA_FTZ"), which would flush every libdevice function's
// subnormals; without it they keep subnormal arguments and results, which costs a compare, a
// select and two multiplies each in SASS (suite row #19's loop: 9 of its 35 instructions an
// element). Codegen calls them only for values that reach f16 and bf16 outputs alone
// (CodegenOptions::approximate_math), where no f32 subnormal survives the rounding; the
// emulator's host copies flush as these do. LowerToPtx calls it before linking libdevice,
// which then links neither. INVALID_ARGUMENT as DefineMachineFunctions.
Status DefineFlushToZeroApproximations(llvm::Module& module);

}  // namespace stitch::codegen
