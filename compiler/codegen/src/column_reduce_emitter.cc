#include <algorithm>
#include <functional>
#include <tuple>
#include <vector>

#include "emitters.h"
#include "grid_barrier.h"
#include "reduction.h"

namespace stitch::codegen {

StatusOr<EmittedNest> EmitColumnReduceKernel(KernelContext& kc) {
  STITCH_ASSIGN_OR_RETURN(ReducePlan plan, AnalyzeReduceKernel(kc));
  const ReduceGeometry& geo = plan.geometry;
  const ThreadMapping& cfg = kc.spec.mapping;
  EmittedNest nest;
  nest.launch = cfg.launch;
  const int tile_y = cfg.column_tile_y;
  // Each lane reduces `width` adjacent kept columns (the scheduler's width divides the
  // input's minor-most dimension), so a tile spans 32 x width columns and a lane's loads of
  // one row are adjacent: the vectoriser makes them one access.
  const int width = std::max(cfg.vector_width, 1);
  const int64_t tile_columns = 32 * static_cast<int64_t>(width);
  const int64_t chunks = std::max(cfg.reduce_chunks, 1);
  const bool last_block =
      chunks > 1 && cfg.split_combine == ThreadMapping::SplitCombine::kLastBlock;
  llvm::IRBuilder<>& b = kc.b;
  PartialArrays arrays;
  // Last-block combining: a u32 arrival counter per column tile, after the partials.
  llvm::Value* counters = nullptr;
  if (chunks > 1) {
    STITCH_ASSIGN_OR_RETURN(arrays, LayoutPartials(kc, plan, chunks));
    nest.workspace_end = arrays.end_offset;
    if (last_block) {
      counters = b.CreateConstInBoundsGEP1_64(b.getInt8Ty(), kc.workspace, arrays.end_offset);
      const uint64_t tiles_at_top =
          static_cast<uint64_t>((geo.kept + tile_columns - 1) / tile_columns);
      nest.workspace_end += 4 * tiles_at_top;
    }
  }
  for (auto& r : plan.reduces) {
    llvm::Type* st = SharedType(r.acc_ty);
    // Thread (tx, ty)'s partial of its column j is at [(ty * width + j) * 32 + tx]: the
    // writes of one j and the column walk of the final step touch 32 consecutive slots (no
    // bank conflicts).
    const uint64_t slots = static_cast<uint64_t>(tile_columns) * static_cast<uint64_t>(tile_y);
    r.smem = SharedArray(kc, st, slots, "column_partials");
    nest.shared_bytes +=
        static_cast<uint32_t>(kc.module.getDataLayout().getTypeAllocSize(st) * slots);
  }
  // One copy of the plan per column of a lane, each with accumulators of its own.
  std::vector<ReducePlan> lane_plans(static_cast<size_t>(width), plan);
  for (ReducePlan& p : lane_plans) {
    for (ReduceInfo& r : p.reduces) r.acc = nullptr;
  }
  ElementalEmitter em(kc);
  llvm::Value* tx = ThreadIdx(kc, Dim::kX);
  llvm::Value* ty = ThreadIdx(kc, Dim::kY);
  auto slot = [&](llvm::Value* y, int j) {
    return b.CreateAdd(
        b.CreateMul(b.CreateAdd(b.CreateMul(y, kc.Index(width)), kc.Index(j)), kc.Index(32)), tx);
  };
  // Combines the tile's rows of lane accumulators through shared memory: each thread stores
  // its columns' accumulators, and the threads of row 0 whose columns are `valid` sum the
  // tile's rows of them and pass the totals (per column, per reduce) to `finish`. Every
  // thread of the block calls it; the slots are free again when it returns, or, without
  // `free_slots`, after the next block barrier (the caller's).
  using TotalsFn = std::function<Status(std::vector<std::vector<llvm::Value*>>&)>;
  auto combine_rows = [&](llvm::Value* valid, const TotalsFn& finish,
                          bool free_slots = true) -> Status {
    for (int j = 0; j < width; ++j) {
      const std::vector<ReduceInfo>& lane = lane_plans[static_cast<size_t>(j)].reduces;
      for (size_t i = 0; i < lane.size(); ++i) {
        llvm::Type* st = SharedType(lane[i].acc_ty);
        b.CreateStore(ToShared(b, b.CreateLoad(lane[i].acc_ty, lane[i].acc)),
                      b.CreateInBoundsGEP(st, plan.reduces[i].smem, {slot(ty, j)}));
      }
    }
    Barrier(kc);
    llvm::Value* writer = b.CreateAnd(valid, b.CreateICmpEQ(ty, kc.Index(0)));
    STITCH_RETURN_IF_ERROR(EmitIf(kc, "combine", writer, [&]() -> Status {
      // Every column's totals first, then their stores side by side, which the vectoriser
      // merges.
      std::vector<std::vector<llvm::Value*>> totals(static_cast<size_t>(width));
      for (int j = 0; j < width; ++j) {
        for (auto& r : plan.reduces) {
          llvm::Type* st = SharedType(r.acc_ty);
          llvm::Value* acc = nullptr;
          for (int i = 0; i < tile_y; ++i) {
            llvm::Value* p = b.CreateInBoundsGEP(st, r.smem, {slot(kc.Index(i), j)});
            llvm::Value* v = FromShared(b, b.CreateLoad(st, p), r.acc_ty);
            acc = acc ? Combine(b, r, acc, v) : v;
          }
          totals[static_cast<size_t>(j)].push_back(acc);
        }
      }
      return finish(totals);
    }));
    // The next use reuses the slots.
    if (free_slots) Barrier(kc);
    return Status::Ok();
  };
  auto write_outputs = [&](const std::vector<llvm::Value*>& ks) -> TotalsFn {
    return [&em, &kc, &plan, ks](std::vector<std::vector<llvm::Value*>>& totals) -> Status {
      for (size_t j = 0; j < totals.size(); ++j) {
        STITCH_RETURN_IF_ERROR(WriteReduceOutputs(kc, em, plan, totals[j], ks[j]));
      }
      return Status::Ok();
    };
  };
  llvm::Value* kept = KeptCount(kc, geo);
  llvm::Value* tiles =
      b.CreateUDiv(b.CreateAdd(kept, kc.Index(tile_columns - 1)), kc.Index(tile_columns));
  // A work item is a tile of 32 x width kept columns and, when split, one chunk of its rows.
  STITCH_RETURN_IF_ERROR(EmitForLoop(
      kc, "tile", BlockIdx(kc, Dim::kX), b.CreateMul(tiles, kc.Index(chunks)), GridDim(kc, Dim::kX),
      [&](llvm::Value* item) -> Status {
        llvm::Value* tile = chunks > 1 ? b.CreateURem(item, tiles) : item;
        llvm::Value* chunk = chunks > 1 ? b.CreateUDiv(item, tiles) : kc.Index(0);
        llvm::Value* first = b.CreateAdd(b.CreateMul(tile, kc.Index(tile_columns)),
                                         b.CreateMul(tx, kc.Index(width)));
        // A lane's columns are all in range or none is: the width divides the kept count.
        llvm::Value* valid = b.CreateICmpSLT(first, kept);
        llvm::Value* lo = kc.Index(0);
        llvm::Value* hi = ReducedCount(kc, geo);
        if (chunks > 1) std::tie(lo, hi) = ChunkRange(kc, hi, chunks, chunk);
        std::vector<AccumulatedColumn> columns;
        std::vector<llvm::Value*> ks;
        for (int j = 0; j < width; ++j) {
          InitAccumulators(kc, lane_plans[static_cast<size_t>(j)].reduces);
          ks.push_back(j == 0 ? first : b.CreateAdd(first, kc.Index(j), "", true, true));
          columns.push_back({&lane_plans[static_cast<size_t>(j)], ks.back()});
        }
        // Threads past the last output skip the loads but still take part in barriers.
        llvm::Value* end = b.CreateSelect(valid, hi, kc.Index(0));
        STITCH_RETURN_IF_ERROR(EmitAccumulateLoop(kc, em, columns, b.CreateAdd(lo, ty), end, tile_y,
                                                  cfg.loads_per_step, "red"));
        if (chunks == 1) return combine_rows(valid, write_outputs(ks));
        // The arrival's own block barrier frees the slots.
        STITCH_RETURN_IF_ERROR(combine_rows(
            valid,
            [&](std::vector<std::vector<llvm::Value*>>& totals) {
              StoreColumnPartials(kc, plan, arrays, totals, chunk, first);
              return Status::Ok();
            },
            /*free_slots=*/!last_block));
        if (!last_block) return Status::Ok();
        llvm::Value* counter =
            b.CreateInBoundsGEP(b.getInt32Ty(), counters, {tile}, "tile_arrivals");
        STITCH_ASSIGN_OR_RETURN(llvm::Value * is_last,
                                EmitLastArrival(kc, counter, kc.Index(chunks)));
        // The last block of the tile combines every chunk's partials of it: the tile's rows
        // take the chunks in turn, as they took the reduced elements.
        return EmitIf(kc, "last_block", is_last, [&]() -> Status {
          for (ReducePlan& p : lane_plans) InitAccumulators(kc, p.reduces);
          llvm::Value* chunk_end = b.CreateSelect(valid, kc.Index(chunks), kc.Index(0));
          STITCH_RETURN_IF_ERROR(EmitForLoop(
              kc, "chunk", ty, chunk_end, kc.Index(tile_y), [&](llvm::Value* c) -> Status {
                std::vector<std::vector<llvm::Value*>> partials =
                    LoadColumnPartials(kc, plan, arrays, c, first, width);
                for (int j = 0; j < width; ++j) {
                  const std::vector<ReduceInfo>& lane = lane_plans[static_cast<size_t>(j)].reduces;
                  for (size_t i = 0; i < lane.size(); ++i) {
                    llvm::Value* acc = b.CreateLoad(lane[i].acc_ty, lane[i].acc);
                    b.CreateStore(Combine(b, lane[i], acc, partials[static_cast<size_t>(j)][i]),
                                  lane[i].acc);
                  }
                }
                return Status::Ok();
              }));
          return combine_rows(valid, write_outputs(ks));
        });
      }));
  if (chunks > 1 && !last_block) STITCH_RETURN_IF_ERROR(EmitCombinePartials(kc, em, plan, arrays));
  return nest;
}

}  // namespace stitch::codegen
