// Row-stitched kernels: a group of threads owns whole rows and, for each row, runs one pass
// per phase of reduces, then one pass that writes the row's outputs.
//
// Reuse follows AStitch's schemes: a reduce result reaches the row's threads through warp
// shuffles (threads_per_row <= 32) or a shared-memory slot per warp (a block per row); row
// values read by several passes stay in registers when each thread holds a fixed number
// of a row's elements (mapping.values_per_thread > 0), and are read again otherwise. What
// stays is the layout's kept values: x + bias rather than x where later passes read x only
// through the sum. A value with one element per row that loads from memory (the one-pass
// statistics' shift) is computed once per row and pass, not once per element.
// A rescaled sum (softmax's sum of exp(x - max)) that shares its max's pass keeps, per
// thread, its sum relative to the thread's running max: after each group of elements (a
// vector in loop mode) the sum is rescaled by exp(old max - new max) and the group's terms
// are added at the new max. Once the row's max is known, each thread rescales its sum to it
// and the sums combine as any other.
//
// Column reduces (row_stitch.h) follow the global scheme: each thread accumulates its
// columns over the rows it visits in registers, the row groups of a block combine theirs in
// shared memory, each block stores one partial per column in the workspace, and after a
// grid barrier a warp per column combines the blocks' partials (reduction.h).
#include <llvm/IR/InlineAsm.h>

#include <algorithm>
#include <functional>
#include <map>

#include "dtype_lowering.h"
#include "emitters.h"
#include "index_alignment.h"
#include "machine_functions.h"
#include "reduction.h"
#include "row_tile_stager.h"
#include "stitch/plan/row_stitch.h"

namespace stitch::codegen {
namespace {

class RowStitchEmitter {
 public:
  RowStitchEmitter(KernelContext& kc, const RowStitchLayout& layout)
      : kc_(kc), b_(kc.b), m_(kc.spec.mapping), layout_(layout), em_(kc) {}

  StatusOr<EmittedNest> Emit() {
    STITCH_RETURN_IF_ERROR(CheckRowLengthFixed());
    for (const auto& phase : layout_.phases) {
      for (int id : phase) {
        STITCH_ASSIGN_OR_RETURN(ReduceInfo r, MakeReduceInfo(kc_, id));
        r.acc = EntryAlloca(kc_, r.acc_ty, "acc");
        reduces_[id] = r;
        results_[id] = EntryAlloca(kc_, r.acc_ty, "row_result");
      }
    }
    for (const RescaledSum& rs : layout_.rescaled_sums) {
      if (!InOnePass(layout_, rs)) continue;
      max_of_sum_[rs.sum_reduce] = rs.max_reduce;
      rescaled_at_[rs.sum_reduce] = EntryAlloca(kc_, reduces_[rs.max_reduce].acc_ty, "rescaled_at");
    }
    for (int v : layout_.row_invariants) {
      invariant_slot_[v] =
          EntryAlloca(kc_, ComputeType(kc_.ctx, kc_.graph.nodes[v].shape.dtype), "row_invariant");
    }
    STITCH_RETURN_IF_ERROR(CheckSharedRow());
    if (m_.dynamic_shared_bytes == 0) {
      for (int c : layout_.kept) {
        llvm::Type* ty = ComputeType(kc_.ctx, kc_.graph.nodes[c].shape.dtype);
        for (int j = 0; j < m_.values_per_thread; ++j) {
          llvm::AllocaInst* slot = EntryAlloca(kc_, ty, "row_cache");
          cache_[c].push_back({slot, ty, slot->getAlign()});
        }
      }
    }
    EmittedNest nest;
    nest.launch = m_.launch;
    nest.dynamic_shared_bytes = m_.dynamic_shared_bytes;
    STITCH_RETURN_IF_ERROR(InitColumnReduces());
    STITCH_RETURN_IF_ERROR(EmitIndependentOutputs());
    if (m_.transpose_tile >= 0) {
      if (m_.threads_per_row > 32) STITCH_RETURN_IF_ERROR(AllocateSlots(nest.shared_bytes));
      STITCH_RETURN_IF_ERROR(EmitTileRows(nest.shared_bytes));
    } else if (m_.staged_row_spans && !kc_.Varies(HeroInput())) {
      STITCH_RETURN_IF_ERROR(EmitStagedRows(nest.shared_bytes));
    } else if (m_.threads_per_row <= 32) {
      STITCH_RETURN_IF_ERROR(EmitWarpRows());
    } else {
      STITCH_RETURN_IF_ERROR(AllocateSlots(nest.shared_bytes));
      STITCH_RETURN_IF_ERROR(EmitBlockRows());
    }
    STITCH_RETURN_IF_ERROR(EmitColumnReduces(nest));
    return nest;
  }

 private:
  int64_t rows() const { return layout_.geometry.rows; }
  // The layout's kept values a thread keeps: none in a resident row tile, whose every pass
  // reads the rows from the tile.
  size_t KeptCount() const { return m_.resident_row_tile() ? 0 : layout_.kept.size(); }
  int64_t row_len() const { return layout_.geometry.row_len; }
  // The rows of this run: a shape-generic kernel's rows follow the extent, and its rows keep
  // their length (CheckRowLengthFixed).
  llvm::Value* RunRows() { return kc_.RunCount(rows(), kc_.Varies(HeroInput())); }
  int HeroInput() const { return kc_.graph.nodes[kc_.spec.hero].operands[0]; }

  // A row's length picks the thread mapping and the values each thread keeps, so it must
  // not follow the extent: the extent may only count rows.
  Status CheckRowLengthFixed() const {
    if (!kc_.Varies(HeroInput())) return Status::Ok();
    const std::vector<int64_t>& reduced = kc_.graph.nodes[kc_.spec.hero].dimensions;
    if (std::find(reduced.begin(), reduced.end(), 0) == reduced.end()) return Status::Ok();
    return Unimplemented("kernel " + kc_.spec.name + ": " + DescribeNode(kc_.graph, kc_.spec.hero) +
                         " reduces the varying dimension 0 inside its rows; a row-stitched " +
                         "kernel's row length cannot vary");
  }

  // Several rows per warp (or a warp per row): lanes [sub * tpr, (sub + 1) * tpr) own row
  // `group * rows_per_warp + sub`. Every lane runs the same iterations, so full-mask
  // shuffles are executed by the whole warp.
  Status EmitWarpRows() {
    // A warp's next row is a grid's worth of rows on (EmitWarpRowLoop).
    const int64_t rows_per_grid_step = int64_t{m_.launch.block[1]} * (32 / m_.threads_per_row);
    return EmitWarpRowLoop(
        kc_, RunRows(), m_.threads_per_row, m_.launch.block[1],
        [&](llvm::Value* row, llvm::Value* valid, llvm::Value* seg) {
          seg_ = seg;
          if (m_.prefetch_next_rows) {
            next_row_ = b_.CreateAdd(
                row, b_.CreateMul(GridDim(kc_, Dim::kX), kc_.Index(rows_per_grid_step)));
            next_row_valid_ = b_.CreateICmpSLT(next_row_, RunRows());
          }
          return EmitRow(row, valid);
        });
  }

