#include "stitch/plan/reduction_rewrites.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "int_math.h"

namespace stitch {
namespace {

int64_t Product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  return std::accumulate(dims.begin() + static_cast<std::ptrdiff_t>(begin),
                         dims.begin() + static_cast<std::ptrdiff_t>(end), int64_t{1},
                         std::multiplies<>());
}

// A reduce's layout once its reduced dimensions are collapsed: a row reduction [kept, n]
// (the reduced dimensions trail), a column reduction [n, kept] (they lead), or neither.
struct ReduceShape {
  enum class Kind { kRow, kColumn, kOther };
  Kind kind = Kind::kOther;
  int64_t n = 0;     // reduced elements per output
  int64_t kept = 0;  // outputs
};

// Returns the layout of a reduce of an `in`-shaped tensor over the sorted `dims`.
ReduceShape Classify(const std::vector<int64_t>& in, const std::vector<int64_t>& dims) {
  const size_t rank = in.size();
  const size_t k = dims.size();
  if (k == 0 || rank == 0) return {};
  const bool trailing = dims.front() == static_cast<int64_t>(rank - k) &&
                        dims.back() == static_cast<int64_t>(rank) - 1;
  const bool leading = dims.front() == 0 && dims.back() == static_cast<int64_t>(k) - 1;
  if (trailing) {
    return {ReduceShape::Kind::kRow, Product(in, rank - k, rank), Product(in, 0, rank - k)};
  }
  if (leading) return {ReduceShape::Kind::kColumn, Product(in, 0, k), Product(in, k, rank)};
  return {};
}

std::vector<int64_t> Sorted(std::vector<int64_t> dims) {
  std::sort(dims.begin(), dims.end());
  return dims;
}

// `in` without the (sorted) `dims`.
std::vector<int64_t> KeptDims(const std::vector<int64_t>& in, const std::vector<int64_t>& dims) {
  std::vector<int64_t> kept;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!std::binary_search(dims.begin(), dims.end(), static_cast<int64_t>(d))) {
      kept.push_back(in[d]);
    }
  }
  return kept;
}

// Copies a graph node by node in topological order, letting a subclass replace each reduce,
// and builds the reshapes, pads, transposes and reduces the replacements are made of.
class GraphRewriter {
 public:
  explicit GraphRewriter(const Graph& g) : g_(g), map_(g.nodes.size(), -1) { out_.name = g.name; }
  virtual ~GraphRewriter() = default;

  Graph Run() && {
    for (int id : TopologicalOrder(g_)) {
      const Node& n = g_.nodes[id];
      map_[id] = n.op == OpCode::kReduce ? Reduce(n) : Copy(n);
    }
    for (int o : g_.outputs) out_.outputs.push_back(map_[o]);
    return std::move(out_);
  }

 protected:
  // Returns the node of the rewritten graph that stands for the reduce `n`.
  virtual int Reduce(const Node& n) = 0;

  int Copy(const Node& n) {
    Node c = n;
    for (int& o : c.operands) o = map_[o];
    return out_.Add(std::move(c));
  }

  int Mapped(int original) const { return map_[original]; }
  const Shape& ShapeOf(int id) const { return out_.nodes[id].shape; }

  int Transpose(int x, const std::vector<int64_t>& permutation, std::string name) {
    Node t;
    t.op = OpCode::kTranspose;
    t.name = std::move(name);
    t.shape.dtype = ShapeOf(x).dtype;
    for (int64_t d : permutation) t.shape.dims.push_back(ShapeOf(x).dims[d]);
    t.dimensions = permutation;
    t.operands = {x};
    return out_.Add(std::move(t));
  }

  // Reduces `x` over the sorted `dims` with the kind and element type of `original`.
  int ReduceDims(int x, int init, const Node& original, std::vector<int64_t> dims,
                 std::string name) {
    Node r;
    r.op = OpCode::kReduce;
    r.name = std::move(name);
    r.reduce_kind = original.reduce_kind;
    r.shape = {original.shape.dtype, KeptDims(ShapeOf(x).dims, dims)};
    r.dimensions = std::move(dims);
    r.operands = {x, init};
    return out_.Add(std::move(r));
  }

