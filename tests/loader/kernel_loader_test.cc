// The kernel loader: the image choice and bundle validation (pure), and Launch end to end
// against the stand-in driver (fake_cuda_driver.cc), which records every call.
#include "stitch/loader/kernel_loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <thread>

#include "loader/loader_test_util.h"

namespace stitch::loader {
namespace {

using testing::AddKernel;
using testing::BucketBundle;
using testing::TwoKernelBundle;

std::string Bytes(const v1::KernelBundle& b) { return b.SerializeAsString(); }

TEST(ParseTarget, ReadsMajorAndMinor) {
  auto cc = ParseTarget("sm_90");
  ASSERT_TRUE(cc.ok()) << cc.status().ToString();
  EXPECT_EQ(cc->major, 9);
  EXPECT_EQ(cc->minor, 0);
  cc = ParseTarget("sm_86");
  ASSERT_TRUE(cc.ok());
  EXPECT_EQ(cc->major, 8);
  EXPECT_EQ(cc->minor, 6);
  cc = ParseTarget("sm_120");
  ASSERT_TRUE(cc.ok());
  EXPECT_EQ(cc->major, 12);
  EXPECT_EQ(cc->minor, 0);
}

TEST(ChooseImage, Table) {
  struct Row {
    const char* target;
    bool cubin;
    ComputeCapability device;
    StatusCode code;
    ImageKind image;
  };
  const Row rows[] = {
      // The cubin runs on its own major, same or later minor.
      {"sm_90", true, {9, 0}, StatusCode::kOk, ImageKind::kCubin},
      {"sm_86", true, {8, 9}, StatusCode::kOk, ImageKind::kCubin},
      // Another major: the PTX goes through the JIT.
      {"sm_80", true, {9, 0}, StatusCode::kOk, ImageKind::kPtx},
      {"sm_90", true, {10, 0}, StatusCode::kOk, ImageKind::kPtx},
      // No cubin: PTX even on the exact device.
      {"sm_90", false, {9, 0}, StatusCode::kOk, ImageKind::kPtx},
      {"sm_80", false, {8, 6}, StatusCode::kOk, ImageKind::kPtx},
      // A device older than the target runs neither.
      {"sm_90", true, {8, 0}, StatusCode::kFailedPrecondition, ImageKind::kPtx},
      {"sm_86", true, {8, 0}, StatusCode::kFailedPrecondition, ImageKind::kPtx},
      {"sm_90", false, {8, 9}, StatusCode::kFailedPrecondition, ImageKind::kPtx},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(std::string(r.target) + (r.cubin ? " cubin" : " ptx") + " on " +
                 std::to_string(r.device.major) + "." + std::to_string(r.device.minor));
    auto image = ChooseImage(r.target, r.cubin, r.device);
    EXPECT_EQ(image.status().code(), r.code) << image.status().ToString();
    if (r.code == StatusCode::kOk && image.ok()) {
      EXPECT_EQ(*image, r.image);
    }
  }
}

TEST(ChooseImage, MismatchNamesBothArchitectures) {
  auto image = ChooseImage("sm_90", true, {8, 0}, 0);
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(image.status().message(), "bundle targets sm_90 but device 0 is sm_80");
  image = ChooseImage("sm_90", true, {8, 6});
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().message(), "bundle targets sm_90 but the device is sm_86");
}

TEST(ChooseImage, RejectsMalformedTargets) {
  for (const char* t :
       {"", "sm90", "sm_", "sm_9", "sm_9a", "sm_90a", "compute_90", "SM_90", "sm_-9", "sm_ 90"}) {
    auto image = ChooseImage(t, true, {9, 0});
    EXPECT_EQ(image.status().code(), StatusCode::kInvalidArgument) << "target \"" << t << "\"";
  }
}

TEST(ParseProgram, CountsInputsOutputsAndKeepsTheBundle) {
  v1::KernelBundle b = TwoKernelBundle("abc123");
  AddKernel(b, "tail", {{v1::KernelParam::INPUT, 4}, {v1::KernelParam::OUTPUT, 2}});
  auto p = ParseProgram(Bytes(b));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->num_inputs(), 5);
  EXPECT_EQ((*p)->num_outputs(), 3);
  EXPECT_EQ((*p)->key(), "abc123");
  EXPECT_EQ((*p)->target(), "sm_90");
  ASSERT_EQ((*p)->temporaries().size(), 1);
  EXPECT_EQ((*p)->temporaries().Get(0).bytes(), 3000u);
  EXPECT_EQ((*p)->bundle().kernels_size(), 3);
  EXPECT_FALSE((*p)->has_cubin());
}

TEST(ParseProgram, KeylessProgramsGetDistinctCacheKeys) {
  auto a = ParseProgram(Bytes(TwoKernelBundle("")));
  auto b = ParseProgram(Bytes(TwoKernelBundle("")));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->cache_key(), (*b)->cache_key());
  auto c = ParseProgram(Bytes(TwoKernelBundle("same")));
  EXPECT_EQ((*c)->cache_key(), "same");
}