  // Asks L2 for this thread's share of its next row of each row-space input
  // (ThreadMapping::prefetch_next_rows): one address per vector of its register positions,
  // a position past the row's end clamped to its last element.
  Status PrefetchNextRow() {
    if (next_row_ == nullptr) return Status::Ok();
    return EmitIf(kc_, "prefetch", next_row_valid_, [&]() -> Status {
      llvm::Value* base = b_.CreateMul(next_row_, kc_.Index(row_len()));
      llvm::Value* last = kc_.Index(row_len() - 1);
      for (int id : kc_.spec.inputs) {
        const Shape& shape = kc_.graph.nodes[id].shape;
        auto buffer = kc_.buffers.find(id);
        // Row-space inputs are read in row order (as RowSpanStagingOf takes them to be);
        // per-row and per-column ones stay in the caches.
        if (shape.elements() != rows() * row_len() || buffer == kc_.buffers.end()) continue;
        llvm::Type* element = StorageType(kc_.ctx, shape.dtype);
        for (int j = 0; j < m_.values_per_thread; j += static_cast<int>(width())) {
          llvm::Value* col = ColumnOf(seg_, j);
          col = b_.CreateSelect(b_.CreateICmpSLT(col, last), col, last);
          EmitL2Prefetch(b_, b_.CreateInBoundsGEP(element, buffer->second,
                                                  b_.CreateAdd(base, col, "", true, true)));
        }
      }
      return Status::Ok();
    });
  }

  // Outputs unrelated to the rows: a grid-stride loop over each one's elements, using
  // every thread of the launch.
  Status EmitIndependentOutputs() {
    if (layout_.independent_outputs.empty()) return Status::Ok();
    const int64_t block = int64_t{m_.launch.block[0]} * m_.launch.block[1];
    llvm::Value* tid =
        b_.CreateAdd(b_.CreateMul(ThreadIdx(kc_, Dim::kY), kc_.Index(m_.launch.block[0])),
                     ThreadIdx(kc_, Dim::kX));
    llvm::Value* first = b_.CreateAdd(b_.CreateMul(BlockIdx(kc_, Dim::kX), kc_.Index(block)), tid);
    llvm::Value* stride = b_.CreateMul(GridDim(kc_, Dim::kX), kc_.Index(block));
    for (int o : layout_.independent_outputs) {
      const int64_t n = kc_.graph.nodes[o].shape.elements();
      STITCH_RETURN_IF_ERROR(EmitForLoop(kc_, "independent", first, kc_.RunCount(n, kc_.Varies(o)),
                                         stride, [&](llvm::Value* i) {
                                           em_.ResetScope();
                                           return StoreOutput(o, i);
                                         }));
    }
    return Status::Ok();
  }

  // Lays out a row kept in shared memory (ThreadMapping::dynamic_shared_bytes) and checks it:
  // one row per block, at most the bytes the launch gives, and its values' compute types
  // taking the bytes the planner counted for them.
  Status CheckSharedRow() {
    if (m_.dynamic_shared_bytes == 0 || m_.resident_row_tile()) return Status::Ok();
    const std::string k = "kernel " + kc_.spec.name;
    if (m_.threads_per_row <= 32 || m_.rows_per_block != 1 || m_.values_per_thread <= 0 ||
        !layout_.column_reduces.empty()) {
      return InvalidArgument(k + ": a row kept in shared memory needs a block per row, " +
                             "values_per_thread > 0, and no column reduce");
    }
    shared_regions_ = SharedRowRegionsOf(kc_.graph, layout_);
    if (shared_regions_.bytes > int64_t{m_.dynamic_shared_bytes}) {
      return InvalidArgument(k + ": its row's kept values take " +
                             std::to_string(shared_regions_.bytes) +
                             " bytes of shared memory, more than the mapping's " +
                             std::to_string(m_.dynamic_shared_bytes));
    }
    for (int c : layout_.kept) {
      const DType t = kc_.graph.nodes[c].shape.dtype;
      const uint64_t bytes =
          kc_.module.getDataLayout().getTypeAllocSize(ComputeType(kc_.ctx, t)).getFixedValue();
      if (bytes != static_cast<uint64_t>(KeptValueBytes(t))) {
        return Internal(k + ": " + DescribeNode(kc_.graph, c) + " computes in " +
                        std::to_string(bytes) + " bytes, not the " +
                        std::to_string(KeptValueBytes(t)) + " its shared-memory region counts");
      }
    }
    return Status::Ok();
  }

  // The slots of a row kept in shared memory: kept value c's position j of the thread at
  // seg_ is element ColumnOf(seg_, j) of c's region. They are the same for every row, as a
  // block holds one row at a time, and only their thread reads them.
  void MakeSharedSlots() {
    llvm::GlobalVariable* smem = DynamicSharedMemory(kc_);
    for (size_t c = 0; c < layout_.kept.size(); ++c) {
      const DType t = kc_.graph.nodes[layout_.kept[c]].shape.dtype;
      llvm::Type* ty = ComputeType(kc_.ctx, t);
      llvm::Value* region = b_.CreateConstInBoundsGEP1_64(
          b_.getInt8Ty(), smem, static_cast<uint64_t>(shared_regions_.offsets[c]));
      std::vector<ElementalEmitter::Slot>& slots = cache_[layout_.kept[c]];
      for (int j = 0; j < m_.values_per_thread; ++j) {
        llvm::Value* col = ColumnOf(seg_, j);
        const uint64_t align = ElementAlignment(col, static_cast<uint64_t>(KeptValueBytes(t)));
        slots.push_back({b_.CreateInBoundsGEP(ty, region, col), ty, llvm::Align(align)});
      }
    }
  }

  // A block per row: partial results of each warp meet in shared memory.
  Status EmitBlockRows() {
    seg_ = ThreadIdx(kc_, Dim::kX);
    lane_ = b_.CreateURem(seg_, kc_.Index(32));
    warp_ = b_.CreateUDiv(seg_, kc_.Index(32));
    if (m_.dynamic_shared_bytes > 0) MakeSharedSlots();
    return EmitForLoop(kc_, "row", BlockIdx(kc_, Dim::kX), RunRows(), GridDim(kc_, Dim::kX),
                       [&](llvm::Value* row) -> Status {
                         STITCH_RETURN_IF_ERROR(EmitRow(row, b_.getTrue()));
                         // The next row reuses the warp slots.
                         Barrier(kc_);
                         return Status::Ok();
                       });
  }

  // Row tiles (ThreadMapping::transpose_tile): a block takes rows_per_block rows adjacent in
  // the transposed operand per pass, threads_per_row threads each, stages them into registers
  // round by round through shared memory (RowTileStaging) and then runs their passes from
  // registers. A shape-generic kernel walks its rows in order instead, rows_per_block per
  // pass: the tiles are laid out for the graph's exact sizes.
  Status EmitTileRows(uint32_t& shared_bytes) {
    llvm::Value* tid = LinearThreadIdx(kc_);
    const int64_t tpr = m_.threads_per_row;
    seg_ = b_.CreateURem(tid, kc_.Index(tpr));
    lane_ = b_.CreateURem(tid, kc_.Index(32));
    warp_ = b_.CreateUDiv(tid, kc_.Index(32));
    llvm::Value* row_in_tile = b_.CreateUDiv(tid, kc_.Index(tpr));
    const int64_t per_block = m_.rows_per_block;
    if (kc_.Varies(HeroInput())) {
      llvm::Value* groups =
          b_.CreateUDiv(b_.CreateAdd(RunRows(), kc_.Index(per_block - 1)), kc_.Index(per_block));
      return EmitForLoop(kc_, "rows", BlockIdx(kc_, Dim::kX), groups, GridDim(kc_, Dim::kX),
                         [&](llvm::Value* group) -> Status {
                           llvm::Value* row =
                               b_.CreateAdd(b_.CreateMul(group, kc_.Index(per_block)), row_in_tile);
                           STITCH_RETURN_IF_ERROR(EmitRow(row, b_.CreateICmpSLT(row, RunRows())));
                           Barrier(kc_);
                           return Status::Ok();
                         });
    }
    RowTileStager stager(kc_, em_, tid, shared_bytes);
    if (stager.Resident()) return EmitResidentTiles(stager, row_in_tile);
    const int transpose = m_.transpose_tile;
    llvm::Type* ty = ComputeType(kc_.ctx, kc_.graph.nodes[transpose].shape.dtype);
    std::vector<llvm::AllocaInst*> staged;
    for (int j = 0; j < m_.values_per_thread; ++j) staged.push_back(EntryAlloca(kc_, ty, "staged"));
    return EmitForLoop(kc_, "tile", BlockIdx(kc_, Dim::kX), kc_.Index(stager.Tiles()),
                       GridDim(kc_, Dim::kX), [&](llvm::Value* tile) -> Status {
                         const TileOrigin origin = stager.OriginOf(tile);
                         SetRowPositions(stager.RowOf(origin, row_in_tile), b_.getTrue());
                         stager.LoadTile(origin);
                         for (int64_t round = 0; round < stager.Rounds(); ++round) {
                           STITCH_RETURN_IF_ERROR(stager.ComputeRound(round));
                           Barrier(kc_);
                           stager.ReadRound(row_in_tile, seg_, round, staged);
                           // The next round, or the next tile, overwrites the tile.
                           Barrier(kc_);
                         }
                         for (size_t j = 0; j < staged.size(); ++j)
                           em_.Pin(transpose, lins_[j], staged[j]);
                         return EmitRowPasses();
                       });
  }

