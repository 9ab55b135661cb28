#include "stitch/plan/xla_reduction_rewrites.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace stitch {
namespace {

bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

int64_t Product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  return std::accumulate(dims.begin() + static_cast<std::ptrdiff_t>(begin),
                         dims.begin() + static_cast<std::ptrdiff_t>(end), int64_t{1},
                         std::multiplies<>());
}

// A reduce whose reduced dimensions are contiguous, as XLA sees it after collapsing them:
// a row reduction [kept, n] or a column reduction [n, kept].
struct ContiguousReduce {
  bool row = true;
  int64_t n = 0;     // reduced elements per output
  int64_t kept = 0;  // outputs
};

// Returns the reduce's shape class, or n == 0 when its reduced dimensions are not contiguous
// at either end.
ContiguousReduce Classify(const Graph& g, const Node& reduce) {
  const std::vector<int64_t>& in = g.nodes[reduce.operands[0]].shape.dims;
  std::vector<int64_t> dims = reduce.dimensions;
  std::sort(dims.begin(), dims.end());
  const size_t rank = in.size();
  const size_t k = dims.size();
  if (k == 0 || rank == 0) return {};
  const bool leading = dims.front() == 0 && dims.back() == static_cast<int64_t>(k) - 1;
  const bool trailing = dims.front() == static_cast<int64_t>(rank - k) &&
                        dims.back() == static_cast<int64_t>(rank) - 1;
  if (trailing) return {true, Product(in, rank - k, rank), Product(in, 0, rank - k)};
  if (leading) return {false, Product(in, 0, k), Product(in, k, rank)};
  return {};
}

class Rewriter {
 public:
  explicit Rewriter(const Graph& g) : g_(g), map_(g.nodes.size(), -1) { out_.name = g.name; }

  Graph Run() {
    for (int id : TopologicalOrder(g_)) {
      const Node& n = g_.nodes[id];
      map_[id] = n.op == OpCode::kReduce ? Reduce(n) : Copy(n);
    }
    for (int o : g_.outputs) out_.outputs.push_back(map_[o]);
    return std::move(out_);
  }

 private:
  int Copy(const Node& n) {
    Node c = n;
    for (int& o : c.operands) o = map_[o];
    return out_.Add(std::move(c));
  }

  int Reduce(const Node& n) {
    const ContiguousReduce shape = Classify(g_, n);
    const int64_t bound = shape.row ? kXlaRowReductionBound : kXlaColumnReductionBound;
    if (shape.n <= bound) return Copy(n);
    const auto [k1, k2] = XlaTreeSplit(shape.n, bound);
    const int init = map_[n.operands[1]];
    const std::string name = n.name.empty() ? "reduce" : n.name;
    // Rows [kept, k1, k2] reduce over k2, then k1; columns [k1, k2, kept] over k2, then k1.
    const std::vector<int64_t> flat = shape.row ? std::vector<int64_t>{shape.kept, shape.n}
                                                : std::vector<int64_t>{shape.n, shape.kept};
    int x = Reshape(map_[n.operands[0]], flat, name + ".flat");
    const int64_t padding = k1 * k2 - shape.n;
    if (padding > 0) x = PadReduced(x, init, shape.row, padding, name + ".pad");
    const std::vector<int64_t> tiled = shape.row ? std::vector<int64_t>{shape.kept, k1, k2}
                                                 : std::vector<int64_t>{k1, k2, shape.kept};
    x = Reshape(x, tiled, name + ".tiles");
    x = ReduceDim(x, init, n, shape.row ? 2 : 1, name + ".inner");
    x = ReduceDim(x, init, n, shape.row ? 1 : 0, name + ".outer");
    return Reshape(x, n.shape.dims, name);
  }

  int Reshape(int x, std::vector<int64_t> dims, std::string name) {
    Node r;
    r.op = OpCode::kReshape;
    r.name = std::move(name);
    r.shape = {out_.nodes[x].shape.dtype, std::move(dims)};
    r.operands = {x};
    return out_.Add(std::move(r));
  }

  // Pads the reduced dimension of a [kept, n] (row) or [n, kept] (column) tensor at its end.
  int PadReduced(int x, int value, bool row, int64_t padding, std::string name) {
    Node p;
    p.op = OpCode::kPad;
    p.name = std::move(name);
    p.shape = out_.nodes[x].shape;
    const size_t reduced = row ? 1 : 0;
    p.shape.dims[reduced] += padding;
    p.pad_low = {0, 0};
    p.pad_high = {0, 0};
    p.pad_high[reduced] = padding;
    p.pad_interior = {0, 0};
    p.operands = {x, value};
    return out_.Add(std::move(p));
  }

  int ReduceDim(int x, int init, const Node& original, int64_t dim, std::string name) {
    Node r;
    r.op = OpCode::kReduce;
    r.name = std::move(name);
    r.reduce_kind = original.reduce_kind;
    r.dimensions = {dim};
    r.shape.dtype = original.shape.dtype;
    const std::vector<int64_t>& in = out_.nodes[x].shape.dims;
    for (size_t d = 0; d < in.size(); ++d) {
      if (static_cast<int64_t>(d) != dim) r.shape.dims.push_back(in[d]);
    }
    r.operands = {x, init};
    return out_.Add(std::move(r));
  }

  const Graph& g_;
  std::vector<int> map_;
  Graph out_;
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

Graph XlaTreeReductionRewrite(const Graph& g) { return Rewriter(g).Run(); }

}  // namespace stitch