// Each malformation, and the text its error must contain.
TEST(ParseProgram, RejectsMalformedBundles) {
  struct Case {
    const char* what;
    std::function<void(v1::KernelBundle&)> edit;
    const char* mentions;
  };
  const Case cases[] = {
      {"no code", [](v1::KernelBundle& b) { b.mutable_kernels(1)->clear_ptx(); }, "(add)"},
      {"zero grid",
       [](v1::KernelBundle& b) { b.mutable_kernels(1)->mutable_launch()->set_grid_y(0); }, "add"},
      {"zero block",
       [](v1::KernelBundle& b) { b.mutable_kernels(0)->mutable_launch()->set_block_z(0); },
       "scale"},
      {"too many threads",
       [](v1::KernelBundle& b) {
         auto* d = b.mutable_kernels(1)->mutable_launch();
         d->set_block_x(32);
         d->set_block_y(32);
         d->set_block_z(2);
       },
       "2048 threads"},
      {"unspecified role",
       [](v1::KernelBundle& b) {
         b.mutable_kernels(1)->mutable_params(0)->set_role(v1::KernelParam::ROLE_UNSPECIFIED);
       },
       "add"},
      {"unknown role",
       [](v1::KernelBundle& b) {
         b.mutable_kernels(1)->mutable_params(0)->set_role(static_cast<v1::KernelParam::Role>(9));
       },
       "add"},
      {"negative index",
       [](v1::KernelBundle& b) { b.mutable_kernels(0)->mutable_params(0)->set_index(-1); },
       "scale"},
      {"index past any signature",
       [](v1::KernelBundle& b) { b.mutable_kernels(1)->mutable_params(2)->set_index(1 << 30); },
       "has index 1073741824, past the 16777216 buffers"},
      {"missing temporary",
       [](v1::KernelBundle& b) { b.mutable_kernels(0)->mutable_params(1)->set_index(3); }, "scale"},
      {"no name", [](v1::KernelBundle& b) { b.mutable_kernels(0)->clear_name(); }, "no name"},
      {"bad target", [](v1::KernelBundle& b) { b.set_target("gfx90a"); }, "gfx90a"},
      {"no kernels", [](v1::KernelBundle& b) { b.clear_kernels(); }, "no kernels"},
      {"grid barriers without a workspace",
       [](v1::KernelBundle& b) { b.mutable_kernels(1)->set_cooperative(true); },
       "(add) is cooperative (grid-wide barriers) but has no workspace"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    v1::KernelBundle b = TwoKernelBundle();
    c.edit(b);
    auto p = ParseProgram(Bytes(b));
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(c.mentions), std::string::npos) << p.status().ToString();
  }
  // A 1024-thread block is the limit, not over it.
  v1::KernelBundle ok = TwoKernelBundle();
  ok.mutable_kernels(0)->mutable_launch()->set_block_x(1024);
  EXPECT_TRUE(ParseProgram(Bytes(ok)).ok());
}

TEST(ParseProgram, RejectsBytesThatAreNotABundle) {
  auto p = ParseProgram(std::string("\xff\xff\xff\xff garbage", 12));
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  // A cubin-only kernel is valid: the device decides later whether it can run it.
  v1::KernelBundle b = TwoKernelBundle();
  b.mutable_kernels(0)->set_cubin(
      "\x7f"
      "ELF");
  b.mutable_kernels(0)->clear_ptx();
  EXPECT_TRUE(ParseProgram(Bytes(b)).ok());
}

TEST(KernelLoader, MissingDriverIsUnavailable) {
  LoaderOptions options;
  options.driver_library = "/nonexistent/libcuda.so.1";
  auto loader = KernelLoader::Open(options);
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), StatusCode::kUnavailable);
}

TEST(OpenReportingOnce, ReportsTheFirstFailureOnly) {
  LoaderOptions options;
  options.driver_library = "/nonexistent/libcuda-report-once.so";
  std::vector<std::string> reports;
  auto report = [&](const Status& s) { reports.push_back(s.ToString()); };
  auto first = OpenReportingOnce(options, report);
  auto second = OpenReportingOnce(options, report);
  ASSERT_FALSE(first.ok());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(first.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(second.status().ToString(), first.status().ToString());
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0], first.status().ToString());
  // Another library is another first failure.
  options.driver_library = "/nonexistent/libcuda-other.so";
  (void)OpenReportingOnce(options, report);
  EXPECT_EQ(reports.size(), 2u);
}

#ifndef STITCH_FAKE_LOADER_DRIVER

TEST(KernelLoader, BuiltWithoutCudaHeaderIsUnavailable) {
  auto loader = KernelLoader::Open();
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(loader.status().message().find("without the CUDA driver header"), std::string::npos);
}

#else

}  // namespace
}  // namespace stitch::loader

#include <cuda.h>

namespace stitch::loader {
namespace {

using testing::Fields;
using testing::Numbers;

testing::FakeDriver& Fake() { return testing::FakeDriver::Get(); }

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Fake().SetInitResult(0);
    Fake().SetCc(9, 0);
    Fake().SetContext(1);
    Fake().Reset();
    baseline_allocations_ = Fake().LiveAllocations();
    baseline_modules_ = Fake().LiveModules();
    LoaderOptions options;
    options.driver_library = testing::FakeDriver::Path();
    auto loader = KernelLoader::Open(options);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    loader_ = std::move(loader).value();
  }

