// A loop kernel whose transposed read is staged through shared memory (plan.h,
// ThreadMapping::transpose_tile). Each pass of the grid-stride loop takes one tile of the
// transpose's output: first the block computes the tile's elements with its lanes along the
// dimension that is minor-most in the transposed operand, so the operand's loads are
// coalesced, and keeps them in shared memory; then it writes them out with its lanes along
// the output's minor-most dimension, so the stores are coalesced too. Any elementwise work
// before or after the transpose happens in the first half, through the elemental emitter.
#include "dtype_lowering.h"
#include "elemental_emitter.h"
#include "emitters.h"
#include "stitch/plan/schedule.h"

namespace stitch::codegen {
namespace {

// One tile's place in the transpose's output: the linear index of its (0, 0) element's
// other dimensions, and its first coordinates along the tiled pair.
struct TileOrigin {
  llvm::Value* base = nullptr;
  llvm::Value* p0 = nullptr;
  llvm::Value* q0 = nullptr;
};

class TransposeTileEmitter {
 public:
  explicit TransposeTileEmitter(KernelContext& kc)
      : kc_(kc),
        b_(kc.b),
        em_(kc),
        shape_(kc.graph.nodes[kc.spec.mapping.transpose_tile].shape),
        tiles_(TransposeTilesOf(kc.graph, kc.spec.mapping.transpose_tile)) {
    strides_.assign(shape_.dims.size(), 1);
    for (int d = shape_.rank() - 2; d >= 0; --d) {
      strides_[d] = strides_[d + 1] * shape_.dims[d + 1];
    }
  }

  // Whether a block of the mapping's threads covers a tile in whole rows both ways.
  bool Fits() const {
    const int64_t threads = static_cast<int64_t>(kc_.spec.mapping.launch.block_threads());
    return threads > 0 && threads % tiles_.p_side == 0 && threads % tiles_.q_side == 0 &&
           kTransposeTileElements % threads == 0;
  }