  // Rows staged in spans (ThreadMapping::staged_row_spans): per pass a block copies the span
  // of its consecutive rows of each staged input into shared memory in 16-byte vectors, runs
  // the rows' passes on that copy, leaving the staged outputs' elements in shared memory, and
  // copies those out in 16-byte vectors. The spans hold the buffers' own bytes, so the copies
  // convert nothing and each element widens or narrows once, where it is read or written.
  // Every thread runs every pass, so the barriers and the rows' full-warp shuffles see the
  // whole block. A shape-generic kernel walks its rows as a plain one (the spans are laid out
  // for the graph's exact sizes).
  Status EmitStagedRows(uint32_t& shared_bytes) {
    spans_ = RowSpanStagingOf(kc_.graph, kc_.spec, layout_);
    if (spans_.span == 0) {
      return InvalidArgument("kernel " + kc_.spec.name +
                             ": staged_row_spans, but its rows cannot be staged in spans");
    }
    for (const std::vector<int>* staged : {&spans_.inputs, &spans_.outputs}) {
      for (int id : *staged) {
        const DType dtype = kc_.graph.nodes[id].shape.dtype;
        llvm::GlobalVariable* span = SharedArray(kc_, StorageType(kc_.ctx, dtype),
                                                 static_cast<uint64_t>(spans_.span), "row_span");
        span->setAlignment(llvm::Align(kMaxVectorBytes));
        (staged == &spans_.inputs ? span_in_ : span_out_)[id] = span;
        shared_bytes += static_cast<uint32_t>(spans_.span * DTypeBytes(dtype));
      }
    }
    llvm::Value* tid = LinearThreadIdx(kc_);
    const int64_t tpr = m_.threads_per_row;
    seg_ = b_.CreateURem(tid, kc_.Index(tpr));
    llvm::Value* row_in_block = b_.CreateUDiv(tid, kc_.Index(tpr));
    const int64_t groups = (rows() + spans_.rows - 1) / spans_.rows;
    return EmitForLoop(
        kc_, "span", BlockIdx(kc_, Dim::kX), kc_.Index(groups), GridDim(kc_, Dim::kX),
        [&](llvm::Value* group) -> Status {
          span_first_ = b_.CreateMul(group, kc_.Index(spans_.span), "", true, true);
          STITCH_RETURN_IF_ERROR(CopySpans(tid, /*in=*/true));
          Barrier(kc_);
          llvm::Value* row =
              b_.CreateAdd(b_.CreateMul(group, kc_.Index(spans_.rows)), row_in_block);
          SetRowPositions(row, b_.CreateICmpSLT(row, kc_.Index(rows())));
          // Each register position's element within the span: its row's place in the block's
          // rows, and its column.
          llvm::Value* row_base = b_.CreateMul(row_in_block, kc_.Index(row_len()), "", true, true);
          span_offset_.clear();
          for (size_t j = 0; j < lins_.size(); ++j) {
            span_offset_[lins_[j]] =
                b_.CreateAdd(row_base, ColumnOf(seg_, static_cast<int64_t>(j)), "", true, true);
          }
          for (const auto& [id, span] : span_in_) {
            for (llvm::Value* lin : lins_) em_.Pin(id, lin, SpanSlot(id, span, span_offset_[lin]));
          }
          STITCH_RETURN_IF_ERROR(EmitRowPasses());
          // The copy out reads what every thread left; the next span overwrites the copies in.
          Barrier(kc_);
          return CopySpans(tid, /*in=*/false);
        });
  }

  // Copies the current span of each staged input into shared memory (`in`) or of each staged
  // output out of it, a 16-byte vector at a time, vector `tid + i x block` of the span for
  // each i. Every vector a thread copies in is loaded before any is stored, so they are in
  // flight together; a vector past the buffer's end (in the last span of rows) loads the
  // span's last one again, in bounds, and stores nothing.
  Status CopySpans(llvm::Value* tid, bool in) {
    const int64_t block = static_cast<int64_t>(m_.launch.block_threads());
    llvm::Type* vector = llvm::FixedVectorType::get(b_.getInt32Ty(), kMaxVectorBytes / 4);
    const auto& outs = kc_.spec.outputs;
    struct Copy {
      llvm::Value* shared;
      llvm::Value* global;
      llvm::Value* copies;
      llvm::Value* loaded = nullptr;
    };
    std::vector<Copy> copies;
    for (const auto& [id, span] : in ? span_in_ : span_out_) {
      const int64_t bytes = DTypeBytes(kc_.graph.nodes[id].shape.dtype);
      llvm::Type* element = StorageType(kc_.ctx, kc_.graph.nodes[id].shape.dtype);
      const int64_t per_vector = kMaxVectorBytes / bytes;
      llvm::Value* buffer = in ? kc_.buffers.at(id)
                               : kc_.output_buffers[static_cast<size_t>(
                                     std::find(outs.begin(), outs.end(), id) - outs.begin())];
      // The span's vectors inside the buffer: all of them but in the last span.
      llvm::Value* left = b_.CreateSub(kc_.Index(rows() * row_len()), span_first_);
      llvm::Value* inside =
          b_.CreateUDiv(b_.CreateSelect(b_.CreateICmpULT(left, kc_.Index(spans_.span)), left,
                                        kc_.Index(spans_.span)),
                        kc_.Index(per_vector));
      const int64_t vectors = spans_.span / per_vector;
      for (int64_t i = 0; i < (vectors + block - 1) / block; ++i) {
        llvm::Value* v = b_.CreateAdd(tid, kc_.Index(i * block), "", true, true);
        llvm::Value* copies_it = b_.CreateICmpULT(v, inside);
        llvm::Value* at =
            b_.CreateMul(in ? b_.CreateSelect(copies_it, v, b_.CreateSub(inside, kc_.Index(1))) : v,
                         kc_.Index(per_vector), "", true, true);
        Copy c{b_.CreateInBoundsGEP(span->getValueType(), span, {kc_.Index(0), at}),
               b_.CreateInBoundsGEP(element, buffer, b_.CreateAdd(span_first_, at, "", true, true)),
               copies_it};
        if (in) c.loaded = b_.CreateAlignedLoad(vector, c.global, llvm::Align(kMaxVectorBytes));
        copies.push_back(c);
      }
    }
    for (const Copy& c : copies) {
      STITCH_RETURN_IF_ERROR(EmitIf(kc_, in ? "span_in" : "span_out", c.copies, [&]() -> Status {
        if (in) {
          b_.CreateAlignedStore(c.loaded, c.shared, llvm::Align(kMaxVectorBytes));
        } else {
          b_.CreateAlignedStore(
              b_.CreateAlignedLoad(vector, c.shared, llvm::Align(kMaxVectorBytes)), c.global,
              llvm::Align(kMaxVectorBytes));
        }
        return Status::Ok();
      }));
    }
    return Status::Ok();
  }

