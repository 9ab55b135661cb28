// Transpose tiles: a loop kernel whose input is read through a transpose of its minor-most
// dimension stages the read through shared memory (ThreadMapping::transpose_tile), so both
// its loads and its stores are coalesced. Ragged edges, batch dimensions on either side of
// the tiled pair, several outputs and half types match the interpreter on the emulator
// (threads in random order between barriers); a kernel that also reads a full-size input in
// output order keeps the plain loop.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "stitch/driver/compile.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/plan/baseline_models.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/op_classes.h"
#include "stitch/plan/schedule.h"
#include "support/emulator_check.h"
#include "support/graph_builder.h"
#include "support/known_gaps.h"

namespace stitch {
namespace {

using testing::Binary;
using testing::Broadcast;
using testing::Compare;
using testing::ConstScalar;
using testing::Convert;
using testing::Param;
using testing::Reduce;
using testing::Reshape;
using testing::Transpose;
using testing::Unary;

constexpr uint64_t kSeed = 6100;

// relu(x) transposed by `perm`, plus a bias along the output's minor-most dimension, in
// `dtype`.
Graph BiasedTranspose(std::vector<int64_t> dims, std::vector<int64_t> perm, DType dtype) {
  Graph g;
  g.name = "biased_transpose";
  int x = Param(g, {dtype, dims}, 0, "x");
  int relu = Binary(g, OpCode::kMax, x, Broadcast(g, ConstScalar(g, dtype, 0), dims, {}));
  int t = Transpose(g, relu, perm);
  const std::vector<int64_t> out = g.nodes[t].shape.dims;
  int bias = Param(g, {dtype, {out.back()}}, 1, "bias");
  g.outputs = {Binary(g, OpCode::kAdd, t, Broadcast(g, bias, out, {int64_t(out.size()) - 1}))};
  return g;
}

// The one kernel `r` ships, with its tile's geometry printed.
const KernelSpec& OnlyKernel(const testing::EmulatorCheck& check) {
  const CompileResult& r = check.compiled;
  EXPECT_EQ(r.plan.kernels.size(), 1u) << Describe(r.graph, r.plan);
  return r.plan.kernels[0];
}

// Checks `g` against the interpreter on the emulator (threads in random order from `seed`),
// that its one kernel stages a transpose tile and reads no input strided, and sets `fetched`
// to that kernel's bytes fetched per byte used on the emulator at its full geometry.
void CheckTiledKernel(const Graph& g, uint64_t seed, testing::EmulatorCheck& check,
                      double& fetched) {
  ASSERT_TRUE(testing::CheckOnEmulator(g, seed, /*random_order=*/true, &check));
  const KernelSpec& k = OnlyKernel(check);
  ASSERT_GE(k.mapping.transpose_tile, 0) << Describe(check.compiled.graph, check.compiled.plan);
  EXPECT_EQ(k.mapping.strided_input_bytes, 0);

  StatusOr<CompileResult> r = CompileGraph(g, testing::Sm90Compile());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const SectorTrafficOptions options = SectorTrafficOptionsFor(*FindDevice("H100"));
  StatusOr<SampledRun> run = MeasureSectorTraffic(r->graph, r->plan, r->kernels, options);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  ASSERT_EQ(run->launches.size(), 1u);
  fetched = FetchedPerUsed(run->launches[0].stats);
  std::printf("%s: %d per access, fetched/used %.2f\n",
              g.nodes[g.outputs[0]].shape.ToString().c_str(), k.mapping.vector_width, fetched);
}

TEST(TransposeTile, LoopKernelsStageTransposedReadsAndMatchTheInterpreter) {
  struct Case {
    std::vector<int64_t> dims, perm;
    DType dtype;
    size_t p_dims;  // output dimensions in the tile's p run
    int width;      // elements per lane and access
  };
  // [70, 45] -> [45, 70]: both sides ragged, 45 elements a row, so one element per access.
  // [3, 50, 40] -> [3, 40, 50]: a batch dimension before the pair; 50 output columns take
  // vectors of 2. [2, 40, 3, 36] -> [3, 36, 2, 40]: the operand's trailing [3, 36] is one run
  // of 108 elements, a batch dimension between. [256, 64, 12] -> [12, 64, 256]: suite row
  // #13's heads, a run of 768 whose minor dimension has 12 elements.
  for (const Case& c :
       {Case{{70, 45}, {1, 0}, DType::kF32, 1, 1}, Case{{3, 50, 40}, {0, 2, 1}, DType::kF16, 1, 2},
        Case{{2, 40, 3, 36}, {2, 3, 0, 1}, DType::kBF16, 2, 4},
        Case{{64, 3136}, {1, 0}, DType::kF32, 1, 4},
        Case{{256, 64, 12}, {2, 1, 0}, DType::kBF16, 2, 4}}) {
    const Graph g = BiasedTranspose(c.dims, c.perm, c.dtype);
    SCOPED_TRACE(g.nodes[g.outputs[0]].shape.ToString() + ", seed " + std::to_string(kSeed));
    testing::EmulatorCheck check;
    ASSERT_TRUE(testing::CheckOnEmulator(g, kSeed, /*random_order=*/true, &check));
    const KernelSpec& k = OnlyKernel(check);
    ASSERT_GE(k.mapping.transpose_tile, 0) << Describe(check.compiled.graph, check.compiled.plan);
    const TransposeTiles tiles = LoopTransposeTilesOf(check.compiled.graph, k.mapping);
    EXPECT_EQ(k.mapping.work_items, tiles.count());
    EXPECT_GT(k.mapping.shared_bytes, 0u);
    EXPECT_EQ(k.mapping.strided_input_bytes, 0);
    EXPECT_EQ(tiles.p_dims.size(), c.p_dims);
    EXPECT_EQ(k.mapping.vector_width, c.width);
    std::printf("%s: %lld tiles (%lld x %lld x %lld), %d per access, max relative error %.2e\n",
                g.nodes[g.outputs[0]].shape.ToString().c_str(),
                static_cast<long long>(tiles.count()), static_cast<long long>(tiles.batch),
                static_cast<long long>(tiles.tiles_p), static_cast<long long>(tiles.tiles_q),
                k.mapping.vector_width, check.max_rel_error);
  }
}

TEST(TransposeTile, EveryOutputOfTheKernelGoesThroughTheTile) {
  Graph g;
  g.name = "two_transposed_outputs";
  int x = Param(g, {DType::kBF16, {96, 33}}, 0, "x");
  int t = Transpose(g, Convert(g, x, DType::kF32), {1, 0});
  int doubled =
      Binary(g, OpCode::kMul, t, Broadcast(g, ConstScalar(g, DType::kF32, 2), {33, 96}, {}));
  g.outputs = {doubled, Convert(g, Unary(g, OpCode::kExp, t), DType::kBF16)};
  testing::EmulatorCheck check;
  ASSERT_TRUE(testing::CheckOnEmulator(g, kSeed + 1, /*random_order=*/true, &check));
  const KernelSpec& k = OnlyKernel(check);
  EXPECT_GE(k.mapping.transpose_tile, 0) << Describe(check.compiled.graph, check.compiled.plan);
  EXPECT_EQ(k.outputs.size(), 2u);
}

// A batch norm's backward over NHWC outputs from NCHW values, as the ResNet blocks' regions
// write it: two outputs, each a transpose of the same permutation of values computed in
// the operands' order from two inputs. One tile stages both; every load and store is
// coalesced, in f32, f16 and bf16.
Graph TwoAlikeTransposes(DType t) {
  Graph g;
  g.name = "two_alike_transposes";
  const std::vector<int64_t> dims = {2, 64, 12, 20};
  const std::vector<int64_t> to_nhwc = {0, 2, 3, 1};
  const int x = Convert(g, Param(g, {t, dims}, 0, "x"), DType::kF32);
  const int dy = Convert(g, Param(g, {t, dims}, 1, "dy"), DType::kF32);
  const int product = Binary(g, OpCode::kMul, x, dy);
  const int sum = Binary(g, OpCode::kAdd, x, dy);
  g.outputs = {Convert(g, Transpose(g, product, to_nhwc), t),
               Convert(g, Transpose(g, sum, to_nhwc), t)};
  return g;
}

TEST(TransposeTile, TransposesOfOnePermutationShareATile) {
  uint64_t seed = kSeed + 10;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    testing::EmulatorCheck check;
    double fetched = 0;
    CheckTiledKernel(TwoAlikeTransposes(t), seed++, check, fetched);
    // Read across its order, each input would fetch a sector per element.
    EXPECT_LE(fetched, 1.1);
  }
}

// Integer and predicate transposes go through the tile as float ones do: shared memory holds
// each output's compute type (u8 and s8 as bytes, s64 in 8-byte slots, a predicate as a
// byte), and every load and store is coalesced.
TEST(TransposeTile, IntegerAndPredicateTransposesAreTiled) {
  uint64_t seed = kSeed + 30;
  std::vector<Graph> graphs;
  graphs.push_back(BiasedTranspose({64, 3136}, {1, 0}, DType::kU8));
  graphs.push_back(BiasedTranspose({3, 50, 40}, {0, 2, 1}, DType::kS32));
  graphs.push_back(BiasedTranspose({70, 45}, {1, 0}, DType::kS64));
  graphs.push_back(BiasedTranspose({2, 64, 3, 96}, {2, 3, 0, 1}, DType::kS8));
  {
    // A mask transposed: x > 0 over [96, 200] f32, written as pred [200, 96].
    Graph g;
    g.name = "transposed_mask";
    const int x = Param(g, {DType::kF32, {96, 200}}, 0, "x");
    const int zero = Broadcast(g, ConstScalar(g, DType::kF32, 0), {96, 200}, {});
    g.outputs = {Transpose(g, Compare(g, CompareDirection::kGt, x, zero), {1, 0})};
    graphs.push_back(std::move(g));
  }
  for (const Graph& g : graphs) {
    SCOPED_TRACE(g.nodes[g.outputs[0]].shape.ToString() + ", seed " + std::to_string(seed));
    testing::EmulatorCheck check;
    double fetched = 0;
    CheckTiledKernel(g, seed++, check, fetched);
    // Read across its order, the input would fetch a sector per element (8 to 32 bytes per
    // byte used for these types).
    EXPECT_LE(fetched, 1.25);
  }
}

// XLA's transpose with side outputs: beside y's transpose, the kernel writes x + y and -x
// flattened, both in the operands' order. The tile computes them with the transposed
// operand's elements, at the operand's linear indices, and stores them at once; only the
// transpose goes through shared memory. Every load and store is coalesced, in f32 and bf16.
Graph TransposeWithSideOutputs(DType t) {
  Graph g;
  g.name = "transpose_with_side_outputs";
  const std::vector<int64_t> dims = {96, 256};
  const int x = Param(g, {t, dims}, 0, "x");
  const int y = Param(g, {t, dims}, 1, "y");
  g.outputs = {Binary(g, OpCode::kAdd, x, y), Transpose(g, y, {1, 0}),
               Reshape(g, Unary(g, OpCode::kNeg, x), {96 * 256})};
  return g;
}

TEST(TransposeTile, SideOutputsAreWrittenAsTheTileComputesThem) {
  uint64_t seed = kSeed + 40;
  for (DType t : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(t)) + ", seed " + std::to_string(seed));
    testing::EmulatorCheck check;
    double fetched = 0;
    CheckTiledKernel(TransposeWithSideOutputs(t), seed++, check, fetched);
    EXPECT_LE(fetched, 1.1);
    const KernelSpec& k = OnlyKernel(check);
    int side = 0;
    for (int o : k.outputs) side += IsTileSideOutput(check.compiled.graph, k, o) ? 1 : 0;
    EXPECT_EQ(side, 2) << Describe(check.compiled.graph, check.compiled.plan);
  }
}

