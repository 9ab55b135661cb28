// Vector accesses: loop and row-stitched kernels give each thread up to 16 bytes of
// consecutive elements (ThreadMapping::vector_width), and the NVPTX backend merges them into
// 64- and 128-bit loads and stores because kernel buffers are 16-byte aligned. Widths follow
// the dtypes and the sizes; vectorized kernels match the interpreter on the emulator.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "stitch/codegen/codegen.h"
#include "stitch/driver/compile.h"
#include "support/emulator_check.h"
#include "support/graph_builder.h"
#include "support/ptx_text.h"

namespace stitch {
namespace {

using testing::Binary;
using testing::CompileToPtx;
using testing::Convert;
using testing::CountOf;
using testing::Param;

// out = (a + b) * a in `out_type`, from inputs of `in_type`.
Graph Elementwise(std::vector<int64_t> dims, DType in_type, DType out_type) {
  Graph g;
  g.name = "elementwise";
  int a = Param(g, {in_type, dims}, 0, "a");
  int b = Param(g, {in_type, dims}, 1, "b");
  int y = Binary(g, OpCode::kMul, Binary(g, OpCode::kAdd, a, b), a);
  g.outputs = {in_type == out_type ? y : Convert(g, y, out_type)};
  return g;
}

bool HasVectorLoad(const std::string& ptx) {
  return ptx.find("ld.global.nc.v") != std::string::npos;
}
bool HasVectorStore(const std::string& ptx) { return ptx.find("st.global.v") != std::string::npos; }

TEST(VectorAccess, LoopKernelsTakeSixteenBytesPerThreadWhereTheDtypesAllow) {
  struct Case {
    DType in, out;
    int width;
  };
  for (Case c : {Case{DType::kF32, DType::kF32, 4}, Case{DType::kF16, DType::kF16, 8},
                 Case{DType::kF64, DType::kF64, 2}, Case{DType::kF32, DType::kF16, 4}}) {
    Graph g = Elementwise({1024, 512}, c.in, c.out);
    SCOPED_TRACE(std::string(DTypeName(c.in)) + " -> " + std::string(DTypeName(c.out)));
    CompileResult r = CompileToPtx(g);
    ASSERT_EQ(r.kernels.size(), 1u);
    EXPECT_EQ(r.plan.kernels[0].mapping.vector_width, c.width);
    EXPECT_TRUE(HasVectorLoad(r.kernels[0].ptx)) << r.kernels[0].ptx;
    EXPECT_TRUE(HasVectorStore(r.kernels[0].ptx));
  }
}

// NVPTX splits vectors of more than 4 i8 or i16 lanes; the emitters access them as i32 words.
TEST(VectorAccess, SubwordVectorsAreAccessedAsWholeWords) {
  struct Case {
    Graph g;
    int width;
    const char* load;  // the one global load form the kernel's vectors take
    const char* store;
  };
  Case cases[] = {
      {Elementwise({1024, 512}, DType::kBF16, DType::kBF16), 8, "ld.global.nc.v4.u32",
       "st.global.v4.u32"},
      {Elementwise({1024, 512}, DType::kS8, DType::kS8), 8, "ld.global.nc.v2.u32",
       "st.global.v2.u32"},
      {testing::Softmax(4096, 1024, DType::kBF16), 8, "ld.global.nc.v4.u32", "st.global.v4.u32"},
      // Four bf16 lanes are one 8-byte access already, and stay one.
      {Elementwise({1024, 512}, DType::kF32, DType::kBF16), 4, "ld.global.nc.v4.f32",
       "st.global.v4.u16"},
  };
  for (Case& c : cases) {
    SCOPED_TRACE(c.g.name + " " + c.g.nodes[0].shape.ToString() + " -> " +
                 c.g.nodes[c.g.outputs[0]].shape.ToString());
    CompileResult r = CompileToPtx(c.g);
    ASSERT_EQ(r.kernels.size(), 1u);
    EXPECT_EQ(r.plan.kernels[0].mapping.vector_width, c.width);
    const std::string& ptx = r.kernels[0].ptx;
    EXPECT_GT(CountOf(ptx, c.load), 0) << ptx;
    EXPECT_GT(CountOf(ptx, c.store), 0) << ptx;
    for (const char* split : {"ld.global.nc.v4.u16", "ld.global.nc.v4.u8", "st.global.v4.u8"}) {
      EXPECT_EQ(CountOf(ptx, split), 0) << split << "\n" << ptx;
    }
    if (c.width == 8) {
      EXPECT_EQ(CountOf(ptx, "st.global.v4.u16"), 0) << ptx;
    }
  }
}

// out = x[:, 1:513] * 2 in bf16: the output's vectors start at multiples of 8 elements, the
// input's at odd ones, which no word access can take.
TEST(VectorAccess, SubwordVectorsAreWordsOnlyWhereTheirAlignmentIsProven) {
  Graph g;
  g.name = "offset_slice";
  int x = Param(g, {DType::kBF16, {1024, 514}}, 0, "x");
  int s = testing::Slice(g, x, {0, 1}, {1024, 513});
  g.outputs = {Binary(g, OpCode::kAdd, s, s)};
  CompileResult r = CompileToPtx(g);
  ASSERT_EQ(r.kernels.size(), 1u);
  ASSERT_EQ(r.plan.kernels[0].mapping.vector_width, 8);
  const std::string& ptx = r.kernels[0].ptx;
  EXPECT_EQ(CountOf(ptx, "ld.global.nc.v4.u32"), 0) << ptx;
  EXPECT_EQ(CountOf(ptx, "ld.global.nc.v2.u32"), 0) << ptx;
  EXPECT_GT(CountOf(ptx, "st.global.v4.u32"), 0) << ptx;
  testing::EmulatorCheck check;
  EXPECT_TRUE(testing::CheckOnEmulator(g, 41, /*random_order=*/true, &check));
}

TEST(VectorAccess, SizesNoWidthDividesStayScalar) {
  Graph g = Elementwise({1001, 3}, DType::kF32, DType::kF32);
  CompileResult r = CompileToPtx(g);
  ASSERT_EQ(r.kernels.size(), 1u);
  EXPECT_EQ(r.plan.kernels[0].mapping.vector_width, 1);
  EXPECT_FALSE(HasVectorLoad(r.kernels[0].ptx));
  EXPECT_FALSE(HasVectorStore(r.kernels[0].ptx));
}

TEST(VectorAccess, RowStitchedSoftmaxLoadsItsRowsAsVectors) {
  Graph g = testing::Softmax(4096, 1024);
  CompileResult r = CompileToPtx(g);
  ASSERT_EQ(r.kernels.size(), 1u) << Describe(g, r.plan);
  EXPECT_EQ(r.plan.kernels[0].kind, KernelKind::kRowStitch);
  EXPECT_EQ(r.plan.kernels[0].mapping.vector_width, 4) << Describe(g, r.plan);
  EXPECT_NE(r.kernels[0].ptx.find("ld.global.nc.v4.f32"), std::string::npos);
  EXPECT_NE(r.kernels[0].ptx.find("st.global.v4.f32"), std::string::npos);
}

TEST(VectorAccess, VectorizedKernelsMatchTheInterpreter) {
  struct Case {
    Graph g;
    uint64_t seed;
  };
  Case cases[] = {
      {Elementwise({64, 40}, DType::kF16, DType::kF16), 31},
      {Elementwise({33, 6}, DType::kF32, DType::kF16), 32},
      {testing::Softmax(37, 96), 33},                 // rows of whole vectors
      {testing::Softmax(29, 4000, DType::kF16), 34},  // long rows: vectors in a loop
      {testing::Softmax(37, 99), 35},                 // odd rows: scalar
      // Sub-word elements in i32 words.
      {Elementwise({64, 40}, DType::kBF16, DType::kBF16), 36},
      {Elementwise({64, 40}, DType::kS8, DType::kS8), 37},
      {Elementwise({33, 8}, DType::kF32, DType::kBF16), 38},
      {testing::Softmax(37, 96, DType::kBF16), 39},
      {testing::Softmax(29, 4000, DType::kBF16), 40},
  };
  for (Case& c : cases) {
    SCOPED_TRACE(c.g.name + " " + c.g.nodes[0].shape.ToString());
    testing::EmulatorCheck check;
    EXPECT_TRUE(testing::CheckOnEmulator(c.g, c.seed, /*random_order=*/true, &check));
  }
}

// (x + bias) * scale with a bias per column and a scale per row, #16's ViT pattern: x and the
// output are `dims`, bias the last dimension, scale every other one.
Graph RowScaledBias(std::vector<int64_t> dims, DType t) {
  Graph g;
  g.name = "row_scaled_bias";
  const int64_t rank = static_cast<int64_t>(dims.size());
  std::vector<int64_t> rows(dims.begin(), dims.end() - 1), leading(rows.size());
  std::iota(leading.begin(), leading.end(), 0);
  int x = Param(g, {t, dims}, 0, "x");
  int bias = Param(g, {t, {dims.back()}}, 1, "bias");
  int scale = Param(g, {t, rows}, 2, "scale");
  int shifted = Binary(g, OpCode::kAdd, x, testing::Broadcast(g, bias, dims, {rank - 1}));
  g.outputs = {Binary(g, OpCode::kMul, shifted, testing::Broadcast(g, scale, dims, leading))};
  return g;
}

// A value broadcast along the trailing dimensions is read at the element's index divided by
// their size: the index of the row, one division, not the row's coordinates found by dividing
// again and multiplied back together, which the optimiser cannot fold (#16 made three
// divisions a vector for its [64, 197] scale, now one).
TEST(VectorAccess, ARowsBroadcastValueIsIndexedByOneDivision) {
  Graph g = RowScaledBias({64, 197, 768}, DType::kF16);
  CompileResult r = CompileToPtx(g);
  ASSERT_EQ(r.kernels.size(), 1u);
  ASSERT_EQ(r.plan.kernels[0].kind, KernelKind::kLoop);
  EXPECT_EQ(CountOf(r.kernels[0].ptx, "mul.hi.u32"), 1) << r.kernels[0].ptx;
}

TEST(VectorAccess, RowsBroadcastValuesMatchTheInterpreter) {
  const std::vector<std::vector<int64_t>> shapes = {{6, 7, 96}, {3, 1, 5, 32}, {2, 3, 1, 40}};
  for (const std::vector<int64_t>& dims : shapes) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      Graph g = RowScaledBias(dims, t);
      SCOPED_TRACE(g.nodes[0].shape.ToString());
      testing::EmulatorCheck check;
      EXPECT_TRUE(testing::CheckOnEmulator(g, 43, /*random_order=*/true, &check));
    }
  }
}

