// The kernels that ship, run as they ship: the plan compiled for sm_90's own grid at the
// graph's full shapes, launched at full geometry on a sample of blocks with every global
// access bounds-checked (RunSampledOnEmulator). A scaled-down run may pick another plan, so
// it never stands in for the shipped kernels; these tests say which plan each run executed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "stitch/driver/bundle.h"
#include "stitch/driver/compile.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/loader/kernel_loader.h"
#include "stitch/reference/shape_scaling.h"
#include "support/emulator_check.h"
#include "support/ir_mutation.h"
#include "support/normalization_graphs.h"
#include "support/random_graph.h"

namespace stitch {
namespace {

// Training batch norm at a ResNet shape, NHWC, f16 in and out, with the batch statistics as
// outputs: on sm_90 it ships as one grid-barrier kernel of 264 blocks of 1024 threads.
constexpr char kBatchNormHlo[] = R"(HloModule bn

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  xin = f16[64,56,56,256] parameter(0)
  gamma = f32[256] parameter(1)
  beta = f32[256] parameter(2)
  x = f32[64,56,56,256] convert(xin)
  zero = f32[] constant(0)
  s = f32[256] reduce(x, zero), dimensions={0,1,2}, to_apply=sum
  inv_n = f32[] constant(4.982461734693877e-06)
  inv_n_b = f32[256] broadcast(inv_n), dimensions={}
  mean = f32[256] multiply(s, inv_n_b)
  mean_b = f32[64,56,56,256] broadcast(mean), dimensions={3}
  xc = f32[64,56,56,256] subtract(x, mean_b)
  sq = f32[64,56,56,256] multiply(xc, xc)
  ss = f32[256] reduce(sq, zero), dimensions={0,1,2}, to_apply=sum
  var = f32[256] multiply(ss, inv_n_b)
  eps = f32[] constant(1e-5)
  eps_b = f32[256] broadcast(eps), dimensions={}
  ve = f32[256] add(var, eps_b)
  rs = f32[256] rsqrt(ve)
  scale = f32[256] multiply(rs, gamma)
  scale_b = f32[64,56,56,256] broadcast(scale), dimensions={3}
  b_b = f32[64,56,56,256] broadcast(beta), dimensions={3}
  t = f32[64,56,56,256] multiply(xc, scale_b)
  y0 = f32[64,56,56,256] add(t, b_b)
  y0z = f32[64,56,56,256] broadcast(zero), dimensions={}
  y = f32[64,56,56,256] maximum(y0, y0z)
  out = f16[64,56,56,256] convert(y)
  ROOT r = (f16[64,56,56,256], f32[256], f32[256]) tuple(out, mean, var)
}
)";

StatusOr<CompileResult> CompileShipped(const Graph& g) {
  CompileOptions options;
  options.codegen.target = *Target::Parse("sm_90");
  options.codegen.emit_cubin = false;
  return CompileGraph(g, options);
}

std::string DescribeRun(const SampledRun& run) {
  std::string out;
  for (const SampledLaunch& l : run.launches) {
    out += "  " + l.kernel + " [" + std::string(KernelKindName(l.kind)) + "] grid " +
           std::to_string(l.launch.blocks()) + " x " + std::to_string(l.launch.block_threads()) +
           " threads, " + std::to_string(l.blocks.size()) + " blocks sampled\n";
  }
  return out;
}

class FullGeometryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<Graph> g = ImportHloModule(kBatchNormHlo);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    graph_ = *g;
    StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create();
    ASSERT_TRUE(emulator.ok()) << emulator.status().ToString();
    emulator_ = std::move(*emulator);
  }

  Graph graph_;
  std::unique_ptr<Emulator> emulator_;
};

