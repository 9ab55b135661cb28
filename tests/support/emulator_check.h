// Compile a graph, run its kernels on the host emulator, compare with the interpreter.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>

#include "stitch/driver/compile.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/reference/interpreter.h"
#include "stitch/reference/tensor_compare.h"

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
  std::mt19937_64 rng(seed);
  std::vector<Tensor> inputs;
  for (int p : g.Parameters()) inputs.push_back(RandomTensor(g.nodes[p].shape, rng));
  StatusOr<std::vector<Tensor>> expected = Evaluate(g, inputs);
  if (!expected.ok()) return ::testing::AssertionFailure() << expected.status().ToString();
  EmulatorOptions eo;
  eo.random_order = random_order;
  eo.seed = seed;
  StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create(eo);
  if (!emulator.ok()) return ::testing::AssertionFailure() << emulator.status().ToString();
  StatusOr<EmulatedRun> run = RunOnEmulator(compiled->graph, compiled->kernels, inputs, **emulator);
  if (!run.ok()) {
    return ::testing::AssertionFailure() << run.status().ToString() << "\nplan:\n"
                                         << Describe(compiled->graph, compiled->plan);
  }
  EmulatorCheck check;
  check.compiled = *compiled;
  check.kernels = static_cast<int>(compiled->kernels.size());
  check.emulated_bytes = run->global_bytes();
  for (size_t k = 0; k < expected->size(); ++k) {
    double tol = OutputTolerance(g, (*expected)[k].shape.dtype) * tolerance_scale;
    Comparison c = Compare((*expected)[k], run->outputs[k], tol);
    check.max_rel_error = std::max(check.max_rel_error, c.max_rel_error);
    if (!c.pass) {
      return ::testing::AssertionFailure()
             << "output " << k << " " << (*expected)[k].shape.ToString() << ": " << c.mismatches
             << " mismatches, max_rel " << c.max_rel_error << " (tol " << tol << "), " << c.message
             << "\nplan:\n"
             << Describe(compiled->graph, compiled->plan);
    }
  }
  if (out) *out = check;
  return ::testing::AssertionSuccess();
}

}  // namespace stitch::testing
