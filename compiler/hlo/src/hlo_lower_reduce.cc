// Lowering of HLO's reduces, whose reducers must be one combiner the IR knows, and of
// batch-norm-training and batch-norm-grad, expanded into reduces and elementwise ops.
#include <algorithm>
#include <unordered_map>

#include "hlo_lowerer.h"

namespace stitch::hlo {
namespace {

std::optional<ReduceKind> ReduceKindOf(std::string_view opcode) {
  if (opcode == "add") return ReduceKind::kSum;
  if (opcode == "multiply") return ReduceKind::kProd;
  if (opcode == "maximum") return ReduceKind::kMax;
  if (opcode == "minimum") return ReduceKind::kMin;
  if (opcode == "and") return ReduceKind::kAnd;
  if (opcode == "or") return ReduceKind::kOr;
  return std::nullopt;
}

// Returns the error for a reducer that AnalyseReducer does not recognise.
Status UnsupportedReducer(const Instr& in, const HloComputation& reducer, size_t n) {
  return Unimplemented(in.where + ": reduce '" + in.ins.name + "' uses reducer '" + reducer.name +
                       "', which is not " +
                       (n == 1 ? std::string("one add/multiply/maximum/minimum/and/or of its "
                                             "two parameters")
                               : std::string("separable into add/multiply/maximum/minimum/"
                                             "and/or of each input pair")));
}

}  // namespace

std::optional<std::vector<ReduceKind>> AnalyseReducer(const HloComputation& c, size_t n) {
  std::unordered_map<std::string, int> index;
  std::unordered_map<std::string, int64_t> param_no;
  for (size_t k = 0; k < c.instructions.size(); ++k) {
    const auto& ins = c.instructions[k];
    index[ins.name] = static_cast<int>(k);
    if (ins.opcode == "parameter") {
      auto v = ParseInt(ins.args_text);
      if (!v) return std::nullopt;
      param_no[ins.name] = *v;
    }
  }
  if (param_no.size() != 2 * n) return std::nullopt;
  auto combiner = [&](const HloInstruction& ins, size_t i) -> std::optional<ReduceKind> {
    auto kind = ReduceKindOf(ins.opcode);
    if (!kind || ins.operands.size() != 2) return std::nullopt;
    auto a = param_no.find(ins.operands[0].name);
    auto b = param_no.find(ins.operands[1].name);
    if (a == param_no.end() || b == param_no.end()) return std::nullopt;
    int64_t x = a->second, y = b->second;
    int64_t lhs = static_cast<int64_t>(i), rhs = static_cast<int64_t>(i + n);
    if (!((x == lhs && y == rhs) || (x == rhs && y == lhs))) return std::nullopt;
    return kind;
  };
  const auto& root = c.instructions[c.root];
  std::vector<ReduceKind> kinds;
  if (n == 1) {
    auto k = combiner(root, 0);
    if (!k) return std::nullopt;
    kinds.push_back(*k);
    return kinds;
  }
  if (root.opcode != "tuple" || root.operands.size() != n) return std::nullopt;
  for (size_t i = 0; i < n; ++i) {
    auto it = index.find(root.operands[i].name);
    if (it == index.end()) return std::nullopt;
    auto k = combiner(c.instructions[it->second], i);
    if (!k) return std::nullopt;
    kinds.push_back(*k);
  }
  return kinds;
}

// A reduce of N inputs (and N init values) becomes one IR reduce per input; their values
// form a tuple when N > 1.
StatusOr<Value> LowerReduce(Lowerer& l, const Instr& in) {
  if (in.operands.empty() || in.operands.size() % 2 != 0) {
    return in.Fail("expected N inputs and N init values");
  }
  const size_t n = in.operands.size() / 2;
  const std::string* to_apply = in.Attr("to_apply");
  if (!to_apply) return in.Fail("missing attribute 'to_apply'");
  const HloComputation* reducer = FindComputation(l.module(), *to_apply);
  if (!reducer) return in.Fail("to_apply names unknown computation '" + *to_apply + "'");
  auto kinds = AnalyseReducer(*reducer, n);
  if (!kinds) return UnsupportedReducer(in, *reducer, n);
  const std::string* dims_text = in.Attr("dimensions");
  if (!dims_text) return in.Fail("missing attribute 'dimensions'");
  auto dims = ParseIntList(*dims_text);
  if (!dims) return in.Fail("expected dimensions={i,j,...}");
  std::sort(dims->begin(), dims->end());
  const HloShape& shape = in.ins.shape;
  if (n > 1 && (!shape.is_tuple || shape.elements.size() != n)) {
    return in.Fail("a reduce of " + std::to_string(n) + " inputs must have a tuple shape of " +
                   std::to_string(n) + " elements");
  }
  Value result;
  result.is_tuple = n > 1;
  for (size_t i = 0; i < n; ++i) {
    const HloShape& hs = n > 1 ? shape.elements[i] : shape;
    Node node;
    STITCH_ASSIGN_OR_RETURN(node.shape, l.ArrayShape(hs, in.where));
    const Value& input = *in.operands[i];
    const Value& init = *in.operands[i + n];
    if (input.is_tuple || init.is_tuple) {
      return in.Fail("operand '" + in.operand_ins[i]->name + "' or '" +
                     in.operand_ins[i + n]->name + "' is a tuple");
    }
    node.op = OpCode::kReduce;
    node.reduce_kind = (*kinds)[i];
    node.operands = {input.node, init.node};
    node.dimensions = *dims;
    if (n > 1) node.name = "." + std::to_string(i);
    Value e;
    STITCH_ASSIGN_OR_RETURN(e.m2m, NormaliseLayout(hs, in.where));
    e.node = l.Add(std::move(node));
    if (n == 1) return e;
    result.elems.push_back(std::move(e));
  }
  return result;
}

namespace {

// Expands batch-norm-training and batch-norm-grad as XLA's documentation defines them:
// statistics over every dimension except feature_index, biased variance. The operands must
// have been checked.
class BatchNormExpansion {
 public:
  BatchNormExpansion(Lowerer& l, std::vector<int> operands, int64_t feature_index)
      : l_(l), x_(std::move(operands)), input_(l.ShapeOf(x_[0])), feature_index_(feature_index) {
    for (int64_t d = 0; d < input_.rank(); ++d) {
      if (d != feature_index_) reduced_.push_back(d);
    }
  }

