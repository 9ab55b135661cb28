#include "row_tile_stager.h"

#include <algorithm>

#include "dtype_lowering.h"
#include "index_alignment.h"

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
  if (Resident()) {
    tile_ = DynamicSharedMemory(kc_);
    return;
  }
  const uint64_t slots = static_cast<uint64_t>(tiles_.p_side * staging_.row_stride);
  llvm::GlobalVariable* tile = SharedArray(kc_, type_, slots, "row_tile");
  // Each thread's vector of a row starts on a 16-byte boundary, so its loads can merge.
  tile->setAlignment(llvm::Align(16));
  tile_ = tile;
  shared_bytes += static_cast<uint32_t>(kc_.module.getDataLayout().getTypeAllocSize(type_) * slots);
}

llvm::Value* RowTileStager::RowOf(const TileOrigin& o, llvm::Value* row_in_tile) {
  llvm::Value* m = b_.CreateAdd(o.p0, row_in_tile, "", true, true);
  llvm::Value* first = index_.LinearOf(o, index_.CoordinatesOf(o, m, kc_.Index(0)));
  return b_.CreateUDiv(first, kc_.Index(tiles_.q));
}

void RowTileStager::ElementsOfPass(const TileOrigin& o, int64_t round, int64_t pass,
                                   std::vector<llvm::Value*>& linears,
                                   std::vector<llvm::Value*>& slots) {
  const int64_t rows_per_pass = static_cast<int64_t>(m_.launch.block_threads()) / staging_.p_lanes;
  llvm::Value* p_lane = b_.CreateURem(tid_, kc_.Index(staging_.p_lanes));
  llvm::Value* first_row =
      b_.CreateMul(p_lane, kc_.Index(staging_.p_width), "", true, true);  // in the tile
  llvm::Value* m = b_.CreateAdd(o.p0, first_row, "", true, true);
  llvm::Value* first_q = b_.CreateUDiv(tid_, kc_.Index(staging_.p_lanes));
  llvm::Value* element =
      b_.CreateAdd(first_q, kc_.Index(pass * rows_per_pass), "", true, true);  // in the round
  llvm::Value* q = b_.CreateAdd(kc_.Index(round * staging_.round), element, "", true, true);
  const std::vector<llvm::Value*> rows = index_.AdjacentInOperand(em_, o, m, q, staging_.p_width);
  for (size_t e = 0; e < rows.size(); ++e) {
    linears.push_back(rows[e]);
    slots.push_back(
        Slot(b_.CreateAdd(first_row, kc_.Index(static_cast<int64_t>(e)), "", true, true), element));
  }
}

int64_t RowTileStager::PassesPerRound() const {
  return staging_.round /
         (static_cast<int64_t>(m_.launch.block_threads()) / std::max<int64_t>(staging_.p_lanes, 1));
}

void RowTileStager::LoadTile(const TileOrigin& o) {
  em_.ResetScope();
  rounds_.assign(static_cast<size_t>(staging_.rounds), {});
  std::vector<llvm::Value*> every;
  for (int64_t round = 0; round < staging_.rounds; ++round) {
    StagedRound& r = rounds_[static_cast<size_t>(round)];
    for (int64_t pass = 0; pass < PassesPerRound(); ++pass) {
      ElementsOfPass(o, round, pass, r.linears, r.slots);
    }
    every.insert(every.end(), r.linears.begin(), r.linears.end());
  }
  em_.SetLaneOffsetsLast(true);
  em_.EmitLoads({transpose_}, every);
  em_.SetLaneOffsetsLast(false);
}

Status RowTileStager::StageTile(const TileOrigin& o) {
  const int64_t passes = PassesPerRound();
  const int64_t at_once = std::max(m_.loads_per_step, 1);
  for (int64_t first = 0; first < passes; first += at_once) {
    em_.ResetScope();
    std::vector<llvm::Value*> linears, slots;
    for (int64_t pass = first; pass < std::min(passes, first + at_once); ++pass) {
      ElementsOfPass(o, /*round=*/0, pass, linears, slots);
    }
    em_.SetLaneOffsetsLast(true);
    em_.SetLaneAddressesFromFirst(true);
    em_.EmitLoads({transpose_}, linears);
    em_.SetLaneAddressesFromFirst(false);
    em_.SetLaneOffsetsLast(false);
    for (size_t k = 0; k < linears.size(); ++k) {
      STITCH_ASSIGN_OR_RETURN(llvm::Value * v, em_.Emit(transpose_, IrIndex{{}, linears[k]}));
      b_.CreateStore(v, slots[k]);
    }
  }
  return Status::Ok();
}

ElementalEmitter::Slot RowTileStager::SlotOf(llvm::Value* row_in_tile, llvm::Value* element) {
  const uint64_t bytes = kc_.module.getDataLayout().getTypeAllocSize(type_);
  // Rows start 16-byte aligned (RowTileStaging::row_stride), so the element's alignment in
  // its row is its alignment in the tile.
  return {Slot(row_in_tile, element), type_, llvm::Align(ElementAlignment(element, bytes))};
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