  std::shared_ptr<const Program> Load(const v1::KernelBundle& b) {
    auto p = loader_->Load(Bytes(b));
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? *p : nullptr;
  }

  std::unique_ptr<KernelLoader> loader_;
  int baseline_allocations_ = 0;
  int baseline_modules_ = 0;
};

TEST_F(LoaderTest, LoadsModulesOncePerContext) {
  auto p = Load(TwoKernelBundle());
  const std::vector<uint64_t> in = {0x1000, 0x2000}, out = {0x3000};
  ASSERT_TRUE(loader_->Launch(*p, in, out, 0).ok());
  ASSERT_TRUE(loader_->Launch(*p, in, out, 0).ok());
  // One module per kernel, once, in context 1; two launches of each kernel.
  EXPECT_EQ(Fake().Events("load ").size(), 2u);
  EXPECT_EQ(Fake().Events("load ctx=1 image=ptx").size(), 2u);
  EXPECT_EQ(Fake().Events("launch ").size(), 4u);

  // Another context needs its own modules; the first context's stay cached.
  Fake().SetContext(2);
  ASSERT_TRUE(loader_->Launch(*p, in, out, 0).ok());
  EXPECT_EQ(Fake().Events("load ctx=2").size(), 2u);
  Fake().SetContext(1);
  ASSERT_TRUE(loader_->Launch(*p, in, out, 0).ok());
  EXPECT_EQ(Fake().Events("load ").size(), 4u);
  // The device's capability was asked once, though two contexts launched.
  EXPECT_EQ(Fake().Events("cc").size(), 1u);

  // A second program with the same key shares the modules.
  auto same = Load(TwoKernelBundle());
  ASSERT_TRUE(loader_->Launch(*same, in, out, 0).ok());
  EXPECT_EQ(Fake().Events("load ").size(), 4u);
}

TEST_F(LoaderTest, PassesPointersInParamsOrderWithTemporariesAndWorkspaceLast) {
  v1::KernelBundle b;
  b.set_key("order");
  b.set_target("sm_90");
  b.add_temporaries()->set_bytes(3000);
  v1::TempBuffer* aligned = b.add_temporaries();
  aligned->set_bytes(100);
  aligned->set_alignment(4096);
  AddKernel(b, "first",
            {{v1::KernelParam::OUTPUT, 0},
             {v1::KernelParam::INPUT, 1},
             {v1::KernelParam::TEMPORARY, 1},
             {v1::KernelParam::INPUT, 0}});
  AddKernel(b, "second", {{v1::KernelParam::TEMPORARY, 0}, {v1::KernelParam::OUTPUT, 1}},
            /*workspace=*/777);
  auto p = Load(b);
  ASSERT_EQ(p->num_inputs(), 2);
  ASSERT_EQ(p->num_outputs(), 2);
  const std::vector<uint64_t> in = {0xA00, 0xB00}, out = {0xC00, 0xD00};
  ASSERT_TRUE(loader_->Launch(*p, in, out, /*stream=*/0x55).ok());

  // Temporaries by their sizes (the aligned one over-allocated), the workspace by its own.
  std::map<uint64_t, uint64_t> alloc_by_bytes;
  for (const std::string& line : Fake().Events("alloc ")) {
    auto f = Fields(line);
    alloc_by_bytes[std::stoull(f["bytes"])] = std::stoull(f["ptr"]);
  }
  ASSERT_EQ(alloc_by_bytes.size(), 3u) << ::testing::PrintToString(Fake().Events());
  ASSERT_TRUE(alloc_by_bytes.count(3000));
  ASSERT_TRUE(alloc_by_bytes.count(777));
  ASSERT_TRUE(alloc_by_bytes.count(100 + 4095));
  const uint64_t temp0 = alloc_by_bytes[3000];
  const uint64_t workspace = alloc_by_bytes[777];
  const uint64_t temp1_base = alloc_by_bytes[100 + 4095];

  auto launches = Fake().Events("launch ");
  ASSERT_EQ(launches.size(), 2u);
  auto first = Fields(launches[0]);
  EXPECT_EQ(first["fn"], "first");
  EXPECT_EQ(first["coop"], "0");
  EXPECT_EQ(first["stream"], std::to_string(0x55));
  EXPECT_EQ(first["grid"], "4,1,1");
  EXPECT_EQ(first["block"], "128,1,1");
  const std::vector<uint64_t> args = Numbers(first["args"]);
  ASSERT_EQ(args.size(), 4u);
  EXPECT_EQ(args[0], 0xC00u);
  EXPECT_EQ(args[1], 0xB00u);
  EXPECT_EQ(args[2] % 4096, 0u);
  EXPECT_GE(args[2], temp1_base);
  EXPECT_LE(args[2] + 100, temp1_base + 100 + 4095);
  EXPECT_EQ(args[3], 0xA00u);

  auto second = Fields(launches[1]);
  EXPECT_EQ(second["fn"], "second");
  EXPECT_EQ(second["coop"], "1");
  EXPECT_EQ(Numbers(second["args"]), (std::vector<uint64_t>{temp0, 0xD00, workspace}));

  // The workspace was zero-filled on the launch stream before its first launch.
  auto all = Fake().Events();
  auto memset = std::find(all.begin(), all.end(),
                          "memset ptr=" + std::to_string(workspace) +
                              " value=0 bytes=777 stream=" + std::to_string(0x55));
  ASSERT_NE(memset, all.end()) << ::testing::PrintToString(all);
  auto launch = std::find_if(all.begin(), all.end(),
                             [](const std::string& l) { return l.find("fn=second") != l.npos; });
  EXPECT_LT(memset - all.begin(), launch - all.begin());

  // A second launch on the stream reuses everything: no allocation, no memset, same pointers.
  Fake().Reset();
  ASSERT_TRUE(loader_->Launch(*p, in, out, 0x55).ok());
  EXPECT_TRUE(Fake().Events("alloc ").empty());
  EXPECT_TRUE(Fake().Events("memset ").empty());
  auto again = Fake().Events("launch ");
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(Numbers(Fields(again[1])["args"]), (std::vector<uint64_t>{temp0, 0xD00, workspace}));
}

