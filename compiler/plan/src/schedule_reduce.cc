// Row and column reductions that are kernels (or phases) of their own.
#include <algorithm>

#include "int_math.h"
#include "schedule_internal.h"

namespace stitch::internal {
namespace {

// The reduced elements of each output of a reduction kernel, and the threads that share one
// output's elements (a row's threads, or a column tile's height).
struct ReduceSpan {
  int64_t reduced = 0;
  int64_t threads = 1;
};

ReduceSpan SpanOf(const Graph& g, const KernelSpec& k) {
  const Node& h = g.nodes[k.hero];
  const int64_t outputs = h.shape.elements();
  const int64_t reduced = outputs > 0 ? g.nodes[h.operands[0]].shape.elements() / outputs : 0;
  const ThreadMapping& m = k.mapping;
  return {reduced, k.kind == KernelKind::kColumnReduce ? m.column_tile_y : m.threads_per_row};
}

}  // namespace

// Sets how many reduced elements a reduction kernel's thread loads before combining them:
// up to 4, as many as it has per row (or chunk), each an independent load in flight.
void SetLoadsPerStep(const Graph& g, KernelSpec& k) {
  ThreadMapping& m = k.mapping;
  const ReduceSpan span = SpanOf(g, k);
  const int64_t chunk = CeilDiv(span.reduced, std::max(m.reduce_chunks, 1));
  const int64_t per_thread = CeilDiv(chunk, std::max<int64_t>(span.threads, 1));
  const int loads = per_thread >= 4 ? 4 : per_thread >= 2 ? 2 : 1;
  m.load_bytes_in_flight_per_thread =
      m.load_bytes_in_flight_per_thread / std::max(m.loads_per_step, 1) * loads;
  m.loads_per_step = loads;
}

void ScheduleRowReduce(const Graph& g, KernelSpec& k, const GpuDevice& d, int block_threads) {
  const Node& h = g.nodes[k.hero];
  const int64_t rows = h.shape.elements();
  const int64_t row_len = rows > 0 ? g.nodes[h.operands[0]].shape.elements() / rows : 0;
  ThreadMapping& m = k.mapping;
  m.work_items = rows;
  if (row_len <= 512) {
    // A warp (or part of one) per row: no shared memory and no barriers.
    m.threads_per_row = std::min(NextPow2(row_len), 32);
    const int warps = block_threads > 0 ? block_threads / 32 : 8;
    m.rows_per_block = warps * (32 / m.threads_per_row);
    m.launch.block = {32, static_cast<uint32_t>(warps), 1};
    m.launch.grid = {CeilDivCapped(rows, m.rows_per_block, int64_t{d.sms} * kMaxBlocksPerSm), 1, 1};
  } else {
    const int threads = block_threads > 0  ? block_threads
                        : row_len <= 4096  ? 256
                        : row_len <= 16384 ? 512
                                           : 1024;
    m.threads_per_row = threads;
    m.rows_per_block = 1;
    m.launch.block = {static_cast<uint32_t>(threads), 1, 1};
    m.launch.grid = {CeilDivCapped(rows, 1, int64_t{d.sms} * kMaxBlocksPerSm), 1, 1};
    m.shared_bytes = static_cast<uint32_t>(8 * (threads / 32) * k.outputs.size());
    m.block_barriers_per_item = 2;
  }
  SetTraffic(g, k, rows * row_len);
  SetLoadsPerStep(g, k);
}

void ScheduleColumnReduce(const Graph& g, KernelSpec& k, const GpuDevice& d, int block_threads) {
  const Node& h = g.nodes[k.hero];
  const int64_t kept = h.shape.elements();
  const int64_t reduced = kept > 0 ? g.nodes[h.operands[0]].shape.elements() / kept : 0;
  ThreadMapping& m = k.mapping;
  const int64_t tiles = (kept + 31) / 32;
  // Few tiles: taller blocks so each SM still gets enough threads to hide latency.
  m.column_tile_y = (tiles < int64_t{d.sms} * 4 && reduced >= 256) ? 32 : 8;
  if (block_threads > 0) m.column_tile_y = block_threads / 32;
  m.launch.block = {32, static_cast<uint32_t>(m.column_tile_y), 1};
  m.launch.grid = {CeilDivCapped(tiles, 1, int64_t{d.sms} * kMaxBlocksPerSm), 1, 1};
  m.shared_bytes = static_cast<uint32_t>(8 * 32 * m.column_tile_y * k.outputs.size());
  m.block_barriers_per_item = 2;
  m.work_items = tiles;
  SetTraffic(g, k, kept * reduced);
  SetLoadsPerStep(g, k);
}

}  // namespace stitch::internal