  // Returns (output, batch mean, batch variance) for training, whose operands are (x,
  // scale, offset), or (grad_operand, grad_scale, grad_offset) for the gradient, whose
  // operands are (x, scale, mean, variance, grad_output).
  Value Expand(bool training, double epsilon) {
    double count = 1;
    for (int64_t d : reduced_) count *= static_cast<double>(input_.dims[d]);
    inv_count_ = FeatureConst(count > 0 ? 1.0 / count : 0.0, ".inv_count");
    return training ? Training(epsilon) : Grad(epsilon);
  }

 private:
  Value Training(double epsilon) {
    const int x = x_[0];
    int mean = Bin(OpCode::kMul, ReduceSum(x, ".sum"), inv_count_, ".mean");
    int centered = Bin(OpCode::kSub, x, Spread(mean, ".mean_b"), ".centered");
    int sq = Bin(OpCode::kMul, centered, centered, ".sq");
    int var = Bin(OpCode::kMul, ReduceSum(sq, ".sq_sum"), inv_count_, ".var");
    int inv_std = InvStd(var, epsilon);
    int scale_b = Spread(x_[1], ".scale_b");
    int factor = Bin(OpCode::kMul, Spread(inv_std, ".inv_std_b"), scale_b, ".factor");
    int offset_b = Spread(x_[2], ".offset_b");
    int normed = Bin(OpCode::kMul, centered, factor, ".normed");
    int out = Bin(OpCode::kAdd, normed, offset_b, ".output");
    return Tuple(out, mean, var);
  }

  // grad_x = scale * inv_std * (g - mean(g) - (x - mean) * mean(g * (x - mean)) * inv_std^2)
  Value Grad(double epsilon) {
    const int x = x_[0], grad = x_[4];
    int centered = Bin(OpCode::kSub, x, Spread(x_[2], ".mean_b"), ".centered");
    int inv_std = InvStd(x_[3], epsilon);
    int grad_offset = ReduceSum(grad, ".grad_offset");
    int sum_gc = ReduceSum(Bin(OpCode::kMul, grad, centered, ".gc"), ".gc_sum");
    int grad_scale = Bin(OpCode::kMul, sum_gc, inv_std, ".grad_scale");
    int inv_std_b = Spread(inv_std, ".inv_std_b");
    int mean_g = Spread(Bin(OpCode::kMul, grad_offset, inv_count_, ".mean_g"), ".mean_g_b");
    int mean_gc = Spread(Bin(OpCode::kMul, sum_gc, inv_count_, ".mean_gc"), ".mean_gc_b");
    int inv_var = Bin(OpCode::kMul, inv_std_b, inv_std_b, ".inv_var");
    int corr = Bin(OpCode::kMul, Bin(OpCode::kMul, centered, mean_gc, ".corr0"), inv_var, ".corr");
    int diff = Bin(OpCode::kSub, Bin(OpCode::kSub, grad, mean_g, ".g_centered"), corr, ".diff");
    int factor = Bin(OpCode::kMul, Spread(x_[1], ".scale_b"), inv_std_b, ".factor");
    int grad_x = Bin(OpCode::kMul, factor, diff, ".grad_operand");
    return Tuple(grad_x, grad_scale, grad_offset);
  }

  int Bin(OpCode op, int a, int b, const std::string& suffix) {
    Node n;
    n.op = op;
    n.operands = {a, b};
    n.shape = l_.ShapeOf(a);
    n.name = suffix;
    return l_.Add(std::move(n));
  }

  int Un(OpCode op, int a, const std::string& suffix) {
    Node n;
    n.op = op;
    n.operands = {a};
    n.shape = l_.ShapeOf(a);
    n.name = suffix;
    return l_.Add(std::move(n));
  }

