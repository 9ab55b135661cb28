// Target: one spelling rule, one table, each target resolved once to the device that plans
// and prices its kernels.
#include <gtest/gtest.h>

#include <set>

#include "stitch/plan/target.h"

namespace stitch {
namespace {

TEST(Target, ParsesSupportedSpellings) {
  for (const char* spelling : {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"}) {
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
  for (const char* bad : {"", "sm", "sm_", "sm_9", "sm_9000", "SM_90", "sm90", "sm_90b", "sm_9a0",
                          "compute_90", " sm_90", "sm_90 ", "sm_-90", "auto"}) {
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
    StatusOr<Target> again = Target::Parse(t.name());
    ASSERT_TRUE(again.ok()) << t.name();
    EXPECT_TRUE(*again == t);
    EXPECT_EQ(t.llvm_cpu().substr(0, 3), "sm_");
    EXPECT_EQ(t.ptx_features().substr(0, 4), "+ptx");
  }
  EXPECT_EQ(Target::SupportedList(), "sm_75, sm_80, sm_86, sm_89, sm_90, sm_90a");
}

}  // namespace
}  // namespace stitch
