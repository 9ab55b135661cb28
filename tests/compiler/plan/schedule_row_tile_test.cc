// Row tiles (plan/src/schedule_row_stitch.cc, MapRowTiles and TileTransposedRows): which
// row-stitched kernels can stage a transpose a tile of rows at a time, the mapping a tile
// gets, and when the cost model takes it.
#include <gtest/gtest.h>

#include <cmath>

#include "stitch/plan/cost_model.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/schedule.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

using testing::Binary;
using testing::Broadcast;
using testing::ConstScalar;
using testing::Param;
using testing::Reduce;
using testing::Transpose;
using testing::Unary;

const GpuDevice& H100() { return *FindDevice("H100"); }

// A softmax over the last dimension of `rows_input` ([a, b, q] f32), with `extra` (an input
// of the same shape, or -1) added to its exponentials, as one row-stitched kernel.
struct SoftmaxKernel {
  Graph graph;
  KernelSpec kernel;
};

SoftmaxKernel Softmax(Graph g, int rows_input, int extra) {
  SoftmaxKernel s;
  const std::vector<int64_t> dims = g.nodes[rows_input].shape.dims;
  const int mx =
      Reduce(g, rows_input, ConstScalar(g, DType::kF32, -INFINITY), {2}, ReduceKind::kMax);
  int e =
      Unary(g, OpCode::kExp, Binary(g, OpCode::kSub, rows_input, Broadcast(g, mx, dims, {0, 1})));
  if (extra >= 0) e = Binary(g, OpCode::kAdd, e, extra);
  const int sum = Reduce(g, e, ConstScalar(g, DType::kF32, 0), {2}, ReduceKind::kSum);
  const int p = Binary(g, OpCode::kDiv, e, Broadcast(g, sum, dims, {0, 1}));
  g.outputs = {p};
  s.kernel.name = "softmax";
  s.kernel.kind = KernelKind::kRowStitch;
  s.kernel.hero = mx;
  s.kernel.outputs = {p};
  for (int id = 0; id < static_cast<int>(g.nodes.size()); ++id) {
    if (g.nodes[id].op == OpCode::kParameter) {
      s.kernel.inputs.push_back(id);
    } else {
      s.kernel.nodes.push_back(id);
    }
  }
  s.graph = std::move(g);
  return s;
}

// Scores [q, k, h] moved to [h, k, q]: each row a column of the scores.
SoftmaxKernel TransposedSoftmax(int64_t q, int64_t k, int64_t h, bool extra_in_row_order) {
  Graph g;
  const int x = Param(g, {DType::kF32, {q, k, h}}, 0, "x");
  const int t = Transpose(g, x, {2, 1, 0});
  const int extra = extra_in_row_order ? Param(g, {DType::kF32, {h, k, q}}, 1, "y") : -1;
  return Softmax(std::move(g), t, extra);
}

TEST(RowTiles, ATileKeepsWholeRowsInRegistersAndReadsNothingStrided) {
  SoftmaxKernel s = TransposedSoftmax(2048, 64, 12, false);
  ASSERT_TRUE(MapRowTiles(s.graph, s.kernel, H100(), 8, 128));
  const ThreadMapping& m = s.kernel.mapping;
  EXPECT_GE(m.transpose_tile, 0);
  EXPECT_EQ(m.rows_per_block, 8);
  EXPECT_EQ(m.threads_per_row, 128);
  EXPECT_EQ(m.launch.block_threads(), 1024u);
  EXPECT_EQ(m.values_per_thread, 2048 / 128);
  EXPECT_EQ(m.strided_input_bytes, 0);
  const RowTileStaging staging = RowTileStagingOf(s.graph, m);
  // 12 heads: rows are loaded 4 at a time; each round a vector of every thread's row.
  EXPECT_EQ(staging.p_width, 4);
  EXPECT_EQ(staging.round, 128 * m.vector_width);
  EXPECT_EQ(staging.rounds * m.vector_width, m.values_per_thread);
  EXPECT_EQ(staging.row_stride % 4, 0);
  EXPECT_GE(m.shared_bytes, static_cast<uint32_t>(8 * staging.row_stride * 4));
}

