// Compile a graph, run its kernels on the host emulator, compare with the interpreter.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "stitch/driver/compile.h"
#include "support/emulator_compare.h"

namespace stitch::testing {

struct EmulatorCheck {
  CompileResult compiled;  // the plan and kernels that ran
  int kernels = 0;
  uint64_t emulated_bytes = 0;
  double max_rel_error = 0;
};

// Compiles `g` to portable IR, runs it on a fresh emulator (random thread order between
// barriers when `random_order`), and compares every output with the reference interpreter
// at the output tolerance (OutputTolerance) times `tolerance_scale`. Inputs are random from `seed`.
// The `planner`'s plan runs even where another is modelled faster, unless `never_slower`
// (the compiler's default) lets the cheapest plan ship instead.
inline ::testing::AssertionResult CheckOnEmulator(const Graph& g, uint64_t seed, bool random_order,
                                                  EmulatorCheck* out = nullptr,
                                                  double tolerance_scale = 1.0,
                                                  bool never_slower = false,
                                                  PlannerKind planner = PlannerKind::kStitch) {
  CompileOptions options;
  options.emit_ptx = false;
  options.never_slower = never_slower;
  options.planner = planner;
  options.max_persistent_grid_blocks = kEmulatorMaxPersistentGridBlocks;
  StatusOr<CompileResult> compiled = CompileGraph(g, options);
  if (!compiled.ok()) return ::testing::AssertionFailure() << compiled.status().ToString();
  EmulatedComparison figures;
  ::testing::AssertionResult matched =
      EmulatedMatchesInterpreter(g, compiled->graph, compiled->kernels, RandomInputs(g, seed), seed,
                                 random_order, tolerance_scale, &figures);
  if (!matched) return matched << "\nplan:\n" << Describe(compiled->graph, compiled->plan);
  if (out) {
    out->compiled = *compiled;
    out->kernels = static_cast<int>(compiled->kernels.size());
    out->emulated_bytes = figures.global_bytes;
    out->max_rel_error = figures.max_rel_error;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace stitch::testing