  StatusOr<EmittedNest> Emit() {
    threads_ = static_cast<int64_t>(kc_.spec.mapping.launch.block_threads());
    EmittedNest nest;
    nest.launch = kc_.spec.mapping.launch;
    const auto& dl = kc_.module.getDataLayout();
    for (int out : kc_.spec.outputs) {
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
                                         const TileOrigin origin = OriginOf(tile);
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
  TileOrigin OriginOf(llvm::Value* tile) {
    TileOrigin o;
    llvm::Value* tq = b_.CreateURem(tile, kc_.Index(tiles_.tiles_q));
    llvm::Value* rest = b_.CreateUDiv(tile, kc_.Index(tiles_.tiles_q));
    llvm::Value* tp = b_.CreateURem(rest, kc_.Index(tiles_.tiles_p));
    llvm::Value* batch = b_.CreateUDiv(rest, kc_.Index(tiles_.tiles_p));
    o.p0 = b_.CreateMul(tp, kc_.Index(tiles_.p_side));
    o.q0 = b_.CreateMul(tq, kc_.Index(tiles_.q_side));
    // The other dimensions, row-major, from the batch number.
    o.base = kc_.Index(0);
    for (int d = shape_.rank() - 1; d >= 0; --d) {
      if (d == tiles_.p_dim || d == tiles_.q_dim) continue;
      llvm::Value* coordinate = b_.CreateURem(batch, kc_.Index(shape_.dims[d]));
      batch = b_.CreateUDiv(batch, kc_.Index(shape_.dims[d]));
      o.base = b_.CreateAdd(o.base, b_.CreateMul(coordinate, kc_.Index(strides_[d])));
    }
    return o;
  }

  llvm::Value* LinearOf(const TileOrigin& o, llvm::Value* p, llvm::Value* q) {
    return b_.CreateAdd(o.base,
                        b_.CreateAdd(b_.CreateMul(p, kc_.Index(strides_[tiles_.p_dim])), q));
  }

  llvm::Value* Min(llvm::Value* v, int64_t bound) {
    return b_.CreateSelect(b_.CreateICmpSLT(v, kc_.Index(bound)), v, kc_.Index(bound));
  }

  // Consecutive threads along p (the operand's minor dimension), p_side of them per row of
  // the tile. Edge tiles compute the last valid element again rather than branch, so every
  // load is issued before any math.
  Status ComputeTile(const TileOrigin& o) {
    em_.ResetScope();
    llvm::Value* p_local = b_.CreateURem(tid_, kc_.Index(tiles_.p_side));
    llvm::Value* p = Min(b_.CreateAdd(o.p0, p_local), shape_.dims[tiles_.p_dim] - 1);
    llvm::Value* first_q = b_.CreateUDiv(tid_, kc_.Index(tiles_.p_side));
    const int64_t rows_per_pass = threads_ / tiles_.p_side;
    std::vector<llvm::Value*> linears;
    std::vector<llvm::Value*> q_locals;
    for (int64_t r = 0; r < tiles_.q_side / rows_per_pass; ++r) {
      llvm::Value* q_local = b_.CreateAdd(first_q, kc_.Index(r * rows_per_pass));
      llvm::Value* q = Min(b_.CreateAdd(o.q0, q_local), shape_.dims[tiles_.q_dim] - 1);
      linears.push_back(LinearOf(o, p, q));
      q_locals.push_back(q_local);
    }
    em_.EmitLoads(kc_.spec.outputs, linears);
    for (size_t i = 0; i < kc_.spec.outputs.size(); ++i) {
      for (size_t r = 0; r < linears.size(); ++r) {
        STITCH_ASSIGN_OR_RETURN(llvm::Value * v,
                                em_.Emit(kc_.spec.outputs[i], IrIndex{{}, linears[r]}));
        b_.CreateStore(v, Slot(i, q_locals[r], p_local));
      }
    }
    return Status::Ok();
  }

  // Consecutive threads along q (the output's minor dimension), q_side of them per row;
  // elements past the output's edge are not stored.
  Status StoreTile(const TileOrigin& o) {
    llvm::Value* q_local = b_.CreateURem(tid_, kc_.Index(tiles_.q_side));
    llvm::Value* q = b_.CreateAdd(o.q0, q_local);
    llvm::Value* q_in = b_.CreateICmpSLT(q, kc_.Index(shape_.dims[tiles_.q_dim]));
    llvm::Value* first_p = b_.CreateUDiv(tid_, kc_.Index(tiles_.q_side));
    const int64_t rows_per_pass = threads_ / tiles_.q_side;
    for (int64_t r = 0; r < tiles_.p_side / rows_per_pass; ++r) {
      llvm::Value* p_local = b_.CreateAdd(first_p, kc_.Index(r * rows_per_pass));
      llvm::Value* p = b_.CreateAdd(o.p0, p_local);
      llvm::Value* in =
          b_.CreateAnd(q_in, b_.CreateICmpSLT(p, kc_.Index(shape_.dims[tiles_.p_dim])));
      std::vector<ElementStore> stores;
      for (size_t i = 0; i < kc_.spec.outputs.size(); ++i) {
        llvm::Value* v = b_.CreateLoad(types_[i], Slot(i, q_local, p_local));
        stores.push_back({kc_.graph.nodes[kc_.spec.outputs[i]].shape.dtype, v,
                          kc_.output_buffers[i], LinearOf(o, p, q)});
      }
      STITCH_RETURN_IF_ERROR(EmitIf(kc_, "tile_store", in, [&]() -> Status {
        StoreElements(b_, stores);
        return Status::Ok();
      }));
    }
    return Status::Ok();
  }

  // Element (q_local, p_local) of output i's tile. Rows of p_side elements are padded by one,
  // an odd stride, so that threads along p and threads along q both fall in different banks.
  llvm::Value* Slot(size_t i, llvm::Value* q_local, llvm::Value* p_local) {
    llvm::Value* at = b_.CreateAdd(b_.CreateMul(q_local, kc_.Index(tiles_.p_side + 1)), p_local);
    return b_.CreateInBoundsGEP(types_[i], tiles_smem_[i], {at});
  }

  KernelContext& kc_;
  llvm::IRBuilder<>& b_;
  ElementalEmitter em_;
  const Shape& shape_;
  const TransposeTiles tiles_;
  std::vector<int64_t> strides_;
  std::vector<llvm::GlobalVariable*> tiles_smem_;
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
