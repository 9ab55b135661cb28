// The staging of a row-stitched kernel's row tiles (ThreadMapping::transpose_tile; schedule.h,
// RowTileStaging): rows adjacent in a transposed operand are computed into a shared-memory
// tile with the threads along the operand's minor-most run, so its loads are coalesced, and
// read back into registers with each thread on its own row.
#pragma once

#include <vector>

#include "elemental_emitter.h"
#include "kernel_context.h"
#include "stitch/plan/schedule.h"
#include "transpose_tile_index.h"

namespace stitch::codegen {

class RowTileStager {
 public:
  // Allocates the tile in shared memory and adds its bytes to `shared_bytes`. `tid` is the
  // thread's linear index in its block; `em` computes the transpose's values.
  RowTileStager(KernelContext& kc, ElementalEmitter& em, llvm::Value* tid, uint32_t& shared_bytes);

  // Row tiles of the transpose's output, and the rounds that stage one.
  int64_t Tiles() const { return tiles_.count(); }
  int64_t Rounds() const { return staging_.rounds; }

  TileOrigin OriginOf(llvm::Value* tile) { return index_.OriginOf(tile); }

  // The kernel's row that is row `row_in_tile` of tile `o`: the transpose's output is the
  // row space, its minor-most dimension along the rows.
  llvm::Value* RowOf(const TileOrigin& o, llvm::Value* row_in_tile);

  // Issues every load of tile `o`'s rounds (round r holds elements [r, r + 1) x
  // RowTileStaging::round of each of its rows; each thread takes p_width adjacent rows at one
  // element, as many times as a round needs), before any round's math: a block's loads for
  // the whole tile are in flight together rather than a round's at a time between barriers.
  void LoadTile(const TileOrigin& o);

  // Computes round `round` of the tile LoadTile loaded into shared memory.
  Status ComputeRound(int64_t round);

  // After a barrier: loads the vector of round `round` that the thread at `seg` of tile row
  // `row_in_tile` keeps, into its register positions round x vector_width onwards of `staged`.
  void ReadRound(llvm::Value* row_in_tile, llvm::Value* seg, int64_t round,
                 const std::vector<llvm::AllocaInst*>& staged);

 private:
  llvm::Value* Slot(llvm::Value* row_in_tile, llvm::Value* element);

  KernelContext& kc_;
  llvm::IRBuilder<>& b_;
  ElementalEmitter& em_;
  const ThreadMapping& m_;
  const int transpose_;
  const Shape& shape_;
  const RowTileStaging staging_;
  const TransposeTiles tiles_;
  TransposeTileIndex index_;
  llvm::Value* tid_;
  llvm::Type* type_ = nullptr;
  llvm::GlobalVariable* tile_ = nullptr;
  // Per round of the tile being staged: the linear indices of the thread's elements, and
  // the shared-memory slot of each.
  struct StagedRound {
    std::vector<llvm::Value*> linears, slots;
  };
  std::vector<StagedRound> rounds_;
};

}  // namespace stitch::codegen
