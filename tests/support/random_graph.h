// Random well-formed graphs for property tests. A graph works on one shape (rank 1 to 4, sizes
// irregular or not, sometimes with repeated sizes) and mixes:
//   - elementwise chains;
//   - reductions along different axes: the minor-most (row), the major-most (column), interior
//     (middle) dimensions, all dimensions, or a random set;
//   - reduce results broadcast back over the reduced axes (the softmax/layernorm pattern) and,
//     where two sizes agree, along another axis than the one they came from (through a
//     transpose when the kept axes change order);
//   - elementwise ops on reduce results before they are broadcast, and between two reduce
//     results of the same shape;
//   - reductions of a reduction's consumer: softmax (max, then the sum of exp(x - max)) and
//     layernorm (mean, then the variance of x - mean);
//   - several outputs of different shapes: reduce results are graph outputs next to
//     full-shape elementwise values;
//   - f16 and bf16 storage (parameters and outputs), f32 arithmetic.
// Values are kept in a numerically tame range (bounded unary ops, means instead of raw sums,
// divisions by 1 + |x|, a variance offset of 1 under the rsqrt) so a disagreement between a
// kernel and the interpreter means a bug, not an ill-conditioned graph. Tensors are capped at
// kMaxElements so a few hundred graphs run on the host emulator in test time.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "support/graph_builder.h"

namespace stitch::testing {

// The base seed of a property test run: STITCH_RANDOM_GRAPH_SEED when set (to replay a run),
// else new each run from the clock. The same for every call in a process; tests log it.
inline uint64_t RandomGraphBaseSeed() {
  static const uint64_t seed = [] {
    if (const char* fixed = std::getenv("STITCH_RANDOM_GRAPH_SEED")) {
      return static_cast<uint64_t>(std::stoull(fixed));
    }
    return static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  }();
  return seed;
}

class RandomGraphBuilder {
 public:
  static constexpr int64_t kMaxElements = int64_t{1} << 17;

  // Graphs from `seed` whose tensors hold at most `max_elements` elements.
  explicit RandomGraphBuilder(uint64_t seed, int64_t max_elements = kMaxElements)
      : rng_(seed), max_elements_(max_elements) {}

  // Graphs from `seed` at model-sized shapes: sizes up to those of real models' hidden and
  // vocabulary dimensions (4097, 12288, 50257), tensors of at least 2^20 and at most
  // `max_elements` elements, where the scheduler picks the grids, splits and vector widths
  // that ship for real models.
  static RandomGraphBuilder Large(uint64_t seed, int64_t max_elements) {
    RandomGraphBuilder b(seed, max_elements);
    b.large_ = true;
    return b;
  }

  Graph Build() {
    g_ = Graph{};
    g_.name = "random";
    PickDims();
    const int storage_pick = Pick(0, 9);
    storage_ = storage_pick < 6 ? DType::kF32 : storage_pick < 8 ? DType::kF16 : DType::kBF16;
    values_.clear();
    reduced_.clear();
    int params = Pick(1, 3);
    for (int p = 0; p < params; ++p) {
      int x = Param(g_, {storage_, dims_}, p);
      values_.push_back(storage_ == DType::kF32 ? x : Convert(g_, x, DType::kF32));
    }
    int steps = Pick(3, 12);
    for (int s = 0; s < steps; ++s) Step();
    int outputs = Pick(1, 3);
    for (int o = 0; o < outputs; ++o) {
      AddOutput(values_[values_.size() - 1 - Pick(0, std::min<int>(2, values_.size() - 1))]);
    }
    // Reduce results as outputs next to the full-shape ones.
    if (!reduced_.empty()) {
      int small = Chance(0.6) ? Pick(1, std::min<int>(2, reduced_.size())) : 0;
      for (int o = 0; o < small; ++o) AddOutput(reduced_[Pick(0, reduced_.size() - 1)]);
    }
    return g_;
  }