// Transposes of two permutations cannot share one tile's geometry: the loop stays plain.
TEST(TransposeTile, TransposesOfTwoPermutationsKeepThePlainLoop) {
  Graph g;
  g.name = "two_unlike_transposes";
  const int x = Param(g, {DType::kF32, {8, 64, 96}}, 0, "x");
  const int y = Param(g, {DType::kF32, {8, 64, 96}}, 1, "y");
  g.outputs = {Transpose(g, Binary(g, OpCode::kMul, x, y), {0, 2, 1}),
               Transpose(g, Binary(g, OpCode::kAdd, x, y), {2, 0, 1})};
  testing::EmulatorCheck check;
  ASSERT_TRUE(testing::CheckOnEmulator(g, kSeed + 20, /*random_order=*/true, &check));
  for (const KernelSpec& k : check.compiled.plan.kernels) {
    EXPECT_EQ(k.mapping.transpose_tile, -1) << Describe(check.compiled.graph, check.compiled.plan);
  }
}

TEST(TransposeTile, AnInputReadInOutputOrderKeepsThePlainLoop) {
  // y is read where the output is written: tiling would make its reads strided instead.
  Graph g;
  g.name = "transpose_plus_full_size";
  int x = Param(g, {DType::kF32, {128, 96}}, 0, "x");
  int y = Param(g, {DType::kF32, {96, 128}}, 1, "y");
  g.outputs = {Binary(g, OpCode::kAdd, Transpose(g, x, {1, 0}), y)};
  testing::EmulatorCheck check;
  ASSERT_TRUE(testing::CheckOnEmulator(g, kSeed + 2, /*random_order=*/true, &check));
  EXPECT_EQ(OnlyKernel(check).mapping.transpose_tile, -1);
  EXPECT_GT(OnlyKernel(check).mapping.strided_input_bytes, 0);
}

