// The loop kernels' schedule (plan/src/schedule_loop.cc): the block size, vector width and
// grid a loop kernel of its own gets, and the bytes it is modelled to load.
#include <gtest/gtest.h>

#include "stitch/plan/gpu_device.h"
#include "stitch/plan/schedule.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

const GpuDevice& H100() { return *FindDevice("H100"); }

// y = x * w + x over `dims` in `dtype`, planned as one loop kernel.
struct LoopGraph {
  Graph graph;
  KernelSpec kernel;
};

LoopGraph ElementwiseLoop(DType dtype, std::vector<int64_t> dims) {
  LoopGraph l;
  Graph& g = l.graph;
  int x = testing::Param(g, {dtype, dims}, 0, "x");
  int w = testing::Param(g, {dtype, dims}, 1, "w");
  int xw = testing::Binary(g, OpCode::kMul, x, w);
  int y = testing::Binary(g, OpCode::kAdd, xw, x);
  g.outputs = {y};
  l.kernel.name = "loop";
  l.kernel.kind = KernelKind::kLoop;
  l.kernel.inputs = {x, w};
  l.kernel.nodes = {xw, y};
  l.kernel.outputs = {y};
  return l;
}

// The blocks of a one-pass grid on the SM that runs the most of them, over the mean.
double BusiestSmShare(int64_t blocks, int64_t sms) {
  return static_cast<double>((blocks + sms - 1) / sms * sms) / static_cast<double>(blocks);
}

TEST(ScheduleLoop, AModelTieGoesToTheGridThatSpreadsEvenlyOverTheSms) {
  // Suite row #30's size: 409,600 vectors of 4 f32 are 1,600 blocks of 256 threads or 3,200
  // of 128. The model prices both as two waves of resident blocks; on 132 SMs the busiest SM
  // runs 13 of the 1,600 (7% over the mean) and 25 of the 3,200 (3%).
  LoopGraph l = ElementwiseLoop(DType::kF32, {1280, 1280});
  ASSERT_TRUE(ScheduleKernel(l.graph, l.kernel, H100()).ok());
  const ThreadMapping& m = l.kernel.mapping;
  EXPECT_EQ(m.vector_width, 4);
  EXPECT_EQ(m.launch.block_threads(), 128u);
  EXPECT_EQ(m.launch.blocks(), 3200u);
  const int64_t sms = H100().sms;
  EXPECT_LT(BusiestSmShare(static_cast<int64_t>(m.launch.blocks()), sms),
            BusiestSmShare(1600, sms) / 1.01);
}

TEST(ScheduleLoop, ManyPassesPerSmKeepTheWidestVectors) {
  // Suite row #9's size in bf16: every grid runs hundreds of passes per SM, within 0.2% of
  // an even share, so 16-byte accesses stay.
  LoopGraph l = ElementwiseLoop(DType::kBF16, {8192, 11008});
  ASSERT_TRUE(ScheduleKernel(l.graph, l.kernel, H100()).ok());
  EXPECT_EQ(l.kernel.mapping.vector_width, 8);
}

TEST(ScheduleLoop, AGridOfFewerBlocksThanSmsKeepsItsDefaultBlock) {
  // 64 passes of 256 x 4 elements: each block has an SM of its own whichever block size, so
  // nothing is more even and the default 256 threads stay.
  LoopGraph l = ElementwiseLoop(DType::kF32, {256, 256});
  ASSERT_TRUE(ScheduleKernel(l.graph, l.kernel, H100()).ok());
  EXPECT_EQ(l.kernel.mapping.launch.block_threads(), 256u);
  EXPECT_EQ(l.kernel.mapping.vector_width, 4);
}

TEST(ScheduleLoop, AnInputReadThroughAReshapedSliceCostsTheSlicesBytes) {
  // A statistic's shift: one sample per group of a [64, 16384, 32, 4] view of a stored
  // tensor, the first element of each group. The kernel over the [64, 32] samples reads 2,048
  // elements of the 32 MiB input, whether it slices the input or a reshape of it.
  for (bool through_reshape : {false, true}) {
    SCOPED_TRACE(through_reshape ? "reshape, then slice" : "slice");
    Graph g;
    const int x = testing::Param(g, {DType::kF32, {64, 16384, 128}}, 0, "x");
    KernelSpec k;
    k.name = "shift";
    k.kind = KernelKind::kLoop;
    k.inputs = {x};
    int sample = -1;
    if (through_reshape) {
      const int view = testing::Reshape(g, x, {64, 16384, 32, 4});
      sample = testing::Slice(g, view, {0, 0, 0, 0}, {64, 1, 32, 1});
      k.nodes = {view, sample};
    } else {
      sample = testing::Slice(g, x, {0, 0, 0}, {64, 1, 128}, {1, 1, 4});
      k.nodes = {sample};
    }
    const int shift = testing::Reshape(g, sample, {64, 32});
    const int y = testing::Unary(g, OpCode::kExp, shift);
    k.nodes.push_back(shift);
    k.nodes.push_back(y);
    k.outputs = {y};
    g.outputs = {y};
    ASSERT_TRUE(ScheduleKernel(g, k, H100()).ok());
    EXPECT_EQ(k.mapping.bytes_loaded, 2048 * 4);
  }
}

// A loop whose every input is a broadcast small next to its output (a bias over [4096, 768])
// waits on DRAM for none of its loads: no bytes in flight bound it, only its stores' bytes. With
// an input as large as the output, that input's element is in flight for each of the vector's.
TEST(ScheduleLoop, ALoopOfBroadcastsAloneKeepsNoLoadsInFlight) {
  for (bool streams : {false, true}) {
    SCOPED_TRACE(streams ? "bias + x" : "bias alone");
    Graph g;
    const int bias = testing::Param(g, {DType::kF32, {768}}, 0, "bias");
    const int wide = testing::Broadcast(g, bias, {4096, 768}, {1});
    KernelSpec k;
    k.name = "loop";
    k.kind = KernelKind::kLoop;
    k.inputs = {bias};
    k.nodes = {wide};
    int y = testing::Unary(g, OpCode::kExp, wide);
    k.nodes.push_back(y);
    if (streams) {
      const int x = testing::Param(g, {DType::kF32, {4096, 768}}, 1, "x");
      k.inputs.push_back(x);
      y = testing::Binary(g, OpCode::kAdd, y, x);
      k.nodes.push_back(y);
    }
    k.outputs = {y};
    g.outputs = {y};
    ASSERT_TRUE(ScheduleKernel(g, k, H100()).ok());
    const ThreadMapping& m = k.mapping;
    EXPECT_EQ(m.load_bytes_in_flight_per_thread, streams ? 4 * m.vector_width : 0);
  }
}

}  // namespace
}  // namespace stitch
