// Rows prefetched into L2: a global kernel's row-stitch phase, a warp per row with the row in
// registers, whose warps each walk several rows (suite rows #6 and #15, layer norm backward),
// can ask for its next row's inputs in L2 once a row's loads are issued
// (ThreadMapping::prefetch_next_rows, a candidate the mapping sweep times). The prefetching
// kernel issues one prefetch.global.L2 per vector of each row-space input, none for the
// per-row and per-column ones, assembles with the registers of the plain one, and matches the
// interpreter on the emulator in random thread order, in f16 and f32, with a last grid step
// whose rows have no next row. Seeds are logged.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "stitch/codegen/codegen.h"
#include "stitch/driver/compile.h"
#include "stitch/emulator/emulator.h"
#include "stitch/plan/schedule.h"
#include "support/emulator_compare.h"
#include "support/graph_builder.h"
#include "support/known_gaps.h"
#include "support/ptx_text.h"

namespace stitch {
namespace {

using testing::Binary;
using testing::Broadcast;
using testing::ConstScalar;
using testing::Convert;
using testing::Param;
using testing::Reduce;

constexpr uint64_t kSeed = 7700;

// Layer norm backward of x [rows, cols] with the forward's mean and rstd per row: dx, and
// dgamma and dbeta summed over the rows.
Graph LayerNormBackward(int64_t rows, int64_t cols, DType dtype) {
  Graph g;
  g.name = "layer_norm_backward";
  const std::vector<int64_t> dims = {rows, cols};
  int dy = Convert(g, Param(g, {dtype, dims}, 0, "dy"), DType::kF32);
  int x = Convert(g, Param(g, {dtype, dims}, 1, "x"), DType::kF32);
  int mean = Broadcast(g, Param(g, {DType::kF32, {rows}}, 2, "mean"), dims, {0});
  int rstd = Broadcast(g, Param(g, {DType::kF32, {rows}}, 3, "rstd"), dims, {0});
  int gamma = Broadcast(g, Param(g, {DType::kF32, {cols}}, 4, "gamma"), dims, {1});
  int xhat = Binary(g, OpCode::kMul, Binary(g, OpCode::kSub, x, mean), rstd);
  int dxhat = Binary(g, OpCode::kMul, dy, gamma);
  int zero = ConstScalar(g, DType::kF32, 0);
  int inv_cols =
      Broadcast(g, ConstScalar(g, DType::kF32, 1.0 / static_cast<double>(cols)), {rows}, {});
  int mean_dxhat = Binary(g, OpCode::kMul, Reduce(g, dxhat, zero, {1}, ReduceKind::kSum), inv_cols);
  int mean_dxhat_xhat = Binary(
      g, OpCode::kMul, Reduce(g, Binary(g, OpCode::kMul, dxhat, xhat), zero, {1}, ReduceKind::kSum),
      inv_cols);
  int dx = Binary(
      g, OpCode::kMul, rstd,
      Binary(g, OpCode::kSub, Binary(g, OpCode::kSub, dxhat, Broadcast(g, mean_dxhat, dims, {0})),
             Binary(g, OpCode::kMul, xhat, Broadcast(g, mean_dxhat_xhat, dims, {0}))));
  g.outputs = {Convert(g, dx, dtype),
               Reduce(g, Binary(g, OpCode::kMul, dy, xhat), zero, {0}, ReduceKind::kSum),
               Reduce(g, dy, zero, {0}, ReduceKind::kSum)};
  return g;
}

// The stitched plan of `g` for sm_90 on a grid the emulator runs.
CompileResult Planned(const Graph& g) {
  CompileOptions o = testing::Sm90Compile();
  o.never_slower = false;
  o.max_persistent_grid_blocks = kEmulatorMaxPersistentGridBlocks;
  StatusOr<CompileResult> r = CompileGraph(g, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : CompileResult{};
}

// The candidate of `kernel` whose row phase prefetches, or nothing.
std::optional<KernelSpec> PrefetchingCandidate(const Graph& g, const KernelSpec& kernel) {
  for (const KernelSpec& c : GlobalStitchMappingCandidates(g, kernel, *FindDevice("H100"))) {
    for (const KernelSpec& phase : c.phases) {
      if (phase.mapping.prefetch_next_rows) return c;
    }
  }
  return std::nullopt;
}

const KernelSpec* RowPhase(const KernelSpec& kernel) {
  for (const KernelSpec& phase : kernel.phases) {
    if (phase.kind == KernelKind::kRowStitch) return &phase;
  }
  return nullptr;
}

TEST(RowPrefetch, LayerNormBackwardPrefetchesItsNextRowsAndMatchesTheInterpreter) {
  uint64_t seed = kSeed;
  for (DType dtype : {DType::kF16, DType::kF32}) {
    // 3,000 rows over 64 blocks of 8 warps: each warp walks five or six rows, and the last
    // grid step's rows have no next row.
    const Graph g = LayerNormBackward(3000, 768, dtype);
    SCOPED_TRACE(std::string(DTypeName(dtype)) + ", seed " + std::to_string(seed));
    const CompileResult r = Planned(g);
    ASSERT_EQ(r.plan.kernels.size(), 1u) << Describe(r.graph, r.plan);
    const KernelSpec& plain = r.plan.kernels[0];
    ASSERT_EQ(plain.kind, KernelKind::kGlobalStitch) << Describe(r.graph, r.plan);
    const std::optional<KernelSpec> prefetching = PrefetchingCandidate(r.graph, plain);
    ASSERT_TRUE(prefetching.has_value()) << Describe(r.graph, r.plan);
    const KernelSpec* phase = RowPhase(*prefetching);
    ASSERT_NE(phase, nullptr);
    const ThreadMapping& m = phase->mapping;
    ASSERT_LE(m.threads_per_row, 32);
    const int64_t rows_per_grid_step = static_cast<int64_t>(prefetching->mapping.launch.blocks()) *
                                       m.launch.block[1] * (32 / m.threads_per_row);
    ASSERT_GT(3000, rows_per_grid_step);

    const CodegenOptions& codegen = testing::Sm90Compile().codegen;
    StatusOr<CompiledKernel> compiled = EmitKernel(r.graph, *prefetching, codegen);
    ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
    CompiledKernel lowered = *compiled;
    ASSERT_TRUE(LowerToPtx(lowered, codegen).ok());
    // dy and x, a vector of each at each of the thread's vectors of the row; mean, rstd and
    // gamma are not prefetched.
    const int vectors = m.values_per_thread / m.vector_width;
    EXPECT_EQ(testing::CountOf(lowered.ptx, "prefetch.global.L2"), 2 * vectors) << lowered.ptx;
    EXPECT_EQ(r.kernels[0].ptx.find("prefetch"), std::string::npos);

    // ptxas assembles it without spills, its registers leaving an SM as many blocks as the
    // plain kernel's do (the grid is co-resident).
    if (!r.kernels[0].cubin.empty()) {
      ASSERT_TRUE(AssembleCubin(lowered, codegen).ok());
      ASSERT_TRUE(lowered.assembly.reported);
      const int64_t threads = static_cast<int64_t>(plain.mapping.launch.block_threads());
      const auto blocks_per_sm = [&](int registers) { return 65536 / (registers * threads); };
      EXPECT_EQ(blocks_per_sm(lowered.assembly.registers),
                blocks_per_sm(r.kernels[0].assembly.registers))
          << lowered.assembly.registers << " registers against " << r.kernels[0].assembly.registers;
      EXPECT_EQ(lowered.assembly.spill_store_bytes, 0);
      std::printf("%s: %d registers (plain %d)\n", std::string(DTypeName(dtype)).c_str(),
                  lowered.assembly.registers, r.kernels[0].assembly.registers);
    }

    testing::EmulatedComparison figures;
    EXPECT_TRUE(testing::EmulatedMatchesInterpreter(g, r.graph, {*compiled},
                                                    testing::RandomInputs(g, seed), seed,
                                                    /*random_order=*/true, 4.0, &figures));
    std::printf(
        "%s %s: %d threads a row, %d values a thread, %lld rows a grid step, "
        "max relative error %.2e\n",
        g.name.c_str(), std::string(DTypeName(dtype)).c_str(), m.threads_per_row,
        m.values_per_thread, static_cast<long long>(rows_per_grid_step), figures.max_rel_error);
    seed += 100;
  }
}

TEST(RowPrefetch, AMappingThatCannotPrefetchIsRefused) {
  const CompileResult r = Planned(LayerNormBackward(600, 768, DType::kF16));
  ASSERT_EQ(r.plan.kernels.size(), 1u);
  KernelSpec kernel = r.plan.kernels[0];
  ASSERT_EQ(kernel.kind, KernelKind::kGlobalStitch);
  KernelSpec* phase = nullptr;
  for (KernelSpec& p : kernel.phases) {
    if (p.kind == KernelKind::kRowStitch) phase = &p;
  }
  ASSERT_NE(phase, nullptr);
  // In loop mode (no values in registers) there is no row to prefetch ahead of.
  phase->mapping.prefetch_next_rows = true;
  phase->mapping.values_per_thread = 0;
  StatusOr<CompiledKernel> compiled = EmitKernel(r.graph, kernel, testing::Sm90Compile().codegen);
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(compiled.status().message().find("prefetch_next_rows"), std::string::npos)
      << compiled.status().ToString();
}

}  // namespace
}  // namespace stitch