TEST(RowTiles, KernelsATileCannotServeKeepTheirMapping) {
  const GpuDevice& d = H100();
  // No transpose: the rows are the input's own.
  Graph plain;
  SoftmaxKernel rows = Softmax(plain, Param(plain, {DType::kF32, {12, 64, 256}}, 0, "x"), -1);
  rows.kernel.mapping.threads_per_row = 7;
  EXPECT_FALSE(MapRowTiles(rows.graph, rows.kernel, d, 8, 128));
  EXPECT_EQ(rows.kernel.mapping.threads_per_row, 7);
  // An input read in row order would be strided while the tile is staged.
  SoftmaxKernel mixed = TransposedSoftmax(256, 64, 12, true);
  EXPECT_FALSE(MapRowTiles(mixed.graph, mixed.kernel, d, 8, 32));
  // 6 rows of the run (2 heads x 3) do not split into tiles of 8.
  SoftmaxKernel ragged = TransposedSoftmax(256, 3, 2, false);
  EXPECT_FALSE(MapRowTiles(ragged.graph, ragged.kernel, d, 8, 32));
  // 4,096 elements a row over 64 threads is 64 values each, past the 32 a thread keeps.
  SoftmaxKernel long_rows = TransposedSoftmax(4096, 64, 12, false);
  EXPECT_FALSE(MapRowTiles(long_rows.graph, long_rows.kernel, d, 8, 64));
  // 16 rows of 128 threads is a block of 2,048.
  SoftmaxKernel wide = TransposedSoftmax(2048, 64, 12, false);
  EXPECT_FALSE(MapRowTiles(wide.graph, wide.kernel, d, 16, 128));
}

TEST(RowTiles, TheFittedModelTakesATileWhereTheStridedReadsMissL2) {
  // #13's shape: 100 MB of scores whose sectors serve rows 2048 rows apart.
  SoftmaxKernel large = TransposedSoftmax(2048, 2048, 12, false);
  ASSERT_TRUE(ScheduleKernel(large.graph, large.kernel, H100()).ok());
  EXPECT_GT(large.kernel.mapping.strided_input_bytes, 0);
  TileTransposedRows(large.graph, large.kernel, H100());
  EXPECT_GE(large.kernel.mapping.transpose_tile, 0);
  // A small one stays in L2 between a sector's uses: the strided kernel is priced no dearer.
  SoftmaxKernel small = TransposedSoftmax(256, 16, 8, false);
  ASSERT_TRUE(ScheduleKernel(small.graph, small.kernel, H100()).ok());
  TileTransposedRows(small.graph, small.kernel, H100());
  EXPECT_EQ(small.kernel.mapping.transpose_tile, -1);
}

// A tile's warps all wait for its loads behind a barrier and then compute while none of them
// loads, so only other resident blocks hide one phase behind the other.
TEST(RowTiles, OnlyOtherBlocksOnTheSmHideATilesMathBehindItsLoads) {
  const GpuDevice& d = H100();
  std::unique_ptr<CostModel> model =
      NewAnalyticalCostModel(d, CostModelParametersFor(d, kCurrentCostModel));
  auto busy = [](const KernelCost& c) { return c.seconds - c.launch_seconds - c.barrier_seconds; };
  SoftmaxKernel alone = TransposedSoftmax(2048, 2048, 12, false);
  ASSERT_TRUE(MapRowTiles(alone.graph, alone.kernel, d, 8, 128));
  alone.kernel.mapping.assembled_instructions = 700;
  const KernelCost one = model->EstimateKernel(alone.graph, alone.kernel);
  ASSERT_EQ(one.resident_blocks_per_sm, 1);
  ASSERT_GT(one.issue_seconds, 0);
  EXPECT_NEAR(busy(one), one.memory_seconds + one.issue_seconds, 1e-12);

  SoftmaxKernel paired = TransposedSoftmax(2048, 2048, 12, false);
  ASSERT_TRUE(MapRowTiles(paired.graph, paired.kernel, d, 4, 128));
  paired.kernel.mapping.assembled_instructions = 700;
  const KernelCost two = model->EstimateKernel(paired.graph, paired.kernel);
  ASSERT_EQ(two.resident_blocks_per_sm, 2);
  const double longer = std::max(two.memory_seconds, two.issue_seconds);
  const double shorter = std::min(two.memory_seconds, two.issue_seconds);
  EXPECT_NEAR(busy(two), longer + shorter / 2, 1e-12);

  // The same rows read strided, with no tile: warps of other rows load while some compute.
  SoftmaxKernel strided = TransposedSoftmax(2048, 2048, 12, false);
  ASSERT_TRUE(ScheduleKernel(strided.graph, strided.kernel, d).ok());
  ASSERT_LT(strided.kernel.mapping.transpose_tile, 0);
  strided.kernel.mapping.assembled_instructions = 700;
  const KernelCost overlapped = model->EstimateKernel(strided.graph, strided.kernel);
  EXPECT_NEAR(busy(overlapped), std::max(overlapped.memory_seconds, overlapped.issue_seconds),
              1e-12);
}

}  // namespace
}  // namespace stitch
