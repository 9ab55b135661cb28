// Tests of the HLO text importer, feature by feature: syntax, layouts, fusions, tuples,
// reducers, constants, the ops of the op list, batch-norm expansion, and the errors, which name
// the file, the line and the op.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "hlo_test_util.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/verifier.h"
#include "stitch/reference/interpreter.h"

namespace stitch {
namespace {

using testing::CountOp;
using testing::FindNode;
using testing::MustImport;
using testing::Opts;

// ---------------------------------------------------------------------------------------
// Syntax features.

TEST(HloSyntax, NoHeaderNoEntryPercentlessNamesAndComments) {
  Graph g = MustImport(R"(
// RUN: hlo-opt %s | FileCheck %s
add {   /* a reducer, never the entry */
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
// CHECK: whatever
fused {
  x = f32[4,8] parameter(0)
  zero = f32[] constant(0)
  ROOT r = f32[4] reduce(x, zero), dimensions={1}, to_apply=add  // trailing comment
}
)");
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.name, "fused");
  const Node& r = g.nodes[g.outputs[0]];
  EXPECT_EQ(r.op, OpCode::kReduce);
  EXPECT_EQ(r.reduce_kind, ReduceKind::kSum);
  EXPECT_EQ(r.name, "r");
  EXPECT_EQ(r.source, "t.hlo:12");
  EXPECT_EQ(r.shape, (Shape{DType::kF32, {4}}));
}

TEST(HloSyntax, TypedOperandsSignatureMetadataAndAttributes) {
  Graph g = MustImport(R"(HloModule m, entry_computation_layout={(f32[2,3]{1,0})->f32[2,3]{1,0}}

ENTRY %main.7 (p: f32[2,3]) -> f32[2,3] {
  %p = f32[2,3]{1,0} parameter(0), sharding={replicated}
  %e = f32[2,3]{1,0} exponential(f32[2,3]{1,0} %p), metadata={op_type="exp" op_name="a/b{c}" source_file="x.py" source_line=3}, backend_config="{\"k\": {\"v\": 1}}"
  ROOT %n = f32[2,3]{1,0} negate(f32[2,3]{1,0} %e), frontend_attributes={_xla="1"}, unknown_attr={{1,2},{3}}
}
)");
  EXPECT_EQ(g.name, "m");
  EXPECT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(CountOp(g, OpCode::kExp), 1);
  EXPECT_EQ(g.nodes[g.outputs[0]].op, OpCode::kNeg);
}

TEST(HloSyntax, ParameterLayoutBecomesPhysicalParameterAndTranspose) {
  Graph g = MustImport(R"(
ENTRY e {
  p = f32[2,3,4]{0,2,1} parameter(0)
  ROOT n = f32[2,3,4] negate(p)
})");
  auto params = g.Parameters();
  ASSERT_EQ(params.size(), 1u);
  // minor-to-major {0,2,1}: physical order (major first) is dims 1, 2, 0.
  EXPECT_EQ(g.nodes[params[0]].shape.dims, (std::vector<int64_t>{3, 4, 2}));
  const Node* t = FindNode(g, "p.logical");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->op, OpCode::kTranspose);
  EXPECT_EQ(t->shape.dims, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(t->dimensions, (std::vector<int64_t>{2, 0, 1}));
}

TEST(HloSyntax, RootLayoutAndCopyBecomeOutputTranspose) {
  Graph g = MustImport(R"(
ENTRY e {
  p = f32[2,3] parameter(0)
  ROOT c = f32[2,3]{0,1} copy(p)
})");
  ASSERT_EQ(g.outputs.size(), 1u);
  const Node& out = g.nodes[g.outputs[0]];
  EXPECT_EQ(out.op, OpCode::kTranspose);
  EXPECT_EQ(out.shape.dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(out.dimensions, (std::vector<int64_t>{1, 0}));
  // Default layouts and tiling suffixes add nothing.
  Graph h = MustImport(R"(
ENTRY e {
  p = f32[8,128]{1,0:T(8,128)} parameter(0)
  ROOT c = f32[8,128]{1,0:T(8,128)} copy(p)
})");
  EXPECT_EQ(h.nodes.size(), 1u);
  EXPECT_EQ(CountOp(h, OpCode::kTranspose), 0);
}

TEST(HloSyntax, BitcastIsReshapeOrLayoutAware) {
  Graph g = MustImport(R"(
ENTRY e {
  p = f32[2,3] parameter(0)
  ROOT b = f32[6] bitcast(p)
})");
  EXPECT_EQ(g.nodes[g.outputs[0]].op, OpCode::kReshape);
  // A column-major [2,3] holds the elements in the order of its transpose.
  Graph h = MustImport(R"(
ENTRY e {
  p = f32[2,3]{0,1} parameter(0)
  ROOT b = f32[3,2] bitcast(p)
})");
  auto r = Evaluate(h, {Tensor{{DType::kF32, {3, 2}}, {1, 2, 3, 4, 5, 6}, {}}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].f, (std::vector<double>{1, 2, 3, 4, 5, 6}));
}

TEST(HloSyntax, FusionsAreInlinedRecursively) {
  Graph g = MustImport(R"(HloModule f
inner {
  a = f32[4] parameter(0)
  ROOT t = f32[4] tanh(a)
}
outer {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  s = f32[4] add(x, y)
  ROOT f = f32[4] fusion(s), kind=kLoop, calls=inner
}
ENTRY e {
  p0 = f32[4] parameter(0)
  p1 = f32[4] parameter(1)
  ROOT o = f32[4] fusion(p0, p1), kind=kLoop, calls=%outer
})");
  EXPECT_EQ(g.Parameters().size(), 2u);
  EXPECT_EQ(CountOp(g, OpCode::kParameter), 2);
  EXPECT_EQ(CountOp(g, OpCode::kAdd), 1);
  EXPECT_EQ(CountOp(g, OpCode::kTanh), 1);
  EXPECT_EQ(g.nodes[g.outputs[0]].name, "t");
  EXPECT_EQ(g.nodes[g.outputs[0]].source, "t.hlo:4");
  EXPECT_EQ(g.nodes[g.Parameters()[1]].parameter_number, 1);
}

TEST(HloSyntax, TuplesAndGetTupleElementFlatten) {
  Graph g = MustImport(R"(
fused {
  a = f32[3] parameter(0)
  n = f32[3] negate(a)
  e = f32[3] exponential(a)
  ROOT t = (f32[3], f32[3]) tuple(n, e)
}
ENTRY e {
  p = f32[3] parameter(0)
  q = (f32[3], s32[]) parameter(1)
  f = (f32[3], f32[3]) fusion(p), kind=kLoop, calls=fused
  g1 = f32[3] get-tuple-element(f), index=1
  q0 = f32[3] get-tuple-element(q), index=0
  m = f32[3] multiply(g1, q0)
  inner = (f32[3], (f32[3], f32[3])) tuple(m, f)
  ROOT out = ((f32[3], (f32[3], f32[3])), f32[3]) tuple(inner, p)
})");
  // m, n, e, p: nested tuples flattened in order.
  ASSERT_EQ(g.outputs.size(), 4u);
  EXPECT_EQ(g.nodes[g.outputs[0]].op, OpCode::kMul);
  EXPECT_EQ(g.nodes[g.outputs[1]].op, OpCode::kNeg);
  EXPECT_EQ(g.nodes[g.outputs[2]].op, OpCode::kExp);
  EXPECT_EQ(g.nodes[g.outputs[3]].op, OpCode::kParameter);
  // The tuple parameter is flattened into its two elements: 0, then 1 and 2.
  EXPECT_EQ(g.Parameters().size(), 3u);
}

TEST(HloSyntax, VariadicReduceSplitsIntoOneReducePerOutput) {
  Graph g = MustImport(R"(
red {
  a0 = f32[] parameter(0)
  a1 = s32[] parameter(1)
  b0 = f32[] parameter(2)
  b1 = s32[] parameter(3)
  s = f32[] maximum(b0, a0)
  m = s32[] multiply(a1, b1)
  ROOT t = (f32[], s32[]) tuple(s, m)
}
ENTRY e {
  x = f32[4,5] parameter(0)
  y = s32[4,5] parameter(1)
  c = f32[] constant(-inf)
  d = s32[] constant(1)
  ROOT r = (f32[5], s32[5]) reduce(x, y, c, d), dimensions={0}, to_apply=red
})");
  ASSERT_EQ(g.outputs.size(), 2u);
  EXPECT_EQ(g.nodes[g.outputs[0]].reduce_kind, ReduceKind::kMax);
  EXPECT_EQ(g.nodes[g.outputs[1]].reduce_kind, ReduceKind::kProd);
  EXPECT_EQ(g.nodes[g.outputs[1]].shape, (Shape{DType::kS32, {5}}));
}

TEST(HloSyntax, ReducerRecognitionAndRejection) {
  const char* kinds[][2] = {{"add", "sum"},     {"multiply", "prod"}, {"maximum", "max"},
                            {"minimum", "min"}, {"and", "and"},       {"or", "or"}};
  for (auto& k : kinds) {
    std::string dt = std::string(k[0]) == "and" || std::string(k[0]) == "or" ? "pred" : "f32";
    std::string text =
        "r {\n a = " + dt + "[] parameter(0)\n b = " + dt + "[] parameter(1)\n ROOT c = " + dt +
        "[] " + k[0] + "(a, b)\n}\nENTRY e {\n x = " + dt + "[4,5] parameter(0)\n i = " + dt +
        "[] parameter(1)\n ROOT y = " + dt + "[4] reduce(x, i), dimensions={1}, to_apply=r\n}\n";
    Graph g = MustImport(text);
    ASSERT_EQ(g.outputs.size(), 1u);
    EXPECT_EQ(ReduceKindName(g.nodes[g.outputs[0]].reduce_kind), k[1]);
  }
  // A reducer that converts, or an argmax-style one, is refused by name.
  auto r = ImportHloModule(R"(
cvt_add {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ca = f32[] convert(a)
  cb = f32[] convert(b)
  s = f32[] add(ca, cb)
  ROOT o = bf16[] convert(s)
}
ENTRY e {
  x = bf16[8] parameter(0)
  z = bf16[] constant(0)
  ROOT y = bf16[] reduce(x, z), dimensions={0}, to_apply=cvt_add
})",
                           Opts());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("'cvt_add'"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("t.hlo:13"), std::string::npos) << r.status().ToString();
}

TEST(HloSyntax, Constants) {
  Graph g = MustImport(R"(
ENTRY e {
  a = f32[] constant(-1.5e-3)
  b = f32[] constant(inf)
  c = f32[] constant(-inf)
  d = f32[] constant(nan)
  t = pred[] constant(true)
  v = s32[3] constant({1, -2, 3})
  m = f32[2,2] constant({{1,2},{3.5,4}})
  s = f32[2,2] constant(0)
  ROOT r = (f32[], f32[], f32[], f32[], pred[], s32[3], f32[2,2], f32[2,2]) tuple(a, b, c, d, t, v, m, s)
})");
  ASSERT_EQ(g.outputs.size(), 8u);
  auto lit = [&](int k) { return g.nodes[g.outputs[k]].literal; };
  EXPECT_DOUBLE_EQ(lit(0).f[0], -1.5e-3);
  EXPECT_TRUE(std::isinf(lit(1).f[0]) && lit(1).f[0] > 0);
  EXPECT_TRUE(std::isinf(lit(2).f[0]) && lit(2).f[0] < 0);
  EXPECT_TRUE(std::isnan(lit(3).f[0]));
  EXPECT_EQ(lit(4).i, (std::vector<int64_t>{1}));
  EXPECT_EQ(lit(5).i, (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(lit(6).f, (std::vector<double>{1, 2, 3.5, 4}));
  EXPECT_EQ(lit(7).f, (std::vector<double>{0}));  // a splat
  for (const char* bad :
       {"s32[3] constant({1, 2})", "s32[2] constant({{1},{2}})", "s32[] constant(1.5)",
        "f32[2] constant({1, zz})", "s32[2,2] constant({1,2,3,4})"}) {
    auto r = ImportHloModule(std::string("ENTRY e {\n  ROOT c = ") + bad + "\n}\n", Opts());
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("t.hlo:2"), std::string::npos) << r.status().ToString();
  }
}

TEST(HloSyntax, ClampScalarBoundsAndSelectAreBroadcast) {
  Graph g = MustImport(R"(
ENTRY e {
  x = f32[4] parameter(0)
  lo = f32[] constant(0)
  hi = f32[] constant(6)
  c = f32[4] clamp(lo, x, hi)
  p = pred[4] compare(x, c), direction=GT, type=TOTALORDER
  ROOT s = f32[4] select(p, x, c)
})");
  EXPECT_EQ(CountOp(g, OpCode::kBroadcast), 2);
  const Node* cmp = FindNode(g, "p");
  ASSERT_NE(cmp, nullptr);
  EXPECT_EQ(cmp->direction, CompareDirection::kGt);
}

TEST(HloSyntax, SlicePadConcatIotaReverse) {
  Graph g = MustImport(R"(
ENTRY e {
  x = f32[8,4] parameter(0)
  s = f32[4,1] slice(x), slice={[0:8:2], [2:3]}
  z = f32[] constant(0)
  p = f32[8,4] pad(s, z), padding=0_1_1x1_2
  i = f32[8,4] iota(), iota_dimension=1
  r = f32[8,4] reverse(i), dimensions={0}
  ROOT c = f32[8,8] concatenate(p, r), dimensions={1}
})");
  const Node* s = FindNode(g, "s");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->slice_strides, (std::vector<int64_t>{2, 1}));
  const Node* p = FindNode(g, "p");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->pad_interior, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(p->pad_high, (std::vector<int64_t>{1, 2}));
}

TEST(HloSyntax, SeveralModulesAndDeadNodes) {
  auto r = ImportHloModules(R"(HloModule one
ENTRY e {
  x = f32[2] parameter(0)
  dead = f32[2] exponential(x)
  also_dead = f32[2] dot(x, x)
  ROOT n = f32[2] negate(x)
}
// -----
HloModule two
ENTRY e {
  ROOT c = s32[] constant(7)
}
)",
                            Opts());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].name, "one");
  EXPECT_EQ((*r)[0].nodes.size(), 2u);  // the parameter and the negate
  EXPECT_EQ((*r)[1].name, "two");
  EXPECT_FALSE(ImportHloModule("HloModule a\nENTRY e {\n ROOT c = s32[] constant(1)\n}\n"
                               "// -----\nENTRY e {\n ROOT c = s32[] constant(1)\n}\n",
                               Opts())
                   .ok());
}

