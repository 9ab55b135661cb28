#include "transpose_tile_index.h"

#include <algorithm>

namespace stitch::codegen {

TransposeTileIndex::TransposeTileIndex(KernelContext& kc, const Shape& shape,
                                       const TransposeTiles& tiles)
    : kc_(kc), b_(kc.b), shape_(shape), tiles_(tiles) {
  strides_.assign(shape_.dims.size(), 1);
  for (int d = shape_.rank() - 2; d >= 0; --d) {
    strides_[d] = strides_[d + 1] * shape_.dims[d + 1];
  }
}

bool TransposeTileIndex::InP(int d) const {
  return std::find(tiles_.p_dims.begin(), tiles_.p_dims.end(), d) != tiles_.p_dims.end();
}

TileOrigin TransposeTileIndex::OriginOf(llvm::Value* tile) {
  TileOrigin o;
  llvm::Value* tq = b_.CreateURem(tile, kc_.Index(tiles_.tiles_q));
  llvm::Value* rest = b_.CreateUDiv(tile, kc_.Index(tiles_.tiles_q));
  llvm::Value* tp = b_.CreateURem(rest, kc_.Index(tiles_.tiles_p));
  llvm::Value* batch = b_.CreateUDiv(rest, kc_.Index(tiles_.tiles_p));
  o.p0 = b_.CreateMul(tp, kc_.Index(tiles_.p_side), "", true, true);
  o.q0 = b_.CreateMul(tq, kc_.Index(tiles_.q_side), "", true, true);
  o.coords.assign(shape_.dims.size(), nullptr);
  o.base = kc_.Index(0);
  for (int d = shape_.rank() - 1; d >= 0; --d) {
    if (d == tiles_.q_dim || InP(d)) continue;
    o.coords[d] = b_.CreateURem(batch, kc_.Index(shape_.dims[d]));
    batch = b_.CreateUDiv(batch, kc_.Index(shape_.dims[d]));
    o.base =
        b_.CreateAdd(o.base, b_.CreateMul(o.coords[d], kc_.Index(strides_[d])), "", true, true);
  }
  return o;
}

std::vector<llvm::Value*> TransposeTileIndex::CoordinatesOf(const TileOrigin& o, llvm::Value* m,
                                                            llvm::Value* q) {
  std::vector<llvm::Value*> coords = o.coords;
  coords[tiles_.q_dim] = q;
  llvm::Value* rest = m;
  for (size_t k = tiles_.p_dims.size(); k-- > 0;) {
    const int d = tiles_.p_dims[k];
    if (k == 0) {
      coords[d] = rest;
    } else if (shape_.dims[d] == 1) {
      coords[d] = kc_.Index(0);
    } else {
      coords[d] = b_.CreateURem(rest, kc_.Index(shape_.dims[d]));
      rest = b_.CreateUDiv(rest, kc_.Index(shape_.dims[d]));
    }
  }
  return coords;
}

llvm::Value* TransposeTileIndex::LinearOf(const TileOrigin& o,
                                          const std::vector<llvm::Value*>& coords) {
  llvm::Value* linear = o.base;
  for (int d : tiles_.p_dims) {
    linear = b_.CreateAdd(linear, b_.CreateMul(coords[d], kc_.Index(strides_[d]), "", true, true),
                          "", true, true);
  }
  return b_.CreateAdd(linear, coords[tiles_.q_dim], "", true, true);
}

std::vector<llvm::Value*> TransposeTileIndex::AdjacentInOperand(ElementalEmitter& em,
                                                                const TileOrigin& o, llvm::Value* m,
                                                                llvm::Value* q, int64_t width) {
  const int inner = tiles_.p_dims.back();
  const std::vector<llvm::Value*> first = CoordinatesOf(o, m, q);
  llvm::Value* first_linear = LinearOf(o, first);
  std::vector<llvm::Value*> linears;
  for (int64_t e = 0; e < width; ++e) {
    std::vector<llvm::Value*> coords = first;
    llvm::Value* linear = first_linear;
    if (e > 0) {
      coords[inner] = b_.CreateAdd(first[inner], kc_.Index(e), "", true, true);
      linear = b_.CreateAdd(first_linear, kc_.Index(e * strides_[inner]), "", true, true);
    }
    em.SeedDelinearization(linear, shape_.dims, std::move(coords));
    linears.push_back(linear);
  }
  return linears;
}

}  // namespace stitch::codegen