// Whether any kernel of `plan` that reduces holds a transpose of a minor-most dimension.
bool ReductionReadsTransposed(const Graph& g, const FusionPlan& plan) {
  for (const KernelSpec& k : plan.kernels) {
    if (k.kind == KernelKind::kLoop) continue;
    for (int id : k.nodes) {
      if (MovesMinorDimension(g, id)) return true;
    }
  }
  return false;
}

TEST(TransposeTile, AReductionReadsATransposeTiledInAKernelOfItsOwn) {
  // Softmax over rows of x [q, k, h] moved to [h, k, q] (suite row #13's layout): a row is
  // a column of x, and the next row the next k, 16 columns on. The stitched plan writes the
  // transpose from a tiled loop kernel and the softmax reads it in order (as XLA plans it);
  // the Inductor model fuses the transpose into the reduction.
  Graph g;
  g.name = "softmax_of_transpose";
  int x = Param(g, {DType::kF32, {256, 64, 16}}, 0, "x");
  int t = Transpose(g, x, {2, 1, 0});
  const std::vector<int64_t> dims = {16, 64, 256};
  int mx = Reduce(g, t, ConstScalar(g, DType::kF32, -INFINITY), {2}, ReduceKind::kMax);
  int e = Unary(g, OpCode::kExp, Binary(g, OpCode::kSub, t, Broadcast(g, mx, dims, {0, 1})));
  int sum = Reduce(g, e, ConstScalar(g, DType::kF32, 0), {2}, ReduceKind::kSum);
  g.outputs = {Binary(g, OpCode::kDiv, e, Broadcast(g, sum, dims, {0, 1}))};
  testing::EmulatorCheck check;
  ASSERT_TRUE(testing::CheckOnEmulator(g, kSeed + 3, /*random_order=*/true, &check));
  const CompileResult& r = check.compiled;
  SCOPED_TRACE(Describe(r.graph, r.plan));
  EXPECT_FALSE(ReductionReadsTransposed(r.graph, r.plan));
  ASSERT_GE(r.plan.kernels.size(), 2u);
  EXPECT_EQ(r.plan.kernels[0].kind, KernelKind::kLoop);
  EXPECT_GE(r.plan.kernels[0].mapping.transpose_tile, 0);
  StatusOr<BaselinePlan> inductor =
      PlanBaselineModel(BaselineCompiler::kInductor, g, *FindDevice("H100"));
  ASSERT_TRUE(inductor.ok()) << inductor.status().ToString();
  EXPECT_TRUE(ReductionReadsTransposed(inductor->graph, inductor->plan))
      << Describe(inductor->graph, inductor->plan);
}

