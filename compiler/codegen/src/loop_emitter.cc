#include <llvm/IR/Intrinsics.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dtype_lowering.h"
#include "elemental_emitter.h"
#include "emitters.h"

namespace stitch::codegen {
namespace {

// The outermost dimension of `dims` (after the first) from which the trailing dimensions'
// product is `period`, or -1 where none is.
int PeriodStart(const std::vector<int64_t>& dims, int64_t period) {
  int64_t product = 1;
  for (int d = static_cast<int>(dims.size()) - 1; d >= 1; --d) {
    product *= dims[d];
    if (product == period) return d;
  }
  return -1;
}

// A thread keeps to the same columns only while the grid's stride is a multiple of the
// column period: a launch on any other grid traps rather than compute with another column's
// values.
Status EmitColumnPeriodGuard(KernelContext& kc, llvm::Value* stride_elements, int64_t period) {
  llvm::IRBuilder<>& b = kc.b;
  llvm::Value* off = b.CreateICmpNE(b.CreateURem(stride_elements, kc.Index(period)), kc.Index(0));
  return EmitIf(kc, "column_period.guard", off, [&] {
    b.CreateIntrinsic(llvm::Intrinsic::trap, {}, {});
    return Status::Ok();
  });
}

// Every output of a loop kernel has the first's element count, which `width` divides (for a
// shape-generic kernel, per extent, so that its vectors tile the outputs at every extent).
Status CheckLoopOutputs(const KernelContext& kc, int64_t n, int64_t width) {
  const Graph& g = kc.graph;
  for (int out : kc.spec.outputs) {
    if (g.nodes[out].shape.elements() != n) {
      return InvalidArgument("loop kernel " + kc.spec.name + ": output " + DescribeNode(g, out) +
                             " has a different element count from the first output");
    }
  }
  const bool varies = kc.Varies(kc.spec.outputs[0]);
  const int64_t tiled = varies ? n / kc.shape_class->extent : n;
  if (tiled % width != 0) {
    return InvalidArgument("loop kernel " + kc.spec.name + ": vector width " +
                           std::to_string(width) + " does not divide its " + std::to_string(tiled) +
                           " elements" + (varies ? " per extent" : ""));
  }
  return Status::Ok();
}

// A loop's column period (ThreadMapping::column_period): the first dimension it spans, and
// the thread's column indices within it, the same on every pass.
struct ColumnPeriod {
  int64_t period = 0;
  int first_dim = -1;
  std::vector<llvm::Value*> column_indices;
};

// With a column period the thread's columns are the same on every pass: their indices are
// computed here, once, and so is everything that depends on nothing else (LLVM hoists the
// per-column loads and math out of the loop). No period, no code.
StatusOr<ColumnPeriod> EmitColumnPeriod(KernelContext& kc, ElementalEmitter& em, llvm::Value* start,
                                        llvm::Value* step, int64_t width) {
  ColumnPeriod cp;
  cp.period = kc.spec.mapping.column_period;
  if (cp.period <= 0) return cp;
  const Shape& shape = kc.graph.nodes[kc.spec.outputs[0]].shape;
  const std::vector<int64_t>& dims = shape.dims;
  cp.first_dim = PeriodStart(dims, cp.period);
  const std::string what =
      "loop kernel " + kc.spec.name + ": column period " + std::to_string(cp.period);
  if (cp.first_dim < 0) {
    return InvalidArgument(what + " is not the product of trailing dimensions of its output " +
                           shape.ToString() + " (the outermost excluded)");
  }
  if (cp.period % width != 0) {
    return InvalidArgument(what + " is not a multiple of its vector width " +
                           std::to_string(width));
  }
  llvm::IRBuilder<>& b = kc.b;
  STITCH_RETURN_IF_ERROR(EmitColumnPeriodGuard(kc, b.CreateMul(step, kc.Index(width)), cp.period));
  llvm::Value* column = b.CreateURem(b.CreateMul(start, kc.Index(width)), kc.Index(cp.period));
  cp.column_indices = em.Delinearize(column, {dims.begin() + cp.first_dim, dims.end()});
  return cp;
}

// What every trip of a loop kernel shares: `vectors` vectors of `width` elements a trip,
// `step` vectors apart (the grid's threads), `count` vectors in all, and the column period.
struct LoopTrips {
  llvm::Value* step;
  llvm::Value* count;
  int64_t width;
  int64_t vectors;
  ColumnPeriod period;
};

// One trip of the loop at vector `q`: every load of all of its vectors issued before their
// math, so that a thread keeps that many in flight. A vector past the end is loaded from the
// trip's first one, whose address is in bounds, and not stored.
Status EmitLoopTrip(KernelContext& kc, ElementalEmitter& em, const LoopTrips& trips,
                    llvm::Value* q) {
  const ColumnPeriod& cp = trips.period;
  const int64_t width = trips.width;
  const Graph& g = kc.graph;
  llvm::IRBuilder<>& b = kc.b;
  const std::vector<int64_t>& dims = g.nodes[kc.spec.outputs[0]].shape.dims;
  em.ResetScope();
  std::vector<llvm::Value*> in_range = {b.getTrue()};
  std::vector<std::vector<llvm::Value*>> lanes;
  for (int64_t v = 0; v < trips.vectors; ++v) {
    llvm::Value* vector = q;
    if (v > 0) {
      llvm::Value* next = b.CreateAdd(q, b.CreateMul(trips.step, kc.Index(v)), "", true, true);
      in_range.push_back(b.CreateICmpSLT(next, trips.count));
      vector = b.CreateSelect(in_range.back(), next, q);
    }
    lanes.push_back(em.VectorLanes(b.CreateMul(vector, kc.Index(width), "", true, true), width));
    if (cp.period > 0) {
      std::vector<llvm::Value*> first =
          em.Delinearize(b.CreateUDiv(lanes.back()[0], kc.Index(cp.period)),
                         {dims.begin(), dims.begin() + cp.first_dim});
      first.insert(first.end(), cp.column_indices.begin(), cp.column_indices.end());
      em.SeedDelinearization(lanes.back()[0], dims, std::move(first));
    }
  }
  // Every load of every vector first, so they are in flight together.
  std::vector<llvm::Value*> indices;
  for (const std::vector<llvm::Value*>& l : lanes)
    indices.insert(indices.end(), l.begin(), l.end());
  em.EmitLoads(kc.spec.outputs, indices);
  for (size_t o = 0; o < kc.spec.outputs.size(); ++o) {
    const int out = kc.spec.outputs[o];
    std::vector<std::vector<ElementStore>> stores(lanes.size());
    for (size_t v = 0; v < lanes.size(); ++v) {
      for (llvm::Value* i : lanes[v]) {
        STITCH_ASSIGN_OR_RETURN(llvm::Value * value, em.Emit(out, IrIndex{{}, i}));
        stores[v].push_back({g.nodes[out].shape.dtype, value, kc.output_buffers[o], i});
      }
    }
    // The stores follow all of the output's loads, so nothing separates adjacent ones; a
    // vector past the end stores nothing.
    StoreElements(b, stores[0]);
    for (size_t v = 1; v < lanes.size(); ++v) {
      STITCH_RETURN_IF_ERROR(EmitIf(kc, "vec.in_range", in_range[v], [&] {
        StoreElements(b, stores[v]);
        return Status::Ok();
      }));
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<EmittedNest> EmitLoopKernel(KernelContext& kc, bool allow_tile) {
  if (allow_tile && kc.spec.mapping.transpose_tile >= 0 && !kc.Varies(kc.spec.outputs[0])) {
    return EmitTransposeTileKernel(kc);
  }
  const int64_t n = kc.graph.nodes[kc.spec.outputs[0]].shape.elements();
  // A thread handles `width` consecutive elements per pass; their accesses to full-size
  // buffers sit side by side at a multiple of the width from an aligned base, which lets the
  // backend's load/store vectorizer turn them into vector accesses.
  const int64_t width = std::max(kc.spec.mapping.vector_width, 1);
  STITCH_RETURN_IF_ERROR(CheckLoopOutputs(kc, n, width));
  EmittedNest nest;
  nest.launch = kc.spec.mapping.launch;
  llvm::IRBuilder<>& b = kc.b;
  ElementalEmitter em(kc);
  llvm::Value* start = b.CreateAdd(b.CreateMul(BlockIdx(kc, Dim::kX), BlockDim(kc, Dim::kX)),
                                   ThreadIdx(kc, Dim::kX));
  llvm::Value* step = b.CreateMul(GridDim(kc, Dim::kX), BlockDim(kc, Dim::kX));
  LoopTrips trips{step, nullptr, width, std::max(kc.spec.mapping.loads_per_step, 1), {}};
  STITCH_ASSIGN_OR_RETURN(trips.period, EmitColumnPeriod(kc, em, start, step, width));
  trips.count = kc.RunCount(n / width, kc.Varies(kc.spec.outputs[0]));
  llvm::Value* stride = trips.vectors > 1 ? b.CreateMul(step, kc.Index(trips.vectors)) : step;
  STITCH_RETURN_IF_ERROR(EmitForLoop(kc, "vec", start, trips.count, stride, [&](llvm::Value* q) {
    return EmitLoopTrip(kc, em, trips, q);
  }));
  return nest;
}

}  // namespace stitch::codegen