// A split reduction whose last block combines has a workspace but no grid barrier: it gets
// its zeroed workspace and launches with cuLaunchKernel, whose grid may exceed what is
// resident at once.
TEST_F(LoaderTest, AWorkspaceWithoutGridBarriersLaunchesNormally) {
  v1::KernelBundle b;
  b.set_key("last-block");
  b.set_target("sm_90");
  v1::Kernel* k =
      AddKernel(b, "split", {{v1::KernelParam::INPUT, 0}, {v1::KernelParam::OUTPUT, 0}}, 1024);
  k->set_cooperative(false);
  k->mutable_launch()->set_grid_x(100000);
  auto p = Load(b);
  const std::vector<uint64_t> in = {0xA00}, out = {0xB00};
  ASSERT_TRUE(loader_->Launch(*p, in, out, /*stream=*/3).ok());
  auto launches = Fake().Events("launch ");
  ASSERT_EQ(launches.size(), 1u);
  auto launch = Fields(launches[0]);
  EXPECT_EQ(launch["coop"], "0");
  const std::vector<uint64_t> args = Numbers(launch["args"]);
  ASSERT_EQ(args.size(), 3u);
  EXPECT_EQ(args[0], 0xA00u);
  EXPECT_EQ(args[1], 0xB00u);
  ASSERT_EQ(Fake().Events("memset ").size(), 1u);
  EXPECT_NE(
      Fake().Events("memset ")[0].find("ptr=" + std::to_string(args[2]) + " value=0 bytes=1024"),
      std::string::npos);
}

TEST_F(LoaderTest, EachStreamGetsItsOwnBuffers) {
  v1::KernelBundle b = TwoKernelBundle("streams");
  b.mutable_kernels(1)->set_workspace_bytes(512);
  b.mutable_kernels(1)->set_ptx(testing::Image("add", 4));
  auto p = Load(b);
  const std::vector<uint64_t> in = {1, 2}, out = {3};
  ASSERT_TRUE(loader_->Launch(*p, in, out, 7).ok());
  ASSERT_TRUE(loader_->Launch(*p, in, out, 9).ok());
  ASSERT_TRUE(loader_->Launch(*p, in, out, 7).ok());
  EXPECT_EQ(Fake().Events("alloc ").size(), 4u);  // a temporary and a workspace per stream
  EXPECT_EQ(Fake().Events("memset ").size(), 2u);
  EXPECT_EQ(Fake().Events("memset ").at(0).find("stream=7") != std::string::npos, true);
  EXPECT_EQ(Fake().Events("memset ").at(1).find("stream=9") != std::string::npos, true);
  auto launches = Fake().Events("launch ");
  ASSERT_EQ(launches.size(), 6u);
  // The two streams' temporaries differ; the same stream's stay the same.
  EXPECT_NE(Numbers(Fields(launches[0])["args"])[1], Numbers(Fields(launches[2])["args"])[1]);
  EXPECT_EQ(Numbers(Fields(launches[0])["args"])[1], Numbers(Fields(launches[4])["args"])[1]);
}