// (x + bias) / 8 split into heads: [batch, seq, heads * dim] to [batch, heads, seq, dim] in
// `t`, with the bias per column of x (#25's attention pattern).
Graph SplitHeads(int64_t batch, int64_t seq, int64_t heads, int64_t dim, DType t) {
  Graph g;
  g.name = "split_heads";
  const std::vector<int64_t> dims = {batch, seq, heads * dim};
  int x = Param(g, {t, dims}, 0, "x");
  int bias = Param(g, {t, {heads * dim}}, 1, "bias");
  int shifted = Binary(g, OpCode::kAdd, x, testing::Broadcast(g, bias, dims, {2}));
  int scaled = Binary(g, OpCode::kMul, shifted,
                      testing::Broadcast(g, testing::ConstScalar(g, t, 0.125), dims, {}));
  int split = testing::Reshape(g, scaled, {batch, seq, heads, dim});
  g.outputs = {testing::Transpose(g, split, {0, 2, 1, 3})};
  return g;
}

// A vector of the output reads x's elements through the transpose at consecutive indices, and
// the bias at those indices modulo its length: the later lanes' bias index is the first's plus
// the lane, so the bias is one vector load, not one division and 2-byte load per lane (#25).
TEST(VectorAccess, AnOperandReadThroughATransposedVectorIsOneVectorLoad) {
  Graph g = SplitHeads(32, 128, 12, 64, DType::kF16);
  CompileResult r = CompileToPtx(g);
  ASSERT_EQ(r.kernels.size(), 1u);
  ASSERT_EQ(r.plan.kernels[0].mapping.vector_width, 4) << Describe(r.graph, r.plan);
  const std::string& ptx = r.kernels[0].ptx;
  EXPECT_EQ(CountOf(ptx, "ld.global.nc.v4.b16"), 2) << ptx;  // x and the bias
  EXPECT_EQ(CountOf(ptx, "ld.global.nc.b16"), 0) << ptx;
}

