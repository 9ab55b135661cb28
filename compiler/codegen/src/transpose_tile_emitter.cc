// A loop kernel whose transposed read is staged through shared memory (plan.h,
// ThreadMapping::transpose_tile). Each pass of the grid-stride loop takes one tile of the
// transpose's output (LoopTransposeTilesOf; each thread loads loads_per_step vectors of it,
// all before the tile's math): first the block computes the tile's elements with its
// lanes along the p run, which is contiguous in the transposed operand, so the operand's
// loads are coalesced, and keeps them in shared memory; then it writes them out with its
// lanes along the output's minor-most dimension, so the stores are coalesced too. Each lane
// takes vector_width consecutive elements both ways: the lanes of a vector differ only in
// the operand's minor-most coordinate, which the width divides, so their loads are visibly
// adjacent and aligned (index_alignment.h) and merge into one access. Any elementwise work
// before or after the transpose happens in the first half, through the elemental emitter.
// A side output (IsTileSideOutput), computed without the transpose, is computed in the first
// half too, at the operand's linear indices of the tile's elements, and stored at once: its
// lanes are adjacent there as well.
#include "dtype_lowering.h"
#include "elemental_emitter.h"
#include "emitters.h"
#include "stitch/plan/schedule.h"
#include "transpose_tile_index.h"

namespace stitch::codegen {
namespace {

class TransposeTileEmitter {
 public:
  explicit TransposeTileEmitter(KernelContext& kc)
      : kc_(kc),
        b_(kc.b),
        em_(kc),
        shape_(kc.graph.nodes[kc.spec.mapping.transpose_tile].shape),
        tiles_(LoopTransposeTilesOf(kc.graph, kc.spec.mapping)),
        width_(std::max(kc.spec.mapping.vector_width, 1)),
        index_(kc, shape_, tiles_) {}

  // Whether a block of the mapping's threads covers a tile in whole rows of vectors both
  // ways, and a vector stays within a row of the operand's minor-most dimension and of q_dim.
  bool Fits() const {
    const int64_t threads = static_cast<int64_t>(kc_.spec.mapping.launch.block_threads());
    if (tiles_.p_dims.empty()) return false;
    const int64_t operand_minor = shape_.dims[tiles_.p_dims.back()];
    return operand_minor % width_ == 0 && tiles_.q % width_ == 0 &&
           TransposeTileFits(tiles_, threads, width_);
  }

  StatusOr<EmittedNest> Emit() {
    threads_ = static_cast<int64_t>(kc_.spec.mapping.launch.block_threads());
    EmittedNest nest;
    nest.launch = kc_.spec.mapping.launch;
    const auto& dl = kc_.module.getDataLayout();
    for (size_t i = 0; i < kc_.spec.outputs.size(); ++i) {
      const int out = kc_.spec.outputs[i];
      if (IsTileSideOutput(kc_.graph, kc_.spec, out)) {
        side_.push_back(i);
        continue;
      }
      staged_.push_back(i);
      llvm::Type* ty = ComputeType(kc_.ctx, kc_.graph.nodes[out].shape.dtype);
      const uint64_t slots = static_cast<uint64_t>(tiles_.q_side * (tiles_.p_side + 1));
      tiles_smem_.push_back(SharedArray(kc_, ty, slots, "transpose_tile"));
      types_.push_back(ty);
      nest.shared_bytes += static_cast<uint32_t>(dl.getTypeAllocSize(ty) * slots);
    }
    tid_ = LinearThreadIdx(kc_);
    STITCH_RETURN_IF_ERROR(EmitForLoop(kc_, "tile", BlockIdx(kc_, Dim::kX),
                                       kc_.Index(tiles_.count()), GridDim(kc_, Dim::kX),
                                       [&](llvm::Value* tile) -> Status {
                                         const TileOrigin origin = index_.OriginOf(tile);
                                         STITCH_RETURN_IF_ERROR(ComputeTile(origin));
                                         Barrier(kc_);
                                         STITCH_RETURN_IF_ERROR(StoreTile(origin));
                                         // The next tile overwrites shared memory.
                                         Barrier(kc_);
                                         return Status::Ok();
                                       }));
    return nest;
  }