// The shipped plan is one grid-barrier kernel; run at full geometry, every sampled block's
// accesses stay inside their buffers.
TEST_F(FullGeometryTest, BatchNormShipsOneGridBarrierKernelThatStaysInBounds) {
  StatusOr<CompileResult> shipped = CompileShipped(graph_);
  ASSERT_TRUE(shipped.ok()) << shipped.status().ToString();
  ASSERT_EQ(shipped->kernels.size(), 1u) << Describe(shipped->graph, shipped->plan);
  const CompiledKernel& k = shipped->kernels[0];
  EXPECT_EQ(k.kind, KernelKind::kGlobalStitch);
  EXPECT_GT(k.workspace_bytes, 0u);
  EXPECT_GT(k.launch.blocks(), uint64_t{kEmulatorMaxPersistentGridBlocks})
      << "the shipped grid must be the target's, not the emulator's cap";

  BlockSampling sampling;
  sampling.seed = 25;
  StatusOr<SampledRun> run =
      RunSampledOnEmulator(shipped->graph, shipped->plan, shipped->kernels, sampling, *emulator_);
  ASSERT_TRUE(run.ok()) << run.status().ToString() << "\n"
                        << Describe(shipped->graph, shipped->plan);
  std::printf("shipped plan ran at full geometry:\n%s", DescribeRun(*run).c_str());
  ASSERT_EQ(run->launches.size(), 1u);
  const SampledLaunch& l = run->launches[0];
  EXPECT_EQ(l.kernel, k.name);
  EXPECT_EQ(l.launch.grid, k.launch.grid);
  EXPECT_EQ(l.stats.threads, k.launch.threads());
  EXPECT_EQ(l.stats.blocks_run, l.blocks.size());
  // The first and the last block, and at least one grid barrier passed by the sample.
  EXPECT_EQ(l.blocks.front(), 0u);
  EXPECT_EQ(l.blocks.back(), k.launch.blocks() - 1);
  EXPECT_GE(l.stats.grid_barriers, 1u);
}

// Suite row #26's column reduction splits over blocks and the last block of each column tile
// combines its partials. The sample holds every block of the last tile, so that tile's last
// arrival runs its combine at full geometry, bounds-checked: it loads the tile's partials and
// stores its outputs, beyond the partials every block stores.
TEST_F(FullGeometryTest, ASplitColumnReductionCombinesItsLastTileInTheSample) {
  StatusOr<Graph> g = ImportHloModule(R"(HloModule bias_grad
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  dy = f32[8192,768] parameter(0)
  zero = f32[] constant(0)
  ROOT db = f32[768] reduce(dy, zero), dimensions={0}, to_apply=sum
}
)");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  StatusOr<CompileResult> shipped = CompileShipped(*g);
  ASSERT_TRUE(shipped.ok()) << shipped.status().ToString();
  ASSERT_EQ(shipped->kernels.size(), 1u) << Describe(shipped->graph, shipped->plan);
  const ThreadMapping& m = shipped->plan.kernels[0].mapping;
  ASSERT_EQ(m.split_combine, ThreadMapping::SplitCombine::kLastBlock)
      << Describe(shipped->graph, shipped->plan);
  const int64_t tile_columns = 32 * m.vector_width;
  const int64_t tiles = 768 / tile_columns;
  ASSERT_EQ(m.launch.blocks(), static_cast<uint64_t>(tiles * m.reduce_chunks))
      << "a block per work item";
  BlockSampling sampling;
  sampling.seed = 26;
  StatusOr<SampledRun> run =
      RunSampledOnEmulator(shipped->graph, shipped->plan, shipped->kernels, sampling, *emulator_);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  std::printf("shipped plan ran at full geometry:\n%s", DescribeRun(*run).c_str());
  const SampledLaunch& l = run->launches[0];
  const std::set<uint64_t> sampled(l.blocks.begin(), l.blocks.end());
  for (int64_t c = 0; c < m.reduce_chunks; ++c) {
    EXPECT_TRUE(sampled.count(static_cast<uint64_t>(c * tiles + tiles - 1))) << "chunk " << c;
  }
  // Each block stores its tile's partials (a float per column); the last tile's combine
  // stores its outputs, and its counter's reset, besides.
  const uint64_t partials = static_cast<uint64_t>(tile_columns) * 4 * l.blocks.size();
  EXPECT_GE(l.stats.global_bytes_stored, partials + static_cast<uint64_t>(tile_columns) * 4);
}

