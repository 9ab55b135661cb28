// Canonical keys. The canonical order comes from structural hashes: each node's hash covers
// its op, attributes, shape and its operands' hashes (so it is independent of names and of
// the order nodes were listed), and a Kahn topological sort breaks ties by that hash.
#include "stitch/ir/key.h"

#include <openssl/sha.h>

#include <algorithm>
#include <cstring>
#include <queue>
#include <tuple>

#include "stitch_compiler_fingerprint.h"

namespace stitch {
namespace {

// A byte writer that keeps the serialisation unambiguous: every field is tagged and
// every sequence is length-prefixed.
class Writer {
 public:
  void Tag(char t) { out_.push_back(t); }
  void U64(uint64_t v) {
    for (int k = 0; k < 8; ++k) out_.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
  }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void F64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    U64(bits);
  }
  void Ints(char tag, const std::vector<int64_t>& v) {
    if (v.empty()) return;
    Tag(tag);
    U64(v.size());
    for (int64_t x : v) I64(x);
  }
  void Bytes(std::string_view s) {
    U64(s.size());
    out_.append(s);
  }
  const std::string& str() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string Sha256Hex(std::string_view data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : md) {
    hex.push_back(kHex[c >> 4]);
    hex.push_back(kHex[c & 15]);
  }
  return hex;
}

// Serialises what a node computes, apart from its operands.
void WriteNodeLocal(Writer& w, const Node& n) {
  w.Tag('o');
  w.U64(static_cast<uint64_t>(n.op));
  w.Tag('t');
  w.U64(static_cast<uint64_t>(n.shape.dtype));
  w.Ints('d', n.shape.dims);
  w.Tag('r');  // always present so rank-0 shapes differ from missing fields
  w.U64(n.shape.dims.size());
  switch (n.op) {
    case OpCode::kParameter:
      w.Tag('p');
      w.I64(n.parameter_number);
      break;
    case OpCode::kConstant:
      w.Tag('l');
      w.U64(n.literal.f.size());
      for (double v : n.literal.f) w.F64(v);
      w.U64(n.literal.i.size());
      for (int64_t v : n.literal.i) w.I64(v);
      break;
    case OpCode::kCompare:
      w.Tag('c');
      w.U64(static_cast<uint64_t>(n.direction));
      break;
    case OpCode::kReduce:
      w.Tag('k');
      w.U64(static_cast<uint64_t>(n.reduce_kind));
      break;
    case OpCode::kRngUniform:
      w.Tag('s');
      w.I64(n.rng_stream);
      break;
    default:
      break;
  }
  w.Ints('D', n.dimensions);
  w.Ints('S', n.slice_starts);
  w.Ints('L', n.slice_limits);
  w.Ints('T', n.slice_strides);
  w.Ints('P', n.pad_low);
  w.Ints('H', n.pad_high);
  w.Ints('I', n.pad_interior);
}

using Hash = std::string;  // raw hex digest

std::vector<Hash> StructuralHashes(const Graph& g, const std::vector<int>& topo) {
  std::vector<Hash> h(g.nodes.size());
  for (int i : topo) {
    Writer w;
    WriteNodeLocal(w, g.nodes[i]);
    w.Tag('(');
    for (int o : g.nodes[i].operands) w.Bytes(h[o]);
    h[i] = Sha256Hex(w.str());
  }
  return h;
}

// Kahn's algorithm over the nodes that reach an output, smallest structural hash first.
std::vector<int> CanonicalOrder(const Graph& g, const std::vector<Hash>& h) {
  const int n = static_cast<int>(g.nodes.size());
  const std::vector<bool> live = LiveNodes(g);
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> users(n);
  for (int i = 0; i < n; ++i) {
    if (!live[i]) continue;
    for (int o : g.nodes[i].operands) {
      ++pending[i];
      users[o].push_back(i);
    }
  }
  using Item = std::pair<const Hash*, int>;
  auto later = [](const Item& a, const Item& b) { return *a.first > *b.first; };
  std::priority_queue<Item, std::vector<Item>, decltype(later)> ready(later);
  for (int i = 0; i < n; ++i) {
    if (live[i] && pending[i] == 0) ready.push({&h[i], i});
  }
  std::vector<int> order;
  while (!ready.empty()) {
    int i = ready.top().second;
    ready.pop();
    order.push_back(i);
    for (int u : users[i]) {
      if (--pending[u] == 0) ready.push({&h[u], u});
    }
  }
  return order;
}

std::string ShortHex(const std::string& hex) { return hex.substr(0, 12); }

}  // namespace

