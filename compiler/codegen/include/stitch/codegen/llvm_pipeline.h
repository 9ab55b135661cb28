// The LLVM pieces that both codegen and the host emulator use. This header names LLVM
// types, so only layers that link LLVM themselves include it.
//
// Thread safety: RunModulePipeline touches only `module` and reads `machine`; calls on
// different modules may run concurrently.
#pragma once

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

// For kernels too large for the NVPTX backend's optimising IR passes: casts every kernel
// pointer parameter to the global address space (as the backend's argument lowering does),
// infers the address space of every access from it and merges adjacent accesses into vector
// ones. Keeps what those two backend passes give, loads and stores that are global and as
// wide as the emitters laid them out, at a cost linear in the kernel's size.
void RunGlobalAccessPasses(llvm::Module& module, llvm::TargetMachine* machine);

}  // namespace stitch::codegen
