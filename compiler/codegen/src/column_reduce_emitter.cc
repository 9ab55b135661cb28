#include <algorithm>
#include <functional>
#include <tuple>
#include <vector>

#include "emitters.h"
#include "grid_barrier.h"
#include "reduction.h"

namespace stitch::codegen {
namespace {

// A column reduction's kernel: a grid-stride loop over work items, each a tile of 32 lanes
// of `width` adjacent kept columns and, when split, one chunk of the tile's rows. The block's
// rows of threads walk the chunk's rows and combine their accumulators through shared
// memory. A split's partials go to the workspace, where either the last block of each tile
// to arrive combines them (kLastBlock) or a second stage behind a grid barrier does.
class ColumnReduceEmitter {
 public:
  // Per column of a lane, per reduce: the totals a combine passes on.
  using Totals = std::vector<std::vector<llvm::Value*>>;
  using TotalsFn = std::function<Status(Totals&)>;

  ColumnReduceEmitter(KernelContext& kc, ReducePlan plan)
      : kc_(kc),
        b_(kc.b),
        plan_(std::move(plan)),
        cfg_(kc.spec.mapping),
        tile_y_(cfg_.column_tile_y),
        // Each lane reduces `width` adjacent kept columns (the scheduler's width divides the
        // input's minor-most dimension), so a tile spans 32 x width columns and a lane's
        // loads of one row are adjacent: the vectoriser makes them one access.
        width_(std::max(cfg_.vector_width, 1)),
        tile_columns_(32 * static_cast<int64_t>(width_)),
        chunks_(std::max(cfg_.reduce_chunks, 1)),
        last_block_(chunks_ > 1 && cfg_.split_combine == ThreadMapping::SplitCombine::kLastBlock),
        em_(kc) {}

  StatusOr<EmittedNest> Emit() {
    EmittedNest nest;
    nest.launch = cfg_.launch;
    STITCH_RETURN_IF_ERROR(LayOutWorkspace(nest));
    AllocateSharedSlots(nest);
    // One copy of the plan per column of a lane, each with accumulators of its own.
    lane_plans_.assign(static_cast<size_t>(width_), plan_);
    for (ReducePlan& p : lane_plans_) {
      for (ReduceInfo& r : p.reduces) r.acc = nullptr;
    }
    tx_ = ThreadIdx(kc_, Dim::kX);
    ty_ = ThreadIdx(kc_, Dim::kY);
    kept_ = KeptCount(kc_, plan_.geometry);
    tiles_ =
        b_.CreateUDiv(b_.CreateAdd(kept_, kc_.Index(tile_columns_ - 1)), kc_.Index(tile_columns_));
    STITCH_RETURN_IF_ERROR(
        EmitForLoop(kc_, "tile", BlockIdx(kc_, Dim::kX), b_.CreateMul(tiles_, kc_.Index(chunks_)),
                    GridDim(kc_, Dim::kX), [&](llvm::Value* item) { return EmitWorkItem(item); }));
    if (chunks_ > 1 && !last_block_) {
      STITCH_RETURN_IF_ERROR(EmitCombinePartials(kc_, em_, plan_, arrays_));
    }
    return nest;
  }

 private:
  // A split's partial arrays, and for last-block combining a u32 arrival counter per column
  // tile after them.
  Status LayOutWorkspace(EmittedNest& nest) {
    if (chunks_ == 1) return Status::Ok();
    STITCH_ASSIGN_OR_RETURN(arrays_, LayoutPartials(kc_, plan_, chunks_));
    nest.workspace_end = arrays_.end_offset;
    if (!last_block_) return Status::Ok();
    counters_ = b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), kc_.workspace, arrays_.end_offset);
    const uint64_t tiles_at_top =
        static_cast<uint64_t>((plan_.geometry.kept + tile_columns_ - 1) / tile_columns_);
    nest.workspace_end += 4 * tiles_at_top;
    return Status::Ok();
  }

  // Thread (tx, ty)'s partial of its column j is at [(ty * width + j) * 32 + tx]: the writes
  // of one j and the column walk of the final step touch 32 consecutive slots (no bank
  // conflicts).
  void AllocateSharedSlots(EmittedNest& nest) {
    for (auto& r : plan_.reduces) {
      llvm::Type* st = SharedType(r.acc_ty);
      const uint64_t slots = static_cast<uint64_t>(tile_columns_) * static_cast<uint64_t>(tile_y_);
      r.smem = SharedArray(kc_, st, slots, "column_partials");
      nest.shared_bytes +=
          static_cast<uint32_t>(kc_.module.getDataLayout().getTypeAllocSize(st) * slots);
    }
  }