TEST(VectorAccess, TransposedVectorsMatchTheInterpreter) {
  for (DType t : {DType::kF16, DType::kBF16, DType::kF32}) {
    Graph g = SplitHeads(2, 9, 3, 32, t);
    SCOPED_TRACE(std::string(DTypeName(t)));
    testing::EmulatorCheck check;
    EXPECT_TRUE(testing::CheckOnEmulator(g, 44, /*random_order=*/true, &check));
  }
}

// dy * erf(x) in `t` and its sum over the rows, in f32: a column reduction whose element
// math calls the math library, as #11's gelu gradient does.
Graph ErfColumnSum(int64_t rows, int64_t cols, DType t) {
  Graph g;
  g.name = "erf_column_sum";
  int x = Param(g, {t, {rows, cols}}, 0, "x");
  int dy = Param(g, {t, {rows, cols}}, 1, "dy");
  int y = Binary(g, OpCode::kMul, dy, testing::Unary(g, OpCode::kErf, x));
  int sum = testing::Reduce(g, Convert(g, y, DType::kF32), testing::ConstScalar(g, DType::kF32, 0),
                            {0}, ReduceKind::kSum);
  g.outputs = {y, sum};
  return g;
}

// The column reductions of `r`'s kernels (kernels of their own, or phases) that give a lane
// more than one column.
std::vector<const KernelSpec*> ColumnLanes(const CompileResult& r) {
  std::vector<const KernelSpec*> lanes;
  auto add = [&](const KernelSpec& k) {
    if (k.kind == KernelKind::kColumnReduce && k.mapping.vector_width > 1) lanes.push_back(&k);
  };
  for (const KernelSpec& k : r.plan.kernels) {
    add(k);
    for (const KernelSpec& phase : k.phases) add(phase);
  }
  return lanes;
}

