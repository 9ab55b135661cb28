// Helpers for the codegen tests: a small graph builder and a compile-everything check.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stitch/codegen/codegen.h"
#include "stitch/plan/schedule.h"

namespace stitch::testing {

class GraphBuilder {
 public:
  Graph g;

  int Param(DType t, std::vector<int64_t> dims) {
    Node n;
    n.op = OpCode::kParameter;
    n.name = "p" + std::to_string(params_);
    n.parameter_number = params_++;
    n.shape = {t, std::move(dims)};
    return g.Add(n);
  }
  int Const(DType t, double v, std::vector<int64_t> dims = {}) {
    Node n;
    n.op = OpCode::kConstant;
    n.shape = {t, std::move(dims)};
    if (IsFloat(t)) {
      n.literal.f = {v};
    } else {
      n.literal.i = {static_cast<int64_t>(v)};
    }
    return g.Add(n);
  }
  int Op(OpCode op, std::vector<int> operands, Shape shape) {
    Node n;
    n.op = op;
    n.operands = std::move(operands);
    n.shape = std::move(shape);
    return g.Add(n);
  }
  // Elementwise op with the first operand's shape.
  int Ew(OpCode op, std::vector<int> operands) {
    Shape s = g.nodes[operands[op == OpCode::kSelect ? 1 : 0]].shape;
    return Op(op, std::move(operands), s);
  }
  int Convert(int x, DType t) {
    Shape s = g.nodes[x].shape;
    s.dtype = t;
    return Op(OpCode::kConvert, {x}, s);
  }
  int Compare(int a, int b, CompareDirection d) {
    Shape s = g.nodes[a].shape;
    s.dtype = DType::kPred;
    int id = Op(OpCode::kCompare, {a, b}, s);
    g.nodes[id].direction = d;
    return id;
  }
  int Broadcast(int x, std::vector<int64_t> dims, std::vector<int64_t> map) {
    int id = Op(OpCode::kBroadcast, {x}, {g.nodes[x].shape.dtype, std::move(dims)});
    g.nodes[id].dimensions = std::move(map);
    return id;
  }
  int Reduce(int x, std::vector<int64_t> reduced, ReduceKind kind, double init) {
    const Shape& in = g.nodes[x].shape;
    std::vector<int64_t> kept;
    for (int d = 0; d < in.rank(); ++d) {
      bool r = false;
      for (int64_t e : reduced) r |= e == d;
      if (!r) kept.push_back(in.dims[d]);
    }
    DType t = in.dtype;
    int c = Const(t, init);
    int id = Op(OpCode::kReduce, {x, c}, {t, kept});
    g.nodes[id].dimensions = std::move(reduced);
    g.nodes[id].reduce_kind = kind;
    return id;
  }

 private:
  int params_ = 0;
};

// A spec whose inputs are the graph's parameters among `nodes`' operands and whose nodes
// are every other node from `first` on, in id order.
inline KernelSpec MakeSpec(const Graph& g, const std::string& name, KernelKind kind,
                           std::vector<int> outputs, int hero = -1,
                           std::vector<int> extra_inputs = {}) {
  KernelSpec s;
  s.name = name;
  s.kind = kind;
  s.hero = hero;
  s.outputs = std::move(outputs);
  s.inputs = extra_inputs;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    bool extra = false;
    for (int e : extra_inputs) extra |= e == i;
    if (extra) continue;
    if (g.nodes[i].op == OpCode::kParameter) {
      s.inputs.push_back(i);
    } else {
      s.nodes.push_back(i);
    }
  }
  // Codegen takes scheduled specs. One with ids outside the graph, or one the scheduler
  // refuses, stays unscheduled, for the tests of EmitKernel's own validation (the scheduler
  // takes the planner's specs and does not check ids).
  const int n = static_cast<int>(g.nodes.size());
  for (int id : s.outputs) {
    if (id < 0 || id >= n) return s;
  }
  if (!ScheduleKernel(g, s, Target().device()).ok()) s.mapping = ThreadMapping{};
  return s;
}

inline bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// How many times `needle` occurs in `haystack`, not overlapping.
inline int Occurrences(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

// Emits, lowers (sm_90, then sm_80) and, where possible, assembles `spec`; returns the
// sm_90 PTX. Fails the test on any error.
inline std::string CompileEverywhere(const Graph& g, const KernelSpec& spec,
                                     CodegenOptions options = {}) {
  auto k = EmitKernel(g, spec, options);
  EXPECT_TRUE(k.ok()) << k.status().ToString();
  if (!k.ok()) return "";
  EXPECT_FALSE(k->portable_ir.empty());
  EXPECT_EQ(k->param_nodes.size(), spec.inputs.size() + spec.outputs.size());
  std::string ptx90;
  for (const char* target : {"sm_90", "sm_80"}) {
    CodegenOptions o = options;
    o.target = *Target::Parse(target);
    CompiledKernel ck = *k;
    Status s = LowerToPtx(ck, o);
    EXPECT_TRUE(s.ok()) << target << ": " << s.ToString();
    if (!s.ok()) return "";
    EXPECT_TRUE(Contains(ck.ptx, ".entry " + spec.name)) << ck.ptx;
    EXPECT_TRUE(Contains(ck.ptx, std::string(".target ") + target)) << ck.ptx.substr(0, 400);
    if (std::string(target) == "sm_90") ptx90 = ck.ptx;
    if (CubinAvailable(o)) {
      Status a = AssembleCubin(ck, o);
      EXPECT_TRUE(a.ok()) << target << ": " << a.ToString() << "\n" << ck.ptx;
      EXPECT_FALSE(ck.cubin.empty());
    }
  }
  return ptx90;
}

}  // namespace stitch::testing
