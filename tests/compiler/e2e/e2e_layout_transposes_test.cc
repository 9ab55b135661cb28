// Batch norm and GroupNorm read from NHWC storage through layout transposes
// (layout_transposes.h; GroupNorm also through its views into groups and back): what ships
// computes in the stored order, with no transpose left, and matches the interpreter on the
// graph as it came, on the emulator in random thread order, in f32, f16 and bf16.
#include <gtest/gtest.h>

#include <string>

#include "stitch/ir/verifier.h"
#include "support/emulator_check.h"
#include "support/normalization_graphs.h"
#include "support/stored_order.h"

namespace stitch {
namespace {

using namespace stitch::testing;

TEST(LayoutTransposes, ChannelsLastBatchNormMatchesTheInterpreterOnTheEmulator) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    const Graph stored = StoredPermuted(BatchNormForward(t, {4, 32, 9, 7}, 1), kNchwOfNhwc);
    ASSERT_TRUE(Verify(stored).ok());
    EmulatorCheck check;
    EXPECT_TRUE(CheckOnEmulator(stored, 5, /*random_order=*/true, &check));
    EXPECT_EQ(CountLiveOps(check.compiled.graph, OpCode::kTranspose), 0);
  }
}

TEST(LayoutTransposes, ChannelsLastGroupNormMatchesTheInterpreterOnTheEmulator) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    const Graph stored = StoredPermuted(GroupNormSwish(t, 2, 64, 9, 7, 8), kNchwOfNhwc);
    ASSERT_TRUE(Verify(stored).ok());
    EmulatorCheck check;
    EXPECT_TRUE(CheckOnEmulator(stored, 7, /*random_order=*/true, &check));
    EXPECT_EQ(CountLiveOps(check.compiled.graph, OpCode::kTranspose), 0);
  }
}

}  // namespace
}  // namespace stitch