 private:
  int Pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  int Pick(int lo, size_t hi) { return Pick(lo, static_cast<int>(hi)); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  int64_t Dim() {
    static const int64_t kSizes[] = {1, 2, 3, 5, 7, 8, 16, 17, 31, 32, 33, 64, 100, 127, 129, 300};
    static const int64_t kLargeSizes[] = {1,   3,   7,    32,   33,   64,   127,   256,
                                          300, 768, 1000, 1024, 3072, 4097, 12288, 50257};
    return large_ ? kLargeSizes[Pick(0, 15)] : kSizes[Pick(0, 15)];
  }

  // Rank 1 to 4; a size sometimes repeats an earlier one so that a reduce result can be
  // broadcast along another axis. The largest sizes are halved until the shape fits.
  void PickDims() {
    const int rank_pick = Pick(0, 19);
    const int rank = rank_pick < 4 ? 1 : rank_pick < 11 ? 2 : rank_pick < 17 ? 3 : 4;
    dims_.clear();
    for (int d = 0; d < rank; ++d) {
      dims_.push_back(d > 0 && Chance(0.3) ? dims_[Pick(0, d - 1)] : Dim());
    }
    auto elements = [this] {
      return std::accumulate(dims_.begin(), dims_.end(), int64_t{1}, std::multiplies<>());
    };
    while (elements() > max_elements_) {
      auto largest = std::max_element(dims_.begin(), dims_.end());
      const int64_t from = *largest;
      // Halve every copy of the largest size so repeated sizes stay equal.
      for (int64_t& v : dims_) {
        if (v == from) v = (v + 1) / 2;
      }
    }
    // Model-sized graphs grow their smallest size (every copy of it) until they are large.
    while (large_ && elements() < kLargeMinElements && elements() * 2 <= max_elements_) {
      const int64_t from = *std::min_element(dims_.begin(), dims_.end());
      for (int64_t& v : dims_) {
        if (v == from) v = 2 * v + 1;
      }
    }
  }

  int Rank() const { return static_cast<int>(dims_.size()); }
  int Any() { return values_[Pick(0, values_.size() - 1)]; }
  int Recent() { return values_.back(); }

  int Scalar(double v) { return ConstScalar(g_, DType::kF32, v); }
  int Splat(double v) { return Broadcast(g_, Scalar(v), dims_, {}); }
  int SplatLike(int like, double v) {
    return Broadcast(g_, Scalar(v), g_.nodes[like].shape.dims, {});
  }

  void AddOutput(int v) {
    g_.outputs.push_back(storage_ == DType::kF32 ? v : Convert(g_, v, storage_));
  }

  void Step() {
    switch (Pick(0, 10)) {
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
      case 5:
        values_.push_back(LayerNormLike(Any()));
        break;
      case 6:
        values_.push_back(SoftmaxLike(Any()));
        break;
      case 7:
        values_.push_back(SafeBinary(Recent(), CrossBroadcast(Any())));
        break;
      case 8:
        values_.push_back(RangeNormalize(Any()));
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
        int one = SplatLike(x, 1.0);
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
        int denom = Binary(g_, OpCode::kAdd, Unary(g_, OpCode::kAbs, b), SplatLike(b, 1.0));
        return Binary(g_, OpCode::kDiv, a, denom);
      }
    }
  }

  // The reduced dimensions (sorted, non-empty) and the kept ones.
  struct Axes {
    std::vector<int64_t> reduced, kept;
    int64_t count = 1;  // elements reduced into each result
  };

  Axes PickAxes() {
    const int rank = Rank();
    std::vector<bool> reduce(rank, false);
    switch (Pick(0, 4)) {
      case 0:  // row: the minor-most dimension
        reduce[rank - 1] = true;
        break;
      case 1:  // column: the major-most dimension
        reduce[0] = true;
        break;
      case 2:  // middle: one interior dimension, or two adjacent ones
        if (rank >= 3) {
          int d = Pick(1, rank - 2);
          reduce[d] = true;
          if (d + 1 < rank - 1 && Chance(0.5)) reduce[d + 1] = true;
        } else {
          reduce[rank - 1] = true;
        }
        break;
      case 3:  // all dimensions
        reduce.assign(rank, true);
        break;
      default:  // a random non-empty set
        for (int d = 0; d < rank; ++d) reduce[d] = Chance(0.5);
        if (std::find(reduce.begin(), reduce.end(), true) == reduce.end()) {
          reduce[Pick(0, rank - 1)] = true;
        }
        break;
    }
    Axes a;
    for (int d = 0; d < rank; ++d) {
      if (reduce[d]) {
        a.reduced.push_back(d);
        a.count *= dims_[d];
      } else {
        a.kept.push_back(d);
      }
    }
    return a;
  }

  int Mean(int x, const Axes& a) {
    int r = Reduce(g_, x, Scalar(0.0), a.reduced, ReduceKind::kSum);
    return Binary(g_, OpCode::kMul, r, SplatLike(r, 1.0 / static_cast<double>(a.count)));
  }

  // A mean, max or min over `a`, sometimes followed by an elementwise op on the small result.
  // The result may become a graph output.
  int TameReduce(int x, const Axes& a) {
    int r;
    switch (Pick(0, 2)) {
      case 0:
        r = Mean(x, a);
        break;
      case 1:
        r = Reduce(g_, x, Scalar(-1e30), a.reduced, ReduceKind::kMax);
        break;
      default:
        r = Reduce(g_, x, Scalar(1e30), a.reduced, ReduceKind::kMin);
        break;
    }
    if (Chance(0.25)) r = BoundedUnary(r);
    reduced_.push_back(r);
    return r;
  }