TEST_F(LoaderTest, RaisesTheSharedMemoryLimitAbove48KiB) {
  v1::KernelBundle b;
  b.set_key("shared");
  b.set_target("sm_90");
  AddKernel(b, "big", {{v1::KernelParam::INPUT, 0}})->set_dynamic_shared_bytes(65536);
  AddKernel(b, "small", {{v1::KernelParam::OUTPUT, 0}})->set_dynamic_shared_bytes(48 * 1024);
  // Static and dynamic shared memory count together against the default limit.
  v1::Kernel* mixed = AddKernel(b, "mixed", {{v1::KernelParam::OUTPUT, 0}});
  mixed->set_dynamic_shared_bytes(47 * 1024);
  mixed->set_static_shared_bytes(2048);
  auto p = Load(b);
  const std::vector<uint64_t> in = {1}, out = {2};
  ASSERT_TRUE(loader_->Launch(*p, in, out, 0).ok());
  ASSERT_TRUE(loader_->Launch(*p, in, out, 0).ok());
  auto attrs = Fake().Events("attr ");
  // Once per kernel, at load, and not for the kernel at the default limit.
  ASSERT_EQ(attrs.size(), 2u);
  const std::string attr =
      std::to_string(static_cast<int>(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES));
  EXPECT_EQ(attrs[0], "attr fn=big attr=" + attr + " value=65536");
  EXPECT_EQ(attrs[1], "attr fn=mixed attr=" + attr + " value=48128");
  auto launches = Fake().Events("launch ");
  ASSERT_EQ(launches.size(), 6u);
  EXPECT_EQ(Fields(launches[0])["shared"], "65536");
  EXPECT_EQ(Fields(launches[1])["shared"], "49152");
  EXPECT_EQ(Fields(launches[2])["shared"], "48128");
}

