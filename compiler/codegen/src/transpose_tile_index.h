// Index arithmetic over the tiles of a transpose's output (schedule.h, TransposeTiles),
// shared by the loop kernel's transpose tiles and the row-stitched kernel's row tiles.
#pragma once

#include <vector>

#include "elemental_emitter.h"
#include "kernel_context.h"
#include "stitch/plan/schedule.h"

namespace stitch::codegen {

// One tile's place in the transpose's output: the linear index of its batch dimensions'
// coordinates, each of those coordinates (the other dimensions' are null), and its first
// positions along the p run and along q_dim.
struct TileOrigin {
  llvm::Value* base = nullptr;
  std::vector<llvm::Value*> coords;
  llvm::Value* p0 = nullptr;
  llvm::Value* q0 = nullptr;
};

class TransposeTileIndex {
 public:
  // Tiles of `tiles` over an output of `shape`; both must outlive this object.
  TransposeTileIndex(KernelContext& kc, const Shape& shape, const TransposeTiles& tiles);

  // The origin of tile number `tile`: tiles are numbered along q_dim first, then along the p
  // run, then over the batch dimensions, row-major in output order.
  TileOrigin OriginOf(llvm::Value* tile);

  // The output coordinates of element `m` of the p run and `q` of q_dim in tile `o`: the p
  // run's coordinates row-major in operand order, its first the quotient left (`m` must be
  // below the run's length).
  std::vector<llvm::Value*> CoordinatesOf(const TileOrigin& o, llvm::Value* m, llvm::Value* q);

  // The output's linear index at `coords`, the batch part taken from the tile's origin.
  llvm::Value* LinearOf(const TileOrigin& o, const std::vector<llvm::Value*>& coords);

  // The linear indices of the `width` elements of the p run from element `m` on at `q` in
  // tile `o`, which differ in the operand's minor-most coordinate alone (`m` is a multiple of
  // the width, which divides that dimension), so their loads are adjacent and aligned
  // (index_alignment.h). Each is seeded in `em` with its coordinates: the transpose and
  // anything of its shape read them without a division.
  std::vector<llvm::Value*> AdjacentInOperand(ElementalEmitter& em, const TileOrigin& o,
                                              llvm::Value* m, llvm::Value* q, int64_t width);

 private:
  bool InP(int d) const;

  KernelContext& kc_;
  llvm::IRBuilder<>& b_;
  const Shape& shape_;
  const TransposeTiles& tiles_;
  std::vector<int64_t> strides_;
};

}  // namespace stitch::codegen