// The scaled-down run executes another plan than the one that ships: the reason a shipped
// kernel needs its own run.
TEST_F(FullGeometryTest, ScaledRunExecutesAnotherPlan) {
  StatusOr<CompileResult> shipped = CompileShipped(graph_);
  ASSERT_TRUE(shipped.ok()) << shipped.status().ToString();
  std::optional<ScaledGraph> scaled = ScaleForEmulation(graph_);
  ASSERT_TRUE(scaled.has_value());
  testing::EmulatorCheck check;
  ASSERT_TRUE(testing::CheckOnEmulator(scaled->graph, 25, /*random_order=*/true, &check,
                                       /*tolerance_scale=*/1.0, /*never_slower=*/true));
  std::printf("shipped: %s\nscaled (%d halvings): %s\n",
              Describe(shipped->graph, shipped->plan).c_str(), scaled->halvings,
              Describe(check.compiled.graph, check.compiled.plan).c_str());
  bool same = check.compiled.kernels.size() == shipped->kernels.size();
  for (size_t i = 0; same && i < shipped->kernels.size(); ++i) {
    same = check.compiled.kernels[i].kind == shipped->kernels[i].kind &&
           check.compiled.kernels[i].launch.grid == shipped->kernels[i].launch.grid;
  }
  EXPECT_FALSE(same) << "the scaled run now executes the shipped plan; this test's premise is gone";
}

// A store index off by one element, planted in the shipped kernel (the artifact stitchd
// caches and serves) on its stores to the full-size output: the full-geometry run stops at
// the first store past the end and names it. The scaled run, the check CI had before,
// compiles and runs kernels of another plan, so it passes: it never executes the kernel
// that ships.
TEST_F(FullGeometryTest, PlantedOffByOneIsCaughtAtFullGeometryOnly) {
  StatusOr<CompileResult> shipped = CompileShipped(graph_);
  ASSERT_TRUE(shipped.ok()) << shipped.status().ToString();
  int planted = 0;
  for (CompiledKernel& k : shipped->kernels) {
    StatusOr<int> n = testing::ShiftStoresToParameter(k, shipped->graph.outputs[0], 1);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    planted += *n;
  }
  ASSERT_GT(planted, 0) << "no store to the output to mutate";
  StatusOr<SampledRun> run = RunSampledOnEmulator(shipped->graph, shipped->plan, shipped->kernels,
                                                  BlockSampling{}, *emulator_);
  ASSERT_FALSE(run.ok()) << "the planted off-by-one went unseen:\n" << DescribeRun(*run);
  const std::string message = run.status().message();
  std::printf("caught: %s\n", message.c_str());
  EXPECT_NE(message.find("kernel " + shipped->kernels[0].name + ": error in block ("),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("out of bounds"), std::string::npos) << message;
  EXPECT_NE(message.find("store to argument"), std::string::npos) << message;
  EXPECT_NE(message.find("'out' f16[64,56,56,256]"), std::string::npos) << message;
  EXPECT_NE(message.find("past its end"), std::string::npos) << message;

  // The scaled run passes, and what it ran is not the shipped kernel.
  std::optional<ScaledGraph> scaled = ScaleForEmulation(graph_);
  ASSERT_TRUE(scaled.has_value());
  testing::EmulatorCheck check;
  ASSERT_TRUE(testing::CheckOnEmulator(scaled->graph, 26, /*random_order=*/true, &check, 1.0,
                                       /*never_slower=*/true));
  for (const CompiledKernel& k : check.compiled.kernels) {
    for (const CompiledKernel& s : shipped->kernels) {
      EXPECT_NE(k.portable_ir, s.portable_ir)
          << "the scaled run executed shipped kernel " << s.name;
    }
  }
}

