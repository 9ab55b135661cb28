// Shape-generic kernels (shape_class.h) on the emulator: one compile per bucket, run at the
// bucket's boundaries and at random extents inside it, each run against the reference
// interpreter at that extent. Seeds are logged; STITCH_RANDOM_GRAPH_SEED replays a run.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <set>

#include "stitch/codegen/codegen.h"
#include "stitch/driver/bundle.h"
#include "stitch/driver/compile.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/ir/shape_class.h"
#include "stitch/ir/verifier.h"
#include "stitch/loader/kernel_loader.h"
#include "stitch/plan/schedule.h"
#include "stitch/reference/interpreter.h"
#include "stitch/reference/tensor_compare.h"
#include "support/random_graph.h"
#include "support/shape_class_graphs.h"

namespace stitch {
namespace {

using testing::BatchChannelSums;
using testing::Binary;
using testing::ConstScalar;
using testing::Expand;
using testing::FoldedSoftmax;
using testing::kF32;
using testing::Param;
using testing::Reduce;
using testing::TokenBlock;
using testing::Transpose;
using testing::Unary;

CompileOptions EmulatorCompileOptions() {
  CompileOptions options;
  options.emit_ptx = false;
  options.never_slower = false;
  options.max_persistent_grid_blocks = kEmulatorMaxPersistentGridBlocks;
  return options;
}

// Runs `compiled` (a shape-generic compile) at `extent` on the emulator and compares every
// output with the interpreter's on `graph` (a graph of the same class) at that extent.
::testing::AssertionResult MatchesAtExtent(const CompileResult& compiled, const Graph& graph,
                                           int64_t extent, uint64_t seed) {
  StatusOr<ShapeClass> c = ClassifyShapes(graph);
  if (!c.ok()) return ::testing::AssertionFailure() << c.status().ToString();
  const Graph at = AtExtent(graph, *c, extent);
  std::mt19937_64 rng(seed);
  std::vector<Tensor> inputs;
  for (int p : at.Parameters()) inputs.push_back(RandomTensor(at.nodes[p].shape, rng));
  StatusOr<std::vector<Tensor>> expected = Evaluate(at, inputs);
  if (!expected.ok()) return ::testing::AssertionFailure() << expected.status().ToString();
  EmulatorOptions eo;
  eo.random_order = true;
  eo.seed = seed;
  StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create(eo);
  if (!emulator.ok()) return ::testing::AssertionFailure() << emulator.status().ToString();
  StatusOr<EmulatedRun> run = RunOnEmulator(AtExtent(compiled.graph, compiled.shape_class, extent),
                                            compiled.kernels, inputs, **emulator, extent);
  if (!run.ok()) {
    return ::testing::AssertionFailure()
           << "extent " << extent << ": " << run.status().ToString() << "\nplan:\n"
           << Describe(compiled.graph, compiled.plan);
  }
  for (size_t k = 0; k < expected->size(); ++k) {
    const double tol = OutputTolerance(at, (*expected)[k].shape.dtype);
    Comparison cmp = Compare((*expected)[k], run->outputs[k], tol);
    if (!cmp.pass) {
      return ::testing::AssertionFailure()
             << "extent " << extent << ", output " << k << " " << (*expected)[k].shape.ToString()
             << ": " << cmp.mismatches << " mismatches, " << cmp.message << "\nplan:\n"
             << Describe(compiled.graph, compiled.plan);
    }
  }
  return ::testing::AssertionSuccess();
}

// The extents a bucket's runs check: both ends and `randoms` drawn inside.
std::set<int64_t> ExtentsToCheck(const Bucket& b, std::mt19937_64& rng, int randoms) {
  std::set<int64_t> extents = {b.lo, b.hi};
  for (int i = 0; i < randoms; ++i) {
    extents.insert(b.lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(b.hi - b.lo + 1)));
  }
  return extents;
}

// Compiles `graph` once and checks its bucket's ends and random extents inside it. Returns
// false, having checked the one extent served, when the compile serves the top alone.
bool CheckBucket(const Graph& graph, uint64_t seed, int randoms = 2) {
  EXPECT_TRUE(Verify(graph).ok()) << Verify(graph).ToString();
  StatusOr<CompileResult> compiled = CompileGraph(graph, EmulatorCompileOptions());
  EXPECT_TRUE(compiled.ok()) << graph.name << ": " << compiled.status().ToString();
  if (!compiled.ok()) return false;
  if (!compiled->shape_generic()) {
    EXPECT_EQ(compiled->served.lo, compiled->served.hi) << compiled->not_generic;
    EXPECT_FALSE(compiled->not_generic.empty());
    for (const CompiledKernel& k : compiled->kernels) EXPECT_FALSE(k.takes_outer_extent);
    return false;
  }
  for (const CompiledKernel& k : compiled->kernels) EXPECT_TRUE(k.takes_outer_extent) << k.name;
  std::mt19937_64 rng(seed);
  for (int64_t e : ExtentsToCheck(compiled->served, rng, randoms)) {
    EXPECT_TRUE(MatchesAtExtent(*compiled, graph, e, seed + static_cast<uint64_t>(e)))
        << graph.name << ", seed " << seed;
  }
  return true;
}

// CheckBucket for graphs that must compile shape-generic.
void CheckGenericBucket(const Graph& graph, uint64_t seed, int randoms = 2) {
  EXPECT_TRUE(CheckBucket(graph, seed, randoms)) << graph.name << " did not compile shape-generic";
}

uint64_t LoggedSeed(const char* what) {
  const uint64_t seed = testing::RandomGraphBaseSeed();
  std::printf("%s: seed %llu\n", what, static_cast<unsigned long long>(seed));
  return seed;
}

TEST(ShapeGenericKernels, TokenBlockServesEveryExtentOfItsBucket) {
  const uint64_t seed = LoggedSeed("token block");
  for (int64_t extent : {1, 2, 3, 7, 33, 100}) CheckGenericBucket(TokenBlock(extent, 64), seed);
  CheckGenericBucket(TokenBlock(45, 96, DType::kF16), seed);
  CheckGenericBucket(TokenBlock(20, 1000, DType::kBF16), seed);
}

TEST(ShapeGenericKernels, ReshapedRowsAndSumsOverTheVaryingDimension) {
  const uint64_t seed = LoggedSeed("folded softmax and batch sums");
  CheckGenericBucket(FoldedSoftmax(6, 5, 32), seed);
  CheckGenericBucket(BatchChannelSums(11, 9, 24, DType::kF32), seed);
  CheckGenericBucket(BatchChannelSums(40, 4, 64, DType::kF16), seed);
}

// A column sum over the varying batch that splits its rows over blocks, the last block of
// each column tile combining the partials: the chunks' ranges follow the run's extent, and
// every chunk's block still arrives, so each extent's counters reach the tile's last block.
TEST(ShapeGenericKernels, ColumnSumsSplitOverBlocksServeEveryExtent) {
  const uint64_t seed = LoggedSeed("split column sums");
  Graph g;
  g.name = "split_column_sums";
  const int x = Param(g, {DType::kF32, {256, 32, 256}}, 0, "x");
  g.outputs = {Reduce(g, x, ConstScalar(g, DType::kF32, 0), {0, 1}, ReduceKind::kSum)};
  g.outer_parameters = {0};
  StatusOr<CompileResult> compiled = CompileGraph(g, EmulatorCompileOptions());
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  ASSERT_EQ(compiled->plan.kernels.size(), 1u);
  const ThreadMapping& m = compiled->plan.kernels[0].mapping;
  EXPECT_GT(m.reduce_chunks, 1) << Describe(compiled->graph, compiled->plan);
  EXPECT_EQ(m.split_combine, ThreadMapping::SplitCombine::kLastBlock);
  CheckGenericBucket(g, seed);
}

// Every plan kind across the planners: the baseline models' plans are shape-generic too.
TEST(ShapeGenericKernels, BaselinePlansServeTheBucket) {
  const uint64_t seed = LoggedSeed("baseline plans");
  for (PlannerKind planner : {PlannerKind::kXla, PlannerKind::kInductor}) {
    const Graph g = TokenBlock(21, 48);
    CompileOptions options = EmulatorCompileOptions();
    options.planner = planner;
    StatusOr<CompileResult> compiled = CompileGraph(g, options);
    ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
    std::mt19937_64 rng(seed);
    for (int64_t e : ExtentsToCheck(compiled->served, rng, 1)) {
      EXPECT_TRUE(MatchesAtExtent(*compiled, g, e, seed)) << PlannerKindName(planner);
    }
  }
}

// A job's batch size and sequence length vary from step to step; its rows are batch x
// sequence. Every step's graph is keyed on its shape class; a key compiles once.
TEST(ShapeGenericKernels, TwentyRandomBatchesAndSequencesCompileOncePerBucket) {
  const uint64_t seed = LoggedSeed("random batches and sequences");
  std::mt19937_64 rng(seed);
  const CompileOptions options = EmulatorCompileOptions();
  const KeyContext context = KeyContextFor(options);
  std::map<std::string, CompileResult> compiled_by_key;
  std::set<int64_t> buckets;
  int compiles = 0;
  for (int step = 0; step < 20; ++step) {
    const int64_t batch = 1 + static_cast<int64_t>(rng() % 16);
    const int64_t sequence = 1 + static_cast<int64_t>(rng() % 64);
    const Graph g = TokenBlock(batch * sequence, 32);
    Bucket served;
    const std::string key = ComputeKey(ToShapeClass(g, &served), context).hex;
    buckets.insert(served.hi);
    auto it = compiled_by_key.find(key);
    if (it == compiled_by_key.end()) {
      StatusOr<CompileResult> compiled = CompileGraph(g, options);
      ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
      ASSERT_EQ(compiled->key.hex, key);
      ++compiles;
      it = compiled_by_key.emplace(key, std::move(*compiled)).first;
    }
    EXPECT_LE(it->second.served.lo, batch * sequence);
    EXPECT_GE(it->second.served.hi, batch * sequence);
    EXPECT_TRUE(MatchesAtExtent(it->second, g, batch * sequence, seed + step))
        << "batch " << batch << ", sequence " << sequence << ", seed " << seed;
  }
  EXPECT_EQ(compiles, static_cast<int>(buckets.size()));
  std::printf("20 steps: %d compiles for %zu buckets\n", compiles, buckets.size());
}

// What the daemon ships for a bucket is what the kernel loader runs: the bundle parses as
// shape-generic over the bucket, buffers sized for an extent in it pass the loader's check
// at that extent, and a varying output one row short is refused.
TEST(ShapeGenericKernels, BucketBundlesPassTheLoadersChecksAtEveryExtent) {
  const uint64_t seed = LoggedSeed("bucket bundles through the loader");
  std::mt19937_64 rng(seed);
  CompileOptions options = EmulatorCompileOptions();
  options.emit_ptx = true;  // the loader refuses kernels without an image
  for (const Graph& g : {TokenBlock(45, 96, DType::kF16), FoldedSoftmax(6, 5, 32),
                         BatchChannelSums(11, 9, 24, DType::kF32)}) {
    StatusOr<CompileResult> compiled = CompileGraph(g, options);
    ASSERT_TRUE(compiled.ok()) << g.name << ": " << compiled.status().ToString();
    ASSERT_TRUE(compiled->shape_generic()) << g.name << ": " << compiled->not_generic;
    const v1::KernelBundle bundle = ToBundle(*compiled, options);
    StatusOr<std::shared_ptr<const loader::Program>> program =
        loader::ParseProgram(bundle.SerializeAsString());
    ASSERT_TRUE(program.ok()) << g.name << ": " << program.status().ToString();
    ASSERT_TRUE((*program)->shape_generic());
    EXPECT_EQ((*program)->min_outer_extent(), compiled->served.lo);
    EXPECT_EQ((*program)->max_outer_extent(), compiled->served.hi);
    for (int64_t e : ExtentsToCheck(compiled->served, rng, 2)) {
      const Graph at = AtExtent(compiled->graph, compiled->shape_class, e);
      std::vector<uint64_t> in, out;
      for (int p : at.Parameters()) in.push_back(static_cast<uint64_t>(at.nodes[p].shape.bytes()));
      for (int o : at.outputs) out.push_back(static_cast<uint64_t>(at.nodes[o].shape.bytes()));
      Status fits = loader::CheckBufferSizes(**program, in, out, e);
      EXPECT_TRUE(fits.ok()) << g.name << " at extent " << e << ": " << fits.ToString();
      for (size_t k = 0; k < out.size(); ++k) {
        const uint64_t row = bundle.outputs(static_cast<int>(k)).bytes_per_extent();
        if (row == 0) continue;
        std::vector<uint64_t> short_out = out;
        short_out[k] -= row;
        EXPECT_EQ(loader::CheckBufferSizes(**program, in, short_out, e).code(),
                  StatusCode::kInvalidArgument)
            << g.name << " output " << k << " at extent " << e;
      }
    }
  }
}

// Returns random graph `seed` with every parameter whose dimension 0 is the first
// parameter's named an outer parameter, or nullopt when that parameter is a scalar.
std::optional<Graph> RandomGraphWithOuterParameters(uint64_t seed) {
  Graph g = testing::RandomGraphBuilder(seed).Build();
  const std::vector<int> params = g.Parameters();
  if (g.nodes[params[0]].shape.rank() == 0) return std::nullopt;
  const int64_t extent = g.nodes[params[0]].shape.dims[0];
  for (size_t p = 0; p < params.size(); ++p) {
    const Shape& s = g.nodes[params[p]].shape;
    if (s.rank() > 0 && s.dims[0] == extent) g.outer_parameters.push_back(static_cast<int64_t>(p));
  }
  return g;
}

// Graphs that once failed, run at every extent of their bucket. Both have an output of
// 50 x 32 elements beside row reduces over [extent, 50, 32]: at the top extent 32 its count
// equals the rows', and the row-stitched phase wrote it one element per row, so every run
// below the top left (32 - extent) x 50 of its elements unwritten.
TEST(ShapeGenericKernels, RandomGraphsThatOnceFailedServeEveryExtent) {
  for (uint64_t seed : {uint64_t{1795865404369869434u}, uint64_t{1795865568413315056u}}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::optional<Graph> g = RandomGraphWithOuterParameters(seed);
    ASSERT_TRUE(g.has_value());
    StatusOr<CompileResult> compiled = CompileGraph(*g, EmulatorCompileOptions());
    ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
    ASSERT_TRUE(compiled->shape_generic()) << compiled->not_generic;
    for (int64_t e = compiled->served.lo; e <= compiled->served.hi; ++e) {
      EXPECT_TRUE(MatchesAtExtent(*compiled, *g, e, seed + static_cast<uint64_t>(e)));
    }
  }
}

// Random graphs whose parameters share dimension 0: where the graph is shape-generic, its
// bucket's kernels match the interpreter at the ends and inside; where it is not, the
// compile serves exactly its own shapes.
TEST(ShapeGenericKernels, RandomGraphsOfAClassMatchTheInterpreter) {
  const uint64_t base = LoggedSeed("random graphs");
  int generic = 0;
  int top_only = 0;
  for (uint64_t i = 0; i < 40; ++i) {
    std::optional<Graph> with_outer = RandomGraphWithOuterParameters(base + i);
    if (!with_outer) continue;
    const Graph& g = *with_outer;
    const int64_t extent = g.nodes[g.Parameters()[0]].shape.dims[0];
    if (!ClassifyShapes(g).ok()) {
      Bucket served;
      ToShapeClass(g, &served);
      EXPECT_EQ(served.lo, extent);
      EXPECT_EQ(served.hi, extent);
      continue;
    }
    SCOPED_TRACE("seed " + std::to_string(base + i));
    if (CheckBucket(g, base + i, 1)) {
      ++generic;
    } else {
      ++top_only;
    }
  }
  // Planner rewrites (a statistics shift taken from the rows) and row kernels whose rows
  // would vary in length leave some classes at their top extent alone.
  std::printf("of 40 random graphs: %d compile shape-generic, %d for the top extent alone\n",
              generic, top_only);
  EXPECT_GT(generic, 0);
}

// A row-tiled kernel (ThreadMapping::transpose_tile) is laid out for its graph's exact sizes;
// in a shape-generic compile it walks its rows in order instead, rows_per_block at a time, at
// every extent of its bucket. The tile is forced on the Inductor model's one-kernel plan of a
// batched softmax over the columns of [batch, q, k, h] scores moved to [batch, h, k, q].
TEST(ShapeGenericKernels, RowTiledKernelsWalkTheirRowsInOrderAtEveryExtent) {
  const uint64_t seed = LoggedSeed("row tiles");
  Graph g;
  g.name = "batched_transposed_softmax";
  const int x = Param(g, {kF32, {9, 64, 8, 4}}, 0, "x");
  const int t = Transpose(g, x, {0, 3, 2, 1});
  const int max = Reduce(g, t, ConstScalar(g, kF32, -1e30), {3}, ReduceKind::kMax);
  const int e = Unary(g, OpCode::kExp, Binary(g, OpCode::kSub, t, Expand(g, max, t, {3})));
  const int sum = Reduce(g, e, ConstScalar(g, kF32, 0), {3}, ReduceKind::kSum);
  g.outputs = {Binary(g, OpCode::kDiv, e, Expand(g, sum, e, {3}))};
  g.outer_parameters = {0};
  CompileOptions options = EmulatorCompileOptions();
  options.planner = PlannerKind::kInductor;
  StatusOr<CompileResult> compiled = CompileGraph(g, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  ASSERT_TRUE(compiled->shape_generic()) << compiled->not_generic;
  ASSERT_EQ(compiled->plan.kernels.size(), 1u) << Describe(compiled->graph, compiled->plan);
  KernelSpec& kernel = compiled->plan.kernels[0];
  ASSERT_TRUE(MapRowTiles(compiled->graph, kernel, *FindDevice("H100"), 8, 32))
      << Describe(compiled->graph, compiled->plan);
  StatusOr<CompiledKernel> tiled =
      EmitKernel(compiled->graph, kernel, CodegenOptions{}, &compiled->shape_class);
  ASSERT_TRUE(tiled.ok()) << tiled.status().ToString();
  ASSERT_TRUE(tiled->takes_outer_extent);
  compiled->kernels[0] = *tiled;
  std::mt19937_64 rng(seed);
  for (int64_t extent : ExtentsToCheck(compiled->served, rng, 2)) {
    EXPECT_TRUE(MatchesAtExtent(*compiled, g, extent, seed + static_cast<uint64_t>(extent)))
        << "seed " << seed;
  }
}

}  // namespace
}  // namespace stitch
