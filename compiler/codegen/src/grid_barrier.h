// Synchronisation between the blocks of a grid. The grid-wide barrier of the portable-IR
// contract (codegen.h), for AStitch's "global" stitching scheme: stages of one kernel
// exchange values through global memory behind a barrier over every thread of a persistent
// grid. And a last-arrival counter, with which the last of several blocks takes over their
// results without any block waiting.
//
// Portable IR only calls `void @stitch.grid.sync(ptr %workspace)`; LowerToPtx gives it its
// device body (DefineGridBarrier) and the emulator maps it to its scheduler.
//
// Thread-safety: the functions act on the module or builder they are given only.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include "stitch/base/status.h"

namespace stitch::codegen {

struct KernelContext;

// The barrier's function name and its workspace: one u32 of arrivals (a count of the blocks
// that have arrived in its low 31 bits, a phase that flips with each barrier in its top
// bit), 4-byte aligned, zero-filled by the host once before the first launch.
inline constexpr char kGridBarrierFunction[] = "stitch.grid.sync";
inline constexpr uint64_t kGridBarrierWorkspaceBytes = 4;

// Returns the module's declaration of the barrier, adding it when missing.
llvm::Function* DeclareGridBarrier(llvm::Module& module);

// Emits a call to the barrier at the builder's insertion point. `workspace` is a pointer in
// any address space (cast to a generic pointer here).
llvm::CallInst* EmitGridBarrier(llvm::IRBuilder<>& b, llvm::Value* workspace);

// The same, for an emitter: every thread of every block of the kernel must reach the call
// the same number of times.
void GridBarrier(KernelContext& kc, llvm::Value* workspace);

// A counter in global memory at which `arrivals` blocks of a launch each arrive once (the
// blocks that split one column tile of a reduction, say): returns an i1 that is true, in
// every thread of the block, in the block that arrives last. Every thread of the block must
// call it at the same point. Global memory the block's threads wrote before the call is
// visible after it to the threads of the last block, which also reset the counter to 0 for
// the next launch. `counter` is a u32 in any address space (4-byte aligned, 0 before the
// first arrival). Unlike the grid barrier no block waits for another, so the grid need not
// be co-resident.
//
// It is plain portable IR (a block barrier with an OR of a predicate, one atomic add by the
// block's first thread between two llvm.nvvm.membar.gl), which the emulator runs as it is.
StatusOr<llvm::Value*> EmitLastArrival(KernelContext& kc, llvm::Value* counter,
                                       llvm::Value* arrivals);

// Gives a declared grid barrier its NVPTX body (bar.sync; thread (0,0,0) of each block
// arrives with one atomic add on the workspace, which flips the phase when the last block
// arrives, and spins until the phase flips; bar.sync), internal and always inlined,
// and drops `noalias` from the writable parameters of the functions that call it (values
// pass between threads through them across the call). A module without the barrier is left
// alone. Returns INVALID_ARGUMENT when the module defines the barrier itself or declares
// it with another type than `void (ptr)`.
Status DefineGridBarrier(llvm::Module& module);

}  // namespace stitch::codegen