// The H100 launch of this module that lost its CUDA context bound `out` to a small buffer
// (memcheck: a 16-byte store by thread (513,0,0) of block (158,0,0), half a megabyte past
// the end of the 2 MiB segment holding the f32[256] statistics; that thread's stores, at
// the kernel's full geometry, are all inside a f16[64,56,56,256] buffer). At full geometry
// the emulator shows that launch writing past the end of the buffer it was given, and the
// same kernels bound as the bundle declares staying inside theirs; the loader now refuses
// that binding before launching, naming the buffer and the size the bundle declares.
TEST_F(FullGeometryTest, OutputBoundToTheStatisticsBufferIsCaughtAndRefused) {
  CompileOptions options;
  options.codegen.target = *Target::Parse("sm_90");
  options.codegen.emit_cubin = false;
  StatusOr<CompileResult> shipped = CompileGraph(graph_, options);
  ASSERT_TRUE(shipped.ok()) << shipped.status().ToString();
  ASSERT_EQ(shipped->kernels.size(), 1u);
  const CompiledKernel& kernel = shipped->kernels[0];
  const Graph& g = shipped->graph;
  const int out = g.outputs[0], mean = g.outputs[1];
  const uint64_t mean_bytes = static_cast<uint64_t>(g.nodes[mean].shape.bytes());

  // Buffers of the graph's sizes, zero-filled and 256-byte aligned as cudaMalloc's are;
  // `out`'s parameter gets mean's buffer.
  std::vector<std::unique_ptr<void, decltype(&std::free)>> owned;
  auto buffer = [&](uint64_t bytes) {
    const size_t rounded = (bytes + 255) / 256 * 256;
    owned.emplace_back(std::aligned_alloc(256, rounded), &std::free);
    std::memset(owned.back().get(), 0, rounded);
    return owned.back().get();
  };
  LaunchOptions launch = CheckedLaunch(g, kernel);
  std::vector<void*> args;
  for (size_t i = 0; i < kernel.param_nodes.size(); ++i) {
    args.push_back(buffer(launch.arg_bytes[i]));
  }
  args.push_back(buffer(kernel.workspace_bytes));
  launch.blocks = SampleBlocks(g, shipped->plan.kernels[0], BlockSampling{});
  StatusOr<LaunchStats> right = emulator_->Launch(kernel, args, launch);
  ASSERT_TRUE(right.ok()) << right.status().ToString();

  const size_t out_arg =
      static_cast<size_t>(std::find(kernel.param_nodes.begin(), kernel.param_nodes.end(), out) -
                          kernel.param_nodes.begin());
  ASSERT_LT(out_arg, kernel.param_nodes.size());
  LaunchOptions misbound = launch;
  misbound.arg_bytes[out_arg] = mean_bytes;
  misbound.arg_names[out_arg] = "the buffer of mean, bound as out";
  args[out_arg] = buffer(mean_bytes);
  std::fill(static_cast<uint8_t*>(args.back()),
            static_cast<uint8_t*>(args.back()) + kernel.workspace_bytes, 0);
  StatusOr<LaunchStats> wrong = emulator_->Launch(kernel, args, misbound);
  ASSERT_FALSE(wrong.ok()) << "the misbound launch stayed in bounds";
  std::printf("misbound launch: %s\n", wrong.status().message().c_str());
  EXPECT_NE(wrong.status().message().find("out of bounds"), std::string::npos);
  EXPECT_NE(wrong.status().message().find("the buffer of mean, bound as out"), std::string::npos);

  // The loader, given the sizes of the buffers the job binds, refuses that launch: the bundle
  // declares every input's and output's size.
  v1::KernelBundle bundle = ToBundle(*shipped, options);
  ASSERT_EQ(bundle.outputs_size(), 3);
  EXPECT_EQ(bundle.outputs(0).shape(), "f16[64,56,56,256]");
  StatusOr<std::shared_ptr<const loader::Program>> program =
      loader::ParseProgram(bundle.SerializeAsString());
  ASSERT_TRUE(program.ok()) << program.status().ToString();
  std::vector<uint64_t> input_bytes, output_bytes;
  for (const v1::BufferSpec& b : bundle.inputs()) input_bytes.push_back(b.bytes());
  for (const v1::BufferSpec& b : bundle.outputs()) output_bytes.push_back(b.bytes());
  EXPECT_TRUE(loader::CheckBufferSizes(**program, input_bytes, output_bytes).ok());
  output_bytes[0] = mean_bytes;
  Status refused = loader::CheckBufferSizes(**program, input_bytes, output_bytes);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(),
            "output 0 is a 1024-byte buffer, but the bundle's output 0 is f16[64,56,56,256] "
            "(102760448 bytes)");
}