  // Reduces `x`, whose layout is the row or column `shape`, in two steps: its reduced extent
  // n is padded with `init` to k1 x k2, reduced over k2 and then over k1. Returns a node of
  // dims `out_dims`: the second reduce's own, its input's kept dimensions unflattened to
  // `out_dims` first. Both compilers write a reduction's output where its consumers read
  // it, so no copy may follow the second reduce: a reshape there would be a kernel of its
  // own in the plans (a bitcast in XLA, a view in Inductor).
  int TwoStep(int x, int init, const Node& original, const ReduceShape& shape, int64_t k1,
              int64_t k2, const std::vector<int64_t>& out_dims, const std::string& name) {
    const bool row = shape.kind != ReduceShape::Kind::kColumn;
    x = Reshape(x,
                row ? std::vector<int64_t>{shape.kept, shape.n} : std::vector{shape.n, shape.kept},
                name + ".flat");
    const int64_t padding = k1 * k2 - shape.n;
    if (padding > 0) x = PadReduced(x, init, row, padding, name + ".pad");
    x = Reshape(x, row ? std::vector<int64_t>{shape.kept, k1, k2} : std::vector{k1, k2, shape.kept},
                name + ".tiles");
    x = ReduceDims(x, init, original, {row ? 2 : 1}, name + ".inner");
    std::vector<int64_t> partials = out_dims;
    partials.insert(row ? partials.end() : partials.begin(), k1);
    if (ShapeOf(x).dims != partials) x = Reshape(x, partials, name + ".partials");
    const int64_t outer = row ? static_cast<int64_t>(out_dims.size()) : 0;
    return ReduceDims(x, init, original, {outer}, name);
  }

 private:
  int Reshape(int x, std::vector<int64_t> dims, std::string name) {
    Node r;
    r.op = OpCode::kReshape;
    r.name = std::move(name);
    r.shape = {ShapeOf(x).dtype, std::move(dims)};
    r.operands = {x};
    return out_.Add(std::move(r));
  }

  // Pads the reduced dimension of a [kept, n] (row) or [n, kept] (column) tensor at its end.
  int PadReduced(int x, int value, bool row, int64_t padding, std::string name) {
    Node p;
    p.op = OpCode::kPad;
    p.name = std::move(name);
    p.shape = ShapeOf(x);
    const size_t reduced = row ? 1 : 0;
    p.shape.dims[reduced] += padding;
    p.pad_low = {0, 0};
    p.pad_high = {0, 0};
    p.pad_high[reduced] = padding;
    p.pad_interior = {0, 0};
    p.operands = {x, value};
    return out_.Add(std::move(p));
  }

  const Graph& g_;
  std::vector<int> map_;
  Graph out_;
};

class XlaRewriter : public GraphRewriter {
 public:
  using GraphRewriter::GraphRewriter;

 private:
  int Reduce(const Node& n) override {
    const std::string name = n.name.empty() ? "reduce" : n.name;
    return Emit(Mapped(n.operands[0]), Mapped(n.operands[1]), Sorted(n.dimensions), n, name);
  }

  int Emit(int x, int init, const std::vector<int64_t>& dims, const Node& original,
           const std::string& name) {
    const std::vector<int64_t>& in = ShapeOf(x).dims;
    if (dims.empty()) return ReduceDims(x, init, original, dims, name);
    const ReduceShape shape = Classify(in, dims);
    if (shape.kind == ReduceShape::Kind::kOther) {
      // ReductionSplitter: the largest contiguous run of reduced dimensions first. One run
      // between kept dimensions is a batched column reduction, which XLA emits as it is.
      const auto [run, rest] = SplitLargestRun(in, dims);
      if (rest.empty()) return ReduceDims(x, init, original, dims, name);
      const int first = ReduceDims(x, init, original, run, name + ".split");
      return Emit(first, init, rest, original, name);
    }
    const bool row = shape.kind == ReduceShape::Kind::kRow;
    const int64_t bound = row ? kXlaRowReductionBound : kXlaColumnReductionBound;
    if (shape.n <= bound) return ReduceDims(x, init, original, dims, name);
    const auto [k1, k2] = XlaTreeSplit(shape.n, bound);
    return TwoStep(x, init, original, shape, k1, k2, KeptDims(in, dims), name);
  }

  // Returns the largest run of consecutive reduced dimensions (the first among equals), and
  // the other reduced dimensions renumbered for the tensor that reducing the run leaves.
  static std::pair<std::vector<int64_t>, std::vector<int64_t>> SplitLargestRun(
      const std::vector<int64_t>& in, const std::vector<int64_t>& dims) {
    std::vector<int64_t> best, current;
    int64_t best_size = 0;
    for (size_t i = 0; i < dims.size(); ++i) {
      if (i > 0 && dims[i] != dims[i - 1] + 1) current.clear();
      current.push_back(dims[i]);
      const int64_t size = Product(in, current.front(), current.back() + 1);
      if (size > best_size) {
        best = current;
        best_size = size;
      }
    }
    std::vector<int64_t> rest;
    for (int64_t d : dims) {
      if (std::binary_search(best.begin(), best.end(), d)) continue;
      rest.push_back(d < best.front() ? d : d - static_cast<int64_t>(best.size()));
    }
    return {best, rest};
  }
};

class InductorRewriter : public GraphRewriter {
 public:
  InductorRewriter(const Graph& g, int sms) : GraphRewriter(g), sms_(sms) {}