// Checks the batch-norm expansion against a direct computation in double precision.
TEST(HloSyntax, BatchNormTrainingAndGradNumerics) {
  const int64_t n = 3, c = 2, w = 2;  // x: [n, c, w], feature_index=1
  const double eps = 0.001;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-2, 2);
  auto rand_vec = [&](size_t k) {
    std::vector<double> v(k);
    for (auto& e : v) e = static_cast<float>(u(rng));
    return v;
  };
  std::vector<double> x = rand_vec(n * c * w), scale = rand_vec(c), offset = rand_vec(c),
                      grad = rand_vec(n * c * w);
  auto at = [&](const std::vector<double>& t, int64_t i, int64_t f, int64_t j) {
    return t[(i * c + f) * w + j];
  };
  std::vector<double> mean(c, 0), var(c, 0);
  const double cnt = n * w;
  for (int64_t f = 0; f < c; ++f) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < w; ++j) mean[f] += at(x, i, f, j) / cnt;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < w; ++j) var[f] += std::pow(at(x, i, f, j) - mean[f], 2) / cnt;
  }

  Graph train = MustImport(R"(
ENTRY e {
  x = f32[3,2,2] parameter(0)
  s = f32[2] parameter(1)
  o = f32[2] parameter(2)
  ROOT bn = (f32[3,2,2], f32[2], f32[2]) batch-norm-training(x, s, o), epsilon=0.001, feature_index=1
})");
  auto r = Evaluate(train,
                    {Tensor{{DType::kF32, {n, c, w}}, x, {}}, Tensor{{DType::kF32, {c}}, scale, {}},
                     Tensor{{DType::kF32, {c}}, offset, {}}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  for (int64_t f = 0; f < c; ++f) {
    EXPECT_NEAR((*r)[1].f[f], mean[f], 1e-9);
    EXPECT_NEAR((*r)[2].f[f], var[f], 1e-9);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < w; ++j) {
        double want = (at(x, i, f, j) - mean[f]) / std::sqrt(var[f] + eps) * scale[f] + offset[f];
        EXPECT_NEAR((*r)[0].f[(i * c + f) * w + j], want, 1e-9);
      }
    }
  }

  Graph bwd = MustImport(R"(
ENTRY e {
  x = f32[3,2,2] parameter(0)
  s = f32[2] parameter(1)
  m = f32[2] parameter(2)
  v = f32[2] parameter(3)
  g = f32[3,2,2] parameter(4)
  ROOT bn = (f32[3,2,2], f32[2], f32[2]) batch-norm-grad(x, s, m, v, g), epsilon=0.001, feature_index=1
})");
  auto b =
      Evaluate(bwd, {Tensor{{DType::kF32, {n, c, w}}, x, {}}, Tensor{{DType::kF32, {c}}, scale, {}},
                     Tensor{{DType::kF32, {c}}, mean, {}}, Tensor{{DType::kF32, {c}}, var, {}},
                     Tensor{{DType::kF32, {n, c, w}}, grad, {}}});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (int64_t f = 0; f < c; ++f) {
    double inv = 1 / std::sqrt(var[f] + eps), sum_g = 0, sum_gc = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < w; ++j) {
        sum_g += at(grad, i, f, j);
        sum_gc += at(grad, i, f, j) * (at(x, i, f, j) - mean[f]);
      }
    }
    EXPECT_NEAR((*b)[2].f[f], sum_g, 1e-9);
    EXPECT_NEAR((*b)[1].f[f], sum_gc * inv, 1e-9);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < w; ++j) {
        double want = scale[f] * inv *
                      (at(grad, i, f, j) - sum_g / cnt -
                       (at(x, i, f, j) - mean[f]) * (sum_gc / cnt) * inv * inv);
        EXPECT_NEAR((*b)[0].f[(i * c + f) * w + j], want, 1e-9);
      }
    }
  }
  // Operand shapes are checked against the feature dimension.
  auto bad = ImportHloModule(R"(
ENTRY e {
  x = f32[3,2,2] parameter(0)
  s = f32[3] parameter(1)
  ROOT bn = (f32[3,2,2], f32[2], f32[2]) batch-norm-training(x, s, s), epsilon=0.001, feature_index=1
})",
                             Opts());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("t.hlo:5"), std::string::npos) << bad.status().ToString();
}

