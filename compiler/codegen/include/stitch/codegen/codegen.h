// LLVM codegen: one kernel of a fusion plan to an LLVM module for nvptx64-nvidia-cuda,
// then to PTX (in-process, LLVM's NVPTX backend) and to cubin (nvJitLink or ptxas, where
// the CUDA toolkit exists).
//
// The module a kernel is emitted as ("portable IR") is the contract with the host
// emulator, which rewrites the same module for the host:
//   * one kernel function per module, named CompiledKernel::name, marked as a kernel
//     (nvvm.annotations), returning void; every parameter is an opaque `ptr` in
//     address space 0 to one buffer (CompiledKernel::param_nodes), but for a shape-generic
//     kernel's last one, the outer extent (an i64; CompiledKernel::takes_outer_extent);
//   * thread geometry comes only from llvm.nvvm.read.ptx.sreg.{tid,ntid,ctaid,nctaid}.*;
//   * block barriers are llvm.nvvm.barrier0 (llvm.nvvm.barrier0.or where the block needs
//     one thread's answer); warp exchanges are llvm.nvvm.shfl.sync.* with a full mask;
//   * blocks that hand results to each other without a grid barrier (a split reduction's
//     last block, grid_barrier.h: EmitLastArrival) use atomicrmw on global memory between
//     llvm.nvvm.membar.gl fences;
//   * shared memory is module globals in addrspace(3) of static size;
//   * math functions are calls to libdevice names (__nv_expf, ...) left as declarations;
//     LowerToPtx links libdevice or, without the toolkit, stitch's own definitions;
//   * f16 values use LLVM `half` (fpext/fptrunc); bf16 is handled as i16 bits;
//   * machine functions (llvm_pipeline.h): f32 to bf16 rounding and f32 max and min are
//     calls to `stitch.f32.to.bf16`, `stitch.f32.max` and `stitch.f32.min`, left as
//     declarations; LowerToPtx and the emulator each define them for their machine;
//   * a grid-wide barrier (AStitch's "global" scheme) is a call to
//     `declare void @stitch.grid.sync(ptr %workspace)`, marked convergent. %workspace
//     points to 4 bytes of global memory, 4-byte aligned: a u32 whose low 31 bits count
//     the blocks that have arrived and whose top bit is the barrier's phase. The host
//     zero-fills it once before the first launch (the phase may hold anything; the count
//     must be 0); every barrier leaves the count at 0 and flips the phase, so later
//     barriers of the launch and later launches reuse it
//     as it is (after an aborted launch, zero it again). Launches that may run at the same
//     time need separate workspaces. Every thread of every block calls it the same number
//     of times, and the grid must be no larger than what can be co-resident on the GPU (a
//     persistent grid), or it hangs. Global memory written by any thread before the call
//     is visible to every thread after it. LowerToPtx gives it its device body and drops
//     `noalias` from the writable parameters of a kernel that calls it; the emulator runs
//     such a kernel's blocks at once.
//
// Thread-safety: every function here may be called concurrently; each call builds its
// own LLVMContext.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/ir/graph.h"
#include "stitch/ir/shape_class.h"
#include "stitch/plan/plan.h"
#include "stitch/plan/target.h"

namespace stitch {

struct CodegenOptions {
  Target target;  // also the cache key's target (compile.h)
  // libdevice bitcode; empty means "use stitch's own math definitions" (PTX-only mode).
  std::string libdevice_path = DefaultLibdevicePath();
  // ptxas binary used when nvJitLink is not linked in; empty disables cubin.
  std::string ptxas_path = DefaultPtxasPath();
  bool emit_cubin = true;
  // Assemble with the ptxas binary when it is executable, nvJitLink otherwise. ptxas
  // assembles the kernel as a whole program; nvJitLink's path compiles it as relocatable
  // code first, which costs registers (on an H100: 48 against 32 for a layernorm row kernel,
  // 96 against 80 for an elementwise one). Tests turn it off to cover nvJitLink.
  bool prefer_ptxas = true;
  // Where f32 compute divides (a kDiv, and the logistic's 1 / (1 + e^-x)) with
  // div.approx.ftz.f32 and takes e^x as ex2.approx.ftz.f32(x * log2(e)) (subnormals flushed,
  // as no f16 or bf16 output can tell: DefineFlushToZeroApproximations): 2 ulp for
  // the division, against IEEE division's dozen instructions and slow-path subroutine, which
  // cost registers and local memory; 2^-22 plus the product's rounding (|x| x 2^-24) for the
  // exp, against libdevice's range reduction, about ten instructions; and erf as a quotient
  // of polynomials over that division, within 4e-7 plus the division's 2 ulp, against
  // libdevice's two branches, which ptxas predicates into both coefficient sets an element
  // (approximate_erf.h; suite row #11's GELU gradient, 49 instructions an element to 38).
  // kWhereOutputsAreHalf, the default, takes them for a node whose value reaches only f16 and
  // bf16 outputs, whose own rounding leaves room; a node that reaches an f32 or f64 output
  // stays exact, since cancellation downstream can amplify the error past the f32 tolerance
  // (suite row #19's batch-norm swish gradient in f32 misses it 3x at the division's bound;
  // suite_approximate_math_test). kAlways is for that test. rsqrt is always rsqrt.approx.f32
  // (2^-22.9, once per row in the normalizations that use it), which every suite row meets
  // in f32 at the bound.
  enum class ApproximateMath { kNever, kWhereOutputsAreHalf, kAlways };
  ApproximateMath approximate_math = ApproximateMath::kWhereOutputsAreHalf;
  // LowerToPtx computes each multiply whose one use is an add or subtract, with it, as one
  // fused multiply-add, rounded once (ContractSingleUseProducts in llvm_pipeline.h), as XLA,
  // Triton and nvcc do: suite row #19's loop 103 SASS instructions per four elements to 83.
  // The compile driver lowers a kernel again without it where the fused one spills or sits
  // within a register allocation unit of another block per SM, and keeps the unfused one if
  // it spills less or fits more blocks (compile.h).
  bool contract_products = true;

