// Target: one spelling rule, one table, each target resolved once to the device that plans
// and prices its kernels.
#include <gtest/gtest.h>

#include <set>

#include "stitch/plan/target.h"

namespace stitch {
namespace {

TEST(Target, ParsesSupportedSpellings) {
  for (const char* spelling :
       {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90/h200", "sm_90a"}) {
    StatusOr<Target> t = Target::Parse(spelling);
    ASSERT_TRUE(t.ok()) << spelling << ": " << t.status().ToString();
    EXPECT_EQ(t->name(), spelling);
  }
}

TEST(Target, ResolvesToItsDevice) {
  EXPECT_EQ(Target::Parse("sm_80")->device().name, "A100");
  EXPECT_EQ(Target::Parse("sm_90")->device().name, "H100");
  EXPECT_EQ(Target::Parse("sm_90a")->device().name, "H100");
  EXPECT_EQ(Target::Parse("sm_75")->device().name, "T4");
  EXPECT_EQ(Target::Parse("sm_86")->device().name, "A10");
  EXPECT_EQ(Target::Parse("sm_89")->device().name, "L4");
}

TEST(Target, ADeviceOfAnArchitectureIsItsOwnTarget) {
  StatusOr<Target> h200 = Target::Parse("sm_90/h200");
  ASSERT_TRUE(h200.ok()) << h200.status().ToString();
  EXPECT_EQ(h200->device().name, "H200");
  // The same code as sm_90's: one architecture for the assembler, the bundle and the loader.
  EXPECT_EQ(h200->arch(), "sm_90");
  EXPECT_EQ(h200->llvm_cpu(), "sm_90");
  EXPECT_EQ(h200->compute_capability(), 90);
  // But planned for another device, so another key.
  EXPECT_FALSE(*h200 == Target());
  EXPECT_EQ(Target().arch(), "sm_90");
  // The device is spelled in any case, and the architecture's own device is the
  // architecture alone.
  EXPECT_TRUE(*Target::Parse("sm_90/H200") == *h200);
  EXPECT_EQ(Target::Parse("sm_90/H200")->name(), "sm_90/h200");
  EXPECT_TRUE(*Target::Parse("sm_90/h100") == Target());
  EXPECT_EQ(Target::Parse("sm_90/H100")->name(), "sm_90");
}

TEST(Target, ADeviceOfAnotherArchitectureIsNotSupported) {
  for (const char* other : {"sm_80/h200", "sm_90/a100", "sm_90a/h200", "sm_90/h300"}) {
    StatusOr<Target> t = Target::Parse(other);
    ASSERT_FALSE(t.ok()) << other;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("'" + std::string(other) + "' is not supported"),
              std::string::npos)
        << t.status().message();
  }
}

TEST(Target, AGpuIsPlannedAsTheDeviceItsDriverNames) {
  const auto name_of = [](std::string_view arch, std::string_view gpu) {
    StatusOr<Target> t = Target::ForGpu(arch, gpu);
    return t.ok() ? t->name() : t.status().ToString();
  };
  EXPECT_EQ(name_of("sm_90", "NVIDIA H200"), "sm_90/h200");
  EXPECT_EQ(name_of("sm_90", "NVIDIA H200 NVL"), "sm_90/h200");
  EXPECT_EQ(name_of("sm_90", "NVIDIA H100 80GB HBM3"), "sm_90");
  // Not a device of the table, or not as a word: the architecture's first device.
  EXPECT_EQ(name_of("sm_90", "NVIDIA GH200 480GB"), "sm_90");
  EXPECT_EQ(name_of("sm_90", "NVIDIA H2000"), "sm_90");
  EXPECT_EQ(name_of("sm_90", ""), "sm_90");
  // The name never moves a GPU to another architecture.
  EXPECT_EQ(name_of("sm_80", "NVIDIA H200"), "sm_80");
  EXPECT_EQ(name_of("sm_89", "NVIDIA L4"), "sm_89");
  StatusOr<Target> unsupported = Target::ForGpu("sm_70", "Tesla V100-SXM2-16GB");
  ASSERT_FALSE(unsupported.ok());
  EXPECT_NE(unsupported.status().message().find("'sm_70' is not supported"), std::string::npos)
      << unsupported.status().message();
}

TEST(Target, ArchSpecificVariantIsItsOwnTarget) {
  StatusOr<Target> plain = Target::Parse("sm_90");
  StatusOr<Target> specific = Target::Parse("sm_90a");
  ASSERT_TRUE(plain.ok() && specific.ok());
  EXPECT_FALSE(*plain == *specific);  // different keys and cubins
  EXPECT_EQ(specific->compute_capability(), 90);
  // LLVM 16 emits sm_90 PTX for it; the assembler targets sm_90a.
  EXPECT_EQ(specific->llvm_cpu(), "sm_90");
  EXPECT_EQ(plain->ptx_features(), specific->ptx_features());
}

TEST(Target, DefaultIsSm90) {
  EXPECT_EQ(Target().name(), "sm_90");
  EXPECT_EQ(Target().device().name, "H100");
  EXPECT_TRUE(Target() == *Target::Parse("sm_90"));
}

TEST(Target, MalformedSpellingsNameTheRule) {
  for (const char* bad :
       {"",       "sm",     "sm_",         "sm_9",        "sm_9000",     "SM_90",  "sm90",
        "sm_90b", "sm_9a0", "compute_90",  " sm_90",      "sm_90 ",      "sm_-90", "auto",
        "sm_90/", "/h200",  "sm_90/h200/", "sm_90/h 200", "sm_90//h200", "h200"}) {
    StatusOr<Target> t = Target::Parse(bad);
    ASSERT_FALSE(t.ok()) << "'" << bad << "' parsed";
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("is not a GPU architecture like sm_80"), std::string::npos)
        << t.status().message();
  }
}

TEST(Target, UnknownArchitectureListsTheSupportedOnes) {
  for (const char* unknown : {"sm_70", "sm_87", "sm_100", "sm_80a", "sm_120a"}) {
    StatusOr<Target> t = Target::Parse(unknown);
    ASSERT_FALSE(t.ok()) << unknown;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    const std::string& m = t.status().message();
    EXPECT_NE(m.find("'" + std::string(unknown) + "' is not supported"), std::string::npos) << m;
    EXPECT_NE(m.find(Target::SupportedList()), std::string::npos) << m;
  }
}

TEST(Target, SupportedTableIsConsistent) {
  std::set<std::string> names;
  int previous = 0;
  for (const Target& t : Target::Supported()) {
    EXPECT_TRUE(names.insert(t.name()).second) << t.name() << " listed twice";
    EXPECT_GE(t.compute_capability(), previous) << t.name();
    previous = t.compute_capability();
    // Every row names a device of the table, and parses back to itself.
    EXPECT_NE(FindDevice(t.device().name), nullptr) << t.name();
    EXPECT_EQ(t.name().rfind(t.arch(), 0), 0u) << t.name();
    StatusOr<Target> again = Target::Parse(t.name());
    ASSERT_TRUE(again.ok()) << t.name();
    EXPECT_TRUE(*again == t);
    EXPECT_EQ(t.llvm_cpu().substr(0, 3), "sm_");
    EXPECT_EQ(t.ptx_features().substr(0, 4), "+ptx");
  }
  EXPECT_EQ(Target::SupportedList(), "sm_75, sm_80, sm_86, sm_89, sm_90, sm_90/h200, sm_90a");
}

}  // namespace
}  // namespace stitch