// ---------------------------------------------------------------------------------------
// The op list: each elementwise op with an HLO spelling lowers from that spelling.

struct SpelledOp {
  OpCode op;
  std::string_view hlo;
};

// Returns every op of the op list with its HLO spelling ("" for none).
std::vector<SpelledOp> SpelledOps() {
  return {
#define STITCH_OP(Enum, wire, Proto, name, hlo, ...) {OpCode::k##Enum, hlo},
#include "stitch/ir/op_list.h"
  };
}

// Returns the element type of `op`'s result on operands of type `operand`.
std::string ResultType(OpCode op, const std::string& operand) {
  switch (ResultDTypeOf(op)) {
    case ResultDType::kPred:
      return "pred";
    case ResultDType::kDeclared:
      return operand == "f32" ? "s32" : "f32";  // same width, for bitcast-convert
    case ResultDType::kOperand:
      break;
  }
  return operand;
}

// Returns a module whose root applies elementwise `op`, spelled `hlo`, to parameters of a
// type it accepts; the root's shape is written when `written`.
std::string ElementwiseModule(OpCode op, std::string_view hlo, bool written) {
  const std::string type = OperandDTypesOf(op) == OperandDTypes::kInteger ? "s32" : "f32";
  std::string text = "ENTRY e {\n";
  std::string operands;
  for (int k = 0; k < Arity(op); ++k) {
    const std::string& t = op == OpCode::kSelect && k == 0 ? "pred" : type;
    text += "  p" + std::to_string(k) + " = " + t + "[4] parameter(" + std::to_string(k) + ")\n";
    operands += (k ? ", p" : "p") + std::to_string(k);
  }
  text += "  ROOT r = " + (written ? ResultType(op, type) + "[4] " : "") + std::string(hlo) + "(" +
          operands + ")" + (op == OpCode::kCompare ? ", direction=LT" : "") + "\n}\n";
  return text;
}