// Larger tiles (TransposeTileMappingCandidates' tiles of 2,048 and 4,096 elements for 256
// threads, each thread loading loads_per_step vectors of a tile before its math) match the
// interpreter as the scheduled ones do: ragged edges on both sides, batch dimensions, the half
// types, and two alike transposes sharing one tile. Threads run in random order between
// barriers.
TEST(TransposeTile, LargerTilesGiveEachThreadMoreVectorsAndMatchTheInterpreter) {
  std::vector<Graph> graphs = {BiasedTranspose({70, 45}, {1, 0}, DType::kF32),
                               BiasedTranspose({3, 50, 40}, {0, 2, 1}, DType::kF16),
                               BiasedTranspose({2, 40, 3, 36}, {2, 3, 0, 1}, DType::kBF16),
                               BiasedTranspose({256, 64, 12}, {2, 1, 0}, DType::kBF16),
                               TwoAlikeTransposes(DType::kF16)};
  uint64_t seed = kSeed + 50;
  for (const Graph& g : graphs) {
    SCOPED_TRACE(g.name + " " + g.nodes[g.outputs[0]].shape.ToString() + ", seed " +
                 std::to_string(seed));
    testing::EmulatorCheck check;
    ASSERT_TRUE(testing::CheckOnEmulator(g, seed, /*random_order=*/true, &check));
    const CompileResult& shipped = check.compiled;
    ASSERT_EQ(shipped.kernels.size(), 1u);
    int larger = 0;
    for (const KernelSpec& candidate : TransposeTileMappingCandidates(
             shipped.graph, shipped.plan.kernels[0], *FindDevice("H100"))) {
      const ThreadMapping& m = candidate.mapping;
      const TransposeTiles tiles = LoopTransposeTilesOf(shipped.graph, m);
      if (m.launch.block_threads() != 256 ||
          tiles.p_side * tiles.q_side == kTransposeTileElements) {
        continue;
      }
      SCOPED_TRACE(std::to_string(m.loads_per_step) + " vectors a thread");
      EXPECT_EQ(tiles.p_side * tiles.q_side, 256 * m.vector_width * m.loads_per_step);
      EXPECT_GT(m.loads_per_step, 1);
      EXPECT_EQ(m.work_items, tiles.count());
      StatusOr<CompiledKernel> kernel = EmitKernel(shipped.graph, candidate, CodegenOptions{});
      ASSERT_TRUE(kernel.ok()) << kernel.status().ToString();
      EXPECT_GE(kernel->shared_bytes, static_cast<uint32_t>(tiles.q_side * (tiles.p_side + 1) * 2));
      EXPECT_TRUE(testing::EmulatedMatchesInterpreter(g, shipped.graph, {*kernel},
                                                      testing::RandomInputs(g, seed), seed,
                                                      /*random_order=*/true));
      ++larger;
    }
    EXPECT_EQ(larger, 2);
    ++seed;
  }
}

