#include "row_tile_stager.h"

#include <algorithm>

#include "dtype_lowering.h"

namespace stitch::codegen {
namespace {

// A row tile's tiles: rows_per_block rows of the p run, each whole along q_dim.
TransposeTiles RowTilesOf(const Graph& g, const ThreadMapping& m) {
  TransposeTiles tiles = TransposeTilesOf(g, m.transpose_tile);
  tiles.p_side = std::max(m.rows_per_block, 1);
  tiles.q_side = tiles.q;
  tiles.tiles_p = tiles.p / tiles.p_side;
  tiles.tiles_q = 1;
  return tiles;
}

}  // namespace

RowTileStager::RowTileStager(KernelContext& kc, ElementalEmitter& em, llvm::Value* tid,
                             uint32_t& shared_bytes)
    : kc_(kc),
      b_(kc.b),
      em_(em),
      m_(kc.spec.mapping),
      transpose_(kc.spec.mapping.transpose_tile),
      shape_(kc.graph.nodes[transpose_].shape),
      staging_(RowTileStagingOf(kc.graph, kc.spec.mapping)),
      tiles_(RowTilesOf(kc.graph, kc.spec.mapping)),
      index_(kc, shape_, tiles_),
      tid_(tid) {
  type_ = ComputeType(kc_.ctx, shape_.dtype);
  const uint64_t slots = static_cast<uint64_t>(tiles_.p_side * staging_.row_stride);
  tile_ = SharedArray(kc_, type_, slots, "row_tile");
  // Each thread's vector of a row starts on a 16-byte boundary, so its loads can merge.
  tile_->setAlignment(llvm::Align(16));
  shared_bytes += static_cast<uint32_t>(kc_.module.getDataLayout().getTypeAllocSize(type_) * slots);
}

llvm::Value* RowTileStager::RowOf(const TileOrigin& o, llvm::Value* row_in_tile) {
  llvm::Value* m = b_.CreateAdd(o.p0, row_in_tile, "", true, true);
  llvm::Value* first = index_.LinearOf(o, index_.CoordinatesOf(o, m, kc_.Index(0)));
  return b_.CreateUDiv(first, kc_.Index(tiles_.q));
}

void RowTileStager::LoadTile(const TileOrigin& o) {
  em_.ResetScope();
  rounds_.assign(static_cast<size_t>(staging_.rounds), {});
  const int64_t threads = static_cast<int64_t>(m_.launch.block_threads());
  const int64_t rows_per_pass = threads / staging_.p_lanes;
  llvm::Value* p_lane = b_.CreateURem(tid_, kc_.Index(staging_.p_lanes));
  llvm::Value* first_row =
      b_.CreateMul(p_lane, kc_.Index(staging_.p_width), "", true, true);  // in the tile
  llvm::Value* m = b_.CreateAdd(o.p0, first_row, "", true, true);
  llvm::Value* first_q = b_.CreateUDiv(tid_, kc_.Index(staging_.p_lanes));
  std::vector<llvm::Value*> every;
  for (int64_t round = 0; round < staging_.rounds; ++round) {
    StagedRound& r = rounds_[static_cast<size_t>(round)];
    for (int64_t pass = 0; pass < staging_.round / rows_per_pass; ++pass) {
      llvm::Value* element =
          b_.CreateAdd(first_q, kc_.Index(pass * rows_per_pass), "", true, true);  // in the round
      llvm::Value* q = b_.CreateAdd(kc_.Index(round * staging_.round), element, "", true, true);
      const std::vector<llvm::Value*> rows =
          index_.AdjacentInOperand(em_, o, m, q, staging_.p_width);
      for (size_t e = 0; e < rows.size(); ++e) {
        r.linears.push_back(rows[e]);
        r.slots.push_back(Slot(
            b_.CreateAdd(first_row, kc_.Index(static_cast<int64_t>(e)), "", true, true), element));
      }
    }
    every.insert(every.end(), r.linears.begin(), r.linears.end());
  }
  em_.SetLaneOffsetsLast(true);
  em_.EmitLoads({transpose_}, every);
  em_.SetLaneOffsetsLast(false);
}

Status RowTileStager::ComputeRound(int64_t round) {
  const StagedRound& r = rounds_[static_cast<size_t>(round)];
  for (size_t k = 0; k < r.linears.size(); ++k) {
    STITCH_ASSIGN_OR_RETURN(llvm::Value * v, em_.Emit(transpose_, IrIndex{{}, r.linears[k]}));
    b_.CreateStore(v, r.slots[k]);
  }
  return Status::Ok();
}

void RowTileStager::ReadRound(llvm::Value* row_in_tile, llvm::Value* seg, int64_t round,
                              const std::vector<llvm::AllocaInst*>& staged) {
  const int64_t width = std::max(m_.vector_width, 1);
  llvm::Value* first = b_.CreateMul(seg, kc_.Index(width), "", true, true);
  for (int64_t e = 0; e < width; ++e) {
    llvm::Value* element = b_.CreateAdd(first, kc_.Index(e), "", true, true);
    llvm::Value* v = b_.CreateLoad(type_, Slot(row_in_tile, element));
    b_.CreateStore(v, staged[static_cast<size_t>(round * width + e)]);
  }
}

llvm::Value* RowTileStager::Slot(llvm::Value* row_in_tile, llvm::Value* element) {
  llvm::Value* at =
      b_.CreateAdd(b_.CreateMul(row_in_tile, kc_.Index(staging_.row_stride), "", true, true),
                   element, "", true, true);
  return b_.CreateInBoundsGEP(type_, tile_, {at});
}

}  // namespace stitch::codegen
