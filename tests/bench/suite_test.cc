// The benchmark suite's graphs: all 30 present, well formed, compilable to PTX, and correct
// on the host emulator (at the emulation scale) against the reference interpreter, as planned
// for each device of sm_90 (the H100 and the H200 plan differently). One test per entry and
// device so ctest can run them in parallel.
#include "suite/suite.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>

#include "stitch/driver/compile.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/ir/verifier.h"
#include "stitch/plan/baseline_planner.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/reference/interpreter.h"
#include "stitch/reference/shape_scaling.h"
#include "stitch/reference/tensor_compare.h"

namespace stitch::suite {
namespace {

TEST(SuiteTest, HasThirtyEntriesInIdOrder) {
  std::vector<SuiteEntry> entries = BuildSuite();
  ASSERT_EQ(entries.size(), static_cast<size_t>(kSuiteSize));
  for (int i = 0; i < kSuiteSize; ++i) {
    EXPECT_EQ(entries[i].id, i + 1);
    EXPECT_FALSE(entries[i].model.empty());
    EXPECT_FALSE(entries[i].pattern.empty());
    EXPECT_FALSE(entries[i].shape_text.empty());
  }
  EXPECT_FALSE(BuildSuiteEntry(0).ok());
  EXPECT_FALSE(BuildSuiteEntry(kSuiteSize + 1).ok());
}

// The batch norms over a whole batch (#17 NCHW, #18 and #20 NHWC) are the rows whose
// statistics span the whole of a tensor that their outputs read again; each such tensor is far
// larger than a GPU holds, so every plan reads it twice but for what stays on chip. #20 reads
// one (x), #18 three (x, the output gradient and the forward's output for the ReLU's mask)
// and its per-channel mean, a few hundred bytes.
TEST(SuiteTest, OnlyWholeBatchStatisticsForceARereadOfTheirInputs) {
  for (const char* name : {"H100", "H200"}) {
    const int64_t on_chip = OnChipBytes(*FindDevice(name));
    for (const SuiteEntry& e : BuildSuite()) {
      const int64_t forced = ForcedRereadBytes(e.graph, on_chip);
      if (e.id != 17 && e.id != 18 && e.id != 20) {
        EXPECT_EQ(forced, 0) << "#" << e.id << " on the " << name;
        continue;
      }
      const int64_t x = e.graph.nodes[e.graph.Parameters()[0]].shape.bytes();
      const int64_t tensors = (e.id == 18 ? 3 : 1) * x - on_chip;
      EXPECT_GE(forced, tensors) << "#" << e.id << " on the " << name;
      EXPECT_LE(forced, tensors + 1024) << "#" << e.id << " on the " << name;
    }
  }
}

// Compiles suite row `id` for `target` and checks its shipped kernels at full geometry and,
// at the emulation scale, against the interpreter.
void CheckEntryOnEmulator(int id, const Target& target) {
  StatusOr<SuiteEntry> entry = BuildSuiteEntry(id);
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  const Graph& full = entry->graph;
  ASSERT_TRUE(Verify(full).ok()) << Verify(full).ToString() << "\n" << ToText(full);

  // Full shape to PTX; cubin assembly is the bench's business and would double the time.
  CompileOptions ptx_options;
  ptx_options.codegen.target = target;
  ptx_options.codegen.emit_cubin = false;
  StatusOr<CompileResult> compiled = CompileGraph(full, ptx_options);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  ASSERT_FALSE(compiled->kernels.empty());
  for (const CompiledKernel& k : compiled->kernels) EXPECT_FALSE(k.ptx.empty()) << k.name;

  // The kernels that ship for the listed shape, at their full geometry: sampled blocks, every
  // access bounds-checked.
  {
    StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create();
    ASSERT_TRUE(emulator.ok()) << emulator.status().ToString();
    BlockSampling sampling;
    sampling.seed = 2000 + static_cast<uint64_t>(id);
    StatusOr<SampledRun> shipped = RunSampledOnEmulator(compiled->graph, compiled->plan,
                                                        compiled->kernels, sampling, **emulator);
    ASSERT_TRUE(shipped.ok()) << shipped.status().ToString() << "\n"
                              << Describe(compiled->graph, compiled->plan);
    ASSERT_EQ(shipped->launches.size(), compiled->kernels.size());
    for (const SampledLaunch& l : shipped->launches) {
      std::printf("shipped %s [%s]: %llu of %llu blocks at full geometry, in bounds\n",
                  l.kernel.c_str(), std::string(KernelKindName(l.kind)).c_str(),
                  static_cast<unsigned long long>(l.blocks.size()),
                  static_cast<unsigned long long>(l.launch.blocks()));
      EXPECT_EQ(l.stats.blocks_run, l.blocks.size());
    }
  }

  std::optional<ScaledGraph> scaled = ScaleForEmulation(full);
  ASSERT_TRUE(scaled.has_value()) << "no shape within the emulation budget";
  const Graph& g = scaled->graph;
  CompileOptions ir_options;
  ir_options.codegen.target = target;
  ir_options.emit_ptx = false;
  ir_options.max_persistent_grid_blocks = kEmulatorMaxPersistentGridBlocks;
  StatusOr<CompileResult> portable = CompileGraph(g, ir_options);
  ASSERT_TRUE(portable.ok()) << portable.status().ToString();
  std::mt19937_64 rng(1000 + id);
  std::vector<Tensor> inputs;
  for (int p : g.Parameters()) inputs.push_back(RandomTensor(g.nodes[p].shape, rng));
  StatusOr<std::vector<Tensor>> expected = Evaluate(g, inputs);
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  EmulatorOptions emulator_options;
  emulator_options.random_order = true;
  emulator_options.seed = 1000 + id;
  emulator_options.count_footprint = true;
  StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create(emulator_options);
  ASSERT_TRUE(emulator.ok()) << emulator.status().ToString();
  StatusOr<EmulatedRun> run = RunOnEmulator(portable->graph, portable->kernels, inputs, **emulator);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  // The cost model's traffic for each kernel is what the emulator measures: the distinct
  // 32-byte sectors the kernel's threads touch.
  ASSERT_EQ(run->per_kernel.size(), portable->plan.kernels.size());
  for (size_t k = 0; k < run->per_kernel.size(); ++k) {
    const ThreadMapping& m = portable->plan.kernels[k].mapping;
    const LaunchStats& s = run->per_kernel[k];
    const double model = static_cast<double>(m.bytes_loaded + m.bytes_stored);
    const double measured =
        static_cast<double>(s.footprint_bytes_loaded + s.footprint_bytes_stored);
    std::printf("kernel %zu: model %.0f bytes, emulator footprint %.0f bytes (%+.2f%%)\n", k, model,
                measured, 100 * (measured / model - 1));
    EXPECT_NEAR(measured / model, 1.0, 0.05) << portable->plan.kernels[k].name << "\n"
                                             << Describe(g, portable->plan);
  }
  ASSERT_EQ(run->outputs.size(), expected->size());
  for (size_t k = 0; k < expected->size(); ++k) {
    const Tensor& want = (*expected)[k];
    Comparison c = Compare(want, run->outputs[k], OutputTolerance(g, want.shape.dtype));
    EXPECT_TRUE(c.pass) << "output " << k << " " << want.shape.ToString() << ": " << c.message
                        << "\nplan:\n"
                        << Describe(g, portable->plan);
  }
}

class SuiteEntryTest : public ::testing::TestWithParam<int> {};

TEST_P(SuiteEntryTest, VerifiesCompilesAndMatchesOnEmulator) {
  CheckEntryOnEmulator(GetParam(), *Target::Parse("sm_90"));
}

INSTANTIATE_TEST_SUITE_P(All, SuiteEntryTest, ::testing::Range(1, kSuiteSize + 1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "id" + std::to_string(info.param);
                         });

class SuiteEntryOnH200Test : public ::testing::TestWithParam<int> {};

TEST_P(SuiteEntryOnH200Test, VerifiesCompilesAndMatchesOnEmulator) {
  CheckEntryOnEmulator(GetParam(), *Target::Parse("sm_90/h200"));
}

INSTANTIATE_TEST_SUITE_P(All, SuiteEntryOnH200Test, ::testing::Range(1, kSuiteSize + 1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "id" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace stitch::suite
