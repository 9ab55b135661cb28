#include <algorithm>
#include <string>
#include <tuple>

#include "emitters.h"
#include "reduction.h"

namespace stitch::codegen {
namespace {

// The vectors of `width` reduced elements a row holds (its elements, for a width of 1).
llvm::Value* ReducedVectors(KernelContext& kc, const ReduceGeometry& geo, int64_t width) {
  llvm::Value* reduced = ReducedCount(kc, geo);
  return width > 1 ? kc.b.CreateUDiv(reduced, kc.Index(width)) : reduced;
}

// Rows of `lanes` lanes each, several rows per warp (EmitWarpRowLoop).
Status EmitWarpRows(KernelContext& kc, ElementalEmitter& em, ReducePlan& plan,
                    const ThreadMapping& cfg) {
  llvm::IRBuilder<>& b = kc.b;
  const ReduceGeometry& geo = plan.geometry;
  const int lanes = cfg.threads_per_row;
  const int64_t width = std::max(cfg.vector_width, 1);
  const WarpRowBody row_body = [&](llvm::Value* row, llvm::Value* valid, llvm::Value* seg) {
    InitAccumulators(kc, plan.reduces);
    llvm::Value* end = b.CreateSelect(valid, ReducedVectors(kc, geo, width), kc.Index(0));
    STITCH_RETURN_IF_ERROR(
        EmitAccumulateLoop(kc, em, plan, row, seg, end, lanes, cfg.loads_per_step, "col", width));
    std::vector<llvm::Value*> partials;
    for (auto& r : plan.reduces) {
      partials.push_back(WarpReduce(kc, r, b.CreateLoad(r.acc_ty, r.acc), lanes));
    }
    llvm::Value* writer = b.CreateAnd(valid, b.CreateICmpEQ(seg, kc.Index(0)));
    return EmitIf(kc, "write", writer,
                  [&] { return WriteReduceOutputs(kc, em, plan, partials, row); });
  };
  return EmitWarpRowLoop(kc, KeptCount(kc, geo), lanes, cfg.launch.block[1], row_body);
}

// One block per row (or, split, per chunk of a row): threads stride over the row, warps
// reduce by shuffles, warp results meet in shared memory and the first warp reduces them.
Status EmitBlockRows(KernelContext& kc, ElementalEmitter& em, ReducePlan& plan,
                     const ThreadMapping& cfg, const PartialArrays* split, uint32_t& shared_bytes) {
  llvm::IRBuilder<>& b = kc.b;
  const ReduceGeometry& geo = plan.geometry;
  const int warps = static_cast<int>(cfg.launch.block[0] / 32);
  const int threads = warps * 32;
  for (auto& r : plan.reduces) {
    llvm::Type* st = SharedType(r.acc_ty);
    r.smem = SharedArray(kc, st, warps, "row_partials");
    shared_bytes += static_cast<uint32_t>(kc.module.getDataLayout().getTypeAllocSize(st) * warps);
  }
  llvm::Value* tid = ThreadIdx(kc, Dim::kX);
  llvm::Value* lane = b.CreateURem(tid, kc.Index(32));
  llvm::Value* warp = b.CreateUDiv(tid, kc.Index(32));
  const int64_t chunks = split ? split->chunks : 1;
  const int64_t width = std::max(cfg.vector_width, 1);
  // A work item is a row and, when split, one chunk of it; a row's chunks are adjacent.
  return EmitForLoop(
      kc, "row", BlockIdx(kc, Dim::kX), b.CreateMul(KeptCount(kc, geo), kc.Index(chunks)),
      GridDim(kc, Dim::kX), [&](llvm::Value* item) -> Status {
        llvm::Value* row = split ? b.CreateUDiv(item, kc.Index(chunks)) : item;
        llvm::Value* chunk = split ? b.CreateURem(item, kc.Index(chunks)) : kc.Index(0);
        // Chunks are whole vectors.
        llvm::Value* lo = kc.Index(0);
        llvm::Value* hi = ReducedVectors(kc, geo, width);
        if (split) std::tie(lo, hi) = ChunkRange(kc, hi, chunks, chunk);
        InitAccumulators(kc, plan.reduces);
        STITCH_RETURN_IF_ERROR(EmitAccumulateLoop(kc, em, plan, row, b.CreateAdd(lo, tid), hi,
                                                  threads, cfg.loads_per_step, "col", width));
        std::vector<llvm::Value*> warp_results;
        for (auto& r : plan.reduces) {
          warp_results.push_back(WarpReduce(kc, r, b.CreateLoad(r.acc_ty, r.acc), 32));
        }
        STITCH_RETURN_IF_ERROR(
            EmitIf(kc, "lane0", b.CreateICmpEQ(lane, kc.Index(0)), [&]() -> Status {
              for (size_t i = 0; i < plan.reduces.size(); ++i) {
                const auto& r = plan.reduces[i];
                llvm::Type* st = SharedType(r.acc_ty);
                b.CreateStore(ToShared(b, warp_results[i]),
                              b.CreateInBoundsGEP(st, r.smem, {warp}));
              }
              return Status::Ok();
            }));
        Barrier(kc);
        STITCH_RETURN_IF_ERROR(
            EmitIf(kc, "warp0", b.CreateICmpEQ(warp, kc.Index(0)), [&]() -> Status {
              llvm::Value* has = b.CreateICmpSLT(lane, kc.Index(warps));
              llvm::Value* slot = b.CreateSelect(has, lane, kc.Index(0));
              std::vector<llvm::Value*> partials;
              for (auto& r : plan.reduces) {
                llvm::Type* st = SharedType(r.acc_ty);
                llvm::Value* v = FromShared(
                    b, b.CreateLoad(st, b.CreateInBoundsGEP(st, r.smem, {slot})), r.acc_ty);
                v = b.CreateSelect(has, v, Identity(b, r));
                partials.push_back(WarpReduce(kc, r, v, 32));
              }
              return EmitIf(kc, "write", b.CreateICmpEQ(lane, kc.Index(0)), [&]() -> Status {
                if (split) {
                  StorePartials(kc, plan, *split, partials, chunk, row);
                  return Status::Ok();
                }
                return WriteReduceOutputs(kc, em, plan, partials, row);
              });
            }));
        // The next row reuses the partial slots.
        Barrier(kc);
        return Status::Ok();
      });
}

}  // namespace

StatusOr<EmittedNest> EmitRowReduceKernel(KernelContext& kc) {
  STITCH_ASSIGN_OR_RETURN(ReducePlan plan, AnalyzeReduceKernel(kc));
  const ThreadMapping& cfg = kc.spec.mapping;
  if (!ReducedVectorWidthFits(plan.geometry, std::max(cfg.vector_width, 1))) {
    return InvalidArgument("row reduce kernel " + kc.spec.name + ": vectors of " +
                           std::to_string(cfg.vector_width) +
                           " reduced elements are not consecutive elements of its input " +
                           DescribeNode(kc.graph, plan.reduces[0].input));
  }
  EmittedNest nest;
  nest.launch = cfg.launch;
  ElementalEmitter em(kc);
  if (cfg.reduce_chunks > 1) {
    if (cfg.threads_per_row <= 32) {
      return InvalidArgument("kernel " + kc.spec.name +
                             ": a split row reduction needs a block per row chunk");
    }
    STITCH_ASSIGN_OR_RETURN(PartialArrays arrays, LayoutPartials(kc, plan, cfg.reduce_chunks));
    nest.workspace_end = arrays.end_offset;
    STITCH_RETURN_IF_ERROR(EmitBlockRows(kc, em, plan, cfg, &arrays, nest.shared_bytes));
    STITCH_RETURN_IF_ERROR(EmitCombinePartials(kc, em, plan, arrays));
  } else if (cfg.threads_per_row > 32) {
    STITCH_RETURN_IF_ERROR(EmitBlockRows(kc, em, plan, cfg, nullptr, nest.shared_bytes));
  } else {
    STITCH_RETURN_IF_ERROR(EmitWarpRows(kc, em, plan, cfg));
  }
  return nest;
}

}  // namespace stitch::codegen
