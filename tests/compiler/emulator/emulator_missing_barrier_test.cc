// A block-per-row reduction from the real codegen needs its barriers: with them removed,
// the emulator's random-order mode produces a wrong answer, while the intact kernel is
// right in every order.
#include <gtest/gtest.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>

#include <random>

#include "stitch/codegen/codegen.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/plan/baseline_planner.h"
#include "stitch/plan/schedule.h"
#include "stitch/reference/interpreter.h"
#include "stitch/reference/tensor_compare.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

// Returns `kernel` with every llvm.nvvm.barrier0 call deleted, and how many there were.
std::pair<CompiledKernel, int> WithoutBarriers(const CompiledKernel& kernel) {
  llvm::LLVMContext context;
  auto buffer = llvm::MemoryBuffer::getMemBuffer(kernel.portable_ir, "kernel", false);
  auto module = llvm::parseBitcodeFile(buffer->getMemBufferRef(), context);
  EXPECT_TRUE(static_cast<bool>(module));
  if (!module) return {kernel, 0};
  std::vector<llvm::Instruction*> barriers;
  for (llvm::Function& f : **module) {
    for (llvm::BasicBlock& b : f) {
      for (llvm::Instruction& i : b) {
        auto* call = llvm::dyn_cast<llvm::CallInst>(&i);
        if (call && call->getCalledFunction() &&
            call->getCalledFunction()->getName().startswith("llvm.nvvm.barrier")) {
          barriers.push_back(call);
        }
      }
    }
  }
  for (llvm::Instruction* i : barriers) i->eraseFromParent();
  CompiledKernel stripped = kernel;
  stripped.portable_ir.clear();
  llvm::raw_string_ostream out(stripped.portable_ir);
  llvm::WriteBitcodeToFile(**module, out);
  out.flush();
  return {stripped, static_cast<int>(barriers.size())};
}

bool Matches(const Graph& g, const std::vector<CompiledKernel>& kernels,
             const std::vector<Tensor>& inputs, const std::vector<Tensor>& expected,
             bool random_order, uint64_t seed) {
  EmulatorOptions options;
  options.random_order = random_order;
  options.seed = seed;
  auto emulator = Emulator::Create(options);
  EXPECT_TRUE(emulator.ok());
  auto run = RunOnEmulator(g, kernels, inputs, **emulator);
  EXPECT_TRUE(run.ok()) << run.status().ToString();
  if (!run.ok()) return false;
  return Compare(expected[0], run->outputs[0], DefaultTolerance(DType::kF32)).pass;
}

TEST(EmulatorMissingBarrier, RandomOrderCatchesARemovedBarrier) {
  // Rows long enough that the codegen picks block-per-row: warp partials meet in shared
  // memory behind a barrier.
  Graph g;
  int x = testing::Param(g, {DType::kF32, {3, 8192}}, 0);
  g.outputs = {
      testing::Reduce(g, x, testing::ConstScalar(g, DType::kF32, 0), {1}, ReduceKind::kSum)};
  StatusOr<FusionPlan> plan = PlanBaseline(g);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->kernels.size(), 1u);
  const CodegenOptions options;
  ASSERT_TRUE(SchedulePlan(g, *plan, options.target.device()).ok());
  StatusOr<CompiledKernel> kernel = EmitKernel(g, plan->kernels[0], options);
  ASSERT_TRUE(kernel.ok()) << kernel.status().ToString();
  ASSERT_GT(kernel->shared_bytes, 0u) << "expected a block-per-row reduction";

  std::mt19937_64 rng(42);
  std::vector<Tensor> inputs = {RandomTensor(g.nodes[x].shape, rng)};
  auto expected = Evaluate(g, inputs);
  ASSERT_TRUE(expected.ok());

  for (uint64_t seed = 1; seed <= 3; ++seed) {
    EXPECT_TRUE(Matches(g, {*kernel}, inputs, *expected, /*random_order=*/true, seed));
  }
  auto [stripped, removed] = WithoutBarriers(*kernel);
  ASSERT_GT(removed, 0) << "the kernel had no barrier to remove";
  int wrong = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    wrong += Matches(g, {stripped}, inputs, *expected, /*random_order=*/true, seed) ? 0 : 1;
  }
  EXPECT_GT(wrong, 0) << "random order never exposed the missing barrier";
}

}  // namespace
}  // namespace stitch
