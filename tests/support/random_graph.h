// Random well-formed graphs for property tests: elementwise chains, broadcasts, reductions
// along different axes feeding back through broadcasts (the softmax/layernorm pattern),
// several outputs, and f16 storage. Values are kept in a numerically tame range (bounded
// unary ops, means instead of raw sums, divisions by 1 + |x|) so a disagreement between
// a kernel and the interpreter means a bug, not an ill-conditioned graph.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "support/graph_builder.h"

namespace stitch::testing {

class RandomGraphBuilder {
 public:
  explicit RandomGraphBuilder(uint64_t seed) : rng_(seed) {}

  Graph Build() {
    g_ = Graph{};
    g_.name = "random";
    int rank = Pick(1, 3);
    dims_.clear();
    for (int d = 0; d < rank; ++d) dims_.push_back(Dim());
    storage_ = Chance(0.25) ? DType::kF16 : DType::kF32;
    values_.clear();
    int params = Pick(1, 3);
    for (int p = 0; p < params; ++p) {
      int x = Param(g_, {storage_, dims_}, p);
      values_.push_back(storage_ == DType::kF32 ? x : Convert(g_, x, DType::kF32));
    }
    int steps = Pick(3, 12);
    for (int s = 0; s < steps; ++s) Step();
    int outputs = Pick(1, 3);
    for (int o = 0; o < outputs; ++o) {
      int v = values_[values_.size() - 1 - Pick(0, std::min<int>(2, values_.size() - 1))];
      g_.outputs.push_back(storage_ == DType::kF32 ? v : Convert(g_, v, storage_));
    }
    return g_;
  }

 private:
  int Pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  int64_t Dim() {
    static const int64_t kSizes[] = {1, 2, 3, 5, 7, 8, 16, 17, 31, 32, 33, 64, 100, 127, 129, 300};
    return kSizes[Pick(0, 15)];
  }
  int Any() { return values_[Pick(0, static_cast<int>(values_.size()) - 1)]; }
  int Recent() { return values_.back(); }

  int Scalar(double v) { return ConstScalar(g_, DType::kF32, v); }
  int Splat(double v) { return Broadcast(g_, Scalar(v), dims_, {}); }

  void Step() {
    switch (Pick(0, 5)) {
      case 0:
        values_.push_back(BoundedUnary(Any()));
        break;
      case 1:
        values_.push_back(SafeBinary(Any(), Any()));
        break;
      case 2:
        values_.push_back(ReduceAndBroadcastBack(Any()));
        break;
      case 3:
        values_.push_back(SafeBinary(Recent(), ReduceAndBroadcastBack(Recent())));
        break;
      case 4:
        values_.push_back(Binary(g_, OpCode::kMul, Any(), Splat(0.5)));
        break;
      default:
        values_.push_back(BoundedUnary(Recent()));
        break;
    }
  }

  int BoundedUnary(int x) {
    switch (Pick(0, 6)) {
      case 0:
        return Unary(g_, OpCode::kNeg, x);
      case 1:
        return Unary(g_, OpCode::kAbs, x);
      case 2:
        return Unary(g_, OpCode::kTanh, x);
      case 3:
        return Unary(g_, OpCode::kLogistic, x);
      case 4:
        return Unary(g_, OpCode::kSin, x);
      case 5:
        return Unary(g_, OpCode::kExp, Unary(g_, OpCode::kTanh, x));
      default: {
        int one = Splat(1.0);
        return Unary(g_, OpCode::kLog, Binary(g_, OpCode::kAdd, Unary(g_, OpCode::kAbs, x), one));
      }
    }
  }

  int SafeBinary(int a, int b) {
    switch (Pick(0, 5)) {
      case 0:
        return Binary(g_, OpCode::kAdd, a, b);
      case 1:
        return Binary(g_, OpCode::kSub, a, b);
      case 2:
        return Binary(g_, OpCode::kMul, Unary(g_, OpCode::kTanh, a), b);
      case 3:
        return Binary(g_, OpCode::kMax, a, b);
      case 4:
        return Binary(g_, OpCode::kMin, a, b);
      default: {
        int denom = Binary(g_, OpCode::kAdd, Unary(g_, OpCode::kAbs, b), Splat(1.0));
        return Binary(g_, OpCode::kDiv, a, denom);
      }
    }
  }

  // Reduces a random non-empty set of dimensions (mean, max or min) and broadcasts the
  // result back over them.
  int ReduceAndBroadcastBack(int x) {
    const int rank = static_cast<int>(dims_.size());
    std::vector<int64_t> reduced, kept;
    int64_t count = 1;
    for (int d = 0; d < rank; ++d) {
      if (Chance(0.5)) {
        reduced.push_back(d);
        count *= dims_[d];
      } else {
        kept.push_back(d);
      }
    }
    if (reduced.empty()) {
      reduced.push_back(rank - 1);
      count = dims_[rank - 1];
      kept.pop_back();
    }
    int r;
    switch (Pick(0, 2)) {
      case 0:
        r = Reduce(g_, x, Scalar(0.0), reduced, ReduceKind::kSum);
        r = Binary(g_, OpCode::kMul, r, ScaleLike(r, 1.0 / static_cast<double>(count)));
        break;
      case 1:
        r = Reduce(g_, x, Scalar(-1e30), reduced, ReduceKind::kMax);
        break;
      default:
        r = Reduce(g_, x, Scalar(1e30), reduced, ReduceKind::kMin);
        break;
    }
    return Broadcast(g_, r, dims_, kept);
  }

  int ScaleLike(int like, double v) {
    const Shape& s = g_.nodes[like].shape;
    std::vector<int64_t> map;
    return Broadcast(g_, Scalar(v), s.dims, map);
  }

  std::mt19937_64 rng_;
  Graph g_;
  std::vector<int64_t> dims_;
  DType storage_ = DType::kF32;
  std::vector<int> values_;
};

}  // namespace stitch::testing