TEST(HloOpList, EveryElementwiseOpLowersFromItsHloSpelling) {
  int lowered = 0;
  for (const SpelledOp& s : SpelledOps()) {
    if (s.hlo.empty() || ClassOf(s.op) != OpClass::kElementwise) continue;
    SCOPED_TRACE(std::string(s.hlo));
    Graph g = MustImport(ElementwiseModule(s.op, s.hlo, true));
    ASSERT_EQ(g.outputs.size(), 1u);
    EXPECT_EQ(g.nodes[g.outputs[0]].op, s.op);
    EXPECT_EQ(CountOp(g, s.op), 1);
    // The result shape may be omitted where the operands imply it.
    auto inferred = ImportHloModule(ElementwiseModule(s.op, s.hlo, false), Opts());
    if (ResultDTypeOf(s.op) == ResultDType::kDeclared) {
      ASSERT_FALSE(inferred.ok());
      EXPECT_NE(inferred.status().message().find("cannot be inferred"), std::string::npos);
    } else {
      ASSERT_TRUE(inferred.ok()) << inferred.status().ToString();
      EXPECT_EQ(inferred->nodes[inferred->outputs[0]].shape, g.nodes[g.outputs[0]].shape);
    }
    ++lowered;
  }
  EXPECT_EQ(lowered, 43);
}