  llvm::Value* Slot(llvm::Value* y, int j) {
    return b_.CreateAdd(
        b_.CreateMul(b_.CreateAdd(b_.CreateMul(y, kc_.Index(width_)), kc_.Index(j)), kc_.Index(32)),
        tx_);
  }

  // One work item: the lane's columns of the tile over the item's rows, combined over the
  // block's rows of threads, then written out, or stored as the chunk's partials.
  Status EmitWorkItem(llvm::Value* item) {
    llvm::Value* tile = chunks_ > 1 ? b_.CreateURem(item, tiles_) : item;
    llvm::Value* chunk = chunks_ > 1 ? b_.CreateUDiv(item, tiles_) : kc_.Index(0);
    llvm::Value* first = b_.CreateAdd(b_.CreateMul(tile, kc_.Index(tile_columns_)),
                                      b_.CreateMul(tx_, kc_.Index(width_)));
    // A lane's columns are all in range or none is: the width divides the kept count.
    llvm::Value* valid = b_.CreateICmpSLT(first, kept_);
    llvm::Value* lo = kc_.Index(0);
    llvm::Value* hi = ReducedCount(kc_, plan_.geometry);
    if (chunks_ > 1) std::tie(lo, hi) = ChunkRange(kc_, hi, chunks_, chunk);
    std::vector<AccumulatedColumn> columns;
    std::vector<llvm::Value*> ks;
    for (int j = 0; j < width_; ++j) {
      InitAccumulators(kc_, lane_plans_[static_cast<size_t>(j)].reduces);
      ks.push_back(j == 0 ? first : b_.CreateAdd(first, kc_.Index(j), "", true, true));
      columns.push_back({&lane_plans_[static_cast<size_t>(j)], ks.back()});
    }
    // Threads past the last output skip the loads but still take part in barriers.
    llvm::Value* end = b_.CreateSelect(valid, hi, kc_.Index(0));
    STITCH_RETURN_IF_ERROR(EmitAccumulateLoop(kc_, em_, columns, b_.CreateAdd(lo, ty_), end,
                                              tile_y_, cfg_.loads_per_step, "red"));
    if (chunks_ == 1) return CombineRows(valid, WriteOutputs(ks));
    // The arrival's own block barrier frees the slots.
    STITCH_RETURN_IF_ERROR(CombineRows(
        valid,
        [&](Totals& totals) {
          StoreColumnPartials(kc_, plan_, arrays_, totals, chunk, first);
          return Status::Ok();
        },
        /*free_slots=*/!last_block_));
    if (!last_block_) return Status::Ok();
    return EmitLastBlockCombine(tile, first, valid, ks);
  }

  // The block that stores a tile's last chunk of partials combines every chunk's partials of
  // it: the tile's rows take the chunks in turn, as they took the reduced elements.
  Status EmitLastBlockCombine(llvm::Value* tile, llvm::Value* first, llvm::Value* valid,
                              const std::vector<llvm::Value*>& ks) {
    llvm::Value* counter =
        b_.CreateInBoundsGEP(b_.getInt32Ty(), counters_, {tile}, "tile_arrivals");
    STITCH_ASSIGN_OR_RETURN(llvm::Value * is_last,
                            EmitLastArrival(kc_, counter, kc_.Index(chunks_)));
    return EmitIf(kc_, "last_block", is_last, [&]() -> Status {
      for (ReducePlan& p : lane_plans_) InitAccumulators(kc_, p.reduces);
      llvm::Value* chunk_end = b_.CreateSelect(valid, kc_.Index(chunks_), kc_.Index(0));
      STITCH_RETURN_IF_ERROR(EmitForLoop(
          kc_, "chunk", ty_, chunk_end, kc_.Index(tile_y_), [&](llvm::Value* c) -> Status {
            AccumulatePartials(LoadColumnPartials(kc_, plan_, arrays_, c, first, width_));
            return Status::Ok();
          }));
      return CombineRows(valid, WriteOutputs(ks));
    });
  }