TEST_F(LoaderTest, WrongBufferCountsAreInvalidArguments) {
  auto p = Load(TwoKernelBundle());
  const std::vector<uint64_t> one = {1}, two = {1, 2}, none = {};
  Status s = loader_->Launch(*p, one, one, 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("2 inputs and 1 outputs, got 1 and 1"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(loader_->Launch(*p, two, none, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(loader_->Launch(*p, two, two, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Fake().Events("launch ").empty());
  EXPECT_TRUE(Fake().Events("load ").empty());
}

// A bundle that declares its buffers: two inputs of 64 bytes, one output of 1024.
v1::KernelBundle SizedBundle() {
  v1::KernelBundle b = TwoKernelBundle();
  for (int i = 0; i < 2; ++i) {
    v1::BufferSpec& in = *b.add_inputs();
    in.set_bytes(64);
    in.set_shape("f32[16]");
  }
  v1::BufferSpec& out = *b.add_outputs();
  out.set_bytes(1024);
  out.set_shape("f32[256]");
  return b;
}

// Buffers bound in the wrong order, or too small, are refused before anything is enqueued:
// the kernels would write past their end.
TEST_F(LoaderTest, BuffersSmallerThanTheBundleDeclaresAreRefusedBeforeLaunch) {
  auto p = Load(SizedBundle());
  const std::vector<uint64_t> in = {1, 2}, out = {3};
  Status s = loader_->LaunchChecked(*p, in, std::vector<uint64_t>{64, 64}, out,
                                    std::vector<uint64_t>{64}, 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(s.message(),
            "output 0 is a 64-byte buffer, but the bundle's output 0 is f32[256] (1024 bytes)");
  s = loader_->LaunchChecked(*p, in, std::vector<uint64_t>{64, 32}, out,
                             std::vector<uint64_t>{1024}, 0);
  EXPECT_NE(s.message().find("input 1 is a 32-byte buffer"), std::string::npos) << s.ToString();
  EXPECT_EQ(
      loader_->LaunchChecked(*p, in, std::vector<uint64_t>{64}, out, std::vector<uint64_t>{1024}, 0)
          .code(),
      StatusCode::kInvalidArgument);
  EXPECT_TRUE(Fake().Events("launch ").empty());
  EXPECT_TRUE(Fake().Events("load ").empty());
  // Right sizes, larger ones, and unknown ones (0) launch.
  EXPECT_TRUE(loader_
                  ->LaunchChecked(*p, in, std::vector<uint64_t>{64, 64}, out,
                                  std::vector<uint64_t>{1024}, 0)
                  .ok());
  EXPECT_TRUE(
      loader_
          ->LaunchChecked(*p, in, std::vector<uint64_t>{0, 4096}, out, std::vector<uint64_t>{0}, 0)
          .ok());
  EXPECT_EQ(Fake().Events("launch ").size(), 4u);
}

// A bundle compiled before buffer sizes were recorded declares none, and every size passes.
TEST_F(LoaderTest, BundlesWithoutDeclaredSizesPassEveryBuffer) {
  auto p = Load(TwoKernelBundle());
  EXPECT_TRUE(CheckBufferSizes(*p, std::vector<uint64_t>{1, 1}, std::vector<uint64_t>{1}).ok());
}

// SizedBundle with a second output that is input 0's bytes (the graph returns a reshape of
// parameter 0): no kernel writes it.
v1::KernelBundle AliasingBundle() {
  v1::KernelBundle b = SizedBundle();
  v1::BufferSpec& view = *b.add_outputs();
  view.set_bytes(64);
  view.set_shape("f32[4,4]");
  view.set_aliases_input(0);
  return b;
}

// The declared lists count the buffers: the aliased output is passed though no kernel takes
// it, and so is a parameter no kernel reads.
TEST(ParseProgram, DeclaredBuffersCountEvenWhenNoKernelTakesThem) {
  v1::KernelBundle b = AliasingBundle();
  b.add_inputs()->set_bytes(8);
  auto p = ParseProgram(Bytes(b));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->num_inputs(), 3);
  EXPECT_EQ((*p)->num_outputs(), 2);
  ASSERT_EQ((*p)->output_aliases().size(), 1u);
  EXPECT_EQ((*p)->output_aliases()[0].output, 1);
  EXPECT_EQ((*p)->output_aliases()[0].input, 0);
  EXPECT_EQ((*p)->OutputBytes(1, 0), 64u);
}

TEST(ParseProgram, RefusesAliasesThatCannotHold) {
  struct Case {
    const char* what;
    std::function<void(v1::KernelBundle&)> edit;
    const char* message;
  };
  const Case cases[] = {
      {"undeclared input", [](v1::KernelBundle& b) { b.mutable_outputs(1)->set_aliases_input(2); },
       "output 1 aliases input 2, but the bundle declares 2 inputs"},
      {"negative input", [](v1::KernelBundle& b) { b.mutable_outputs(1)->set_aliases_input(-1); },
       "output 1 aliases input -1, but the bundle declares 2 inputs"},
      {"another size", [](v1::KernelBundle& b) { b.mutable_outputs(1)->set_bytes(128); },
       "output 1 (f32[4,4]) aliases input 0 (f32[16]) of another size"},
      {"written by a kernel",
       [](v1::KernelBundle& b) {
         AddKernel(b, "copy", {{v1::KernelParam::INPUT, 0}, {v1::KernelParam::OUTPUT, 1}});
       },
       "output 1 aliases input 0, but a kernel writes it"},
      {"kernel past the declared outputs",
       [](v1::KernelBundle& b) {
         AddKernel(b, "tail", {{v1::KernelParam::OUTPUT, 2}});
       },
       "a kernel takes output 2, but the bundle declares 2"},
      {"kernel past the declared inputs",
       [](v1::KernelBundle& b) {
         AddKernel(b, "tail", {{v1::KernelParam::INPUT, 5}});
       },
       "a kernel takes input 5, but the bundle declares 2"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    v1::KernelBundle b = AliasingBundle();
    c.edit(b);
    auto p = ParseProgram(Bytes(b));
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(p.status().message(), c.message);
  }
}

// An output bound to its input's own buffer costs nothing; another buffer gets a copy of the
// input, on the launch stream, after the kernels that read it.
TEST_F(LoaderTest, AliasedOutputsAreCopiedOnlyIntoAnotherBuffer) {
  auto p = Load(AliasingBundle());
  const std::vector<uint64_t> in = {0x1000, 0x2000};
  ASSERT_TRUE(loader_->Launch(*p, in, std::vector<uint64_t>{0x3000, 0x1000}, 7).ok());
  EXPECT_TRUE(Fake().Events("copy ").empty());
  EXPECT_EQ(Fake().Events("launch ").size(), 2u);

  Fake().Reset();
  ASSERT_TRUE(loader_->Launch(*p, in, std::vector<uint64_t>{0x3000, 0x4000}, 7).ok());
  const std::vector<std::string> events = Fake().Events("");
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "copy to=16384 from=4096 bytes=64 stream=7");
  EXPECT_EQ(Fake().Events("copy ").size(), 1u);
  EXPECT_EQ(Fake().Events("launch ").size(), 2u);
}

TEST_F(LoaderTest, NoCurrentContextIsAFailedPrecondition) {
  Fake().SetContext(0);
  auto p = Load(TwoKernelBundle());
  Status s = loader_->Launch(*p, std::vector<uint64_t>{1, 2}, std::vector<uint64_t>{3}, 0);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("context"), std::string::npos);
  EXPECT_TRUE(Fake().Events("launch ").empty());
}

TEST_F(LoaderTest, OlderDeviceIsRefusedBeforeLoading) {
  Fake().SetCc(8, 0);
  auto p = Load(TwoKernelBundle());
  Status s = loader_->Launch(*p, std::vector<uint64_t>{1, 2}, std::vector<uint64_t>{3}, 0);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "bundle targets sm_90 but device 0 is sm_80");
  EXPECT_TRUE(Fake().Events("load ").empty());
  EXPECT_TRUE(Fake().Events("alloc ").empty());
}

TEST_F(LoaderTest, LoadsTheCubinOnItsArchitectureAndThePtxElsewhere) {
  v1::KernelBundle b;
  b.set_key("cubin");
  b.set_target("sm_90");
  AddKernel(b, "k", {{v1::KernelParam::INPUT, 0}}, 0, /*cubin=*/true);
  auto p = Load(b);
  ASSERT_TRUE(p->has_cubin());
  ASSERT_TRUE(loader_->Launch(*p, std::vector<uint64_t>{1}, {}, 0).ok());
  EXPECT_EQ(Fake().Events("load ctx=1 image=cubin").size(), 1u)
      << ::testing::PrintToString(Fake().Events());

  // A Blackwell device: the capability is cached per device, so a fresh loader sees it.
  Fake().SetCc(10, 0);
  Fake().Reset();
  LoaderOptions options;
  options.driver_library = testing::FakeDriver::Path();
  auto other = KernelLoader::Open(options);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*other)->Launch(*p, std::vector<uint64_t>{1}, {}, 0).ok());
  EXPECT_EQ(Fake().Events("load ctx=1 image=ptx").size(), 1u)
      << ::testing::PrintToString(Fake().Events());
}

TEST_F(LoaderTest, CubinOnlyKernelOnAnotherArchitectureIsAFailedPrecondition) {
  Fake().SetCc(10, 0);
  v1::KernelBundle b;
  b.set_key("cubin-only");
  b.set_target("sm_90");
  AddKernel(b, "k", {{v1::KernelParam::INPUT, 0}}, 0, true)->clear_ptx();
  auto p = Load(b);
  Status s = loader_->Launch(*p, std::vector<uint64_t>{1}, {}, 0);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("no PTX"), std::string::npos) << s.ToString();
}

