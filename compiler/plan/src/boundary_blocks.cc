// The blocks at the boundaries of a scheduled kernel's grid-stride loops, and the work items
// a block covers per pass.
#include <algorithm>

#include "int_math.h"
#include "stitch/plan/row_stitch.h"
#include "stitch/plan/schedule.h"

namespace stitch {
namespace {

// Records the block holding work item `last` of a loop whose item i runs in block
// (i / per_block) % grid, and the block after it.
void AddBoundary(int64_t items, int64_t per_block, uint64_t grid, std::vector<uint64_t>& out) {
  if (items <= 0 || per_block <= 0 || grid == 0) return;
  const uint64_t last = static_cast<uint64_t>((items - 1) / per_block) % grid;
  out.push_back(last);
  out.push_back((last + 1) % grid);
}

// The combine stage of a split reduction (reduction.h): a warp per kept output, numbered
// across the grid.
void AddCombineBoundary(int64_t kept, const ThreadMapping& m, std::vector<uint64_t>& out) {
  const int64_t warps_per_block =
      std::max<int64_t>(1, static_cast<int64_t>(m.launch.block_threads()) / 32);
  const int64_t warps = warps_per_block * static_cast<int64_t>(m.launch.blocks());
  if (kept <= 0) return;
  const int64_t last_warp = (kept - 1) % warps;
  out.push_back(static_cast<uint64_t>(last_warp / warps_per_block));
  out.push_back(static_cast<uint64_t>((last_warp / warps_per_block + 1) % m.launch.blocks()));
}

// A column reduction whose last block per tile combines the partials
// (SplitCombine::kLastBlock): every block that holds a chunk of the last tile (work item
// chunk x tiles + tile), so that a sample of blocks includes the tile's last arrival and runs
// its combine, whose partial loads and output stores are the kernel's other accesses.
void AddLastTileBlocks(int64_t tiles, const ThreadMapping& m, std::vector<uint64_t>& out) {
  const uint64_t grid = m.launch.blocks();
  if (tiles <= 0 || grid == 0) return;
  for (int64_t c = 0; c < m.reduce_chunks; ++c) {
    out.push_back(static_cast<uint64_t>(c * tiles + tiles - 1) % grid);
  }
}

void AddRowStitchBoundaries(const Graph& g, const KernelSpec& k, std::vector<uint64_t>& out) {
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(g, k);
  if (!layout.ok()) return;
  const ThreadMapping& m = k.mapping;
  const uint64_t grid = m.launch.blocks();
  const int64_t threads = static_cast<int64_t>(m.launch.block_threads());
  for (int o : layout->independent_outputs) {
    AddBoundary(g.nodes[o].shape.elements(), threads, grid, out);
  }
  const int64_t rows = layout->geometry.rows;
  if (m.transpose_tile >= 0) {
    AddBoundary(CeilDiv(rows, int64_t{m.rows_per_block}), 1, grid, out);  // a tile per pass
  } else if (m.threads_per_row <= 32) {
    const int64_t rows_per_warp = 32 / m.threads_per_row;
    AddBoundary(CeilDiv(rows, rows_per_warp), m.launch.block[1], grid, out);
  } else {
    AddBoundary(rows, 1, grid, out);
  }
  if (!layout->column_reduces.empty()) AddCombineBoundary(layout->geometry.row_len, m, out);
}

void AddBoundaries(const Graph& g, const KernelSpec& k, std::vector<uint64_t>& out) {
  const ThreadMapping& m = k.mapping;
  const uint64_t grid = m.launch.blocks();
  const int64_t chunks = std::max(m.reduce_chunks, 1);
  switch (k.kind) {
    case KernelKind::kLoop: {
      if (m.transpose_tile >= 0) {
        AddBoundary(m.work_items, 1, grid, out);
        return;
      }
      const int64_t n = g.nodes[k.outputs[0]].shape.elements();
      AddBoundary(n / std::max(m.vector_width, 1), static_cast<int64_t>(m.launch.block_threads()),
                  grid, out);
      return;
    }
    case KernelKind::kRowReduce:
    case KernelKind::kColumnReduce: {
      const int64_t kept = g.nodes[k.hero].shape.elements();
      const int64_t tiles = CeilDiv(kept, int64_t{32} * std::max(m.vector_width, 1));
      if (k.kind == KernelKind::kColumnReduce) {
        AddBoundary(tiles * chunks, 1, grid, out);
      } else if (m.threads_per_row <= 32) {
        AddBoundary(CeilDiv(kept, int64_t{32 / m.threads_per_row}), m.launch.block[1], grid, out);
      } else {
        AddBoundary(kept * chunks, 1, grid, out);
      }
      if (chunks > 1 && m.split_combine == ThreadMapping::SplitCombine::kGridBarrier) {
        AddCombineBoundary(kept, m, out);
      }
      if (chunks > 1 && m.split_combine == ThreadMapping::SplitCombine::kLastBlock) {
        AddLastTileBlocks(tiles, m, out);
      }
      return;
    }
    case KernelKind::kRowStitch:
      AddRowStitchBoundaries(g, k, out);
      return;
    case KernelKind::kGlobalStitch:
      for (const KernelSpec& phase : k.phases) AddBoundaries(g, phase, out);
      return;
  }
}

}  // namespace

int64_t ItemsPerPass(KernelKind kind, const ThreadMapping& m) {
  switch (kind) {
    case KernelKind::kLoop:
      // A block takes one transpose tile per pass, or each thread `loads_per_step` vectors
      // of `vector_width` elements.
      if (m.transpose_tile >= 0) return 1;
      return static_cast<int64_t>(m.launch.block_threads()) * std::max(m.vector_width, 1) *
             std::max(m.loads_per_step, 1);
    case KernelKind::kRowReduce:
    case KernelKind::kRowStitch:
      // Rows side by side in a block (several per warp, a warp each, or one per block).
      return std::max(m.rows_per_block, 1);
    case KernelKind::kColumnReduce:
      // A 32 x column_tile_y block owns one tile of 32 x vector_width kept columns at a time.
      return 1;
    case KernelKind::kGlobalStitch:
      return 1;  // priced phase by phase
  }
  return 1;
}

std::vector<uint64_t> BoundaryBlocks(const Graph& g, const KernelSpec& kernel) {
  std::vector<uint64_t> blocks;
  AddBoundaries(g, kernel, blocks);
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  return blocks;
}

}  // namespace stitch
