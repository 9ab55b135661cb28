// Every suite row in f32, f16 and bf16: the row's tensors retyped (graph_retype.h) and its
// shipped plan, at a shape scaled for the host emulator, run on the emulator in a random
// thread order and compared with the reference interpreter. The rows' own dtypes are
// suite_test's; here the same plans' loads, stores and vector widths meet the other two.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <tuple>

#include "stitch/ir/verifier.h"
#include "stitch/reference/shape_scaling.h"
#include "suite/suite.h"
#include "support/emulator_check.h"
#include "support/graph_retype.h"

namespace stitch::suite {
namespace {

class SuiteDtypes : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(SuiteDtypes, ShippedPlanMatchesTheInterpreter) {
  const auto [id, dtype] = GetParam();
  StatusOr<SuiteEntry> entry = BuildSuiteEntry(id);
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  if (!testing::RetypeChanges(entry->graph, dtype)) {
    GTEST_SUCCEED() << "#" << id << " is already " << DTypeName(dtype) << " (suite_test)";
    return;
  }
  const Graph retyped = testing::RetypeFloats(entry->graph, dtype);
  ASSERT_TRUE(Verify(retyped).ok()) << Verify(retyped).ToString();
  std::optional<ScaledGraph> scaled = ScaleForEmulation(retyped);
  ASSERT_TRUE(scaled.has_value()) << "no shape within the emulation budget";
  const uint64_t seed = 4000 + static_cast<uint64_t>(id) * 3 + static_cast<uint64_t>(dtype);
  testing::EmulatorCheck check;
  EXPECT_TRUE(testing::CheckOnEmulator(scaled->graph, seed, /*random_order=*/true, &check,
                                       /*tolerance_scale=*/1.0, /*never_slower=*/true))
      << "#" << id << " in " << DTypeName(dtype) << ", seed " << seed;
  std::printf("#%d in %s: %d kernel(s), max relative error %.2e\n", id,
              std::string(DTypeName(dtype)).c_str(), check.kernels, check.max_rel_error);
}

INSTANTIATE_TEST_SUITE_P(All, SuiteDtypes,
                         ::testing::Combine(::testing::Range(1, kSuiteSize + 1),
                                            ::testing::Values(DType::kF32, DType::kF16,
                                                              DType::kBF16)),
                         [](const auto& info) {
                           return "id" + std::to_string(std::get<0>(info.param)) + "_" +
                                  std::string(DTypeName(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace stitch::suite