TEST(HloOpList, OpsWithoutAnHloSpellingAreNotHloOps) {
  for (const SpelledOp& s : SpelledOps()) {
    if (!s.hlo.empty()) continue;
    const std::string name(OpCodeName(s.op));
    auto r = ImportHloModule(
        "ENTRY e {\n  a = u64[] parameter(0)\n  ROOT x = f32[4] " + name + "(a)\n}\n", Opts());
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().message(), "unsupported op '" + name + "' (instruction 'x') at t.hlo:3");
  }
}

// ---------------------------------------------------------------------------------------
// Errors name the file, the line and the op.

TEST(HloErrors, UnsupportedOpNamesOpInstructionAndLine) {
  auto r = ImportHloModule(R"(HloModule m
ENTRY e {
  a = f32[2,2] parameter(0)
  dot.3 = f32[2,2] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT n = f32[2,2] negate(dot.3)
})",
                           Opts("model.hlo"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(r.status().message(), "unsupported op 'dot' (instruction 'dot.3') at model.hlo:4");
  for (const char* op : {"custom-call", "all-reduce", "sort", "gather", "while", "rng"}) {
    auto s = ImportHloModule(
        std::string("ENTRY e {\n  a = f32[2] parameter(0)\n  ROOT x = f32[2] ") + op + "(a)\n}\n",
        Opts("m.hlo"));
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(s.status().message().find(std::string("'") + op + "'"), std::string::npos);
    EXPECT_NE(s.status().message().find("m.hlo:3"), std::string::npos);
  }
}

TEST(HloErrors, MalformedTextsGiveLineAndExpectation) {
  struct Case {
    const char* text;
    const char* where;
    const char* what;
  };
  const Case cases[] = {
      {"ENTRY e {\n  a = f32[2 parameter(0)\n}\n", "t.hlo:2", "expected"},
      {"ENTRY e {\n  a = f32[2] parameter(0)\n  ROOT b = f32[2] add(a, zz)\n}\n", "t.hlo:3",
       "'zz'"},
      {"ENTRY e {\n  a = f32[2] parameter(0)\n", "t.hlo:3", "expected '}'"},
      {"\n\nENTRY e {\n  a = f32[<=4] parameter(0)\n  ROOT n = f32[<=4] negate(a)\n}\n", "t.hlo:4",
       "dynamic"},
      {"ENTRY e {\n  ROOT a = f32[2] broadcast(), dimensions={0\n}\n", "t.hlo:", "expected"},
      {"ENTRY e {\n  a = f32[2] parameter(0) /* unterminated\n}\n", "t.hlo:2", "unterminated"},
      {"", "t.hlo:1", "expected"},
      {"ENTRY e {\n  a = f32[2] parameter(0)\n  ROOT b = f32[3] negate(a)\n}\n", "t.hlo", "b"},
      {"ENTRY e {\n  a = f32[2,3]{0,0} parameter(0)\n  ROOT b = f32[2,3] negate(a)\n}\n", "t.hlo:2",
       "permutation"},
      {"ENTRY e {\n  a = f32[99999999999,99999999999,99999] parameter(0)\n  ROOT b = "
       "f32[99999999999,99999999999,99999] negate(a)\n}\n",
       "t.hlo:2", "overflow"},
  };
  for (const auto& c : cases) {
    auto r = ImportHloModule(c.text, Opts());
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_FALSE(r.status().message().empty());
    EXPECT_NE(r.status().message().find(c.where), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.what), std::string::npos) << r.status().ToString();
  }
}