  // The slot of staged buffer `id`'s element `at` of the current span, in its storage type.
  ElementalEmitter::Slot SpanSlot(int id, llvm::GlobalVariable* span, llvm::Value* at) {
    const DType dtype = kc_.graph.nodes[id].shape.dtype;
    llvm::Type* element = StorageType(kc_.ctx, dtype);
    llvm::Value* address =
        b_.CreateInBoundsGEP(span->getValueType(), span, {kc_.Index(0), at}, "span_slot");
    return {address, element, llvm::Align(static_cast<uint64_t>(DTypeBytes(dtype))), dtype};
  }

  // Resident row tiles: each tile is staged whole into shared memory, and after one barrier
  // the row's passes read the transpose's values at the thread's positions from there.
  Status EmitResidentTiles(RowTileStager& stager, llvm::Value* row_in_tile) {
    const int transpose = m_.transpose_tile;
    return EmitForLoop(kc_, "tile", BlockIdx(kc_, Dim::kX), kc_.Index(stager.Tiles()),
                       GridDim(kc_, Dim::kX), [&](llvm::Value* tile) -> Status {
                         const TileOrigin origin = stager.OriginOf(tile);
                         SetRowPositions(stager.RowOf(origin, row_in_tile), b_.getTrue());
                         STITCH_RETURN_IF_ERROR(stager.StageTile(origin));
                         Barrier(kc_);
                         for (size_t j = 0; j < lins_.size(); ++j) {
                           em_.Pin(
                               transpose, lins_[j],
                               stager.SlotOf(row_in_tile, ColumnOf(seg_, static_cast<int64_t>(j))));
                         }
                         STITCH_RETURN_IF_ERROR(EmitRowPasses());
                         // The next tile overwrites the tile.
                         Barrier(kc_);
                         return Status::Ok();
                       });
  }

  // A slot per warp of the block and reduce.
  Status AllocateSlots(uint32_t& shared_bytes) {
    const uint64_t warps = m_.launch.block_threads() / 32;
    for (auto& [id, r] : reduces_) {
      llvm::Type* st = SharedType(r.acc_ty);
      r.smem = SharedArray(kc_, st, warps, "row_partials");
      shared_bytes +=
          static_cast<uint32_t>(kc_.module.getDataLayout().getTypeAllocSize(st) * warps);
    }
    return Status::Ok();
  }

  // Checks the mapping a kernel with column reduces needs and sets every thread's
  // accumulators to the identity before it visits its first row.
  Status InitColumnReduces() {
    if (layout_.column_reduces.empty()) return Status::Ok();
    const std::string k = "kernel " + kc_.spec.name;
    if (m_.values_per_thread <= 0) {
      return InvalidArgument(k + ": column reduces need values_per_thread > 0");
    }
    if (kc_.workspace == nullptr) {
      return InvalidArgument(k + ": column reduces need the workspace of a global_stitch kernel");
    }
    if (m_.reduce_chunks != static_cast<int>(m_.launch.grid[0])) {
      return InvalidArgument(k + ": column reduces need reduce_chunks == the grid's " +
                             std::to_string(m_.launch.grid[0]) + " blocks");
    }
    column_.geometry.kept = row_len();
    column_.geometry.reduced = rows();
    for (int id : layout_.column_reduces) {
      STITCH_ASSIGN_OR_RETURN(ReduceInfo r, MakeReduceInfo(kc_, id));
      column_.reduces.push_back(r);
      std::vector<llvm::AllocaInst*>& accs = column_acc_[id];
      for (int j = 0; j < m_.values_per_thread; ++j) {
        accs.push_back(EntryAlloca(kc_, r.acc_ty, "column_acc"));
        b_.CreateStore(Identity(b_, r), accs.back());
      }
    }
    const auto& outs = kc_.spec.outputs;
    for (int o : layout_.column_outputs) {
      column_.kept_outputs.push_back(
          static_cast<size_t>(std::find(outs.begin(), outs.end(), o) - outs.begin()));
    }
    return Status::Ok();
  }

  // Adds this thread's element at register position j to its column accumulators.
  Status AccumulateColumns(llvm::Value* lin, size_t j) {
    for (const ReduceInfo& r : column_.reduces) {
      STITCH_ASSIGN_OR_RETURN(llvm::Value * v, em_.Emit(r.input, IrIndex{{}, lin}));
      llvm::AllocaInst* acc = column_acc_[r.node][j];
      b_.CreateStore(Combine(b_, r, b_.CreateLoad(r.acc_ty, acc), v), acc);
    }
    return Status::Ok();
  }

  // After the last row: one partial per block and column into the workspace, then the
  // grid-wide combine that writes the column outputs.
  Status EmitColumnReduces(EmittedNest& nest) {
    if (column_.reduces.empty()) return Status::Ok();
    STITCH_ASSIGN_OR_RETURN(PartialArrays arrays, LayoutPartials(kc_, column_, m_.launch.grid[0]));
    nest.workspace_end = arrays.end_offset;
    const int tpr = m_.threads_per_row;
    const uint64_t block = m_.launch.block_threads();
    const int64_t groups = static_cast<int64_t>(block) / tpr;
    llvm::Value* chunk = BlockIdx(kc_, Dim::kX);
    // A block's partials go to the chunk of its index: the arrays have one chunk per block of
    // the grid this kernel was scheduled for (InitColumnReduces checks it). The store is
    // masked to those chunks as well, so a launch on a larger grid than the bundle's cannot
    // write past the arrays; the combine then reads the chunks that exist.
    llvm::Value* chunk_in_range = b_.CreateICmpSLT(chunk, kc_.Index(arrays.chunks));
    if (groups == 1) {
      for (int j = 0; j < m_.values_per_thread; ++j) {
        llvm::Value* k = ColumnOf(seg_, j);
        std::vector<llvm::Value*> partials;
        for (const ReduceInfo& r : column_.reduces) {
          partials.push_back(b_.CreateLoad(r.acc_ty, column_acc_[r.node][j]));
        }
        STITCH_RETURN_IF_ERROR(EmitIf(
            kc_, "partial", b_.CreateAnd(chunk_in_range, b_.CreateICmpSLT(k, kc_.Index(row_len()))),
            [&]() -> Status {
              StorePartials(kc_, column_, arrays, partials, chunk, k);
              return Status::Ok();
            }));
      }
    } else {
      STITCH_RETURN_IF_ERROR(
          CombineRowGroups(arrays, groups, chunk, chunk_in_range, nest.shared_bytes));
    }
    ElementalEmitter combine(kc_);
    return EmitCombinePartials(kc_, combine, column_, arrays);
  }