 private:
  int Reduce(const Node& n) override {
    int x = Mapped(n.operands[0]);
    const std::vector<int64_t> in = ShapeOf(x).dims;
    const std::vector<int64_t> dims = Sorted(n.dimensions);
    // A reduce over no dimensions is a copy of its input: nothing to split.
    if (dims.empty()) return Copy(n);
    ReduceShape shape = Classify(in, dims);
    const int64_t numel = n.shape.elements();
    const int64_t rnumel = numel > 0 ? ShapeOf(x).elements() / numel : 0;
    const bool inner = shape.kind == ReduceShape::Kind::kRow ||
                       (shape.kind == ReduceShape::Kind::kOther &&
                        dims.back() == static_cast<int64_t>(in.size()) - 1);
    const int64_t split = InductorSplitFactor(numel, rnumel, inner, sms_);
    if (split <= 1 || rnumel < 2) return Copy(n);
    const std::string name = n.name.empty() ? "reduce" : n.name;
    if (shape.kind == ReduceShape::Kind::kOther) {
      // Kept dimensions first, then the reduced ones: one contiguous reduction index.
      std::vector<int64_t> permutation;
      for (size_t d = 0; d < in.size(); ++d) {
        if (!std::binary_search(dims.begin(), dims.end(), static_cast<int64_t>(d))) {
          permutation.push_back(static_cast<int64_t>(d));
        }
      }
      permutation.insert(permutation.end(), dims.begin(), dims.end());
      x = Transpose(x, permutation, name + ".gather");
      shape = {ReduceShape::Kind::kRow, rnumel, numel};
    }
    // Chunks of ceil(n / split) elements; the last chunk is padded.
    const int64_t k2 = CeilDiv(rnumel, std::min(split, rnumel));
    const int64_t k1 = CeilDiv(rnumel, k2);
    return TwoStep(x, Mapped(n.operands[1]), n, shape, k1, k2, n.shape.dims, name);
  }

  int sms_;
};

}  // namespace

std::pair<int64_t, int64_t> XlaTreeSplit(int64_t n, int64_t cap) {
  const int64_t root =
      std::min<int64_t>(static_cast<int64_t>(std::sqrt(static_cast<double>(n))), cap);
  int64_t best = std::max<int64_t>(root, 1);
  int64_t best_padding = -1;
  for (int64_t k2 = std::max<int64_t>(root, 1); k2 > root / 2; --k2) {
    const int64_t padding = (n + k2 - 1) / k2 * k2 - n;
    const bool better = best_padding < 0 || padding < best_padding ||
                        (padding == best_padding && IsPowerOfTwo(k2) && !IsPowerOfTwo(best));
    if (better) {
      best = k2;
      best_padding = padding;
    }
  }
  return {(n + best - 1) / best, best};
}

Graph XlaReductionRewrites(const Graph& g) { return XlaRewriter(g).Run(); }

int64_t InductorSplitFactor(int64_t numel, int64_t rnumel, bool inner, int sms) {
  // choices.py reduction_split_factor, with the thresholds of an `sms`-SM GPU: blocks of
  // 8 warps, 2,048 threads per SM.
  constexpr int64_t kThreadsPerBlock = 256;
  const int64_t per_sm = 2048;
  const int64_t min_elements = 32 * int64_t{sms} * per_sm;
  const int64_t max_elements = 512 * int64_t{sms} * per_sm;
  const int64_t elements = numel * rnumel;
  if (inner) {
    if (numel >= 2 * int64_t{sms} || rnumel <= 8192) return 1;
    if (elements <= min_elements) return CeilDiv(rnumel, 32 * kThreadsPerBlock);
    if (elements < max_elements) {
      // About four blocks per SM in all, shared among the outputs.
      const int64_t blocks_per_output = CeilDiv(4 * int64_t{sms}, numel);
      const int64_t split_size = CeilDiv(rnumel, kThreadsPerBlock * blocks_per_output);
      return CeilDiv(rnumel, split_size * kThreadsPerBlock);
    }
    return CeilDiv(rnumel, 512 * kThreadsPerBlock);
  }
  // Outer reductions: blocks of 128 columns, 4 reduced values per thread.
  if (numel >= 64 * int64_t{sms} || rnumel <= 32) return 1;
  if (elements < min_elements) return CeilDiv(rnumel, 128);
  if (elements < max_elements) {
    const int64_t column_blocks = CeilDiv(numel, 128);
    const int64_t target = CeilDiv(8 * int64_t{sms}, column_blocks);
    const int64_t split_size = CeilDiv(rnumel, 4 * target);
    return CeilDiv(rnumel, 4 * split_size);
  }
  return CeilDiv(rnumel, 2048);
}

Graph InductorSplitReductions(const Graph& g, int sms) { return InductorRewriter(g, sms).Run(); }

}  // namespace stitch
