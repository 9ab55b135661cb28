// The canonical cache key of a graph: SHA-256 over the graph in canonical form, the GPU
// target, the compiler version with the options that change its output, and a namespace
// salt. Node names and the order in which independent nodes were listed do not matter;
// every op, attribute, shape, dtype and output position does.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "stitch/ir/graph.h"

namespace stitch {

struct KeyContext {
  std::string target = "sm_90";
  std::string compiler_version;  // empty: this build's version (CompilerVersion())
  std::string options;           // canonical text of the options that change codegen
  std::string salt;              // operators bump it to discard a generation of entries
};

// One named ingredient of the key and the SHA-256 (hex) of its bytes.
struct KeyComponent {
  std::string name;    // "graph", "target", "compiler", "options", "salt"
  std::string digest;  // hex SHA-256
  std::string detail;  // a short human-readable summary, e.g. "17 nodes, 3 outputs"
};

struct CacheKey {
  std::string hex;  // the key: SHA-256 (hex) over all component digests in order
  std::vector<KeyComponent> components;
};

// Returns the compiler version of this build: the project version and the fingerprint of the
// compiler's sources ("stitchd-compiler/0.1.0+3f9a0c1d2e4b", cmake/CompilerFingerprint.cmake),
// so that builds whose code generation differs never share cache entries.
std::string CompilerVersion();

// Returns the canonical serialisation of a verified graph: nodes in a deterministic
// topological order that depends only on structure, names dropped, attributes in a fixed
// order. Two graphs have equal canonical forms exactly when they compute the same function
// by the same ops.
std::string CanonicalForm(const Graph& g);

// Computes the key of a verified graph in `context`.
CacheKey ComputeKey(const Graph& g, const KeyContext& context);

// Returns one line per component that differs between `a` and `b` ("graph: 4f2a.. vs
// 91c3.. (17 nodes, 3 outputs vs 17 nodes, 2 outputs)"), or "keys are equal".
std::string ExplainKeyDifference(const CacheKey& a, const CacheKey& b);

// Returns a multi-line listing of the key and its components.
std::string DescribeKey(const CacheKey& key);

}  // namespace stitch