  // Several row groups per block hold partials of the same columns: thread seg of group g
  // publishes at slot g * tpr + seg (its linear thread index), and the first group's
  // threads combine the groups column by column.
  Status CombineRowGroups(const PartialArrays& arrays, int64_t groups, llvm::Value* chunk,
                          llvm::Value* chunk_in_range, uint32_t& shared_bytes) {
    const int tpr = m_.threads_per_row;
    const uint64_t block = m_.launch.block_threads();
    std::vector<llvm::GlobalVariable*> slots;
    for (const ReduceInfo& r : column_.reduces) {
      llvm::Type* st = SharedType(r.acc_ty);
      slots.push_back(SharedArray(kc_, st, block, "column_groups"));
      shared_bytes +=
          static_cast<uint32_t>(kc_.module.getDataLayout().getTypeAllocSize(st) * block);
    }
    llvm::Value* tid = LinearThreadIdx(kc_);
    std::vector<llvm::AllocaInst*> totals;
    for (const ReduceInfo& r : column_.reduces) {
      totals.push_back(EntryAlloca(kc_, r.acc_ty, "column_total"));
    }
    for (int j = 0; j < m_.values_per_thread; ++j) {
      for (size_t i = 0; i < column_.reduces.size(); ++i) {
        const ReduceInfo& r = column_.reduces[i];
        llvm::Type* st = SharedType(r.acc_ty);
        llvm::Value* v = b_.CreateLoad(r.acc_ty, column_acc_[r.node][static_cast<size_t>(j)]);
        b_.CreateStore(ToShared(b_, v), b_.CreateInBoundsGEP(st, slots[i], {tid}));
      }
      Barrier(kc_);
      llvm::Value* k = ColumnOf(tid, j);
      llvm::Value* writer =
          b_.CreateAnd(chunk_in_range, b_.CreateAnd(b_.CreateICmpSLT(tid, kc_.Index(tpr)),
                                                    b_.CreateICmpSLT(k, kc_.Index(row_len()))));
      STITCH_RETURN_IF_ERROR(EmitIf(kc_, "groups", writer, [&]() -> Status {
        for (size_t i = 0; i < column_.reduces.size(); ++i) {
          b_.CreateStore(Identity(b_, column_.reduces[i]), totals[i]);
        }
        STITCH_RETURN_IF_ERROR(EmitForLoop(
            kc_, "group", kc_.Index(0), kc_.Index(groups), kc_.Index(1),
            [&](llvm::Value* g) -> Status {
              llvm::Value* slot = b_.CreateAdd(b_.CreateMul(g, kc_.Index(tpr)), tid);
              for (size_t i = 0; i < column_.reduces.size(); ++i) {
                const ReduceInfo& r = column_.reduces[i];
                llvm::Type* st = SharedType(r.acc_ty);
                llvm::Value* v = FromShared(
                    b_, b_.CreateLoad(st, b_.CreateInBoundsGEP(st, slots[i], {slot})), r.acc_ty);
                b_.CreateStore(Combine(b_, r, b_.CreateLoad(r.acc_ty, totals[i]), v), totals[i]);
              }
              return Status::Ok();
            }));
        std::vector<llvm::Value*> partials;
        for (size_t i = 0; i < column_.reduces.size(); ++i) {
          partials.push_back(b_.CreateLoad(column_.reduces[i].acc_ty, totals[i]));
        }
        StorePartials(kc_, column_, arrays, partials, chunk, k);
        return Status::Ok();
      }));
      // The next position reuses the slots.
      Barrier(kc_);
    }
    return Status::Ok();
  }

  Status EmitRow(llvm::Value* row, llvm::Value* row_valid) {
    SetRowPositions(row, row_valid);
    return EmitRowPasses();
  }

  // The row this thread works on, and the linear index and guard of each of its register
  // positions (lins_, valid_). Forgets the previous row's pins.
  void SetRowPositions(llvm::Value* row, llvm::Value* row_valid) {
    row_ = row;
    row_valid_ = row_valid;
    lins_.clear();
    valid_.clear();
    em_.ClearPins();
    llvm::Value* base = b_.CreateMul(row, kc_.Index(row_len()));
    const int64_t w = width();
    for (int j = 0; j < m_.values_per_thread; j += static_cast<int>(w)) {
      llvm::Value* col = ColumnOf(seg_, j);
      for (llvm::Value* lane : em_.VectorLanes(b_.CreateAdd(base, col, "", true, true), w)) {
        lins_.push_back(lane);
      }
      // Vectors every thread's columns reach are guarded by the row alone, so they share one
      // block and their loads can all be in flight at once.
      const bool always_in_row = (j / w + 1) * m_.threads_per_row * w <= row_len();
      valid_.insert(valid_.end(), static_cast<size_t>(w),
                    always_in_row
                        ? row_valid
                        : b_.CreateAnd(row_valid, b_.CreateICmpSLT(col, kc_.Index(row_len()))));
    }
  }

  // The row's phases, then its outputs, for the row SetRowPositions set.
  Status EmitRowPasses() {
    for (size_t p = 0; p < layout_.phases.size(); ++p) {
      if (p > 0) ReadTileAgain();
      STITCH_RETURN_IF_ERROR(PinRowInvariants(static_cast<int>(p)));
      STITCH_RETURN_IF_ERROR(EmitPhase(static_cast<int>(p)));
    }
    ReadTileAgain();
    STITCH_RETURN_IF_ERROR(PinRowInvariants(static_cast<int>(layout_.phases.size())));
    std::vector<int> reads = layout_.row_space_outputs;
    for (const ReduceInfo& r : column_.reduces) reads.push_back(r.input);
    STITCH_RETURN_IF_ERROR(ForEachElement(reads, [&](llvm::Value* lin, size_t j) -> Status {
      for (int o : layout_.row_space_outputs) STITCH_RETURN_IF_ERROR(QueueOutput(o, lin));
      return AccumulateColumns(lin, j);
    }));
    if (layout_.row_outputs.empty()) return Status::Ok();
    llvm::Value* leader = b_.CreateAnd(row_valid_, b_.CreateICmpEQ(seg_, kc_.Index(0)));
    return EmitIf(kc_, "row_out", leader, [&]() -> Status {
      em_.ResetScope();
      for (int o : layout_.row_outputs) STITCH_RETURN_IF_ERROR(StoreOutput(o, row_));
      return Status::Ok();
    });
  }

  // A resident row tile's passes each read the tile: nothing stores to it between them, so
  // without a fence LLVM would keep the first pass's reads in registers for the later ones,
  // the thread's whole share of its rows at once, which the tile is there to avoid.
  void ReadTileAgain() {
    if (!m_.resident_row_tile()) return;
    auto* fence = llvm::InlineAsm::get(llvm::FunctionType::get(b_.getVoidTy(), false), "",
                                       "~{memory}", /*hasSideEffects=*/true);
    b_.CreateCall(fence);
  }

  // Computes the row invariants that pass `pass` reads, once for the current row, and makes
  // the pass's reads of them take that value. Only a row in range computes them, as only its
  // elements read them; the guard also keeps a load of an invariant (the first element of a
  // bias) from being hoisted out of the row loop, where it would hold a register throughout.
  Status PinRowInvariants(int pass) {
    std::vector<int> nodes;
    for (size_t i = 0; i < layout_.row_invariants.size(); ++i) {
      const std::vector<int>& passes = layout_.row_invariant_passes[i];
      if (std::find(passes.begin(), passes.end(), pass) != passes.end()) {
        nodes.push_back(layout_.row_invariants[i]);
      }
    }
    if (nodes.empty()) return Status::Ok();
    STITCH_RETURN_IF_ERROR(EmitIf(kc_, "row_invariants", row_valid_, [&]() -> Status {
      em_.ResetScope();
      for (int node : nodes) {
        STITCH_ASSIGN_OR_RETURN(llvm::Value * v, em_.Emit(node, IrIndex{{}, row_}));
        b_.CreateStore(v, invariant_slot_[node]);
      }
      return Status::Ok();
    }));
    for (int node : nodes) em_.PinAnyIndex(node, invariant_slot_[node]);
    return Status::Ok();
  }