 private:
  llvm::Value* Min(llvm::Value* v, int64_t bound) {
    return b_.CreateSelect(b_.CreateICmpSLT(v, kc_.Index(bound)), v, kc_.Index(bound));
  }

  // Lanes along the p run, p_side / width of them per row of the tile, each computing a
  // vector of `width` elements of the run. Edge tiles compute the last valid vector again
  // rather than branch, so every load is issued before any math.
  Status ComputeTile(const TileOrigin& o) {
    em_.ResetScope();
    const int64_t per_row = tiles_.p_side / width_;
    llvm::Value* p_local =
        b_.CreateMul(b_.CreateURem(tid_, kc_.Index(per_row)), kc_.Index(width_), "", true, true);
    llvm::Value* m = Min(b_.CreateAdd(o.p0, p_local, "", true, true), tiles_.p - width_);
    llvm::Value* first_q = b_.CreateUDiv(tid_, kc_.Index(per_row));
    const int64_t rows_per_pass = threads_ / per_row;
    std::vector<llvm::Value*> linears;
    std::vector<std::pair<llvm::Value*, int64_t>> slots;  // (q_local, lane) per linear
    for (int64_t r = 0; r < tiles_.q_side / rows_per_pass; ++r) {
      llvm::Value* q_local = b_.CreateAdd(first_q, kc_.Index(r * rows_per_pass), "", true, true);
      llvm::Value* q = Min(b_.CreateAdd(o.q0, q_local, "", true, true), tiles_.q - 1);
      for (llvm::Value* linear : index_.AdjacentInOperand(em_, o, m, q, width_)) {
        slots.emplace_back(q_local, static_cast<int64_t>(linears.size() % width_));
        linears.push_back(linear);
      }
    }
    // A later lane's operand index is the first lane's plus its offset, added last, so
    // NVPTX's vectorizer (and the emulator's count of warp accesses) sees one vector.
    em_.SetLaneOffsetsLast(true);
    em_.EmitLoads(Outputs(staged_), linears);
    std::vector<llvm::Value*> operand_linears;
    if (!side_.empty()) {
      for (llvm::Value* linear : linears) operand_linears.push_back(OperandLinear(linear));
      em_.EmitLoads(Outputs(side_), operand_linears);
    }
    em_.SetLaneOffsetsLast(false);
    for (size_t s = 0; s < staged_.size(); ++s) {
      for (size_t k = 0; k < linears.size(); ++k) {
        STITCH_ASSIGN_OR_RETURN(llvm::Value * v,
                                em_.Emit(kc_.spec.outputs[staged_[s]], IrIndex{{}, linears[k]}));
        llvm::Value* p_at = b_.CreateAdd(p_local, kc_.Index(slots[k].second), "", true, true);
        b_.CreateStore(v, Slot(s, slots[k].first, p_at));
      }
    }
    // Edge tiles' clamped lanes store some elements twice, with the same values.
    std::vector<ElementStore> stores;
    for (size_t i : side_) {
      const int out = kc_.spec.outputs[i];
      for (llvm::Value* at : operand_linears) {
        STITCH_ASSIGN_OR_RETURN(llvm::Value * v, em_.Emit(out, IrIndex{{}, at}));
        stores.push_back({kc_.graph.nodes[out].shape.dtype, v, kc_.output_buffers[i], at});
      }
    }
    StoreElements(b_, stores);
    return Status::Ok();
  }

  std::vector<int> Outputs(const std::vector<size_t>& which) const {
    std::vector<int> nodes;
    for (size_t i : which) nodes.push_back(kc_.spec.outputs[i]);
    return nodes;
  }

  // The linear index in the transposed operand of the element at `linear` in the
  // transpose's output, from its coordinates (seeded by AdjacentInOperand): a later lane's is
  // the first lane's plus its offset, as ElementalEmitter::Linearize finds it.
  llvm::Value* OperandLinear(llvm::Value* linear) {
    const Node& t = kc_.graph.nodes[kc_.spec.mapping.transpose_tile];
    const std::vector<llvm::Value*> out = em_.Delinearize(linear, shape_.dims);
    std::vector<llvm::Value*> in(out.size());
    for (size_t d = 0; d < out.size(); ++d) in[static_cast<size_t>(t.dimensions[d])] = out[d];
    return em_.Linearize(in, kc_.graph.nodes[t.operands[0]].shape.dims);
  }