// libdevice's erf branches, and the vectorizer merges no accesses across a branch: a lane's
// columns are loaded first, as one vector per input, and each converted where its column's
// math first reads it, in f16 (eight lanes as four <2 x half>) and in bf16 (i32 words).
TEST(VectorAccess, ColumnLanesWhoseMathCallsTheLibraryLoadTheirColumnsAsVectors) {
  for (DType t : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    Graph g = ErfColumnSum(3072, 4096, t);
    CompileResult r = CompileToPtx(g);
    ASSERT_EQ(r.kernels.size(), 1u) << Describe(r.graph, r.plan);
    const std::vector<const KernelSpec*> lanes = ColumnLanes(r);
    ASSERT_EQ(lanes.size(), 1u) << Describe(r.graph, r.plan);
    ASSERT_EQ(lanes[0]->mapping.vector_width, 8) << Describe(r.graph, r.plan);
    const std::string& ptx = r.kernels[0].ptx;
    const char* vector = t == DType::kF16 ? "ld.global.nc.v4.b32" : "ld.global.nc.v4.u32";
    EXPECT_EQ(CountOf(ptx, vector), 2) << ptx;  // x and dy, one vector each per row
    for (const char* scalar : {"ld.global.nc.b16", "ld.global.nc.u16"}) {
      EXPECT_EQ(CountOf(ptx, scalar), 0) << scalar << "\n" << ptx;
    }
  }
}

// The planner gives lanes of eight columns to the full-size graph only (a column reduction
// split over blocks): that plan's kernel runs at 96 rows of the same 4096 columns, on a grid
// of kEmulatorMaxPersistentGridBlocks that loops over the same tiles, as the emulator holds a
// persistent grid of that many blocks at once.
TEST(VectorAccess, ColumnLanesThatLoadFirstMatchTheInterpreter) {
  for (DType t : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    CompileResult full = CompileToPtx(ErfColumnSum(3072, 4096, t));
    ASSERT_EQ(full.plan.kernels.size(), 1u);
    ASSERT_EQ(ColumnLanes(full).size(), 1u) << Describe(full.graph, full.plan);
    Graph small = ErfColumnSum(96, 4096, t);
    ASSERT_EQ(full.graph.nodes.size(), small.nodes.size());  // the spec's node ids hold
    KernelSpec spec = full.plan.kernels[0];
    spec.mapping.launch.grid = {kEmulatorMaxPersistentGridBlocks, 1, 1};
    for (KernelSpec& phase : spec.phases) phase.mapping.launch.grid = spec.mapping.launch.grid;
    CodegenOptions o;
    o.target = *Target::Parse("sm_90");
    o.emit_cubin = false;
    StatusOr<CompiledKernel> kernel = EmitKernel(small, spec, o);
    ASSERT_TRUE(kernel.ok()) << kernel.status().ToString();
    EXPECT_TRUE(testing::EmulatedMatchesInterpreter(small, small, {*kernel},
                                                    testing::RandomInputs(small, 42), 42));
  }
}

TEST(VectorAccess, AWidthThatDoesNotDivideTheWorkIsRefused) {
  for (Graph g : {Elementwise({64, 40}, DType::kF32, DType::kF32), testing::Softmax(64, 96)}) {
    CompileResult r = CompileToPtx(g);
    ASSERT_EQ(r.plan.kernels.size(), 1u);
    KernelSpec spec = r.plan.kernels[0];
    spec.mapping.vector_width = 7;
    StatusOr<CompiledKernel> k = EmitKernel(g, spec, CodegenOptions{});
    ASSERT_FALSE(k.ok()) << g.name;
    EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(k.status().message().find("vector width 7"), std::string::npos)
        << k.status().ToString();
  }
}

}  // namespace
}  // namespace stitch