  // The column of a row that register position j of the thread at `seg` holds: threads
  // take vectors of `width` consecutive elements in turn, so position j is element j % width
  // of the thread's (j / width)-th vector.
  llvm::Value* ColumnOf(llvm::Value* seg, int64_t j) {
    const int64_t w = width();
    llvm::Value* vec = b_.CreateAdd(seg, kc_.Index((j / w) * m_.threads_per_row), "", true, true);
    return b_.CreateAdd(b_.CreateMul(vec, kc_.Index(w), "", true, true), kc_.Index(j % w), "", true,
                        true);
  }

  int64_t width() const { return std::max(m_.vector_width, 1); }

  // Runs `body(linear index, register position)` for each element of the row this thread
  // owns: unrolled over the fixed positions when values stay in registers, a loop (position
  // 0) otherwise. A vector's elements share one block, where the backend can merge their
  // adjacent accesses; the stores `body` queues (QueueOutput) follow each vector's last
  // element, where a vector of sub-word elements stores as one (StoreElements).
  using GroupHook = std::function<Status(const std::vector<llvm::Value*>&)>;
  // `after_group`, when set, runs after the body of each group of elements whose loads are
  // issued together (a vector in loop mode; LoadsAtOnce positions of a row's fixed ones), with
  // their linear indices.
  Status ForEachElement(const std::vector<int>& reads,
                        const std::function<Status(llvm::Value*, size_t)>& body, int pass = -1,
                        const GroupHook& after_group = nullptr) {
    const size_t w = static_cast<size_t>(width());
    if (m_.values_per_thread > 0) {
      // Widths divide the row, so a vector is in range when its first element is; runs of
      // positions under the same guard share one block, whose loads are issued LoadsAtOnce
      // positions at a time before their math (ElementalEmitter::EmitLoads).
      const size_t loads_at_once = LoadsAtOnce(pass);
      for (size_t v = 0; v < lins_.size();) {
        size_t end = v;
        while (end < lins_.size() && valid_[end] == valid_[v]) end += w;
        STITCH_RETURN_IF_ERROR(EmitIf(kc_, "elem", valid_[v], [&]() -> Status {
          em_.ResetScope();
          for (size_t j = v; j < end; j += loads_at_once) {
            const size_t last = std::min(end, j + loads_at_once);
            const std::vector<llvm::Value*> chunk(lins_.begin() + static_cast<long>(j),
                                                  lins_.begin() + static_cast<long>(last));
            em_.EmitLoads(reads, chunk);
            for (size_t i = j; i < last; ++i) {
              STITCH_RETURN_IF_ERROR(body(lins_[i], i));
              STITCH_RETURN_IF_ERROR(StoreCached(pass, i));
              if ((i - v + 1) % w == 0) FlushOutputs();
            }
            // Rescaled sums (only where nothing is kept: a resident row tile) add each chunk's
            // terms once its max is in, so no more of the row's values stay live than a
            // chunk's.
            if (after_group) STITCH_RETURN_IF_ERROR(after_group(chunk));
          }
          return Status::Ok();
        }));
        v = end;
      }
      return Status::Ok();
    }
    llvm::Value* end = b_.CreateSelect(row_valid_, kc_.Index(row_len()), kc_.Index(0));
    llvm::Value* base = b_.CreateMul(row_, kc_.Index(row_len()));
    llvm::Value* first = b_.CreateMul(seg_, kc_.Index(width()), "", true, true);
    return EmitForLoop(kc_, "col", first, end, kc_.Index(m_.threads_per_row * width()),
                       [&](llvm::Value* col) -> Status {
                         em_.ResetScope();
                         const std::vector<llvm::Value*> lanes =
                             em_.VectorLanes(b_.CreateAdd(base, col, "", true, true), width());
                         em_.EmitLoads(reads, lanes);
                         for (llvm::Value* lane : lanes) {
                           STITCH_RETURN_IF_ERROR(body(lane, 0));
                         }
                         FlushOutputs();
                         return after_group ? after_group(lanes) : Status::Ok();
                       });
  }

  // The register positions of a pass whose loads are issued together, before any of their
  // math: all of them in the passes of reduces, so that a thread's share of the row is in
  // flight at once. The output pass of a row that keeps values in registers issues each
  // vector's loads before that vector's math instead: what it loads is mostly per-column
  // operands the SM's cache holds (gamma, beta), and all of them in flight beside the kept row
  // take more registers than the blocks per SM the mapping counts on leave a thread (#1's
  // layer norm: 78 where it has 64). A row kept in shared memory has more positions than
  // registers: its passes load loads_per_step vectors at a time, which its first stores to
  // their slots.
  size_t LoadsAtOnce(int pass) const {
    const size_t w = static_cast<size_t>(width());
    if (pass < 0 && KeptCount() > 0) return w;
    if (m_.resident_row_tile()) return w;
    if (m_.dynamic_shared_bytes > 0) return w * static_cast<size_t>(std::max(m_.loads_per_step, 1));
    return lins_.size();
  }

  // Keeps the values of cached nodes first computed in `pass` at position j.
  Status StoreCached(int pass, size_t j) {
    for (size_t c = 0; c < KeptCount(); ++c) {
      if (layout_.kept_first_pass[c] != pass) continue;
      const int node = layout_.kept[c];
      STITCH_ASSIGN_OR_RETURN(llvm::Value * v, em_.Emit(node, IrIndex{{}, lins_[j]}));
      const ElementalEmitter::Slot& slot = cache_[node][j];
      b_.CreateAlignedStore(v, slot.address, slot.align);
    }
    return Status::Ok();
  }

  Status EmitPhase(int p) {
    const std::vector<int>& phase = layout_.phases[static_cast<size_t>(p)];
    std::vector<int> reads, plain, rescaled;
    for (int id : phase) {
      b_.CreateStore(Identity(b_, reduces_[id]), reduces_[id].acc);
      reads.push_back(reduces_[id].input);
      (max_of_sum_.count(id) ? rescaled : plain).push_back(id);
    }
    for (int id : rescaled) {
      b_.CreateStore(Identity(b_, reduces_[max_of_sum_[id]]), rescaled_at_[id]);
    }
    STITCH_RETURN_IF_ERROR(ForEachElement(
        reads,
        [&](llvm::Value* lin, size_t) -> Status {
          for (int id : plain) {
            const ReduceInfo& r = reduces_[id];
            STITCH_ASSIGN_OR_RETURN(llvm::Value * v, em_.Emit(r.input, IrIndex{{}, lin}));
            llvm::Value* acc = b_.CreateLoad(r.acc_ty, r.acc);
            b_.CreateStore(Combine(b_, r, acc, v), r.acc);
          }
          return Status::Ok();
        },
        p,
        rescaled.empty() ? GroupHook() : [&](const std::vector<llvm::Value*>& group) -> Status {
          for (int id : rescaled) STITCH_RETURN_IF_ERROR(AddRescaledTerms(id, group));
          return Status::Ok();
        }));
    // The row's loads are all issued by now; its next row's may start on their way to L2.
    if (p == 0) STITCH_RETURN_IF_ERROR(PrefetchNextRow());
    // From here on, later passes read the cached values instead of recomputing them.
    for (size_t c = 0; c < KeptCount(); ++c) {
      if (layout_.kept_first_pass[c] != p) continue;
      const int node = layout_.kept[c];
      for (size_t j = 0; j < lins_.size(); ++j) em_.Pin(node, lins_[j], cache_[node][j]);
    }
    STITCH_RETURN_IF_ERROR(CombineRow(plain));
    return FinishRescaledSums(rescaled);
  }