  // Returns the sum of `x` over every dimension but the feature one.
  int ReduceSum(int x, const std::string& suffix) {
    const Shape s = l_.ShapeOf(x);  // a copy: Add() below may move the nodes
    int zero = l_.ScalarConst(s.dtype, 0, suffix + ".init");
    Node n;
    n.op = OpCode::kReduce;
    n.reduce_kind = ReduceKind::kSum;
    n.operands = {x, zero};
    n.dimensions = reduced_;
    n.shape = {s.dtype, {s.dims[feature_index_]}};
    n.name = suffix;
    return l_.Add(std::move(n));
  }

  // Returns per-feature values `v` broadcast to the input's shape.
  int Spread(int v, const std::string& suffix) {
    return l_.Broadcast(v, input_.dims, {feature_index_}, suffix);
  }

  // Returns a per-feature vector of `value`.
  int FeatureConst(double value, const std::string& suffix) {
    int scalar = l_.ScalarConst(input_.dtype, value, suffix + ".scalar");
    return l_.Broadcast(scalar, {input_.dims[feature_index_]}, {}, suffix);
  }

  int InvStd(int var, double epsilon) {
    int var_eps = Bin(OpCode::kAdd, var, FeatureConst(epsilon, ".eps"), ".var_eps");
    return Un(OpCode::kRsqrt, var_eps, ".inv_std");
  }

  static Value Tuple(int a, int b, int c) {
    Value r;
    r.is_tuple = true;
    r.elems = {Leaf(a), Leaf(b), Leaf(c)};
    return r;
  }

  Lowerer& l_;
  const std::vector<int> x_;
  const Shape input_;
  const int64_t feature_index_;
  std::vector<int64_t> reduced_;
  int inv_count_ = -1;
};

// Returns the nodes of the operands, which must be arrays.
StatusOr<std::vector<int>> BatchNormOperands(const Instr& in) {
  std::vector<int> x;
  for (size_t k = 0; k < in.operands.size(); ++k) {
    if (in.operands[k]->is_tuple) {
      return in.Fail("operand '" + in.operand_ins[k]->name + "' is a tuple");
    }
    x.push_back(in.operands[k]->node);
  }
  return x;
}

// Checks the operands' shapes against the input's (operand 0) and its feature dimension.
Status CheckBatchNormShapes(const Lowerer& l, const Instr& in, const std::vector<int>& x,
                            bool training, int64_t feature_index) {
  const Shape& input = l.ShapeOf(x[0]);
  if (!IsFloat(input.dtype)) return in.Fail("operand must be floating point");
  const Shape feature{input.dtype, {input.dims[feature_index]}};
  for (size_t k = 1; k < x.size(); ++k) {
    if (k == 4 && !training) {
      if (l.ShapeOf(x[k]) != input) return in.Fail("grad_output must have the operand's shape");
    } else if (l.ShapeOf(x[k]) != feature) {
      return in.Fail("operand " + std::to_string(k) + " must be " + feature.ToString());
    }
  }
  return Status::Ok();
}

// Checks the declared 3-tuple result against the expansion and gives its elements their
// declared layouts.
Status MatchDeclaredResult(const Lowerer& l, const Instr& in, Value* r) {
  const HloShape& shape = in.ins.shape;
  if (!shape.is_tuple || shape.elements.size() != 3) {
    return in.Fail("expected a 3-tuple result shape, got " + shape.ToString());
  }
  for (size_t k = 0; k < 3; ++k) {
    STITCH_ASSIGN_OR_RETURN(Shape s, l.ArrayShape(shape.elements[k], in.where));
    const Shape& computed = l.ShapeOf(r->elems[k].node);
    if (s != computed) {
      return in.Fail("result element " + std::to_string(k) + " is declared " + s.ToString() +
                     " but computes " + computed.ToString());
    }
    STITCH_ASSIGN_OR_RETURN(r->elems[k].m2m, NormaliseLayout(shape.elements[k], in.where));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<Value> LowerBatchNorm(Lowerer& l, const Instr& in) {
  const bool training = in.ins.opcode == "batch-norm-training";
  STITCH_RETURN_IF_ERROR(in.NeedOperands(training ? 3 : 5));
  STITCH_ASSIGN_OR_RETURN(std::vector<int> x, BatchNormOperands(in));
  const std::string* epsilon_text = in.Attr("epsilon");
  const std::string* feature_text = in.Attr("feature_index");
  if (!epsilon_text || !feature_text) return in.Fail("expected epsilon= and feature_index=");
  auto epsilon = ParseFloat(*epsilon_text);
  auto feature_index = ParseInt(*feature_text);
  if (!epsilon || !feature_index || *feature_index < 0 ||
      *feature_index >= l.ShapeOf(x[0]).rank()) {
    return in.Fail("bad epsilon or feature_index");
  }
  STITCH_RETURN_IF_ERROR(CheckBatchNormShapes(l, in, x, training, *feature_index));
  BatchNormExpansion expansion(l, std::move(x), *feature_index);
  Value r = expansion.Expand(training, *epsilon);
  STITCH_RETURN_IF_ERROR(MatchDeclaredResult(l, in, &r));
  return r;
}

}  // namespace stitch::hlo
