// One plus a tanh as a logistic. The tanh form of GELU (GPT-2's gelu_new, BERT's and
// PyTorch's approximate="tanh") computes
//
//   0.5 * h * (1 + tanh(z))
//
// and 1 + tanh(z) = 2 * logistic(2z) exactly, as 1 - tanh(z) = 2 * logistic(-2z). This pass
// rewrites each such sum into the logistic, which the codegen computes as 1 / (1 + exp(-2z)):
// one exp and one division, each a single approximate instruction where the value reaches
// only f16 or bf16 outputs (codegen.h, CodegenOptions::approximate_math), where libdevice's
// tanhf takes an exp, a reciprocal, a polynomial and the selects between them (suite row #10:
// a bias and tanh-GELU over [4096, 3072] f16).
//
// Numerics. The logistic form is the better conditioned one: where tanh(z) is near -1
// (z below about -4), 1 + tanh(z) cancels, and an f32 tanh rounded to its ulp near 1 (6e-8)
// leaves the sum a relative error of 6e-8 / (1 + tanh(z)), 6.6e-4 at z = -5; the logistic's
// relative error stays that of its exp and division (a few ulp) for every z. 2z and the
// final doubling are exact.
//
// A sum is rewritten only when it is recognised exactly: an f32 add (either operand order)
// or subtract (1 - tanh) of a tanh of the sum's own shape and a constant that is 1.0
// everywhere (a splat literal, or one broadcast from a scalar). The tanh stays where
// anything else reads it; outputs keep their order, shapes and dtypes, and nodes left dead
// are removed. A graph with nothing to rewrite is returned unchanged.
//
// Thread-safety: pure functions.
#pragma once

#include "stitch/ir/graph.h"

namespace stitch {

struct TanhRewrite {
  Graph graph;        // the rewritten graph (a copy of the input when nothing matched)
  int rewritten = 0;  // sums 1 + tanh(z) and 1 - tanh(z) rewritten into logistics
};

// Returns the verified graph `g` with every recognised 1 + tanh(z) and 1 - tanh(z) rewritten
// as 2 * logistic(2z) and 2 * logistic(-2z), and how many were rewritten. The result passes
// Verify and computes the same values up to floating-point rounding.
TanhRewrite RewriteOnePlusTanh(const Graph& g);

// RewriteOnePlusTanh(g).graph.
Graph OnePlusTanhAsLogistic(const Graph& g);

}  // namespace stitch