// Soft-capped logits moved heads-major, as suite row #13's first kernel writes them: a tanh
// an element, so the tile's own instructions (its origin, the barriers) are a small share of
// a larger tile's, and the scheduler takes tiles of 2,048 elements, two vectors a thread. A
// plain transpose of 196 tiles (suite row #24) is a launch's worth of blocks whichever tile it
// takes, and keeps kTransposeTileElements.
TEST(TransposeTile, TilesGrowWhereTheirOwnInstructionsWeigh) {
  Graph capped;
  capped.name = "softcapped_heads_major";
  const int64_t s = 2048, heads = 12;
  int logits = Param(capped, {DType::kBF16, {s, s * heads}}, 0, "logits");
  int x = Convert(capped, logits, DType::kF32);
  const std::vector<int64_t> dims = {s, s * heads};
  int tanh = Unary(capped, OpCode::kTanh,
                   Binary(capped, OpCode::kMul, x,
                          Broadcast(capped, ConstScalar(capped, DType::kF32, 0.02), dims, {})));
  int scaled = Binary(capped, OpCode::kMul, tanh,
                      Broadcast(capped, ConstScalar(capped, DType::kF32, 50), dims, {}));
  int split = Reshape(capped, Convert(capped, scaled, DType::kBF16), {s, s, heads});
  capped.outputs = {Transpose(capped, split, {2, 1, 0})};

  for (const auto& [g, loads] :
       {std::pair{capped, 2}, std::pair{BiasedTranspose({3136, 64}, {1, 0}, DType::kF32), 1}}) {
    SCOPED_TRACE(g.name);
    CompileOptions options = testing::Sm90Compile();
    options.emit_ptx = false;
    StatusOr<CompileResult> r = CompileGraph(g, options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->plan.kernels.size(), 1u) << Describe(r->graph, r->plan);
    const ThreadMapping& m = r->plan.kernels[0].mapping;
    ASSERT_GE(m.transpose_tile, 0) << Describe(r->graph, r->plan);
    EXPECT_EQ(m.loads_per_step, loads) << Describe(r->graph, r->plan);
    const TransposeTiles tiles = LoopTransposeTilesOf(r->graph, m);
    EXPECT_EQ(tiles.p_side * tiles.q_side, kTransposeTileElements * loads);
  }
}

}  // namespace
}  // namespace stitch
