// Runs compiled kernels on the host emulator and compares their outputs with the reference
// interpreter's: the check under every emulator test, for tests that compile or emit their
// kernels themselves (CheckOnEmulator in emulator_check.h compiles the graph first).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "stitch/codegen/codegen.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/emulator/emulator.h"
#include "stitch/reference/interpreter.h"
#include "stitch/reference/tensor.h"
#include "stitch/reference/tensor_compare.h"

namespace stitch::testing {

// Random values for each of `g`'s parameters, in order, drawn from `seed`.
inline std::vector<Tensor> RandomInputs(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Tensor> inputs;
  for (int p : g.Parameters()) inputs.push_back(RandomTensor(g.nodes[p].shape, rng));
  return inputs;
}

// What an emulated run moved and how close it came.
struct EmulatedComparison {
  uint64_t global_bytes = 0;  // EmulatedRun::global_bytes()
  double max_rel_error = 0;   // the largest over the outputs
};

// Runs `kernels`, compiled from `compiled` (the graph as the compiler planned it), on the
// emulator on `inputs` (in random thread order from `seed` when `random_order`), and compares
// each output with the interpreter's on `g` at the output tolerance times `tolerance_scale`.
// A failure names the output, its mismatches and the largest error; `out`, when given, gets
// the run's figures on success.
inline ::testing::AssertionResult EmulatedMatchesInterpreter(
    const Graph& g, const Graph& compiled, const std::vector<CompiledKernel>& kernels,
    const std::vector<Tensor>& inputs, uint64_t seed, bool random_order = true,
    double tolerance_scale = 1.0, EmulatedComparison* out = nullptr) {
  StatusOr<std::vector<Tensor>> expected = Evaluate(g, inputs);
  if (!expected.ok()) return ::testing::AssertionFailure() << expected.status().ToString();
  EmulatorOptions eo;
  eo.random_order = random_order;
  eo.seed = seed;
  StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create(eo);
  if (!emulator.ok()) return ::testing::AssertionFailure() << emulator.status().ToString();
  StatusOr<EmulatedRun> run = RunOnEmulator(compiled, kernels, inputs, **emulator);
  if (!run.ok()) return ::testing::AssertionFailure() << run.status().ToString();
  EmulatedComparison figures;
  figures.global_bytes = run->global_bytes();
  for (size_t k = 0; k < expected->size(); ++k) {
    const double tol = OutputTolerance(g, (*expected)[k].shape.dtype) * tolerance_scale;
    const Comparison c = Compare((*expected)[k], run->outputs[k], tol);
    figures.max_rel_error = std::max(figures.max_rel_error, c.max_rel_error);
    if (!c.pass) {
      return ::testing::AssertionFailure()
             << "output " << k << " " << (*expected)[k].shape.ToString() << ": " << c.mismatches
             << " mismatches, max_rel " << c.max_rel_error << " (tol " << tol << "), " << c.message;
    }
  }
  if (out) *out = figures;
  return ::testing::AssertionSuccess();
}

}  // namespace stitch::testing