  // Returns the paths found when stitchd was built (empty when the toolkit was absent).
  static std::string DefaultLibdevicePath();
  static std::string DefaultPtxasPath();
};

struct CompiledKernel {
  std::string name;
  KernelKind kind = KernelKind::kLoop;
  LaunchDims launch;
  uint32_t shared_bytes = 0;  // static shared memory per block
  // Dynamic shared memory per block: launch with this many bytes, which above 48 KiB needs the
  // function's MAX_DYNAMIC_SHARED_SIZE_BYTES attribute set first (cuFuncSetAttribute). 0: none.
  uint32_t dynamic_shared_bytes = 0;
  // The buffer behind each kernel parameter, by graph node index: the spec's inputs in
  // order, then its outputs in order. Each buffer must be 16-byte aligned (cudaMalloc's
  // are 256-byte aligned): kernels load and store up to 16 bytes at once.
  std::vector<int> param_nodes;
  // Scratch global memory the kernel needs (grid-barrier words, partial results of split
  // reductions and their arrival counters); 0 for none. When nonzero the kernel takes one
  // more `ptr` parameter after those of param_nodes: a buffer of this many bytes, 256-byte
  // aligned, zero-filled by the host before the kernel's first launch. Later launches may
  // reuse it as it is, one launch at a time (every launch leaves its barrier words and
  // counters as it found them).
  uint64_t workspace_bytes = 0;
  // The kernel has grid barriers (it calls stitch.grid.sync; it then has a workspace): its
  // grid must be co-resident, so hosts launch it cooperatively (cuLaunchCooperativeKernel),
  // which fails cleanly instead of hanging when the grid does not fit. A kernel with a
  // workspace but no grid barrier (a split reduction whose last block combines) launches
  // like any other, at any grid size.
  bool cooperative = false;
  // Kernels of a shape-generic graph (shape_class.h) take the run's outer extent as their
  // last parameter, an i64 by value after every pointer (the workspace included): it bounds
  // their loops, and every size that follows it (ShapeClass::factor) is the run's. It must
  // lie in the bucket the kernel was compiled for; the launch dimensions serve all of it.
  bool takes_outer_extent = false;
  std::string portable_ir;  // LLVM bitcode of the portable module (see above)
  std::string ptx;          // filled by LowerToPtx
  std::string cubin;        // filled by AssembleCubin; empty in PTX-only mode
  // What the assembler reported for the cubin; all zero (and `reported` false) in PTX-only
  // mode or when the assembler said nothing. Stack and spills are local memory
  // per thread, which the emitters never ask for: nonzero means the kernel holds more
  // values than its registers.
  struct AssemblyReport {
    bool reported = false;
    int registers = 0;
    int stack_bytes = 0;
    int spill_store_bytes = 0;
    int spill_load_bytes = 0;
    // Machine instructions of the kernel's own code in the cubin: its function symbol's
    // bytes, less those of out-of-line subroutines that share its section (the slow paths
    // of division and the like), over 16 bytes per instruction (sm_70 and later). The
    // straight-line body of a pass is most of it, so the cost model reads it as the
    // instructions a warp issues per pass. 0 when the cubin could not be read.
    int instructions = 0;
  };
  AssemblyReport assembly;
};

// Emits the portable LLVM module for `spec`, a kernel scheduled for options.target's device
// (schedule.h): its launch dimensions are the mapping's. Returns INVALID_ARGUMENT for a
// malformed or unscheduled spec, UNIMPLEMENTED for an op the emitters do not handle, naming
// the node.
// For a shape-generic graph, `g` is at its bucket's top extent and `shape_class` is
// ClassifyShapes(g): the kernel then takes the run's extent (takes_outer_extent).
StatusOr<CompiledKernel> EmitKernel(const Graph& g, const KernelSpec& spec,
                                    const CodegenOptions& options,
                                    const ShapeClass* shape_class = nullptr);

// Optimises the portable module, links the math library and produces PTX in `kernel.ptx`.
Status LowerToPtx(CompiledKernel& kernel, const CodegenOptions& options);

// Assembles kernel.ptx into kernel.cubin for options.target with nvJitLink, or ptxas when
// nvJitLink is absent. Returns UNAVAILABLE when neither exists (PTX-only mode).
Status AssembleCubin(CompiledKernel& kernel, const CodegenOptions& options);

// Returns the machine instructions of kernel `name` in `cubin`, an ELF64 cubin: the bytes of
// its function symbol less those of the other function symbols inside it (out-of-line
// subroutines the assembler places after the kernel's exit), over 16 bytes per instruction,
// the encoding of sm_70 and later. 0 when `cubin` is not an ELF64 file or has no such
// symbol. AssembleCubin fills AssemblyReport::instructions with it.
int CubinInstructions(const std::string& cubin, const std::string& name);

// Returns true when AssembleCubin can work in this build and on this machine.
bool CubinAvailable(const CodegenOptions& options);

}  // namespace stitch
