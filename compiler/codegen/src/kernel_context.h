// State shared by the emitters while one kernel function is being built, and the small IR
// helpers they all use (thread geometry, loops, barriers).
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <array>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/codegen/codegen.h"
#include "stitch/ir/graph.h"
#include "stitch/ir/shape_class.h"
#include "stitch/plan/plan.h"

namespace stitch::codegen {

struct KernelContext {
  const Graph& graph;
  const KernelSpec& spec;
  const CodegenOptions& options;
  llvm::LLVMContext& ctx;
  llvm::Module& module;
  llvm::Function* fn = nullptr;
  llvm::IRBuilder<>& b;
  // Input node id -> the kernel parameter holding its buffer.
  std::unordered_map<int, llvm::Value*> buffers;
  // The parameter of each entry of spec.outputs, in order.
  std::vector<llvm::Value*> output_buffers;
  // i32 when every tensor the kernel touches is small enough, else i64. Index values are
  // non-negative and treated as signed.
  llvm::IntegerType* index_ty = nullptr;
  // Phases of a kGlobalStitch kernel run in a one-dimensional physical block of
  // x * y threads and see it as this logical (x, y) block; {0, 0} means the physical one.
  std::array<uint32_t, 2> logical_block = {0, 0};
  // The kernel's workspace parameter (codegen.h), null when it has none, and the byte
  // offset in it where this emitter may put its partial results.
  llvm::Value* workspace = nullptr;
  uint64_t workspace_offset = 0;
  // A shape-generic kernel (shape_class.h): the graph's shape class, whose extent is the
  // bucket's top (the sizes in `graph`), and the run's extent, a kernel argument in
  // index_ty. Both null for an exact kernel.
  const ShapeClass* shape_class = nullptr;
  llvm::Value* outer_extent = nullptr;
  // Per graph node: whether its division and exp may be approximate (div.approx.f32,
  // ex2.approx.f32; CodegenOptions::approximate_math).
  std::vector<bool> approximate_math = {};

  llvm::Value* Index(int64_t v) const { return llvm::ConstantInt::get(index_ty, v); }
  // Whether `node`'s division and exp may be approximate; false for a node the table lacks.
  bool ApproximateMath(int node) const {
    return node >= 0 && static_cast<size_t>(node) < approximate_math.size() &&
           approximate_math[static_cast<size_t>(node)];
  }
  // Whether dimension 0 of `node` follows the run's extent.
  bool Varies(int node) const { return shape_class != nullptr && shape_class->Varies(node); }
  // Returns `count`, a count taken from the graph's sizes, at the run's extent: when it
  // counts along a varying dimension 0 (`varies`) it is scaled from the top extent to the
  // run's, otherwise it is the constant itself.
  llvm::Value* RunCount(int64_t count, bool varies);
};

enum class Dim { kX, kY, kZ };

// Returns threadIdx / blockDim / blockIdx / gridDim along `d`, widened to the index type.
// threadIdx and blockDim follow kc.logical_block when it is set.
llvm::Value* ThreadIdx(KernelContext& kc, Dim d);
llvm::Value* BlockDim(KernelContext& kc, Dim d);
llvm::Value* BlockIdx(KernelContext& kc, Dim d);
llvm::Value* GridDim(KernelContext& kc, Dim d);

// Returns the thread's linear index in its block (x + y * blockDim.x).
llvm::Value* LinearThreadIdx(KernelContext& kc);

// Emits a block-wide barrier (bar.sync 0).
void Barrier(KernelContext& kc);

// Emits `for (i = start; i < end; i += step) body(i)` (signed compare) at the builder's
// insertion point and leaves the builder after the loop. `body` runs with the builder in
// the loop body and may create further blocks.
Status EmitForLoop(KernelContext& kc, const char* name, llvm::Value* start, llvm::Value* end,
                   llvm::Value* step, const std::function<Status(llvm::Value*)>& body);

// As above, and sets `*exit_value` (when given) to the induction variable's value after the
// loop: the first i not below `end`, where a following loop picks up. Without `unrollable`
// the loop carries llvm.loop.unroll.disable: its body is unrolled already, or it runs too few
// times to gain, and unrolling it again only grows the code LLVM and ptxas compile.
Status EmitForLoop(KernelContext& kc, const char* name, llvm::Value* start, llvm::Value* end,
                   llvm::Value* step, const std::function<Status(llvm::Value*)>& body,
                   llvm::Value** exit_value, bool unrollable = true);

// Emits `if (cond) then()` and leaves the builder after it.
Status EmitIf(KernelContext& kc, const char* name, llvm::Value* cond,
              const std::function<Status()>& then);

// Returns an alloca in the entry block (so the optimiser promotes it to a register).
llvm::AllocaInst* EntryAlloca(KernelContext& kc, llvm::Type* ty, const char* name);

// Returns an uninitialised (undef) addrspace(3) array of `count` elements of `ty`.
llvm::GlobalVariable* SharedArray(KernelContext& kc, llvm::Type* ty, uint64_t count,
                                  const char* name);

// Returns the kernel's dynamic shared memory (`extern __shared__`): an i8 array, 16-byte
// aligned, whose size the launch gives (CompiledKernel::dynamic_shared_bytes). Declared once
// per module.
llvm::GlobalVariable* DynamicSharedMemory(KernelContext& kc);

// Returns a description of node `id` for error messages: "node 12 'add.3' (add)".
std::string DescribeNode(const Graph& g, int id);

}  // namespace stitch::codegen
