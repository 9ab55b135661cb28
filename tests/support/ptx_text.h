// Kernels compiled to PTX for sm_90 in tests that read what the code generator emitted.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "stitch/driver/compile.h"

namespace stitch::testing {

// Plans and emits `g` as stitchd does for sm_90, to PTX only; an empty result after
// reporting the error as a test failure. Without `never_slower` the stitched plan ships even
// where a baseline's is modelled faster.
inline CompileResult CompileToPtx(const Graph& g, bool never_slower = true) {
  CompileOptions o;
  o.codegen.target = *Target::Parse("sm_90");
  o.codegen.emit_cubin = false;
  o.never_slower = never_slower;
  StatusOr<CompileResult> r = CompileGraph(g, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : CompileResult{};
}

// How many of the PTX's instructions have exactly the form `op` (e.g. "ld.global.nc.v4.u32"):
// `op` followed by whitespace, so "ld.global.nc.v4" does not count "ld.global.nc.v4.f32".
inline int CountOf(const std::string& ptx, const std::string& op) {
  int n = 0;
  for (size_t at = ptx.find(op); at != std::string::npos; at = ptx.find(op, at + 1)) {
    const char next = at + op.size() < ptx.size() ? ptx[at + op.size()] : '\n';
    n += next == ' ' || next == '\t';
  }
  return n;
}

// How many times `text` occurs in `ptx`: "ld.global.nc.v4" counts every 16-byte load,
// whatever its type.
inline int CountContaining(const std::string& ptx, const std::string& text) {
  int n = 0;
  for (size_t at = ptx.find(text); at != std::string::npos; at = ptx.find(text, at + 1)) ++n;
  return n;
}

// The accesses `op` (ld.global.nc, st.global) of one element in `ptx`: those of a type
// (.f32, .b16, .u16, ...) rather than a vector (.v2, .v4).
inline int ScalarAccesses(const std::string& ptx, const std::string& op) {
  return CountContaining(ptx, op + ".") - CountContaining(ptx, op + ".v");
}

}  // namespace stitch::testing