TEST_F(LoaderTest, JitFailureCarriesTheLog) {
  v1::KernelBundle b = TwoKernelBundle("bad-ptx");
  b.mutable_kernels(1)->set_ptx(b.kernels(1).ptx() + "// syntax error\n");
  auto p = Load(b);
  Status s = loader_->Launch(*p, std::vector<uint64_t>{1, 2}, std::vector<uint64_t>{3}, 0);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("kernel add"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("CUDA_ERROR_INVALID_PTX"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("syntax error near 'bogus'"), std::string::npos) << s.ToString();
  // The first kernel's module was unloaded again, and nothing was launched.
  EXPECT_EQ(Fake().LiveModules(), baseline_modules_);
  EXPECT_TRUE(Fake().Events("launch ").empty());
}

TEST_F(LoaderTest, DestructorReleasesModulesAndMemoryInTheirContexts) {
  v1::KernelBundle b = TwoKernelBundle("release");
  b.mutable_kernels(1)->set_workspace_bytes(256);
  b.mutable_kernels(1)->set_ptx(testing::Image("add", 4));
  auto p = Load(b);
  ASSERT_TRUE(loader_->Launch(*p, std::vector<uint64_t>{1, 2}, std::vector<uint64_t>{3}, 0).ok());
  Fake().SetContext(2);
  ASSERT_TRUE(loader_->Launch(*p, std::vector<uint64_t>{1, 2}, std::vector<uint64_t>{3}, 0).ok());
  EXPECT_EQ(Fake().LiveModules(), baseline_modules_ + 4);
  EXPECT_EQ(Fake().LiveAllocations(), baseline_allocations_ + 4);
  Fake().Reset();
  loader_.reset();
  EXPECT_EQ(Fake().LiveModules(), baseline_modules_);
  EXPECT_EQ(Fake().LiveAllocations(), baseline_allocations_);
  // Each module was unloaded with its own context current.
  EXPECT_EQ(Fake().Events("unload module=").size(), 4u);
  EXPECT_EQ(Fake().Events("push ctx=1").size(), 2u);
  EXPECT_EQ(Fake().Events("push ctx=2").size(), 2u);
  for (const std::string& line : Fake().Events("unload ")) {
    EXPECT_NE(Fields(line)["ctx"], "0") << line;
  }
}

TEST_F(LoaderTest, ConcurrentLaunchesLoadOnce) {
  auto p = Load(TwoKernelBundle("threads"));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        if (!loader_->Launch(*p, std::vector<uint64_t>{1, 2}, std::vector<uint64_t>{3}, 0).ok()) {
          ++failures;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Fake().Events("load ").size(), 2u);
  EXPECT_EQ(Fake().Events("alloc ").size(), 1u);
  EXPECT_EQ(Fake().Events("launch ").size(), 8u * 20u * 2u);
}

// The run's extent reaches the kernels that take it, as their last argument.
TEST_F(LoaderTest, ShapeGenericKernelsGetTheRunsExtentLast) {
  auto p = Load(BucketBundle());
  ASSERT_TRUE(p->shape_generic());
  EXPECT_EQ(p->min_outer_extent(), 33);
  EXPECT_EQ(p->max_outer_extent(), 64);
  const std::vector<uint64_t> in = {0x1000, 0x2000}, out = {0x3000};
  ASSERT_TRUE(loader_->Launch(*p, in, out, 0, /*outer_extent=*/40).ok());
  ASSERT_TRUE(loader_->Launch(*p, in, out, 0, /*outer_extent=*/64).ok());
  auto launches = Fake().Events("launch ");
  ASSERT_EQ(launches.size(), 4u);
  std::vector<uint64_t> norm = Numbers(Fields(launches[0])["args"]);
  ASSERT_EQ(norm.size(), 4u) << launches[0];
  EXPECT_EQ(norm[0], 0x1000u);
  EXPECT_EQ(norm[3], 40u);  // after the workspace
  EXPECT_EQ(Numbers(Fields(launches[1])["args"]).size(), 3u) << launches[1];
  EXPECT_EQ(Numbers(Fields(launches[2])["args"]).back(), 64u);
}

// A shape-generic program launched without an extent, or at one its buffers were not sized
// for, would run its loops past them: refused before anything is enqueued.
TEST_F(LoaderTest, ExtentsABundleDoesNotServeAreRefusedBeforeLaunch) {
  auto p = Load(BucketBundle());
  const std::vector<uint64_t> in = {1, 2}, out = {3};
  for (int64_t extent : {int64_t{0}, int64_t{32}, int64_t{65}, int64_t{-1}}) {
    Status s = loader_->Launch(*p, in, out, 0, extent);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << extent;
    EXPECT_NE(s.message().find("serves outer extents 33 to 64, got " + std::to_string(extent)),
              std::string::npos)
        << s.ToString();
  }
  auto exact = Load(SizedBundle());
  Status s = loader_->Launch(*exact, in, out, 0, /*outer_extent=*/8);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("serves exact shapes, got outer extent 8"), std::string::npos)
      << s.ToString();
  EXPECT_TRUE(Fake().Events("launch ").empty());
  EXPECT_TRUE(Fake().Events("load ").empty());
}