  // Lanes along q_dim, q_side / width of them per row, each storing a vector of `width`
  // elements; elements past the output's edge are not stored (q_dim's size is a multiple of
  // the width, so a vector is stored whole or not at all).
  Status StoreTile(const TileOrigin& o) {
    const int64_t per_row = tiles_.q_side / width_;
    llvm::Value* q_local =
        b_.CreateMul(b_.CreateURem(tid_, kc_.Index(per_row)), kc_.Index(width_), "", true, true);
    llvm::Value* q = b_.CreateAdd(o.q0, q_local, "", true, true);
    llvm::Value* q_in = b_.CreateICmpSLT(q, kc_.Index(tiles_.q));
    llvm::Value* first_p = b_.CreateUDiv(tid_, kc_.Index(per_row));
    const int64_t rows_per_pass = threads_ / per_row;
    for (int64_t r = 0; r < tiles_.p_side / rows_per_pass; ++r) {
      llvm::Value* p_local = b_.CreateAdd(first_p, kc_.Index(r * rows_per_pass), "", true, true);
      llvm::Value* m = b_.CreateAdd(o.p0, p_local, "", true, true);
      llvm::Value* in = b_.CreateAnd(q_in, b_.CreateICmpSLT(m, kc_.Index(tiles_.p)));
      llvm::Value* first = index_.LinearOf(o, index_.CoordinatesOf(o, m, q));
      std::vector<ElementStore> stores;
      for (size_t s = 0; s < staged_.size(); ++s) {
        const size_t i = staged_[s];
        for (int64_t e = 0; e < width_; ++e) {
          llvm::Value* q_at = b_.CreateAdd(q_local, kc_.Index(e), "", true, true);
          llvm::Value* v = b_.CreateLoad(types_[s], Slot(s, q_at, p_local));
          llvm::Value* at = e == 0 ? first : b_.CreateAdd(first, kc_.Index(e), "", true, true);
          stores.push_back(
              {kc_.graph.nodes[kc_.spec.outputs[i]].shape.dtype, v, kc_.output_buffers[i], at});
        }
      }
      STITCH_RETURN_IF_ERROR(EmitIf(kc_, "tile_store", in, [&]() -> Status {
        StoreElements(b_, stores);
        return Status::Ok();
      }));
    }
    return Status::Ok();
  }

  // Element (q_local, p_local) of the tile of staged output i (staged_[i]). Rows of p_side elements
  // are padded by one, an odd stride, so that threads along p and threads along q both fall in
  // different banks.
  llvm::Value* Slot(size_t i, llvm::Value* q_local, llvm::Value* p_local) {
    llvm::Value* at = b_.CreateAdd(b_.CreateMul(q_local, kc_.Index(tiles_.p_side + 1)), p_local);
    return b_.CreateInBoundsGEP(types_[i], tiles_smem_[i], {at});
  }

  KernelContext& kc_;
  llvm::IRBuilder<>& b_;
  ElementalEmitter em_;
  const Shape& shape_;
  const TransposeTiles tiles_;
  const int64_t width_;
  TransposeTileIndex index_;
  std::vector<size_t> staged_;  // outputs written through the tile, as spec.outputs indices
  std::vector<size_t> side_;    // side outputs, stored as computed
  std::vector<llvm::GlobalVariable*> tiles_smem_;  // per staged output
  std::vector<llvm::Type*> types_;
  int64_t threads_ = 0;
  llvm::Value* tid_ = nullptr;
};

}  // namespace

StatusOr<EmittedNest> EmitTransposeTileKernel(KernelContext& kc) {
  TransposeTileEmitter emitter(kc);
  if (!emitter.Fits()) return EmitLoopKernel(kc, /*allow_tile=*/false);
  return emitter.Emit();
}

}  // namespace stitch::codegen
