#include <algorithm>

#include "dtype_lowering.h"
#include "elemental_emitter.h"
#include "emitters.h"

namespace stitch::codegen {

StatusOr<EmittedNest> EmitLoopKernel(KernelContext& kc, bool allow_tile) {
  const Graph& g = kc.graph;
  if (allow_tile && kc.spec.mapping.transpose_tile >= 0 && !kc.Varies(kc.spec.outputs[0])) {
    return EmitTransposeTileKernel(kc);
  }
  const int64_t n = g.nodes[kc.spec.outputs[0]].shape.elements();
  for (int out : kc.spec.outputs) {
    if (g.nodes[out].shape.elements() != n) {
      return InvalidArgument("loop kernel " + kc.spec.name + ": output " + DescribeNode(g, out) +
                             " has a different element count from the first output");
    }
  }
  // A thread handles `width` consecutive elements per pass; their accesses to full-size
  // buffers sit side by side at a multiple of the width from an aligned base, which lets the
  // backend's load/store vectorizer turn them into vector accesses.
  const int64_t width = std::max(kc.spec.mapping.vector_width, 1);
  // A shape-generic kernel's vectors must tile the elements of one extent, so that they
  // tile the outputs at every extent.
  const bool varies = kc.Varies(kc.spec.outputs[0]);
  const int64_t tiled = varies ? n / kc.shape_class->extent : n;
  if (tiled % width != 0) {
    return InvalidArgument("loop kernel " + kc.spec.name + ": vector width " +
                           std::to_string(width) + " does not divide its " + std::to_string(tiled) +
                           " elements" + (varies ? " per extent" : ""));
  }
  EmittedNest nest;
  nest.launch = kc.spec.mapping.launch;
  llvm::IRBuilder<>& b = kc.b;
  ElementalEmitter em(kc);
  llvm::Value* start = b.CreateAdd(b.CreateMul(BlockIdx(kc, Dim::kX), BlockDim(kc, Dim::kX)),
                                   ThreadIdx(kc, Dim::kX));
  llvm::Value* step = b.CreateMul(GridDim(kc, Dim::kX), BlockDim(kc, Dim::kX));
  STITCH_RETURN_IF_ERROR(EmitForLoop(
      kc, "vec", start, kc.RunCount(n / width, varies), step, [&](llvm::Value* q) -> Status {
        em.ResetScope();
        const std::vector<llvm::Value*> indices =
            em.VectorLanes(b.CreateMul(q, kc.Index(width), "", true, true), width);
        // Every load of the vector first, so they are in flight together.
        em.EmitLoads(kc.spec.outputs, indices);
        for (size_t o = 0; o < kc.spec.outputs.size(); ++o) {
          const int out = kc.spec.outputs[o];
          std::vector<llvm::Value*> values;
          for (llvm::Value* i : indices) {
            STITCH_ASSIGN_OR_RETURN(llvm::Value * v, em.Emit(out, IrIndex{{}, i}));
            values.push_back(v);
          }
          // The stores follow all of the output's loads, so nothing separates adjacent ones.
          std::vector<ElementStore> stores;
          for (size_t e = 0; e < indices.size(); ++e) {
            stores.push_back(
                {g.nodes[out].shape.dtype, values[e], kc.output_buffers[o], indices[e]});
          }
          StoreElements(b, stores);
        }
        return Status::Ok();
      }));
  return nest;
}

}  // namespace stitch::codegen