// Varying buffers are held to their size at the run's extent, fixed ones to theirs.
TEST_F(LoaderTest, BufferSizesAreCheckedAtTheRunsExtent) {
  auto p = Load(BucketBundle());
  const std::vector<uint64_t> in = {1, 2}, out = {3};
  const std::vector<uint64_t> fixed_ok = {40 * 256, 256};
  EXPECT_TRUE(
      loader_->LaunchChecked(*p, in, fixed_ok, out, std::vector<uint64_t>{40 * 256}, 0, 40).ok());
  Status s =
      loader_->LaunchChecked(*p, in, fixed_ok, out, std::vector<uint64_t>{40 * 256 - 1}, 0, 40);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "output 0 is a 10239-byte buffer, but the bundle's output 0 is f32[64,64] at outer "
            "extent 40 (10240 bytes)");
  s = loader_->LaunchChecked(*p, in, std::vector<uint64_t>{40 * 256, 255}, out,
                             std::vector<uint64_t>{40 * 256}, 0, 40);
  EXPECT_NE(s.message().find("input 1 is a 255-byte buffer, but the bundle's input 1 is f32[64] "
                             "(256 bytes)"),
            std::string::npos)
      << s.ToString();
  // A buffer sized for extent 40 is too small for the top of the bucket.
  EXPECT_EQ(
      loader_->LaunchChecked(*p, in, fixed_ok, out, std::vector<uint64_t>{40 * 256}, 0, 64).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(Fake().Events("launch ").size(), 2u);
}

TEST(ParseProgram, RefusesMalformedOuterExtents) {
  struct Case {
    const char* what;
    std::function<void(v1::KernelBundle&)> edit;
    const char* message;
  };
  const Case cases[] = {
      {"no range", [](v1::KernelBundle& b) { b.clear_outer_extent(); },
       "kernel norm takes an outer extent, but the bundle names no extents it serves"},
      {"lo 0", [](v1::KernelBundle& b) { b.mutable_outer_extent()->set_lo(0); },
       "bundle serves outer extents 0 to 64"},
      {"hi < lo", [](v1::KernelBundle& b) { b.mutable_outer_extent()->set_hi(32); },
       "bundle serves outer extents 33 to 32"},
      {"huge hi", [](v1::KernelBundle& b) { b.mutable_outer_extent()->set_hi(int64_t{1} << 40); },
       "bundle serves outer extents 33 to 1099511627776"},
      {"input over its bytes", [](v1::KernelBundle& b) { b.mutable_inputs(0)->set_bytes(100); },
       "input 0 takes 256 bytes per extent, over its 100 bytes at the top extent 64"},
      {"output over its bytes",
       [](v1::KernelBundle& b) { b.mutable_outputs(0)->set_bytes_per_extent(257); },
       "output 0 takes 257 bytes per extent"},
      {"temporary over its bytes",
       [](v1::KernelBundle& b) { b.mutable_temporaries(0)->set_bytes_per_extent(1u << 30); },
       "temporary 0 takes 1073741824 bytes per extent"},
  };
  for (const Case& c : cases) {
    v1::KernelBundle b = BucketBundle();
    c.edit(b);
    auto p = ParseProgram(Bytes(b));
    ASSERT_FALSE(p.ok()) << c.what;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(p.status().message().find(c.message), std::string::npos)
        << c.what << ": " << p.status().ToString();
  }
  auto p = ParseProgram(Bytes(BucketBundle()));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_FALSE((*ParseProgram(Bytes(TwoKernelBundle())))->shape_generic());
}

TEST_F(LoaderTest, InitFailureIsUnavailable) {
  Fake().SetInitResult(CUDA_ERROR_NO_DEVICE);
  LoaderOptions options;
  options.driver_library = testing::FakeDriver::Path();
  auto loader = KernelLoader::Open(options);
  Fake().SetInitResult(0);
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(loader.status().message().find("CUDA_ERROR_NO_DEVICE"), std::string::npos)
      << loader.status().ToString();
}

#endif  // STITCH_FAKE_LOADER_DRIVER

}  // namespace
}  // namespace stitch::loader
