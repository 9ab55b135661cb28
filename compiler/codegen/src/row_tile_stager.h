// The staging of a row-stitched kernel's row tiles (ThreadMapping::transpose_tile; schedule.h,
// RowTileStaging): rows adjacent in a transposed operand are computed into a shared-memory
// tile with the threads along the operand's minor-most run, so its loads are coalesced, and
// read back into registers with each thread on its own row, or, for a resident row tile
// (ThreadMapping::dynamic_shared_bytes), read from the tile by every pass over the rows.
#pragma once

#include <vector>

#include "elemental_emitter.h"
#include "kernel_context.h"
#include "stitch/plan/schedule.h"
#include "transpose_tile_index.h"

namespace stitch::codegen {

class RowTileStager {
 public:
  // Allocates the tile in shared memory and adds its bytes to `shared_bytes`; a resident row
  // tile takes the kernel's dynamic shared memory instead. `tid` is the thread's linear index
  // in its block; `em` computes the transpose's values.
  RowTileStager(KernelContext& kc, ElementalEmitter& em, llvm::Value* tid, uint32_t& shared_bytes);

  bool Resident() const { return m_.resident_row_tile(); }

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

  // A resident row tile: computes the whole of tile `o` into shared memory, each thread
  // issuing ThreadMapping::loads_per_step loads at a time before their math, so the loads in
  // flight do not take a register per element the thread stages.
  Status StageTile(const TileOrigin& o);

  // A resident row tile, after the barrier that follows StageTile: the slot of element
  // `element` of tile row `row_in_tile`, holding the transpose's compute-type value.
  ElementalEmitter::Slot SlotOf(llvm::Value* row_in_tile, llvm::Value* element);

  // After a barrier: loads the vector of round `round` that the thread at `seg` of tile row
  // `row_in_tile` keeps, into its register positions round x vector_width onwards of `staged`.
  void ReadRound(llvm::Value* row_in_tile, llvm::Value* seg, int64_t round,
                 const std::vector<llvm::AllocaInst*>& staged);

 private:
  llvm::Value* Slot(llvm::Value* row_in_tile, llvm::Value* element);
  // The trips along the tile's rows a thread takes to compute one round.
  int64_t PassesPerRound() const;
  // The linear indices in the transpose's output of the elements the thread computes on its
  // `pass`-th trip along the tile's rows (p_width adjacent rows at one element of them),
  // and their slots. Seeds their delinearization in `em_`'s current scope.
  void ElementsOfPass(const TileOrigin& o, int64_t round, int64_t pass,
                      std::vector<llvm::Value*>& linears, std::vector<llvm::Value*>& slots);

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
  llvm::Constant* tile_ = nullptr;
  // Per round of the tile being staged: the linear indices of the thread's elements, and
  // the shared-memory slot of each.
  struct StagedRound {
    std::vector<llvm::Value*> linears, slots;
  };
  std::vector<StagedRound> rounds_;
};

}  // namespace stitch::codegen
