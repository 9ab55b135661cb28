// Helpers shared by the HLO importer's tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/verifier.h"

namespace stitch::testing {

// Returns import options whose messages name the text `name`.
inline HloImportOptions Opts(const std::string& name = "t.hlo") {
  HloImportOptions o;
  o.source_name = name;
  return o;
}

// Returns the one graph of `text`, failing the test when it does not import or verify.
inline Graph MustImport(const std::string& text) {
  auto r = ImportHloModule(text, Opts());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return Graph{};
  EXPECT_TRUE(Verify(*r).ok());
  return std::move(r).value();
}

// Returns how many nodes of `g` are `op`s.
inline int CountOp(const Graph& g, OpCode op) {
  return static_cast<int>(
      std::count_if(g.nodes.begin(), g.nodes.end(), [&](const Node& n) { return n.op == op; }));
}

// Returns the node of `g` called `name`, or null.
inline const Node* FindNode(const Graph& g, const std::string& name) {
  for (const auto& n : g.nodes) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

}  // namespace stitch::testing