// Returns `spec`, a scheduled global_stitch kernel, with a grid of `blocks` blocks: every
// phase runs on that grid, and a row-stitched phase's column partials get one chunk per block
// (the invariant its emitter checks). Split reduces keep their chunk counts, which do not
// depend on the grid.
KernelSpec WithGrid(KernelSpec spec, uint32_t blocks) {
  spec.mapping.launch.grid = {blocks, 1, 1};
  for (KernelSpec& phase : spec.phases) {
    phase.mapping.launch.grid = {blocks, 1, 1};
    if (phase.kind == KernelKind::kRowStitch && phase.mapping.reduce_chunks > 1) {
      phase.mapping.reduce_chunks = static_cast<int>(blocks);
    }
  }
  return spec;
}

// Grid-barrier kernels index their reduced outputs and partial results by block and thread,
// and the scheduler may give such a kernel any grid from one block to the co-resident bound
// (the emulator's cap, max_persistent_grid_blocks and SizeGridToWork all pick smaller ones).
// The shipped grid-barrier kernels of batch-norm training in f16 (a split column reduce and
// its combine) and of the first model-sized random graphs of a fixed seed range that ship
// one, emitted for every grid from 1 to 12 blocks, a few more, and the co-resident bound,
// stay in bounds at full geometry.
TEST(GridBarrierIndices, InBoundsForEveryGridTheSchedulerCanChoose) {
  std::vector<std::pair<std::string, Graph>> graphs = {
      {"batch norm f16[8,14,14,256]", testing::BatchNormForward(DType::kF16, {8, 14, 14, 256}, 3)}};
  CompileOptions options;
  options.emit_ptx = false;
  for (uint64_t seed = 2900; graphs.size() < 3 && seed < 3100; ++seed) {
    Graph g = testing::RandomGraphBuilder::Large(seed, int64_t{1} << 20).Build();
    StatusOr<CompileResult> c = CompileGraph(g, options);
    if (!c.ok()) continue;
    for (const CompiledKernel& k : c->kernels) {
      if (k.workspace_bytes != 0) {
        graphs.push_back({"random graph, seed " + std::to_string(seed), g});
        break;
      }
    }
  }
  ASSERT_GE(graphs.size(), 3u) << "too few graphs with grid-barrier kernels in the seed range";
  StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create();
  ASSERT_TRUE(emulator.ok()) << emulator.status().ToString();
  for (const auto& [name, g] : graphs) {
    SCOPED_TRACE(name);
    StatusOr<CompileResult> c = CompileGraph(g, options);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    int checked = 0;
    for (const KernelSpec& spec : c->plan.kernels) {
      if (spec.kind != KernelKind::kGlobalStitch) continue;
      const uint32_t bound = spec.mapping.launch.grid[0];
      std::set<uint32_t> grids;
      for (uint32_t b = 1; b <= std::min<uint32_t>(bound, 12); ++b) grids.insert(b);
      for (uint32_t b : {bound / 3, bound / 2 + 1, bound - 1, bound}) {
        if (b > 0) grids.insert(b);
      }
      for (uint32_t blocks : grids) {
        const KernelSpec resized = WithGrid(spec, blocks);
        StatusOr<CompiledKernel> k = EmitKernel(c->graph, resized, options.codegen);
        ASSERT_TRUE(k.ok()) << blocks << " blocks: " << k.status().ToString();
        FusionPlan one{"stitch", {resized}};
        BlockSampling sampling;
        sampling.seed = blocks;
        StatusOr<SampledRun> run = RunSampledOnEmulator(c->graph, one, {*k}, sampling, **emulator);
        ASSERT_TRUE(run.ok()) << blocks << " blocks: " << run.status().ToString() << "\n"
                              << Describe(c->graph, one);
        ++checked;
      }
      std::printf("%s: %s in bounds on %d grids of 1 to %u blocks\n", name.c_str(),
                  spec.name.c_str(), checked, bound);
    }
    EXPECT_GT(checked, 0);
  }
}

}  // namespace
}  // namespace stitch