  int BroadcastBack(int r, const Axes& a) { return Broadcast(g_, r, dims_, a.kept); }

  // Reduces `x` over some axes and broadcasts the result back over them.
  int ReduceAndBroadcastBack(int x) {
    Axes a = PickAxes();
    return BroadcastBack(TameReduce(x, a), a);
  }

  // Broadcasts a reduce result so that at least one kept axis lands on another output axis of
  // the same size; a transpose puts the kept axes in the order their new positions need.
  // Falls back to broadcasting back when no size matches.
  int CrossBroadcast(int x) {
    Axes a = PickAxes();
    std::vector<std::vector<int64_t>> targets;
    std::vector<int64_t> current;
    std::vector<bool> used(Rank(), false);
    // Every injective assignment of the kept axes to output axes of equal size, other than
    // the identity.
    auto search = [&](auto&& self, size_t k) -> void {
      if (k == a.kept.size()) {
        if (current != a.kept) targets.push_back(current);
        return;
      }
      for (int d = 0; d < Rank(); ++d) {
        if (used[d] || dims_[d] != dims_[a.kept[k]]) continue;
        used[d] = true;
        current.push_back(d);
        self(self, k + 1);
        current.pop_back();
        used[d] = false;
      }
    };
    search(search, 0);
    int r = TameReduce(x, a);
    if (a.kept.empty() || targets.empty()) return BroadcastBack(r, a);
    const std::vector<int64_t>& to = targets[Pick(0, targets.size() - 1)];
    // order[j]: the kept axis (index into r's dims) that lands on the j-th smallest target.
    std::vector<int64_t> order(to.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t p, int64_t q) { return to[p] < to[q]; });
    std::vector<int64_t> map;
    for (int64_t j : order) map.push_back(to[j]);
    bool identity = true;
    for (size_t j = 0; j < order.size(); ++j)
      identity = identity && order[j] == static_cast<int64_t>(j);
    if (!identity) r = Transpose(g_, r, order);
    return Broadcast(g_, r, dims_, map);
  }

  // (x - mean) * rsqrt(var + 1) * 1.5 + 0.25, with var the mean of (x - mean)^2 over the same
  // axes: a reduction of a reduction's consumer.
  int LayerNormLike(int x) {
    Axes a = PickAxes();
    int mean = Mean(x, a);
    int centred = Binary(g_, OpCode::kSub, x, BroadcastBack(mean, a));
    int var = Mean(Binary(g_, OpCode::kMul, centred, centred), a);
    int inv = Unary(g_, OpCode::kRsqrt, Binary(g_, OpCode::kAdd, var, SplatLike(var, 1.0)));
    reduced_.push_back(mean);
    reduced_.push_back(inv);
    int y = Binary(g_, OpCode::kMul, centred, BroadcastBack(inv, a));
    return Binary(g_, OpCode::kAdd, Binary(g_, OpCode::kMul, y, Splat(1.5)), Splat(0.25));
  }

  // exp(x - max) / sum(exp(x - max)) over some axes.
  int SoftmaxLike(int x) {
    Axes a = PickAxes();
    int mx = Reduce(g_, x, Scalar(-1e30), a.reduced, ReduceKind::kMax);
    int e = Unary(g_, OpCode::kExp, Binary(g_, OpCode::kSub, x, BroadcastBack(mx, a)));
    int sum = Reduce(g_, e, Scalar(0.0), a.reduced, ReduceKind::kSum);
    reduced_.push_back(mx);
    reduced_.push_back(sum);
    return Binary(g_, OpCode::kDiv, e, BroadcastBack(sum, a));
  }

  // (x - min) / (max - min + 1): two reduces of the same shape combined before the broadcast.
  int RangeNormalize(int x) {
    Axes a = PickAxes();
    int mx = Reduce(g_, x, Scalar(-1e30), a.reduced, ReduceKind::kMax);
    int mn = Reduce(g_, x, Scalar(1e30), a.reduced, ReduceKind::kMin);
    int range = Binary(g_, OpCode::kAdd, Binary(g_, OpCode::kSub, mx, mn), SplatLike(mx, 1.0));
    reduced_.push_back(range);
    return Binary(g_, OpCode::kDiv, Binary(g_, OpCode::kSub, x, BroadcastBack(mn, a)),
                  BroadcastBack(range, a));
  }

  std::mt19937_64 rng_;
  bool large_ = false;
  static constexpr int64_t kLargeMinElements = int64_t{1} << 20;
  int64_t max_elements_;
  Graph g_;
  std::vector<int64_t> dims_;
  DType storage_ = DType::kF32;
  std::vector<int> values_;   // f32 values of shape dims_
  std::vector<int> reduced_;  // f32 reduce results (or elementwise ops on them)
};

}  // namespace stitch::testing
