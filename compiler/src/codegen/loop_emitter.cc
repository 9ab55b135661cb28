#include "dtype_lowering.h"
#include "elemental_emitter.h"
#include "emitters.h"

namespace stitch::codegen {

StatusOr<EmittedNest> EmitLoopKernel(KernelContext& kc) {
  const Graph& g = kc.graph;
  const int64_t n = g.nodes[kc.spec.outputs[0]].shape.elements();
  for (int out : kc.spec.outputs) {
    if (g.nodes[out].shape.elements() != n) {
      return InvalidArgument("loop kernel " + kc.spec.name + ": output " + DescribeNode(g, out) +
                             " has a different element count from the first output");
    }
  }
  EmittedNest nest;
  nest.launch = kc.spec.mapping.launch;
  llvm::IRBuilder<>& b = kc.b;
  ElementalEmitter em(kc);
  llvm::Value* start = b.CreateAdd(b.CreateMul(BlockIdx(kc, Dim::kX), BlockDim(kc, Dim::kX)),
                                   ThreadIdx(kc, Dim::kX));
  llvm::Value* step = b.CreateMul(GridDim(kc, Dim::kX), BlockDim(kc, Dim::kX));
  STITCH_RETURN_IF_ERROR(
      EmitForLoop(kc, "elem", start, kc.Index(n), step, [&](llvm::Value* i) -> Status {
        em.ResetScope();
        for (size_t o = 0; o < kc.spec.outputs.size(); ++o) {
          int out = kc.spec.outputs[o];
          STITCH_ASSIGN_OR_RETURN(llvm::Value * v, em.Emit(out, IrIndex{{}, i}));
          StoreElement(b, g.nodes[out].shape.dtype, v, kc.output_buffers[o], i);
        }
        return Status::Ok();
      }));
  return nest;
}

}  // namespace stitch::codegen
