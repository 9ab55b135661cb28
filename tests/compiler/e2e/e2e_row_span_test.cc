// Rows staged in spans: a row-stitched kernel of a warp or a share of one per row whose rows
// are not a whole number of 16-byte vectors (suite row #14's softmax over rows of 197 f16,
// #28's row max over rows of 123 f32) copies the span of its block's consecutive rows
// through shared memory in 16-byte vectors (ThreadMapping::staged_row_spans). In f32, f16
// and bf16, with a last span that outruns the rows, the staged kernels load and store only
// 16-byte vectors of their staged buffers and match the interpreter on the emulator (threads
// in random order between barriers). Seeds are logged.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "stitch/codegen/codegen.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/plan/baseline_models.h"
#include "stitch/plan/row_stitch.h"
#include "stitch/plan/schedule.h"
#include "support/emulator_check.h"
#include "support/emulator_compare.h"
#include "support/graph_builder.h"
#include "support/ptx_text.h"

namespace stitch {
namespace {

using testing::Binary;
using testing::Broadcast;
using testing::ConstScalar;
using testing::Convert;
using testing::CountContaining;
using testing::Param;
using testing::Reduce;
using testing::ScalarAccesses;
using testing::Unary;

constexpr uint64_t kSeed = 7400;

// Softmax over the last dimension of x [rows, len] in `dtype`, computed in f32.
Graph RowSoftmax(int64_t rows, int64_t len, DType dtype) {
  Graph g;
  g.name = "row_softmax";
  const std::vector<int64_t> dims = {rows, len};
  int x = Convert(g, Param(g, {dtype, dims}, 0, "x"), DType::kF32);
  int mx = Reduce(g, x, ConstScalar(g, DType::kF32, -INFINITY), {1}, ReduceKind::kMax);
  int e = Unary(g, OpCode::kExp, Binary(g, OpCode::kSub, x, Broadcast(g, mx, dims, {0})));
  int sum = Reduce(g, e, ConstScalar(g, DType::kF32, 0), {1}, ReduceKind::kSum);
  g.outputs = {Convert(g, Binary(g, OpCode::kDiv, e, Broadcast(g, sum, dims, {0})), dtype)};
  return g;
}

// #28's kStitch pattern, two outputs of x [rows, len]: the row's max, and the row less it.
Graph RowMaxAndShift(int64_t rows, int64_t len, DType dtype) {
  Graph g;
  g.name = "row_max_and_shift";
  const std::vector<int64_t> dims = {rows, len};
  int x = Convert(g, Param(g, {dtype, dims}, 0, "x"), DType::kF32);
  int mx = Reduce(g, x, ConstScalar(g, DType::kF32, -INFINITY), {1}, ReduceKind::kMax);
  int shifted = Binary(g, OpCode::kSub, x, Broadcast(g, mx, dims, {0}));
  g.outputs = {Convert(g, mx, dtype), Convert(g, shifted, dtype)};
  return g;
}

// The one row-stitched kernel of the XLA model's plan of `g`, on the H100.
struct PlannedKernel {
  Graph graph;
  KernelSpec kernel;
};
PlannedKernel RowKernelOf(const Graph& g) {
  StatusOr<BaselinePlan> plan = PlanBaselineModel(BaselineCompiler::kXla, g, *FindDevice("H100"));
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok()) return {};
  EXPECT_EQ(plan->plan.kernels.size(), 1u) << Describe(plan->graph, plan->plan);
  EXPECT_EQ(plan->plan.kernels[0].kind, KernelKind::kRowStitch);
  return {plan->graph, plan->plan.kernels[0]};
}

// `kernel` described as a plan of its own.
std::string DescribeKernel(const Graph& g, const KernelSpec& kernel) {
  FusionPlan plan;
  plan.kernels = {kernel};
  return Describe(g, plan);
}

// The PTX of `kernel`.
std::string PtxOf(const Graph& g, const KernelSpec& kernel) {
  CodegenOptions options;
  StatusOr<CompiledKernel> compiled = EmitKernel(g, kernel, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status().ToString();
  if (!compiled.ok()) return "";
  CompiledKernel lowered = *compiled;
  EXPECT_TRUE(LowerToPtx(lowered, options).ok());
  return lowered.ptx;
}

// The bytes `kernel` fetches per byte it uses, loads and stores together, on the emulator.
double FetchedPerUsedOf(const Graph& g, const KernelSpec& kernel) {
  StatusOr<CompiledKernel> compiled = EmitKernel(g, kernel, CodegenOptions{});
  EXPECT_TRUE(compiled.ok()) << compiled.status().ToString();
  if (!compiled.ok()) return 0;
  FusionPlan plan;
  plan.kernels = {kernel};
  StatusOr<SampledRun> run =
      MeasureSectorTraffic(g, plan, {*compiled}, SectorTrafficOptionsFor(*FindDevice("H100")));
  EXPECT_TRUE(run.ok()) << run.status().ToString();
  if (!run.ok() || run->launches.size() != 1) return 0;
  return FetchedPerUsed(run->launches[0].stats);
}

// Checks one staged mapping of `g`'s row kernel against the plain mapping it stages: the
// mapping's figures, every global access to a staged buffer a 16-byte vector, and the
// kernel on the emulator against the interpreter.
void CheckStagedMapping(const Graph& g, const Graph& planned, const KernelSpec& plain,
                        const KernelSpec& kernel, uint64_t seed) {
  SCOPED_TRACE(DescribeKernel(planned, kernel));
  const ThreadMapping& m = kernel.mapping;
  ASSERT_TRUE(m.staged_row_spans);
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(planned, kernel);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  const RowSpanStaging s = RowSpanStagingOf(planned, kernel, *layout);
  EXPECT_EQ(s.rows, m.rows_per_block);
  EXPECT_EQ(s.span, s.rows * layout->geometry.row_len);
  EXPECT_EQ(s.inputs.size(), 1u);
  EXPECT_EQ(s.outputs.size(), 1u);
  EXPECT_EQ(int64_t{m.shared_bytes}, plain.mapping.shared_bytes + s.shared_bytes);
  EXPECT_EQ(m.block_barriers_per_item, plain.mapping.block_barriers_per_item + 2);
  EXPECT_EQ(m.threads_per_row, plain.mapping.threads_per_row);

  const std::string plain_ptx = PtxOf(planned, plain);
  const std::string ptx = PtxOf(planned, kernel);
  // The plain kernel loads the rows an element at a time, the staged one in vectors alone.
  EXPECT_GT(ScalarAccesses(plain_ptx, "ld.global.nc"), 0) << plain_ptx;
  EXPECT_EQ(ScalarAccesses(ptx, "ld.global.nc"), 0) << ptx;
  EXPECT_GT(CountContaining(ptx, "ld.global.nc.v4"), 0) << ptx;
  EXPECT_GT(CountContaining(ptx, "st.global.v4"), 0) << ptx;
  // What stores an element alone is a row's own output (#28's max), once a row.
  EXPECT_EQ(ScalarAccesses(ptx, "st.global"), layout->row_outputs.empty() ? 0 : 1) << ptx;
  EXPECT_EQ(CountContaining(ptx, "bar.sync"), 2) << ptx;

  // Bytes fetched per byte used, 32-byte sectors a warp access: the lanes of a row that
  // starts inside a sector straddle one more. A span's 16-byte vectors waste at most the
  // sector its start or end shares with the next span's (and the last span's lanes past the
  // buffer load its last vector again, counted used, not fetched).
  const double plain_fetched = FetchedPerUsedOf(planned, plain);
  const double fetched = FetchedPerUsedOf(planned, kernel);
  EXPECT_LE(fetched, 1.1);
  EXPECT_GT(plain_fetched, 1.2);

  CodegenOptions options;
  StatusOr<CompiledKernel> compiled = EmitKernel(planned, kernel, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  testing::EmulatedComparison figures;
  EXPECT_TRUE(testing::EmulatedMatchesInterpreter(g, planned, {*compiled},
                                                  testing::RandomInputs(g, seed), seed,
                                                  /*random_order=*/true, 1.0, &figures));
  std::printf(
      "%s %s: %d threads a row, spans of %lld rows, %u B shared, fetched/used %.2f (plain "
      "%.2f), max relative error %.2e\n",
      g.name.c_str(), g.nodes[g.Parameters()[0]].shape.ToString().c_str(), m.threads_per_row,
      static_cast<long long>(s.rows), m.shared_bytes, fetched, plain_fetched,
      figures.max_rel_error);
}

// `kernel`, a warp-row mapping, with blocks of `warps` warps: the blocks the scheduler gives
// a kernel of as many rows as the suite's (#14 has 151,296), at a size the emulator runs.
KernelSpec WithWarpsPerBlock(KernelSpec kernel, int warps, int64_t rows) {
  ThreadMapping& m = kernel.mapping;
  m.launch.block = {32, static_cast<uint32_t>(warps), 1};
  m.rows_per_block = warps * (32 / m.threads_per_row);
  m.launch.grid = {static_cast<uint32_t>((rows + m.rows_per_block - 1) / m.rows_per_block), 1, 1};
  return kernel;
}

// Stages each warp-row mapping among the candidates of `g`'s row kernel (those the mapping
// sweep times), in blocks of 8 warps, and checks it against the plain one; returns how many.
int CheckStagedRows(const Graph& g, uint64_t seed) {
  SCOPED_TRACE(g.name + " " + g.nodes[g.Parameters()[0]].shape.ToString() + ", seed " +
               std::to_string(seed));
  PlannedKernel planned = RowKernelOf(g);
  const int64_t rows = g.nodes[g.Parameters()[0]].shape.dims[0];
  int staged = 0;
  for (const KernelSpec& candidate :
       RowStitchMappingCandidates(planned.graph, planned.kernel, *FindDevice("H100"))) {
    const ThreadMapping& m = candidate.mapping;
    if (m.threads_per_row > 32 || m.values_per_thread == 0 || m.staged_row_spans) continue;
    const KernelSpec plain = WithWarpsPerBlock(candidate, 8, rows);
    KernelSpec kernel = plain;
    StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(planned.graph, plain);
    const RowSpanStaging s =
        layout.ok() ? RowSpanStagingOf(planned.graph, plain, *layout) : RowSpanStaging{};
    if (s.span == 0) {
      ADD_FAILURE() << "no staging of " << DescribeKernel(planned.graph, plain);
      continue;
    }
    // Spans beyond a block's static shared memory stay unstaged.
    if (s.shared_bytes + plain.mapping.shared_bytes > 48 * 1024) {
      EXPECT_FALSE(StageRowSpans(planned.graph, kernel, *FindDevice("H100")));
      continue;
    }
    EXPECT_TRUE(StageRowSpans(planned.graph, kernel, *FindDevice("H100")))
        << DescribeKernel(planned.graph, plain);
    CheckStagedMapping(g, planned.graph, plain, kernel, seed + static_cast<uint64_t>(staged));
    ++staged;
  }
  return staged;
}

TEST(RowSpans, SoftmaxRowsOf197StageThroughSharedMemoryAndMatchTheInterpreter) {
  // #14's rows, 197 elements: 360 rows leave the last span of 16 or 32 rows short.
  uint64_t seed = kSeed;
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kF32}) {
    // At 32, 16 and 8 threads a row: spans of 8, 16 and 32 rows, but for f32 at 8 threads a
    // row (its two spans of 32 rows, 50,432 bytes, more than a block declares).
    EXPECT_EQ(CheckStagedRows(RowSoftmax(360, 197, dtype), seed), dtype == DType::kF32 ? 2 : 3);
    seed += 100;
  }
}

TEST(RowSpans, RowMaxAndShiftOf123StageTheirRowSpaceOutputAlone) {
  // #28's rows, 123 elements: the shifted row is staged, the row's max stores as before.
  uint64_t seed = kSeed + 10;
  for (DType dtype : {DType::kF32, DType::kF16}) {
    EXPECT_GE(CheckStagedRows(RowMaxAndShift(1000, 123, dtype), seed), 1);
    seed += 100;
  }
}

TEST(RowSpans, RowsThatAreWholeVectorsOrBuffersThatAreNotStayAsTheyAre) {
  // Rows of 256 f16 already load 16 bytes a lane; 3 rows of 197 f16 make a buffer of 1,182
  // bytes, no whole number of vectors. Neither has a staged candidate, though both have
  // warp-row mappings with their rows in registers.
  for (const Graph& g : {RowSoftmax(512, 256, DType::kF16), RowSoftmax(3, 197, DType::kF16)}) {
    SCOPED_TRACE(g.nodes[g.Parameters()[0]].shape.ToString());
    PlannedKernel planned = RowKernelOf(g);
    int warp_rows = 0;
    for (KernelSpec k :
         RowStitchMappingCandidates(planned.graph, planned.kernel, *FindDevice("H100"))) {
      EXPECT_FALSE(k.mapping.staged_row_spans) << DescribeKernel(planned.graph, k);
      if (k.mapping.threads_per_row > 32 || k.mapping.values_per_thread == 0) continue;
      ++warp_rows;
      EXPECT_FALSE(StageRowSpans(planned.graph, k, *FindDevice("H100")));
    }
    EXPECT_GT(warp_rows, 0);
  }
}

}  // namespace
}  // namespace stitch