  // Once the row's max is known: each thread's sums move from its running max to the row's,
  // then combine.
  Status FinishRescaledSums(const std::vector<int>& rescaled) {
    if (rescaled.empty()) return Status::Ok();
    for (int id : rescaled) {
      const ReduceInfo& max = reduces_[max_of_sum_[id]];
      llvm::Value* at = b_.CreateLoad(max.acc_ty, rescaled_at_[id]);
      llvm::Value* row_max = b_.CreateLoad(max.acc_ty, results_[max.node]);
      const ReduceInfo& r = reduces_[id];
      llvm::Value* sum = b_.CreateLoad(r.acc_ty, r.acc);
      b_.CreateStore(b_.CreateFMul(sum, RescaleFactor(at, row_max, r.acc_ty)), r.acc);
    }
    STITCH_RETURN_IF_ERROR(CombineRow(rescaled));
    // A row whose max is -inf sums exp(-inf - -inf) = NaN in two passes; the running sums
    // skipped those terms, so the NaN is restored here.
    for (int id : rescaled) {
      const ReduceInfo& max = reduces_[max_of_sum_[id]];
      const ReduceInfo& r = reduces_[id];
      llvm::Value* row_max = b_.CreateLoad(max.acc_ty, results_[max.node]);
      llvm::Value* total = b_.CreateLoad(r.acc_ty, results_[id]);
      llvm::Value* undefined = b_.CreateFCmpOEQ(row_max, Identity(b_, max));
      b_.CreateStore(b_.CreateSelect(undefined, llvm::ConstantFP::getNaN(r.acc_ty), total),
                     results_[id]);
    }
    return Status::Ok();
  }

  // Combines `ids`' per-thread accumulators across the row's threads and keeps each row
  // result, init included, pinned for everything emitted after.
  Status CombineRow(const std::vector<int>& ids) {
    std::vector<llvm::Value*> totals;
    for (int id : ids) {
      const ReduceInfo& r = reduces_[id];
      llvm::Value* partial = b_.CreateLoad(r.acc_ty, r.acc);
      totals.push_back(WarpAllReduce(kc_, r, partial, std::min(m_.threads_per_row, 32)));
    }
    if (m_.threads_per_row > 32) STITCH_RETURN_IF_ERROR(CombineWarps(ids, totals));
    em_.ResetScope();
    for (size_t i = 0; i < ids.size(); ++i) {
      const ReduceInfo& r = reduces_[ids[i]];
      STITCH_ASSIGN_OR_RETURN(llvm::Value * init, em_.Emit(r.init, IrIndex{{}, kc_.Index(0)}));
      b_.CreateStore(Combine(b_, r, init, totals[i]), results_[r.node]);
      em_.PinAnyIndex(r.node, results_[r.node]);
    }
    return Status::Ok();
  }

  // After a group of elements whose max the body has combined: rescales rescaled sum `id`
  // from the max it was kept at to the running max, and adds the group's terms at it. Terms
  // are skipped while the running max is -inf, where exp(x - max) would be exp(NaN).
  Status AddRescaledTerms(int id, const std::vector<llvm::Value*>& group) {
    const ReduceInfo& max = reduces_[max_of_sum_[id]];
    const ReduceInfo& r = reduces_[id];
    llvm::Value* at = b_.CreateLoad(max.acc_ty, rescaled_at_[id]);
    llvm::Value* running = b_.CreateLoad(max.acc_ty, max.acc);
    llvm::Value* sum =
        b_.CreateFMul(b_.CreateLoad(r.acc_ty, r.acc), RescaleFactor(at, running, r.acc_ty));
    // The terms read the max through the graph's own nodes, at the running max.
    em_.PinAnyIndex(max.node, max.acc);
    llvm::Value* none = b_.CreateFCmpOEQ(running, Identity(b_, max));
    for (llvm::Value* lin : group) {
      STITCH_ASSIGN_OR_RETURN(llvm::Value * term, em_.Emit(r.input, IrIndex{{}, lin}));
      sum =
          Combine(b_, r, sum, b_.CreateSelect(none, llvm::Constant::getNullValue(r.acc_ty), term));
    }
    b_.CreateStore(sum, r.acc);
    b_.CreateStore(running, rescaled_at_[id]);
    return Status::Ok();
  }

  // exp(from - to) in `ty`, exactly 1 where the two are equal (both -inf included).
  llvm::Value* RescaleFactor(llvm::Value* from, llvm::Value* to, llvm::Type* ty) {
    llvm::Value* factor = em_.Exp(b_.CreateFSub(from, to));
    factor = b_.CreateSelect(b_.CreateFCmpOEQ(from, to),
                             llvm::ConstantFP::get(from->getType(), 1.0), factor);
    return b_.CreateFPCast(factor, ty);
  }

  // Lane 0 of each warp publishes its warp's result; after one barrier every thread combines
  // those of its row's warps, so all of the row's threads hold the row's result.
  Status CombineWarps(const std::vector<int>& phase, std::vector<llvm::Value*>& totals) {
    const int warps = m_.threads_per_row / 32;
    STITCH_RETURN_IF_ERROR(
        EmitIf(kc_, "publish", b_.CreateICmpEQ(lane_, kc_.Index(0)), [&]() -> Status {
          for (size_t i = 0; i < phase.size(); ++i) {
            const ReduceInfo& r = reduces_[phase[i]];
            llvm::Type* st = SharedType(r.acc_ty);
            b_.CreateStore(ToShared(b_, totals[i]), b_.CreateInBoundsGEP(st, r.smem, {warp_}));
          }
          return Status::Ok();
        }));
    Barrier(kc_);
    // A block of several rows (a row tile) keeps each row's warps side by side.
    llvm::Value* first_slot =
        m_.rows_per_block > 1
            ? b_.CreateMul(b_.CreateUDiv(warp_, kc_.Index(warps)), kc_.Index(warps), "", true, true)
            : nullptr;
    for (size_t i = 0; i < phase.size(); ++i) {
      const ReduceInfo& r = reduces_[phase[i]];
      llvm::Type* st = SharedType(r.acc_ty);
      llvm::Value* acc = nullptr;
      for (int w = 0; w < warps; ++w) {
        llvm::Value* at =
            first_slot ? b_.CreateAdd(first_slot, kc_.Index(w), "", true, true) : kc_.Index(w);
        llvm::Value* slot = b_.CreateInBoundsGEP(st, r.smem, {at});
        llvm::Value* v = FromShared(b_, b_.CreateLoad(st, slot), r.acc_ty);
        acc = acc ? Combine(b_, r, acc, v) : v;
      }
      totals[i] = acc;
    }
    return Status::Ok();
  }

  Status StoreOutput(int node, llvm::Value* lin) {
    STITCH_RETURN_IF_ERROR(QueueOutput(node, lin));
    FlushOutputs();
    return Status::Ok();
  }

