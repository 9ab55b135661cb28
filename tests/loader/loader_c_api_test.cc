// The loader's C ABI (stitch_loader.h): handles, counts, error strings and codes, the image
// choice table, and a launch through the stand-in driver.
#include <gtest/gtest.h>

#include <string>

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

TEST(LoaderCApi, LoadsAndLaunchesThroughTheDriver) {
  auto& fake = testing::FakeDriver::Get();
  fake.SetCc(9, 0);
  fake.SetContext(3);
  fake.Reset();
  char* error = nullptr;
  stitch_loader* loader = stitch_loader_open(testing::FakeDriver::Path(), &error);
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

#endif  // STITCH_FAKE_LOADER_DRIVER

}  // namespace
}  // namespace stitch::loader
