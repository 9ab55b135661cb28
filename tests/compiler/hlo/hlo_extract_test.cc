// Tests of memory-intensive subgraph extraction from whole HLO modules.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/verifier.h"
#include "stitch/reference/interpreter.h"

namespace stitch {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

HloImportOptions Opts(const std::string& name) {
  HloImportOptions o;
  o.source_name = name;
  return o;
}

// Checks what every extracted graph must satisfy; returns a one-line summary.
std::string CheckAndSummarise(const Graph& g) {
  EXPECT_TRUE(Verify(g).ok()) << g.name << ": " << Verify(g).ToString();
  EXPECT_FALSE(g.outputs.empty()) << g.name;
  auto params = g.Parameters();
  for (size_t k = 0; k < params.size(); ++k) {
    EXPECT_EQ(g.nodes[params[k]].parameter_number, static_cast<int64_t>(k)) << g.name;
  }
  bool computes = false;
  for (const auto& n : g.nodes) {
    // Inputs come only through parameters: no node reads anything else from outside.
    for (int o : n.operands) EXPECT_TRUE(o >= 0 && o < static_cast<int>(g.nodes.size()));
    if (ClassOf(n.op) == OpClass::kElementwise || ClassOf(n.op) == OpClass::kReduce ||
        n.op == OpCode::kSlice || n.op == OpCode::kConcatenate || n.op == OpCode::kPad ||
        n.op == OpCode::kReverse) {
      computes = true;
    }
  }
  EXPECT_TRUE(computes) << g.name << " is trivial";
  return g.name + ": " + std::to_string(g.nodes.size()) + " nodes, " +
         std::to_string(params.size()) + " params, " + std::to_string(g.outputs.size()) +
         " outputs";
}

TEST(HloExtract, DotInTheMiddleGivesTwoSubgraphs) {
  const char* text = R"(HloModule mlp
ENTRY e {
  x = f32[4,8] parameter(0)
  w = f32[8,16] parameter(1)
  b = f32[16] parameter(2)
  c = f32[] constant(2)
  cb = f32[4,8] broadcast(c), dimensions={}
  s = f32[4,8] multiply(x, cb)
  t = f32[4,8] tanh(s)
  d = f32[4,16] dot(t, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[4,16] broadcast(b), dimensions={1}
  a = f32[4,16] add(d, bb)
  z = f32[] constant(0)
  zb = f32[4,16] broadcast(z), dimensions={}
  r = f32[4,16] maximum(a, zb)
  wt = f32[16,8] transpose(w), dimensions={1,0}
  ROOT out = (f32[4,16], f32[4,8], f32[16,8]) tuple(r, t, wt)
})";
  auto r = ExtractMemoryIntensiveSubgraphs(text, Opts("mlp.hlo"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);  // the lone transpose of w is pure data movement: dropped
  const Graph& g0 = (*r)[0];
  const Graph& g1 = (*r)[1];
  for (const auto& g : *r) printf("%s\n", CheckAndSummarise(g).c_str());
  EXPECT_EQ(g0.name, "mlp.sg0");
  ASSERT_EQ(g0.Parameters().size(), 1u);
  EXPECT_EQ(g0.nodes[g0.Parameters()[0]].name, "x");
  ASSERT_EQ(g0.outputs.size(), 1u);  // t, used by the dot and by the root
  EXPECT_EQ(g0.nodes[g0.outputs[0]].op, OpCode::kTanh);
  EXPECT_EQ(g1.name, "mlp.sg1");
  ASSERT_EQ(g1.Parameters().size(), 2u);
  EXPECT_EQ(g1.nodes[g1.Parameters()[0]].name, "b");  // in order of first use
  EXPECT_EQ(g1.nodes[g1.Parameters()[1]].name, "d");
  ASSERT_EQ(g1.outputs.size(), 1u);
  EXPECT_EQ(g1.nodes[g1.outputs[0]].op, OpCode::kMax);
}

TEST(HloExtract, TupleParametersAndMultiOutputBoundaries) {
  const char* text = R"(HloModule m
body {
  p = (f32[4], s32[]) parameter(0)
  ROOT q = (f32[4], s32[]) copy(p)
}
ENTRY e {
  tp = (f32[4], f32[4]) parameter(0)
  a = f32[4] get-tuple-element(tp), index=0
  b = f32[4] get-tuple-element(tp), index=1
  s = f32[4] add(a, b)
  i = s32[] constant(0)
  init = (f32[4], s32[]) tuple(s, i)
  w = (f32[4], s32[]) while(init), condition=body, body=body
  w0 = f32[4] get-tuple-element(w), index=0
  ROOT n = f32[4] negate(w0)
})";
  auto r = ExtractMemoryIntensiveSubgraphs(text, Opts("m.hlo"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  for (const auto& g : *r) printf("%s\n", CheckAndSummarise(g).c_str());
  // Each element of the tuple parameter is a parameter of its own.
  EXPECT_EQ((*r)[0].Parameters().size(), 2u);
  EXPECT_EQ((*r)[0].nodes[(*r)[0].Parameters()[1]].name, "tp.1");
  // The while's tuple result enters through the element that is used.
  ASSERT_EQ((*r)[1].Parameters().size(), 1u);
  EXPECT_EQ((*r)[1].nodes[(*r)[1].Parameters()[0]].name, "w.0");
}

TEST(HloExtract, ImportableModuleIsOneSubgraph) {
  std::string text =
      ReadFile(std::string(STITCH_CORPUS_DIR) + "/hlo/extracted/layernorm_fwd_4d3_f32.hlo");
  auto r = ExtractMemoryIntensiveSubgraphs(text, Opts("ln.hlo"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 1u);
  auto whole = ImportHloModule(text, Opts("ln.hlo"));
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ((*r)[0].outputs.size(), whole->outputs.size());
  printf("%s\n", CheckAndSummarise((*r)[0]).c_str());
}

TEST(HloExtract, MobileNetV2TrainingStep) {
  std::string text = ReadFile(std::string(STITCH_CORPUS_DIR) +
                              "/hlo/real_models/mobilenet_v2_pytorchxla_train_bs96.hlo");
  ASSERT_FALSE(text.empty());
  auto t0 = std::chrono::steady_clock::now();
  auto r = ExtractMemoryIntensiveSubgraphs(text, Opts("mobilenet_v2.hlo"));
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  printf("mobilenet_v2: %zu subgraphs in %.1f ms\n", r->size(), ms);
  EXPECT_GE(r->size(), 50u);
  size_t with_reduce = 0;
  for (const auto& g : *r) {
    printf("  %s\n", CheckAndSummarise(g).c_str());
    for (const auto& n : g.nodes) {
      EXPECT_FALSE(n.source.empty());
      EXPECT_EQ(n.source.rfind("mobilenet_v2.hlo:", 0), 0u);
    }
    for (const auto& n : g.nodes) {
      if (n.op == OpCode::kReduce) {
        ++with_reduce;
        break;
      }
    }
  }
  // Every batch-norm (52 in the forward and backward passes) gives statistics reductions.
  EXPECT_GE(with_reduce, 20u);
  // Names are stable: a second run gives the same graphs in the same order.
  auto again = ExtractMemoryIntensiveSubgraphs(text, Opts("mobilenet_v2.hlo"));
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), r->size());
  for (size_t k = 0; k < r->size(); ++k) {
    EXPECT_EQ((*again)[k].name, (*r)[k].name);
    EXPECT_EQ((*again)[k].nodes.size(), (*r)[k].nodes.size());
  }
}

// A residual chain, the shape of a Transformer's memory-intensive region: every step reads the
// stream and the input, so any cut has values crossing it.
std::string ResidualChain(int steps) {
  std::string text =
      "HloModule chain\nENTRY e {\n  x = f32[64] parameter(0)\n  h0 = f32[64] tanh(x)\n";
  for (int k = 1; k <= steps; ++k) {
    const std::string prev = "h" + std::to_string(k - 1), cur = std::to_string(k);
    text += "  e" + cur + " = f32[64] exponential(" + prev + ")\n";
    text += "  m" + cur + " = f32[64] multiply(e" + cur + ", x)\n";
    text += "  h" + cur + " = f32[64] add(m" + cur + ", " + prev + ")\n";
  }
  return text + "  ROOT out = (f32[64], f32[64]) tuple(h" + std::to_string(steps) + ", h1)\n}\n";
}

TEST(HloExtract, LargeRegionsAreCutIntoPiecesThatComposeToTheWhole) {
  const std::string text = ResidualChain(10);  // 31 compute instructions
  HloImportOptions whole_options = Opts("chain.hlo");
  whole_options.max_subgraph_instructions = 0;
  StatusOr<std::vector<Graph>> whole = ExtractMemoryIntensiveSubgraphs(text, whole_options);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  ASSERT_EQ(whole->size(), 1u);
  HloImportOptions cut_options = Opts("chain.hlo");
  cut_options.max_subgraph_instructions = 4;
  StatusOr<std::vector<Graph>> pieces = ExtractMemoryIntensiveSubgraphs(text, cut_options);
  ASSERT_TRUE(pieces.ok()) << pieces.status().ToString();
  ASSERT_EQ(pieces->size(), 8u);  // ceil(31 / 4)
  for (const Graph& g : *pieces) {
    CheckAndSummarise(g);
    size_t computed = 0;
    for (const Node& n : g.nodes) computed += n.op == OpCode::kParameter ? 0 : 1;
    EXPECT_LE(computed, 4u) << g.name;
  }

  // Run the pieces in order, each reading the values earlier pieces computed by name, and
  // compare with the whole region on the reference interpreter.
  std::mt19937_64 rng(7);
  const Tensor x = RandomTensor(whole->front().nodes[whole->front().Parameters()[0]].shape, rng);
  std::map<std::string, Tensor> values = {{"x", x}};
  for (const Graph& g : *pieces) {
    std::vector<Tensor> args;
    for (int p : g.Parameters()) {
      ASSERT_TRUE(values.contains(g.nodes[p].name)) << g.name << " reads " << g.nodes[p].name;
      args.push_back(values.at(g.nodes[p].name));
    }
    StatusOr<std::vector<Tensor>> out = Evaluate(g, args);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    for (size_t k = 0; k < g.outputs.size(); ++k) values[g.nodes[g.outputs[k]].name] = (*out)[k];
  }
  StatusOr<std::vector<Tensor>> expected = Evaluate(whole->front(), {x});
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  for (size_t k = 0; k < whole->front().outputs.size(); ++k) {
    const std::string& name = whole->front().nodes[whole->front().outputs[k]].name;
    ASSERT_TRUE(values.contains(name)) << name;
    EXPECT_EQ(values.at(name).f, (*expected)[k].f) << name;
  }
}

TEST(HloExtract, MalformedTextIsAnError) {
  auto r =
      ExtractMemoryIntensiveSubgraphs("ENTRY e {\n  a = f32[2] parameter(0\n}\n", Opts("x.hlo"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("x.hlo:"), std::string::npos);
}

}  // namespace
}  // namespace stitch
