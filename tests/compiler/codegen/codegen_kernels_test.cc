// Codegen tests on hand-built graphs and kernel specs: every kernel must emit, lower to PTX
// for sm_90 and sm_80, and assemble to cubin where the toolkit is present.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "compiler/codegen/codegen_test_util.h"
#include "stitch/codegen/codegen.h"
#include "stitch/codegen/ptx_summary.h"

namespace stitch {
namespace {

using testing::CompileEverywhere;
using testing::Contains;
using testing::GraphBuilder;
using testing::MakeSpec;
using testing::Occurrences;

constexpr DType F32 = DType::kF32;

TEST(CodegenLoop, ElementwiseChain) {
  GraphBuilder gb;
  int a = gb.Param(F32, {1024, 256});
  int b = gb.Param(F32, {1024, 256});
  int s = gb.Ew(OpCode::kAdd, {a, b});
  int m = gb.Ew(OpCode::kMul, {s, a});
  int e = gb.Ew(OpCode::kExp, {m});
  int t = gb.Ew(OpCode::kTanh, {e});
  int mx = gb.Ew(OpCode::kMax, {t, b});
  auto spec = MakeSpec(gb.g, "chain", KernelKind::kLoop, {mx, s});
  auto k = EmitKernel(gb.g, spec, {});
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(k->launch.block[0], 256u);
  EXPECT_GE(k->launch.grid[0], 1u);
  EXPECT_EQ(k->param_nodes, (std::vector<int>{a, b, mx, s}));
  std::string ptx = CompileEverywhere(gb.g, spec);
  EXPECT_TRUE(Contains(ptx, "ex2.approx")) << "libdevice expf should be inlined";
  EXPECT_FALSE(Contains(ptx, "__nv_")) << "libdevice calls must be inlined";
}

// A product only an add or subtract takes is computed with it as one fused multiply-add
// (ContractSingleUseProducts); a product two operations take stays a multiply, whose value
// both then read. With contract_products off every product is a multiply.
TEST(CodegenContraction, AProductOnlyAnAddTakesBecomesOneFusedMultiplyAdd) {
  GraphBuilder gb;
  int a = gb.Param(F32, {1024});
  int b = gb.Param(F32, {1024});
  int c = gb.Param(F32, {1024});
  int single = gb.Ew(OpCode::kAdd, {gb.Ew(OpCode::kMul, {a, b}), c});  // a*b + c
  int shared = gb.Ew(OpCode::kMul, {b, c});
  int twice = gb.Ew(OpCode::kSub, {gb.Ew(OpCode::kAdd, {shared, a}), shared});  // (bc + a) - bc
  auto spec = MakeSpec(gb.g, "contraction", KernelKind::kLoop, {single, twice});
  const std::string fused = CompileEverywhere(gb.g, spec);
  const int fmas = Occurrences(fused, "fma.rn.f32");
  EXPECT_GT(fmas, 0) << fused;
  EXPECT_EQ(Occurrences(fused, "mul.rn.f32"), fmas) << fused;  // b*c, one per a*b + c
  CodegenOptions off;
  off.contract_products = false;
  const std::string unfused = CompileEverywhere(gb.g, spec, off);
  EXPECT_EQ(Occurrences(unfused, "fma.rn.f32"), 0) << unfused;
  EXPECT_EQ(Occurrences(unfused, "mul.rn.f32"), 2 * fmas) << unfused;
}

TEST(CodegenLoop, BroadcastAddAndTranspose) {
  GraphBuilder gb;
  int x = gb.Param(F32, {64, 128});
  int bias = gb.Param(F32, {128});
  int bb = gb.Broadcast(bias, {64, 128}, {1});
  int y = gb.Ew(OpCode::kAdd, {x, bb});
  int t = gb.Op(OpCode::kTranspose, {y}, {F32, {128, 64}});
  gb.g.nodes[t].dimensions = {1, 0};
  int r = gb.Op(OpCode::kReshape, {t}, {F32, {8192}});
  CompileEverywhere(gb.g, MakeSpec(gb.g, "bias_transpose", KernelKind::kLoop, {r}));
}

TEST(CodegenLoop, SliceConcatPadReverseIota) {
  GraphBuilder gb;
  int x = gb.Param(F32, {16, 40});
  int s = gb.Op(OpCode::kSlice, {x}, {F32, {16, 10}});
  gb.g.nodes[s].slice_starts = {0, 1};
  gb.g.nodes[s].slice_limits = {16, 40};
  gb.g.nodes[s].slice_strides = {1, 3};
  int c = gb.Op(OpCode::kConcatenate, {s, x}, {F32, {16, 50}});
  gb.g.nodes[c].dimensions = {1};
  int pv = gb.Const(F32, -1.5);
  // 50 -> -2 + 50 + 49 * 1 + 3 = 100
  int p = gb.Op(OpCode::kPad, {c, pv}, {F32, {18, 100}});
  gb.g.nodes[p].pad_low = {1, -2};
  gb.g.nodes[p].pad_high = {1, 3};
  gb.g.nodes[p].pad_interior = {0, 1};
  int rv = gb.Op(OpCode::kReverse, {p}, {F32, {18, 100}});
  gb.g.nodes[rv].dimensions = {0, 1};
  int io = gb.Op(OpCode::kIota, {}, {DType::kS32, {18, 100}});
  gb.g.nodes[io].dimensions = {1};
  int iof = gb.Convert(io, F32);
  int out = gb.Ew(OpCode::kAdd, {rv, iof});
  Node lit;
  lit.op = OpCode::kConstant;
  lit.shape = {F32, {4}};
  lit.literal.f = {1, 2, 3, 4};
  int arr = gb.g.Add(lit);
  int arr_b = gb.Broadcast(arr, {18, 100, 4}, {2});
  int red_in = gb.Broadcast(out, {18, 100, 4}, {0, 1});
  int prod = gb.Ew(OpCode::kMul, {red_in, arr_b});
  CompileEverywhere(gb.g, MakeSpec(gb.g, "movement", KernelKind::kLoop, {prod}));
}

TEST(CodegenLoop, HalfAndBfloatConvertChains) {
  GraphBuilder gb;
  int h = gb.Param(DType::kF16, {4096});
  int bf = gb.Param(DType::kBF16, {4096});
  int hf = gb.Convert(h, F32);
  int bff = gb.Convert(bf, F32);
  int e = gb.Ew(OpCode::kExp, {gb.Ew(OpCode::kAdd, {hf, bff})});
  int to_bf = gb.Convert(e, DType::kBF16);
  int to_h = gb.Convert(gb.Ew(OpCode::kMul, {h, h}), DType::kF16);  // identity convert
  int to_s8 = gb.Convert(e, DType::kS8);
  int to_pred = gb.Convert(bf, DType::kPred);
  int e_h = gb.Convert(e, DType::kF16);
  std::string ptx = CompileEverywhere(
      gb.g, MakeSpec(gb.g, "half_chain", KernelKind::kLoop, {to_bf, to_h, to_s8, to_pred, e_h}));
  EXPECT_TRUE(Contains(ptx, "cvt.rn.f16.f32")) << ptx;
}

// The PTX of loop kernel `outputs` of `gb` for sm_75 (no machine instructions for the
// portable IR's machine functions), sm_80 and sm_90, each assembled where ptxas is found.
std::map<std::string, std::string> PtxOfEachGeneration(const GraphBuilder& gb, const char* name,
                                                       const std::vector<int>& outputs) {
  std::map<std::string, std::string> ptx;
  StatusOr<CompiledKernel> k =
      EmitKernel(gb.g, MakeSpec(gb.g, name, KernelKind::kLoop, outputs), CodegenOptions{});
  EXPECT_TRUE(k.ok()) << k.status().ToString();
  if (!k.ok()) return ptx;
  for (const char* target : {"sm_75", "sm_80", "sm_90"}) {
    CodegenOptions o;
    o.target = *Target::Parse(target);
    CompiledKernel ck = *k;
    Status lowered = LowerToPtx(ck, o);
    EXPECT_TRUE(lowered.ok()) << target << ": " << lowered.ToString();
    if (CubinAvailable(o)) {
      EXPECT_TRUE(AssembleCubin(ck, o).ok()) << target;
    }
    ptx[target] = ck.ptx;
  }
  return ptx;
}

// Rounding f32 to bf16 is one cvt.rn.bf16.f32 from sm_80 on, and the bit sequence (add
// 0x7fff and the kept part's lowest bit, truncate) on sm_75, which has no such instruction.
TEST(CodegenLoop, Bf16RoundingIsOneInstructionFromSm80) {
  GraphBuilder gb;
  int x = gb.Param(F32, {4096});
  int y = gb.Convert(gb.Ew(OpCode::kMul, {x, x}), DType::kBF16);
  const auto ptx_of = PtxOfEachGeneration(gb, "to_bf16", {y});
  ASSERT_EQ(ptx_of.size(), 3u);
  for (const auto& [target, ptx] : ptx_of) {
    const bool native = target != "sm_75";
    EXPECT_EQ(Contains(ptx, "cvt.rn.bf16.f32"), native) << target << "\n" << ptx;
    EXPECT_EQ(Contains(ptx, "32767"), !native) << target << "\n" << ptx;
    if (native) {
      // One rounding per element (one multiply each): the convert's result is stored as its
      // bits, not rounded again.
      EXPECT_EQ(Occurrences(ptx, "cvt.rn.bf16.f32"), Occurrences(ptx, "mul.rn.f32"))
          << target << "\n"
          << ptx;
    }
  }
}

// An f32 max or min that propagates NaN is one max.NaN.f32 or min.NaN.f32 from sm_80 on, and
// compares and selects on sm_75.
TEST(CodegenLoop, NanPropagatingMaxAndMinAreOneInstructionFromSm80) {
  GraphBuilder gb;
  int x = gb.Param(F32, {4096});
  int y = gb.Param(F32, {4096});
  int hi = gb.Ew(OpCode::kMax, {x, y});
  int lo = gb.Ew(OpCode::kMin, {x, y});
  const auto ptx_of = PtxOfEachGeneration(gb, "max_min", {hi, lo});
  ASSERT_EQ(ptx_of.size(), 3u);
  for (const auto& [target, ptx] : ptx_of) {
    const bool native = target != "sm_75";
    EXPECT_EQ(Contains(ptx, "max.NaN.f32"), native) << target << "\n" << ptx;
    EXPECT_EQ(Contains(ptx, "min.NaN.f32"), native) << target << "\n" << ptx;
    EXPECT_EQ(Contains(ptx, "setp.nan.f32"), !native) << target << "\n" << ptx;
  }
}

TEST(CodegenLoop, IntegerOps) {
  for (DType t : {DType::kS32, DType::kU32, DType::kS64, DType::kU8, DType::kS8}) {
    GraphBuilder gb;
    int a = gb.Param(t, {1000});
    int b = gb.Param(t, {1000});
    int d = gb.Ew(OpCode::kDiv, {a, b});
    int r = gb.Ew(OpCode::kRem, {a, b});
    int sl = gb.Ew(OpCode::kShiftLeft, {d, b});
    int sr = gb.Ew(OpCode::kShiftRightArithmetic, {r, b});
    int srl = gb.Ew(OpCode::kShiftRightLogical, {sl, b});
    int x = gb.Ew(OpCode::kXor, {gb.Ew(OpCode::kMax, {srl, sr}), gb.Ew(OpCode::kAbs, {a})});
    int pc = gb.Ew(OpCode::kPopcnt, {x});
    int lt = gb.Compare(a, b, CompareDirection::kLt);
    int sel = gb.Ew(OpCode::kSelect, {lt, pc, gb.Ew(OpCode::kSign, {b})});
    int f = gb.Convert(sel, DType::kF64);
    int back = gb.Convert(f, t);
    int cl = gb.Ew(OpCode::kClamp, {a, back, b});
    std::string name = "int_ops_" + std::string(DTypeName(t));
    CompileEverywhere(gb.g, MakeSpec(gb.g, name, KernelKind::kLoop, {cl}));
  }
}

TEST(CodegenLoop, RngUniform) {
  GraphBuilder gb;
  int seed = gb.Param(DType::kU64, {});
  int r = gb.Op(OpCode::kRngUniform, {seed}, {F32, {128, 128}});
  gb.g.nodes[r].rng_stream = 7;
  int half = gb.Const(F32, 0.5);
  int hb = gb.Broadcast(half, {128, 128}, {});
  int mask = gb.Compare(r, hb, CompareDirection::kLt);
  const KernelSpec spec = MakeSpec(gb.g, "dropout_mask", KernelKind::kLoop, {mask});
  const std::string ptx = CompileEverywhere(gb.g, spec);
  // One Philox evaluation (ten rounds, each multiplying by 0xD2511F53, which the PTX prints
  // signed or, where LLVM widened the product, unsigned) serves four consecutive elements: a
  // thread's vector of them multiplies by it at most ten times per four elements, not per
  // element (LLVM may derive a neighbouring block's first product from another's).
  const int width = spec.mapping.vector_width;
  ASSERT_GE(width, 4);
  size_t products = 0;
  for (const char* multiplier : {"-766435501;", "3528531795;"}) {
    for (size_t at = ptx.find(multiplier); at != std::string::npos;
         at = ptx.find(multiplier, at + 1)) {
      ++products;
    }
  }
  EXPECT_GT(products, 0u) << ptx;
  EXPECT_LE(products, 10u * static_cast<size_t>(width / 4)) << ptx;
  // The uniform value is exact in f32: no f64 instruction.
  EXPECT_FALSE(Contains(ptx, ".f64")) << ptx;
}

TEST(CodegenLoop, DeepXorShiftGraphCompilesQuickly) {
  // Like threefry in HLO: thousands of dependent shift/xor/add nodes with fan-out.
  GraphBuilder gb;
  int a = gb.Param(DType::kU32, {1024});
  int b = gb.Param(DType::kU32, {1024});
  for (int i = 0; i < 3000; ++i) {
    int sh = gb.Const(DType::kU32, 13 + i % 7);
    int shb = gb.Broadcast(sh, {1024}, {});
    int l = gb.Ew(OpCode::kShiftLeft, {b, shb});
    int r = gb.Ew(OpCode::kShiftRightLogical, {b, shb});
    int rot = gb.Ew(OpCode::kOr, {l, r});
    int na = gb.Ew(OpCode::kAdd, {a, b});
    int nb = gb.Ew(OpCode::kXor, {rot, na});
    a = na;
    b = nb;
  }
  auto start = std::chrono::steady_clock::now();
  auto spec = MakeSpec(gb.g, "threefry_like", KernelKind::kLoop, {a, b});
  auto k = EmitKernel(gb.g, spec, {});
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  double emit_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(LowerToPtx(*k, {}).ok());
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // The time is printed, not asserted (it depends on the machine's load). What a slow path
  // would change is the code: each of the 3000 rounds is five dependent operations (about 19
  // PTX instructions with their moves and conversions), and the PTX must hold each round
  // once, not re-expanded per use of its fan-out.
  const PtxMemorySummary ptx = SummarizePtx(k->ptx);
  std::printf(
      "threefry-like graph (%zu nodes): emit %.1f ms, emit + PTX %.1f ms, %d PTX "
      "instructions\n",
      gb.g.nodes.size(), emit_ms, ms, ptx.instructions);
  EXPECT_GE(ptx.instructions, 5 * 3000);
  EXPECT_LE(ptx.instructions, 40 * 3000);
}

TEST(CodegenRowReduce, ShortRowsUseWarpShuffles) {
  GraphBuilder gb;
  int x = gb.Param(F32, {4096, 128});
  int r = gb.Reduce(x, {1}, ReduceKind::kSum, 0.0);
  auto spec = MakeSpec(gb.g, "row_sum_short", KernelKind::kRowReduce, {r}, r);
  auto k = EmitKernel(gb.g, spec, {});
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(k->launch.block[0], 32u);
  std::string ptx = CompileEverywhere(gb.g, spec);
  EXPECT_TRUE(Contains(ptx, "shfl.sync.down")) << ptx;
  EXPECT_FALSE(Contains(ptx, "bar.sync"));
}

TEST(CodegenRowReduce, TinyRowsShareAWarp) {
  GraphBuilder gb;
  int x = gb.Param(DType::kF16, {1000, 6});
  int r = gb.Reduce(x, {1}, ReduceKind::kMax, -INFINITY);
  std::string ptx =
      CompileEverywhere(gb.g, MakeSpec(gb.g, "row_max_tiny", KernelKind::kRowReduce, {r}, r));
  EXPECT_TRUE(Contains(ptx, "shfl.sync.down"));
}

TEST(CodegenRowReduce, LongRowsUseSharedMemory) {
  GraphBuilder gb;
  int x = gb.Param(F32, {64, 8192});
  int r = gb.Reduce(x, {1}, ReduceKind::kMax, -INFINITY);
  auto spec = MakeSpec(gb.g, "row_max_long", KernelKind::kRowReduce, {r}, r);
  auto k = EmitKernel(gb.g, spec, {});
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_GT(k->shared_bytes, 0u);
  std::string ptx = CompileEverywhere(gb.g, spec);
  EXPECT_TRUE(Contains(ptx, "bar.sync")) << ptx;
  EXPECT_TRUE(Contains(ptx, "shfl.sync.down"));
  EXPECT_TRUE(Contains(ptx, "st.shared"));
  EXPECT_TRUE(Contains(ptx, "ld.shared"));
}

TEST(CodegenRowReduce, SoftmaxLikeWithExpProducer) {
  GraphBuilder gb;
  int x = gb.Param(DType::kF16, {512, 1000});
  int mx = gb.Param(DType::kF16, {512});  // the row max, materialised by an earlier kernel
  int xf = gb.Convert(x, F32);
  int mf = gb.Convert(mx, F32);
  int mb = gb.Broadcast(mf, {512, 1000}, {0});
  int e = gb.Ew(OpCode::kExp, {gb.Ew(OpCode::kSub, {xf, mb})});
  int r = gb.Reduce(e, {1}, ReduceKind::kSum, 0.0);
  // Epilogue: the reciprocal of the sum, written instead of the sum itself.
  int one = gb.Broadcast(gb.Const(F32, 1.0), {512}, {});
  int inv = gb.Ew(OpCode::kDiv, {one, r});
  auto spec = MakeSpec(gb.g, "softmax_denominator", KernelKind::kRowReduce, {r, inv}, r);
  std::string ptx = CompileEverywhere(gb.g, spec);
  EXPECT_TRUE(Contains(ptx, "bar.sync"));
}

TEST(CodegenRowReduce, MultiOutputAndWideTypes) {
  for (DType t : {DType::kF64, DType::kS64, DType::kS32, DType::kPred, DType::kBF16}) {
    GraphBuilder gb;
    int x = gb.Param(t, {96, 700});
    bool logical = t == DType::kPred;
    int r1 = gb.Reduce(x, {1}, logical ? ReduceKind::kOr : ReduceKind::kSum, 0);
    int r2 = gb.Reduce(x, {1}, logical ? ReduceKind::kAnd : ReduceKind::kMax, logical ? 1 : -100);
    auto spec =
        MakeSpec(gb.g, "multi_" + std::string(DTypeName(t)), KernelKind::kRowReduce, {r1, r2}, r1);
    CompileEverywhere(gb.g, spec);
  }
}

TEST(CodegenRowReduce, ReduceOverMiddleAndAllDims) {
  GraphBuilder gb;
  int x = gb.Param(F32, {8, 30, 5, 7});
  int r = gb.Reduce(x, {1, 3}, ReduceKind::kProd, 1.0);
  CompileEverywhere(gb.g, MakeSpec(gb.g, "reduce_13", KernelKind::kRowReduce, {r}, r));
  GraphBuilder ga;
  int y = ga.Param(F32, {300, 70});
  int all = ga.Reduce(y, {0, 1}, ReduceKind::kMin, INFINITY);
  CompileEverywhere(ga.g, MakeSpec(ga.g, "reduce_all", KernelKind::kRowReduce, {all}, all));
}

TEST(CodegenColumnReduce, SharedMemoryTile) {
  GraphBuilder gb;
  int x = gb.Param(DType::kF16, {4096, 512});
  int xf = gb.Convert(x, F32);
  int r = gb.Reduce(xf, {0}, ReduceKind::kSum, 0.0);
  auto spec = MakeSpec(gb.g, "column_sum", KernelKind::kColumnReduce, {r}, r);
  auto k = EmitKernel(gb.g, spec, {});
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(k->launch.block[0], 32u);
  EXPECT_GT(k->shared_bytes, 0u);
  std::string ptx = CompileEverywhere(gb.g, spec);
  EXPECT_TRUE(Contains(ptx, "bar.sync"));
  EXPECT_TRUE(Contains(ptx, "st.shared"));
  EXPECT_TRUE(Contains(ptx, "ld.shared"));
}

TEST(CodegenColumnReduce, MiddleDimensionAndIntegers) {
  GraphBuilder gb;
  int x = gb.Param(DType::kS64, {6, 1000, 33});
  int r = gb.Reduce(x, {1}, ReduceKind::kMin, 1 << 30);
  CompileEverywhere(gb.g, MakeSpec(gb.g, "column_min_3d", KernelKind::kColumnReduce, {r}, r));
}

TEST(CodegenPtxOnly, OwnMathDefinitionsAssemble) {
  for (DType t : {F32, DType::kF64, DType::kF16}) {
    GraphBuilder gb;
    int x = gb.Param(t, {777});
    int y = gb.Param(t, {777});
    std::vector<int> outs;
    for (OpCode op : {OpCode::kExp, OpCode::kLog, OpCode::kLog1p, OpCode::kExpm1, OpCode::kTanh,
                      OpCode::kErf, OpCode::kSin, OpCode::kCos, OpCode::kTan, OpCode::kCbrt,
                      OpCode::kLogistic, OpCode::kRsqrt, OpCode::kRound, OpCode::kFloor}) {
      outs.push_back(gb.Ew(op, {x}));
    }
    for (OpCode op : {OpCode::kPow, OpCode::kAtan2, OpCode::kRem})
      outs.push_back(gb.Ew(op, {x, y}));
    int acc = outs[0];
    for (size_t i = 1; i < outs.size(); ++i) acc = gb.Ew(OpCode::kAdd, {acc, outs[i]});
    CodegenOptions o;
    o.libdevice_path = "";
    o.prefer_ptxas = true;
    std::string ptx = CompileEverywhere(
        gb.g, MakeSpec(gb.g, "own_math_" + std::string(DTypeName(t)), KernelKind::kLoop, {acc}), o);
    EXPECT_FALSE(Contains(ptx, "__nv_"));
    EXPECT_FALSE(Contains(ptx, "call.uni"));
  }
}

TEST(CodegenCubin, BothAssemblersAgreeOnValidity) {
  CodegenOptions o;
  if (!CubinAvailable(o)) GTEST_SKIP() << "no nvJitLink and no ptxas in this build";
  GraphBuilder gb;
  int x = gb.Param(F32, {100, 300});
  int r = gb.Reduce(x, {1}, ReduceKind::kSum, 0.0);
  auto k = EmitKernel(gb.g, MakeSpec(gb.g, "assemblers", KernelKind::kRowReduce, {r}, r), o);
  ASSERT_TRUE(k.ok());
  ASSERT_TRUE(LowerToPtx(*k, o).ok());
  o.prefer_ptxas = false;
  ASSERT_TRUE(AssembleCubin(*k, o).ok());
  o.prefer_ptxas = true;
  CompiledKernel viaptxas = *k;
  Status s = AssembleCubin(viaptxas, o);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(viaptxas.cubin.empty());
  // Both report the registers they gave the kernel, and this small kernel spills nothing.
  for (const CompiledKernel* c : {&*k, &viaptxas}) {
    EXPECT_TRUE(c->assembly.reported);
    EXPECT_GT(c->assembly.registers, 0);
    EXPECT_LE(c->assembly.registers, 255);
    EXPECT_EQ(c->assembly.stack_bytes + c->assembly.spill_store_bytes, 0);
    // The cubin's own instructions: a row reduction's loads, shuffles and stores, more than
    // a handful and far fewer than its 16-byte encodings could fill the cubin.
    EXPECT_GT(c->assembly.instructions, 16);
    EXPECT_LT(c->assembly.instructions * 16, static_cast<int>(c->cubin.size()));
  }
  EXPECT_EQ(k->assembly.instructions, viaptxas.assembly.instructions);
  // Broken PTX must fail with the assembler's log in the message.
  for (bool ptxas : {false, true}) {
    o.prefer_ptxas = ptxas;
    CompiledKernel bad = *k;
    bad.ptx += "\nthis is not ptx;\n";
    Status e = AssembleCubin(bad, o);
    EXPECT_FALSE(e.ok());
    EXPECT_TRUE(Contains(e.message(), "assemblers") || Contains(e.message(), "error"))
        << e.ToString();
  }
}

TEST(CodegenErrors, BadInputsGiveErrors) {
  GraphBuilder gb;
  int x = gb.Param(F32, {16, 16});
  int r = gb.Reduce(x, {1}, ReduceKind::kSum, 0.0);
  int rb = gb.Broadcast(r, {16, 16}, {0});
  int y = gb.Ew(OpCode::kAdd, {x, rb});
  // A non-hero reduce inside a loop kernel.
  auto k = EmitKernel(gb.g, MakeSpec(gb.g, "bad_loop", KernelKind::kLoop, {y}), {});
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), StatusCode::kUnimplemented) << k.status().ToString();
  EXPECT_TRUE(Contains(k.status().message(), "reduce")) << k.status().ToString();
  // Bad kernel name, out-of-range output, wrong hero.
  EXPECT_EQ(
      EmitKernel(gb.g, MakeSpec(gb.g, "1bad name", KernelKind::kLoop, {x}), {}).status().code(),
      StatusCode::kInvalidArgument);
  auto spec = MakeSpec(gb.g, "oob", KernelKind::kLoop, {999});
  EXPECT_EQ(EmitKernel(gb.g, spec, {}).status().code(), StatusCode::kInvalidArgument);
  auto hero = MakeSpec(gb.g, "hero", KernelKind::kRowReduce, {y}, y);
  EXPECT_FALSE(EmitKernel(gb.g, hero, {}).ok());
  // Codegen never schedules: an unscheduled spec is refused, naming the missing step.
  KernelSpec unscheduled = MakeSpec(gb.g, "unscheduled", KernelKind::kLoop, {y});
  unscheduled.mapping = ThreadMapping{};
  auto u = EmitKernel(gb.g, unscheduled, {});
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(u.status().message(), "no thread mapping")) << u.status().ToString();
  // Float-only op on integers.
  GraphBuilder gi;
  int i = gi.Param(DType::kS32, {8});
  int e = gi.Ew(OpCode::kExp, {i});
  auto ki = EmitKernel(gi.g, MakeSpec(gi.g, "int_exp", KernelKind::kLoop, {e}), {});
  ASSERT_FALSE(ki.ok());
  EXPECT_TRUE(Contains(ki.status().message(), "exponential")) << ki.status().ToString();
  // Garbage portable IR and PTX. (A bad target cannot reach codegen: Target::Parse refuses
  // it, planner_target_test.cc.)
  CompiledKernel junk;
  junk.name = "junk";
  junk.portable_ir = "not bitcode";
  EXPECT_FALSE(LowerToPtx(junk, {}).ok());
  junk.ptx = ".version 7.8";
  EXPECT_FALSE(AssembleCubin(junk, {}).ok());
}