  // Computes output `node` at `lin` and stores it: sub-word elements (AccessedAsWords) once
  // FlushOutputs has the rest of their vector, the others in place, where the backend's
  // vectorizer merges them.
  Status QueueOutput(int node, llvm::Value* lin) {
    if (auto span = span_out_.find(node); span != span_out_.end()) {
      STITCH_ASSIGN_OR_RETURN(llvm::Value * v, em_.Emit(node, IrIndex{{}, lin}));
      const DType dtype = kc_.graph.nodes[node].shape.dtype;
      StoreElement(b_, dtype, v, span->second, span_offset_.at(lin));
      return Status::Ok();
    }
    const auto& outs = kc_.spec.outputs;
    const size_t slot =
        static_cast<size_t>(std::find(outs.begin(), outs.end(), node) - outs.begin());
    STITCH_ASSIGN_OR_RETURN(llvm::Value * v, em_.Emit(node, IrIndex{{}, lin}));
    const ElementStore store{kc_.graph.nodes[node].shape.dtype, v, kc_.output_buffers[slot], lin};
    if (AccessedAsWords(kc_.ctx, store.dtype)) {
      stores_.push_back(store);
    } else {
      StoreElements(b_, {store});
    }
    return Status::Ok();
  }

  void FlushOutputs() {
    StoreElements(b_, stores_);
    stores_.clear();
  }

  KernelContext& kc_;
  llvm::IRBuilder<>& b_;
  const ThreadMapping& m_;
  const RowStitchLayout& layout_;
  ElementalEmitter em_;
  std::vector<ElementStore> stores_;  // queued by QueueOutput
  std::map<int, ReduceInfo> reduces_;
  std::map<int, llvm::AllocaInst*> results_;
  // Where a row kept in shared memory holds its kept values (CheckSharedRow lays them out).
  SharedRowRegions shared_regions_;
  // Per kept value, its slot at each register position: an alloca, or shared memory.
  std::map<int, std::vector<ElementalEmitter::Slot>> cache_;
  std::map<int, llvm::AllocaInst*> invariant_slot_;  // per row invariant: the current row's
  // Rescaled sums computed in their max's pass: the max of each, and the max its running
  // sum is currently relative to.
  std::map<int, int> max_of_sum_;
  std::map<int, llvm::AllocaInst*> rescaled_at_;
  // Column reduces as a split reduction over the grid's blocks, and each thread's
  // accumulators per register position.
  ReducePlan column_;
  std::map<int, std::vector<llvm::AllocaInst*>> column_acc_;
  llvm::Value* seg_ = nullptr;   // this thread's first column in its row
  llvm::Value* lane_ = nullptr;  // block mode: lane within the warp
  llvm::Value* warp_ = nullptr;  // block mode: warp within the block
  llvm::Value* row_ = nullptr;
  llvm::Value* row_valid_ = nullptr;
  // Prefetching rows: the row this thread takes next, and whether there is one.
  llvm::Value* next_row_ = nullptr;
  llvm::Value* next_row_valid_ = nullptr;
  // Rows staged in spans: the staging, each staged buffer's span in shared memory, and the
  // linear index of the current span's first element.
  RowSpanStaging spans_;
  std::map<int, llvm::GlobalVariable*> span_in_, span_out_;
  llvm::Value* span_first_ = nullptr;
  std::map<llvm::Value*, llvm::Value*> span_offset_;  // per register position's index
  std::vector<llvm::Value*> lins_, valid_;            // per register position: index, in range
};

// A row tile's mapping covers its tiles exactly: whole warps per row, every row element in
// a register position, tiles that divide the p run, one block per tile, and a transpose
// whose output is the row space with the rows along its minor-most dimension.
Status CheckRowTile(const KernelContext& kc, const RowStitchLayout& layout) {
  const ThreadMapping& m = kc.spec.mapping;
  const Graph& g = kc.graph;
  const std::string k =
      "kernel " + kc.spec.name + ": row tile of " + DescribeNode(g, m.transpose_tile) + ": ";
  if (m.transpose_tile >= static_cast<int>(g.nodes.size()) ||
      g.nodes[m.transpose_tile].op != OpCode::kTranspose) {
    return InvalidArgument("kernel " + kc.spec.name + ": transpose_tile is not a transpose");
  }
  const Shape& shape = g.nodes[m.transpose_tile].shape;
  const RowGeometry& geo = layout.geometry;
  if (shape.elements() != geo.rows * geo.row_len || shape.dims.back() != geo.row_len) {
    return InvalidArgument(k +
                           "its output is not the row space with rows along its last dimension");
  }
  const TransposeTiles tiles = TransposeTilesOf(g, m.transpose_tile);
  const int64_t rows = m.rows_per_block;
  if (m.threads_per_row % 32 != 0 || rows < 1 || tiles.p % rows != 0 ||
      int64_t{m.values_per_thread} * m.threads_per_row != geo.row_len ||
      m.launch.block_threads() != static_cast<uint64_t>(rows * m.threads_per_row) ||
      !layout.column_reduces.empty()) {
    return InvalidArgument(k + "the mapping does not cover whole tiles of whole rows in registers");
  }
  if (m.resident_row_tile()) {
    const RowTileStaging staging = RowTileStagingOf(g, m);
    const uint64_t needed = static_cast<uint64_t>(rows * staging.row_stride) *
                            kc.module.getDataLayout()
                                .getTypeAllocSize(ComputeType(kc.ctx, shape.dtype))
                                .getFixedValue();
    if (needed > m.dynamic_shared_bytes) {
      return InvalidArgument(k + "a resident tile takes " + std::to_string(needed) +
                             " bytes of shared memory, more than the mapping's " +
                             std::to_string(m.dynamic_shared_bytes));
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<EmittedNest> EmitRowStitchKernel(KernelContext& kc) {
  STITCH_ASSIGN_OR_RETURN(RowStitchLayout layout,
                          AnalyzeRowStitch(kc.graph, kc.spec, kc.shape_class));
  const ThreadMapping& m = kc.spec.mapping;
  if (m.threads_per_row < 1 || (m.threads_per_row > 32 && m.threads_per_row % 32 != 0) ||
      (m.threads_per_row <= 32 && 32 % m.threads_per_row != 0)) {
    return InvalidArgument("kernel " + kc.spec.name + ": threads_per_row " +
                           std::to_string(m.threads_per_row) + " is not a power of two");
  }
  const int width = std::max(m.vector_width, 1);
  if (layout.geometry.row_len % width != 0 || m.values_per_thread % width != 0) {
    return InvalidArgument("kernel " + kc.spec.name + ": vector width " + std::to_string(width) +
                           " does not divide the row length and the values per thread");
  }
  if (m.transpose_tile < 0 && m.threads_per_row > 32 &&
      m.launch.block[0] != static_cast<uint32_t>(m.threads_per_row)) {
    return InvalidArgument("kernel " + kc.spec.name +
                           ": a block per row needs blockDim.x == " + "threads_per_row");
  }
  // A value cached in registers in the pass that combines a rescaled sum would be kept at
  // the running max, not the row's.
  if (m.rescaled_sums_in_one_pass && m.values_per_thread > 0 && !m.resident_row_tile()) {
    return InvalidArgument("kernel " + kc.spec.name +
                           ": rescaled sums share their max's pass only in loop mode "
                           "(values_per_thread 0) and in resident row tiles");
  }
  if (m.transpose_tile >= 0) STITCH_RETURN_IF_ERROR(CheckRowTile(kc, layout));
  if (m.prefetch_next_rows && (!m.warp_rows_in_registers() || m.staged_row_spans)) {
    return InvalidArgument("kernel " + kc.spec.name +
                           ": prefetch_next_rows needs rows of a warp or a share of one held in "
                           "registers, neither tiled nor staged");
  }
  RowStitchEmitter emitter(kc, layout);
  return emitter.Emit();
}

}  // namespace stitch::codegen
