// The loader's C ABI (stitch_loader.h): handles, counts, error strings and codes, the image
// choice table, and a launch through the stand-in driver.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loader/loader_test_util.h"
#include "stitch_client.h"
#include "stitch_loader.h"

namespace stitch::loader {
namespace {

// Returns the error text and releases it as the ABI asks.
std::string Take(char*& error) {
  std::string text = error ? error : "";
  stitch_free(error);
  error = nullptr;
  return text;
}

TEST(LoaderCApi, CheckTargetTable) {
  char* error = nullptr;
  EXPECT_EQ(stitch_loader_check_target("sm_90", 1, 9, 0, &error), 0);
  EXPECT_EQ(stitch_loader_check_target("sm_86", 1, 8, 9, &error), 0);
  EXPECT_EQ(stitch_loader_check_target("sm_90", 0, 9, 0, &error), 1);
  EXPECT_EQ(stitch_loader_check_target("sm_80", 1, 9, 0, &error), 1);
  EXPECT_EQ(error, nullptr);
  EXPECT_EQ(stitch_loader_check_target("sm_90", 1, 8, 0, &error), -1);
  EXPECT_EQ(Take(error), "FAILED_PRECONDITION: bundle targets sm_90 but the device is sm_80");
  EXPECT_EQ(stitch_loader_check_target("sm90", 1, 9, 0, &error), -1);
  EXPECT_EQ(Take(error).rfind("INVALID_ARGUMENT: ", 0), 0u);
  EXPECT_EQ(stitch_loader_check_target(nullptr, 1, 9, 0, &error), -1);
  EXPECT_EQ(Take(error).rfind("INVALID_ARGUMENT: ", 0), 0u);
  // A caller that does not want the text passes NULL.
  EXPECT_EQ(stitch_loader_check_target("sm_90", 1, 7, 5, nullptr), -1);
}

TEST(LoaderCApi, MissingDriverIsUnavailable) {
  char* error = nullptr;
  EXPECT_EQ(stitch_loader_open("/nonexistent/libcuda.so.1", &error), nullptr);
  EXPECT_EQ(Take(error).rfind("UNAVAILABLE: ", 0), 0u);
}

TEST(LoaderCApi, NullHandlesAreReportedNotFollowed) {
  char* error = nullptr;
  EXPECT_EQ(stitch_loader_load(nullptr, "x", 1, &error), nullptr);
  EXPECT_EQ(Take(error).rfind("INVALID_ARGUMENT: ", 0), 0u);
  EXPECT_EQ(stitch_loader_launch(nullptr, nullptr, nullptr, 0, nullptr, 0, 0, &error), -1);
  EXPECT_EQ(Take(error).rfind("INVALID_ARGUMENT: ", 0), 0u);
  EXPECT_EQ(stitch_program_num_inputs(nullptr), -1);
  EXPECT_EQ(stitch_program_num_outputs(nullptr), -1);
  EXPECT_STREQ(stitch_program_key(nullptr), "");
  stitch_program_free(nullptr);
  stitch_loader_close(nullptr);
}

#ifdef STITCH_FAKE_LOADER_DRIVER

// Returns a loader on the stand-in driver, reset, as an sm_90 device with context 3 current.
stitch_loader* OpenOnFakeDriver(const testing::FakeDriver& fake, char** error) {
  fake.SetCc(9, 0);
  fake.SetContext(3);
  fake.Reset();
  return stitch_loader_open(testing::FakeDriver::Path(), error);
}

TEST(LoaderCApi, LoadsAndLaunchesThroughTheDriver) {
  auto& fake = testing::FakeDriver::Get();
  char* error = nullptr;
  stitch_loader* loader = OpenOnFakeDriver(fake, &error);
  ASSERT_NE(loader, nullptr) << Take(error);

  const std::string garbage = "\xff\xff\xff not a bundle";
  EXPECT_EQ(stitch_loader_load(loader, garbage.data(), garbage.size(), &error), nullptr);
  EXPECT_EQ(Take(error).rfind("INVALID_ARGUMENT: ", 0), 0u);

  const std::string bytes = testing::TwoKernelBundle("c-abi").SerializeAsString();
  stitch_program* program = stitch_loader_load(loader, bytes.data(), bytes.size(), &error);
  ASSERT_NE(program, nullptr) << Take(error);
  EXPECT_EQ(stitch_program_num_inputs(program), 2);
  EXPECT_EQ(stitch_program_num_outputs(program), 1);
  EXPECT_STREQ(stitch_program_key(program), "c-abi");
  EXPECT_STREQ(stitch_program_target(program), "sm_90");

  const uint64_t inputs[] = {0x1100, 0x2200};
  const uint64_t outputs[] = {0x3300};
  EXPECT_EQ(stitch_loader_launch(loader, program, inputs, 1, outputs, 1, 0, &error), -1);
  EXPECT_NE(Take(error).find("INVALID_ARGUMENT: "), std::string::npos);
  ASSERT_EQ(stitch_loader_launch(loader, program, inputs, 2, outputs, 1, 0x77, &error), 0)
      << Take(error);
  auto launches = fake.Events("launch ");
  ASSERT_EQ(launches.size(), 2u);
  auto add = testing::Fields(launches[1]);
  EXPECT_EQ(add["fn"], "add");
  EXPECT_EQ(add["ctx"], "3");
  EXPECT_EQ(add["stream"], std::to_string(0x77));
  const auto args = testing::Numbers(add["args"]);
  ASSERT_EQ(args.size(), 3u);
  EXPECT_EQ(args[0], 0x2200u);
  EXPECT_EQ(args[2], 0x3300u);

  // The program outlives the loader that loaded it.
  const int modules = fake.LiveModules();
  stitch_loader_close(loader);
  EXPECT_EQ(fake.LiveModules(), modules - 2);
  EXPECT_EQ(stitch_program_num_inputs(program), 2);
  stitch_program_free(program);
}

// A shape-generic program says which extents it serves and which inputs carry the extent,
// and launches at the run's extent, refusing others with the range in the message.
TEST(LoaderCApi, ShapeGenericProgramsLaunchAtTheRunsExtent) {
  auto& fake = testing::FakeDriver::Get();
  char* error = nullptr;
  stitch_loader* loader = OpenOnFakeDriver(fake, &error);
  ASSERT_NE(loader, nullptr) << Take(error);
  const std::string bytes = testing::BucketBundle().SerializeAsString();
  stitch_program* program = stitch_loader_load(loader, bytes.data(), bytes.size(), &error);
  ASSERT_NE(program, nullptr) << Take(error);
  int64_t lo = 0, hi = 0;
  EXPECT_EQ(stitch_program_outer_extent(program, &lo, &hi), 1);
  EXPECT_EQ(lo, 33);
  EXPECT_EQ(hi, 64);
  EXPECT_EQ(stitch_program_outer_parameter(program, 0), 0);
  EXPECT_EQ(stitch_program_outer_parameter(program, 1), -1);
  EXPECT_EQ(stitch_program_outer_extent(nullptr, &lo, &hi), -1);

  const uint64_t inputs[] = {0x1100, 0x2200}, outputs[] = {0x3300};
  const uint64_t input_bytes[] = {50 * 256, 256}, output_bytes[] = {50 * 256};
  EXPECT_EQ(stitch_loader_launch_checked(loader, program, inputs, input_bytes, 2, outputs,
                                         output_bytes, 1, 0, &error),
            -1);
  EXPECT_EQ(Take(error), "INVALID_ARGUMENT: bundle bucket serves outer extents 33 to 64, got 0");
  EXPECT_EQ(stitch_loader_launch_at_extent(loader, program, inputs, input_bytes, 2, outputs,
                                           output_bytes, 1, /*outer_extent=*/51, 0, &error),
            -1);
  EXPECT_NE(Take(error).find("input 0 is a 12800-byte buffer"), std::string::npos);
  ASSERT_EQ(stitch_loader_launch_at_extent(loader, program, inputs, input_bytes, 2, outputs,
                                           output_bytes, 1, /*outer_extent=*/50, 0, &error),
            0)
      << Take(error);
  auto launches = fake.Events("launch ");
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(testing::Numbers(testing::Fields(launches[0])["args"]).back(), 50u);

  // A program of exact shapes reports none and takes extent 0 only.
  const std::string exact = testing::TwoKernelBundle("exact").SerializeAsString();
  stitch_program* fixed = stitch_loader_load(loader, exact.data(), exact.size(), &error);
  ASSERT_NE(fixed, nullptr) << Take(error);
  EXPECT_EQ(stitch_program_outer_extent(fixed, &lo, &hi), 0);
  EXPECT_EQ(stitch_program_outer_parameter(fixed, 0), -1);
  const uint64_t unknown[] = {0, 0};
  EXPECT_EQ(stitch_loader_launch_at_extent(loader, fixed, inputs, unknown, 2, outputs, unknown, 1,
                                           /*outer_extent=*/7, 0, &error),
            -1);
  EXPECT_EQ(Take(error), "INVALID_ARGUMENT: bundle exact serves exact shapes, got outer extent 7");
  stitch_program_free(fixed);
  stitch_program_free(program);
  stitch_loader_close(loader);
}

// An output that is an input's bytes says which input; binding another buffer for it gets a
// copy of the input after the kernels.
TEST(LoaderCApi, ProgramsNameTheInputAnAliasedOutputIs) {
  auto& fake = testing::FakeDriver::Get();
  char* error = nullptr;
  stitch_loader* loader = OpenOnFakeDriver(fake, &error);
  ASSERT_NE(loader, nullptr) << Take(error);
  v1::KernelBundle b = testing::TwoKernelBundle("alias");
  for (uint64_t bytes : {64, 32}) b.add_inputs()->set_bytes(bytes);
  b.add_outputs()->set_bytes(256);
  v1::BufferSpec& view = *b.add_outputs();
  view.set_bytes(32);
  view.set_aliases_input(1);
  const std::string bytes = b.SerializeAsString();
  stitch_program* program = stitch_loader_load(loader, bytes.data(), bytes.size(), &error);
  ASSERT_NE(program, nullptr) << Take(error);
  EXPECT_EQ(stitch_program_num_outputs(program), 2);
  EXPECT_EQ(stitch_program_output_alias(program, 0), -1);
  EXPECT_EQ(stitch_program_output_alias(program, 1), 1);
  EXPECT_EQ(stitch_program_output_alias(program, 2), -1);
  EXPECT_EQ(stitch_program_output_alias(nullptr, 1), -1);

  const uint64_t inputs[] = {0x1100, 0x2200}, outputs[] = {0x3300, 0x4400};
  ASSERT_EQ(stitch_loader_launch(loader, program, inputs, 2, outputs, 2, 0x77, &error), 0)
      << Take(error);
  EXPECT_EQ(fake.Events("copy "),
            std::vector<std::string>{"copy to=17408 from=8704 bytes=32 stream=119"});
  stitch_program_free(program);
  stitch_loader_close(loader);
}

#endif  // STITCH_FAKE_LOADER_DRIVER

}  // namespace
}  // namespace stitch::loader
