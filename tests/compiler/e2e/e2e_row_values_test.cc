// What a row-stitched kernel computes once per row: its row invariants (the one-pass
// statistics' shift x[row, 0], computed once per row and pass instead of once per vector) and
// its kept values (the bias-added row that later passes read, kept instead of the row it
// was added to, so they load no bias again). Kernels match the interpreter on the emulator,
// including the spare rows of a last warp.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "stitch/driver/compile.h"
#include "stitch/plan/row_stitch.h"
#include "support/emulator_check.h"
#include "support/graph_builder.h"
#include "support/normalization_graphs.h"
#include "support/ptx_text.h"

namespace stitch {
namespace {

using testing::Binary;
using testing::Broadcast;
using testing::CompileToPtx;
using testing::ConstScalar;
using testing::Convert;
using testing::CountOf;
using testing::LayerNorm;
using testing::Param;
using testing::Reduce;

// A per-row scale, a row invariant whose value the outputs depend on (the statistics'
// shift cancels out of them): scaled = x * scale[row], out = scaled - mean(scaled), in `t`.
Graph RowScaledCentering(int64_t rows, int64_t cols, DType t) {
  Graph g;
  g.name = "row_scaled_centering";
  const std::vector<int64_t> dims = {rows, cols};
  int x = Param(g, {t, dims}, 0, "x");
  int scale = Param(g, {t, {rows}}, 1, "scale");
  int scaled = Binary(g, OpCode::kMul, x, Broadcast(g, scale, dims, {0}));
  if (t != DType::kF32) scaled = Convert(g, scaled, DType::kF32);
  int sum = Reduce(g, scaled, ConstScalar(g, DType::kF32, 0), {1}, ReduceKind::kSum);
  int inv_n =
      Broadcast(g, ConstScalar(g, DType::kF32, 1.0 / static_cast<double>(cols)), {rows}, {});
  int mean = Binary(g, OpCode::kMul, sum, inv_n);
  int y = Binary(g, OpCode::kSub, scaled, Broadcast(g, mean, dims, {0}));
  g.outputs = {t == DType::kF32 ? y : Convert(g, y, t)};
  return g;
}

// The one row-stitched kernel of `r` and its layout.
RowStitchLayout LayoutOf(const CompileResult& r) {
  EXPECT_EQ(r.plan.kernels.size(), 1u) << Describe(r.graph, r.plan);
  if (r.plan.kernels.size() != 1 || r.plan.kernels[0].kind != KernelKind::kRowStitch) return {};
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(r.graph, r.plan.kernels[0]);
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  return layout.ok() ? *layout : RowStitchLayout{};
}

// #4's layer norm: the shift of the one-pass statistics, x[row, 0], is computed once per row
// in each of the two passes that read it (the statistics' and the output's), where it was
// loaded once per vector a thread holds (three a pass) behind a division of the vector's
// index. The output pass's load is the statistics pass's, which the optimiser reuses: one
// 2-byte load per row.
TEST(RowValues, TheStatisticsShiftIsLoadedOncePerRowAndPass) {
  CompileResult r = CompileToPtx(LayerNorm(DType::kF16, {8192, 768}));
  const RowStitchLayout layout = LayoutOf(r);
  ASSERT_EQ(layout.row_invariants.size(), 1u);
  EXPECT_EQ(r.graph.nodes[layout.row_invariants[0]].shape.elements(), 8192);
  EXPECT_EQ(layout.row_invariant_passes[0], (std::vector<int>{0, 1}));
  ASSERT_GT(r.plan.kernels[0].mapping.values_per_thread, 0);
  EXPECT_EQ(CountOf(r.kernels[0].ptx, "ld.global.nc.b16"), 1) << r.kernels[0].ptx;
}

// #1's bias-added layer norm keeps x + bias in registers, which the output pass reads, so
// that pass loads gamma and beta only: 16-byte loads of x and bias in the statistics' pass,
// of gamma and beta in the output pass, none of the bias again.
TEST(RowValues, ALaterPassReadsTheKeptSumAndLoadsNoBiasAgain) {
  CompileResult r = CompileToPtx(LayerNorm(DType::kF32, {4096, 768}, 1, /*bias=*/true));
  const RowStitchLayout layout = LayoutOf(r);
  ASSERT_EQ(layout.cached.size(), 1u);
  EXPECT_EQ(r.graph.nodes[layout.cached[0]].op, OpCode::kParameter);
  ASSERT_EQ(layout.kept.size(), 1u);
  EXPECT_EQ(r.graph.nodes[layout.kept[0]].op, OpCode::kAdd);
  const KernelSpec& k = r.plan.kernels[0];
  ASSERT_GT(k.mapping.values_per_thread, 0);
  ASSERT_EQ(k.mapping.vector_width, 4);
  const int vectors = k.mapping.values_per_thread / k.mapping.vector_width;
  EXPECT_EQ(CountOf(r.kernels[0].ptx, "ld.global.nc.v4.f32"), 4 * vectors) << r.kernels[0].ptx;
}

// A value read by the output pass other than through the sum stays kept itself.
TEST(RowValues, AValueReadOutsideTheSumIsKeptItself) {
  Graph g = LayerNorm(DType::kF32, {4096, 768}, 1, /*bias=*/true);
  const int x = 2;  // LayerNorm's parameters: gamma, beta, x
  ASSERT_EQ(g.nodes[x].name, "x");
  g.outputs.push_back(Binary(g, OpCode::kMul, x, x));  // read in the output pass
  CompileResult r = CompileToPtx(g);
  const RowStitchLayout layout = LayoutOf(r);
  EXPECT_NE(std::find(layout.kept.begin(), layout.kept.end(), x), layout.kept.end());
}

// A per-row value that something reads at another index (here an output of twice the rows)
// is not computed once per row: its value at the current row would be wrong there.
TEST(RowValues, AValueReadAtAnotherIndexIsNotARowInvariant) {
  for (bool read_elsewhere : {false, true}) {
    SCOPED_TRACE(read_elsewhere ? "read elsewhere" : "read at the row only");
    Graph g;
    int x = Param(g, {DType::kF32, {64, 256}}, 0, "x");
    int scale = Param(g, {DType::kF32, {64}}, 1, "scale");
    int scaled = Binary(g, OpCode::kMul, x, Broadcast(g, scale, {64, 256}, {0}));
    int sum = Reduce(g, scaled, ConstScalar(g, DType::kF32, 0), {1}, ReduceKind::kSum);
    g.outputs = {Binary(g, OpCode::kSub, scaled, Broadcast(g, sum, {64, 256}, {0}))};
    if (read_elsewhere) g.outputs.push_back(Broadcast(g, scale, {64, 2}, {0}));
    CompileResult r = CompileToPtx(g);
    const RowStitchLayout layout = LayoutOf(r);
    const bool invariant = std::find(layout.row_invariants.begin(), layout.row_invariants.end(),
                                     scale) != layout.row_invariants.end();
    EXPECT_EQ(invariant, !read_elsewhere);
  }
}

// Rows in registers (with and without a bias), rows too long for them (loop mode), and row
// counts that leave spare rows in the last warp, whose invariants must not be loaded. The
// layer norms' shift cancels out of their outputs; the per-row scale does not.
TEST(RowValues, KernelsThatComputeRowValuesOnceMatchTheInterpreter) {
  struct Case {
    int64_t rows, cols;
    bool bias;
  };
  const Case cases[] = {{37, 96, false}, {37, 96, true}, {29, 768, true}, {5, 20000, true}};
  uint64_t seed = 71;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<Graph> graphs;
    for (const Case& c : cases) graphs.push_back(LayerNorm(t, {c.rows, c.cols}, 1, c.bias));
    graphs.push_back(RowScaledCentering(37, 96, t));
    graphs.push_back(RowScaledCentering(29, 768, t));
    graphs.push_back(RowScaledCentering(5, 20000, t));
    for (const Graph& g : graphs) {
      SCOPED_TRACE(g.name + " " + g.nodes[g.outputs[0]].shape.ToString() + " seed " +
                   std::to_string(seed));
      testing::EmulatorCheck check;
      EXPECT_TRUE(testing::CheckOnEmulator(g, seed++, /*random_order=*/true, &check));
      ASSERT_EQ(check.compiled.plan.kernels.size(), 1u);
      StatusOr<RowStitchLayout> layout =
          AnalyzeRowStitch(check.compiled.graph, check.compiled.plan.kernels[0]);
      ASSERT_TRUE(layout.ok()) << layout.status().ToString();
      EXPECT_EQ(layout->row_invariants.size(), 1u);
    }
  }
}

}  // namespace
}  // namespace stitch