std::string CompilerVersion() {
  return std::string("stitchd-compiler/") + STITCH_VERSION + "+" + STITCH_COMPILER_FINGERPRINT;
}

std::string CanonicalForm(const Graph& g) {
  std::vector<Hash> h = StructuralHashes(g, TopologicalOrder(g));
  std::vector<int> order = CanonicalOrder(g, h);
  // Identical twins (equal hashes) are interchangeable, so which one gets which position
  // does not affect the bytes written below.
  std::vector<int> position(g.nodes.size(), -1);
  for (size_t k = 0; k < order.size(); ++k) position[order[k]] = static_cast<int>(k);
  Writer w;
  w.Tag('G');
  w.U64(order.size());
  for (int i : order) {
    WriteNodeLocal(w, g.nodes[i]);
    w.Tag('(');
    w.U64(g.nodes[i].operands.size());
    for (int o : g.nodes[i].operands) w.I64(position[o]);
  }
  w.Tag('O');
  w.U64(g.outputs.size());
  for (int o : g.outputs) w.I64(position[o]);
  if (!g.outer_parameters.empty()) {
    // Exact graphs write nothing here, so their keys are those of builds before shape
    // classes; parameter numbers are positions already, and their order means nothing.
    std::vector<int64_t> outer = g.outer_parameters;
    std::sort(outer.begin(), outer.end());
    w.Tag('V');
    w.U64(outer.size());
    for (int64_t p : outer) w.I64(p);
  }
  return w.Take();
}

CacheKey ComputeKey(const Graph& g, const KeyContext& context) {
  CacheKey key;
  std::string canonical = CanonicalForm(g);
  std::string version =
      context.compiler_version.empty() ? CompilerVersion() : context.compiler_version;
  key.components = {
      {"graph", Sha256Hex(canonical),
       std::to_string(g.nodes.size()) + " nodes, " + std::to_string(g.Parameters().size()) +
           " parameters, " + std::to_string(g.outputs.size()) + " outputs"},
      {"target", Sha256Hex(context.target), context.target},
      {"compiler", Sha256Hex(version), version},
      {"options", Sha256Hex(context.options),
       context.options.empty() ? "(defaults)" : context.options},
      {"salt", Sha256Hex(context.salt), context.salt.empty() ? "(none)" : context.salt},
  };
  Writer w;
  for (const KeyComponent& c : key.components) {
    w.Bytes(c.name);
    w.Bytes(c.digest);
  }
  key.hex = Sha256Hex(w.str());
  return key;
}

std::string ExplainKeyDifference(const CacheKey& a, const CacheKey& b) {
  if (a.hex == b.hex) return "keys are equal";
  std::string out;
  for (size_t k = 0; k < std::min(a.components.size(), b.components.size()); ++k) {
    const KeyComponent& x = a.components[k];
    const KeyComponent& y = b.components[k];
    if (x.digest == y.digest) continue;
    out += x.name + ": " + ShortHex(x.digest) + " vs " + ShortHex(y.digest) + " (" + x.detail +
           " vs " + y.detail + ")\n";
  }
  if (a.components.size() != b.components.size()) out += "keys have different component lists\n";
  return out;
}

std::string DescribeKey(const CacheKey& key) {
  std::string out = "key " + key.hex + "\n";
  for (const KeyComponent& c : key.components) {
    out += "  " + c.name + std::string(10 - std::min<size_t>(c.name.size(), 9), ' ') +
           ShortHex(c.digest) + "  " + c.detail + "\n";
  }
  return out;
}

}  // namespace stitch
