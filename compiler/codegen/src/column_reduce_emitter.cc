#include <algorithm>
#include <tuple>

#include "emitters.h"
#include "reduction.h"

namespace stitch::codegen {

StatusOr<EmittedNest> EmitColumnReduceKernel(KernelContext& kc) {
  STITCH_ASSIGN_OR_RETURN(ReducePlan plan, AnalyzeReduceKernel(kc));
  const ReduceGeometry& geo = plan.geometry;
  const ThreadMapping& cfg = kc.spec.mapping;
  EmittedNest nest;
  nest.launch = cfg.launch;
  const int tile_y = cfg.column_tile_y;
  const int64_t chunks = std::max(cfg.reduce_chunks, 1);
  llvm::IRBuilder<>& b = kc.b;
  PartialArrays arrays;
  if (chunks > 1) {
    STITCH_ASSIGN_OR_RETURN(arrays, LayoutPartials(kc, plan, chunks));
    nest.workspace_end = arrays.end_offset;
  }
  for (auto& r : plan.reduces) {
    llvm::Type* st = SharedType(r.acc_ty);
    // Row ty of the tile holds thread (tx, ty)'s partial at [ty * 32 + tx]: both the writes
    // and the column walk of the final step touch 32 consecutive slots (no bank conflicts).
    r.smem = SharedArray(kc, st, 32 * static_cast<uint64_t>(tile_y), "column_partials");
    nest.shared_bytes +=
        static_cast<uint32_t>(kc.module.getDataLayout().getTypeAllocSize(st) * 32 * tile_y);
  }
  ElementalEmitter em(kc);
  llvm::Value* tx = ThreadIdx(kc, Dim::kX);
  llvm::Value* ty = ThreadIdx(kc, Dim::kY);
  llvm::Value* slot = b.CreateAdd(b.CreateMul(ty, kc.Index(32)), tx);
  llvm::Value* kept = KeptCount(kc, geo);
  llvm::Value* tiles = b.CreateUDiv(b.CreateAdd(kept, kc.Index(31)), kc.Index(32));
  // A work item is a tile of 32 kept columns and, when split, one chunk of its rows.
  STITCH_RETURN_IF_ERROR(EmitForLoop(
      kc, "tile", BlockIdx(kc, Dim::kX), b.CreateMul(tiles, kc.Index(chunks)), GridDim(kc, Dim::kX),
      [&](llvm::Value* item) -> Status {
        llvm::Value* tile = chunks > 1 ? b.CreateURem(item, tiles) : item;
        llvm::Value* chunk = chunks > 1 ? b.CreateUDiv(item, tiles) : kc.Index(0);
        llvm::Value* k = b.CreateAdd(b.CreateMul(tile, kc.Index(32)), tx);
        llvm::Value* valid = b.CreateICmpSLT(k, kept);
        llvm::Value* lo = kc.Index(0);
        llvm::Value* hi = ReducedCount(kc, geo);
        if (chunks > 1) std::tie(lo, hi) = ChunkRange(kc, hi, chunks, chunk);
        InitAccumulators(kc, plan.reduces);
        // Threads past the last output skip the loads but still take part in barriers.
        llvm::Value* end = b.CreateSelect(valid, hi, kc.Index(0));
        STITCH_RETURN_IF_ERROR(EmitAccumulateLoop(kc, em, plan, k, b.CreateAdd(lo, ty), end, tile_y,
                                                  cfg.loads_per_step, "red"));
        for (auto& r : plan.reduces) {
          llvm::Type* st = SharedType(r.acc_ty);
          b.CreateStore(ToShared(b, b.CreateLoad(r.acc_ty, r.acc)),
                        b.CreateInBoundsGEP(st, r.smem, {slot}));
        }
        Barrier(kc);
        llvm::Value* writer = b.CreateAnd(valid, b.CreateICmpEQ(ty, kc.Index(0)));
        STITCH_RETURN_IF_ERROR(EmitIf(kc, "combine", writer, [&]() -> Status {
          std::vector<llvm::Value*> partials;
          for (auto& r : plan.reduces) {
            llvm::Type* st = SharedType(r.acc_ty);
            llvm::Value* acc = nullptr;
            for (int i = 0; i < tile_y; ++i) {
              llvm::Value* p = b.CreateInBoundsGEP(st, r.smem, {b.CreateAdd(tx, kc.Index(32 * i))});
              llvm::Value* v = FromShared(b, b.CreateLoad(st, p), r.acc_ty);
              acc = acc ? Combine(b, r, acc, v) : v;
            }
            partials.push_back(acc);
          }
          if (chunks > 1) {
            StorePartials(kc, plan, arrays, partials, chunk, k);
            return Status::Ok();
          }
          return WriteReduceOutputs(kc, em, plan, partials, k);
        }));
        // The next tile reuses the partial slots.
        Barrier(kc);
        return Status::Ok();
      }));
  if (chunks > 1) STITCH_RETURN_IF_ERROR(EmitCombinePartials(kc, em, plan, arrays));
  return nest;
}

}  // namespace stitch::codegen