  // Folds one chunk's partials (per column, per reduce) into the lanes' accumulators.
  void AccumulatePartials(const Totals& partials) {
    for (int j = 0; j < width_; ++j) {
      const std::vector<ReduceInfo>& lane = lane_plans_[static_cast<size_t>(j)].reduces;
      for (size_t i = 0; i < lane.size(); ++i) {
        llvm::Value* acc = b_.CreateLoad(lane[i].acc_ty, lane[i].acc);
        b_.CreateStore(Combine(b_, lane[i], acc, partials[static_cast<size_t>(j)][i]), lane[i].acc);
      }
    }
  }

  // Combines the tile's rows of lane accumulators through shared memory: each thread stores
  // its columns' accumulators, and the threads of row 0 whose columns are `valid` sum the
  // tile's rows of them and pass the totals to `finish`. Every thread of the block calls it;
  // the slots are free again when it returns, or, without `free_slots`, after the next block
  // barrier (the caller's).
  Status CombineRows(llvm::Value* valid, const TotalsFn& finish, bool free_slots = true) {
    for (int j = 0; j < width_; ++j) {
      const std::vector<ReduceInfo>& lane = lane_plans_[static_cast<size_t>(j)].reduces;
      for (size_t i = 0; i < lane.size(); ++i) {
        llvm::Type* st = SharedType(lane[i].acc_ty);
        b_.CreateStore(ToShared(b_, b_.CreateLoad(lane[i].acc_ty, lane[i].acc)),
                       b_.CreateInBoundsGEP(st, plan_.reduces[i].smem, {Slot(ty_, j)}));
      }
    }
    Barrier(kc_);
    llvm::Value* writer = b_.CreateAnd(valid, b_.CreateICmpEQ(ty_, kc_.Index(0)));
    STITCH_RETURN_IF_ERROR(EmitIf(kc_, "combine", writer, [&]() -> Status {
      Totals totals = SumTileRows();
      return finish(totals);
    }));
    // The next use reuses the slots.
    if (free_slots) Barrier(kc_);
    return Status::Ok();
  }

  // Row 0's sums of the tile's rows of shared slots: every column's totals first, so that
  // the stores after them sit side by side, which the vectoriser merges.
  Totals SumTileRows() {
    Totals totals(static_cast<size_t>(width_));
    for (int j = 0; j < width_; ++j) {
      for (auto& r : plan_.reduces) {
        llvm::Type* st = SharedType(r.acc_ty);
        llvm::Value* acc = nullptr;
        for (int i = 0; i < tile_y_; ++i) {
          llvm::Value* p = b_.CreateInBoundsGEP(st, r.smem, {Slot(kc_.Index(i), j)});
          llvm::Value* v = FromShared(b_, b_.CreateLoad(st, p), r.acc_ty);
          acc = acc ? Combine(b_, r, acc, v) : v;
        }
        totals[static_cast<size_t>(j)].push_back(acc);
      }
    }
    return totals;
  }

  // Writes each column's totals as the reduce outputs of kept index ks[j].
  TotalsFn WriteOutputs(const std::vector<llvm::Value*>& ks) {
    return [this, ks](Totals& totals) -> Status {
      for (size_t j = 0; j < totals.size(); ++j) {
        STITCH_RETURN_IF_ERROR(WriteReduceOutputs(kc_, em_, plan_, totals[j], ks[j]));
      }
      return Status::Ok();
    };
  }

  KernelContext& kc_;
  llvm::IRBuilder<>& b_;
  ReducePlan plan_;
  const ThreadMapping& cfg_;
  const int tile_y_;
  const int width_;
  const int64_t tile_columns_;
  const int64_t chunks_;
  const bool last_block_;
  ElementalEmitter em_;
  PartialArrays arrays_;
  llvm::Value* counters_ = nullptr;
  std::vector<ReducePlan> lane_plans_;
  llvm::Value* tx_ = nullptr;
  llvm::Value* ty_ = nullptr;
  llvm::Value* kept_ = nullptr;
  llvm::Value* tiles_ = nullptr;
};

}  // namespace

StatusOr<EmittedNest> EmitColumnReduceKernel(KernelContext& kc) {
  STITCH_ASSIGN_OR_RETURN(ReducePlan plan, AnalyzeReduceKernel(kc));
  return ColumnReduceEmitter(kc, std::move(plan)).Emit();
}

}  // namespace stitch::codegen