TEST(CodegenTiming, LayerNormLikeKernels) {
  // mean/variance row reductions over f16 [4096, 1024] and the normalising loop kernel.
  GraphBuilder gb;
  int x = gb.Param(DType::kF16, {4096, 1024});
  int gamma = gb.Param(F32, {1024});
  int xf = gb.Convert(x, F32);
  int sum = gb.Reduce(xf, {1}, ReduceKind::kSum, 0.0);
  int sq = gb.Ew(OpCode::kMul, {xf, xf});
  int sumsq = gb.Reduce(sq, {1}, ReduceKind::kSum, 0.0);
  KernelSpec stats = MakeSpec(gb.g, "ln_stats", KernelKind::kRowReduce, {sum, sumsq}, sum);

  GraphBuilder gn;
  int x2 = gn.Param(DType::kF16, {4096, 1024});
  int mean = gn.Param(F32, {4096});
  int rstd = gn.Param(F32, {4096});
  int g2 = gn.Param(F32, {1024});
  int xf2 = gn.Convert(x2, F32);
  int mb = gn.Broadcast(mean, {4096, 1024}, {0});
  int rb = gn.Broadcast(rstd, {4096, 1024}, {0});
  int gbb = gn.Broadcast(g2, {4096, 1024}, {1});
  int y = gn.Ew(OpCode::kMul, {gn.Ew(OpCode::kMul, {gn.Ew(OpCode::kSub, {xf2, mb}), rb}), gbb});
  int yh = gn.Convert(y, DType::kF16);
  KernelSpec norm = MakeSpec(gn.g, "ln_normalize", KernelKind::kLoop, {yh});
  (void)gamma;

  for (auto [g, spec] : {std::pair{&gb.g, &stats}, std::pair{&gn.g, &norm}}) {
    // Warm up once (libdevice is read and cached on first use).
    {
      auto k = EmitKernel(*g, *spec, {});
      ASSERT_TRUE(k.ok()) << k.status().ToString();
      ASSERT_TRUE(LowerToPtx(*k, {}).ok());
    }
    const int reps = 10;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) {
      auto k = EmitKernel(*g, *spec, {});
      ASSERT_TRUE(k.ok());
      ASSERT_TRUE(LowerToPtx(*k, {}).ok());
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count() /
                reps;
    std::printf("%s: emit + PTX %.2f ms per kernel\n", spec->name.c_str(), ms);
    EXPECT_LT(ms, 500.0);  // generous for loaded CI machines; the target is < 50 ms
  }
}

}  // namespace
}  // namespace stitch