// Parameters and reduces take their shapes from the text alone.
TEST(HloErrors, ParametersAndReducesNeedAWrittenShape) {
  const char* texts[] = {
      "ENTRY e {\n  ROOT r = parameter(0)\n}\n",
      "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
      "ENTRY e {\n  a = f32[4] parameter(0)\n  z = f32[] constant(0)\n"
      "  ROOT r = reduce(a, z), dimensions={0}, to_apply=add\n}\n",
  };
  for (const char* text : texts) {
    auto r = ImportHloModule(text, Opts());
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("expected an array shape, none is written"),
              std::string::npos)
        << r.status().ToString();
  }
}

TEST(HloErrors, DeepNestingAndSelfCallsDoNotCrash) {
  std::string deep = "ENTRY e {\n  ROOT c = f32[] constant(" + std::string(100000, '{') + ")\n}\n";
  EXPECT_FALSE(ImportHloModule(deep, Opts()).ok());
  std::string shape = "ENTRY e {\n  ROOT c = " + std::string(100000, '(') + " parameter(0)\n}\n";
  EXPECT_FALSE(ImportHloModule(shape, Opts()).ok());
  auto self = ImportHloModule(R"(
f {
  a = f32[2] parameter(0)
  ROOT b = f32[2] fusion(a), kind=kLoop, calls=f
}
ENTRY e {
  a = f32[2] parameter(0)
  ROOT b = f32[2] fusion(a), kind=kLoop, calls=f
})",
                              Opts());
  ASSERT_FALSE(self.ok());
  EXPECT_NE(self.status().message().find("itself"), std::string::npos);
  // Fusions that each call the next one twice would expand exponentially.
  std::string blow;
  for (int k = 0; k < 40; ++k) {
    blow += "f" + std::to_string(k) + " {\n  a = f32[2] parameter(0)\n";
    if (k == 0) {
      blow += "  ROOT r = f32[2] negate(a)\n}\n";
    } else {
      std::string prev = "f" + std::to_string(k - 1);
      blow += "  x = f32[2] fusion(a), kind=kLoop, calls=" + prev +
              "\n  y = f32[2] fusion(a), kind=kLoop, calls=" + prev +
              "\n  ROOT r = f32[2] add(x, y)\n}\n";
    }
  }
  auto r = ImportHloModule(blow, Opts());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace stitch
