// What the stitchd binary is built from: the daemon links the compiler's driver, never the
// reference layer (interpreter, .npy tensors, shape scaling) that tests, benchmarks and
// stitchctl use to check kernels.
#include <gtest/gtest.h>

#include <string>

#include "support/command.h"

namespace stitch {
namespace {

// Returns the demangled names of the symbols stitchd defines.
std::string DefinedSymbols() {
  int status = -1;
  std::string out = testing::RunCommand(
      "nm -C --defined-only " + std::string(STITCH_BINARY_DIR) + "/daemon/stitchd", &status);
  EXPECT_EQ(status, 0) << "nm failed on stitchd";
  return out;
}

TEST(StitchdBinary, LinksTheDriverButNotTheReferenceLayer) {
  const std::string symbols = DefinedSymbols();
  // The driver is there (the daemon compiles with it)...
  EXPECT_NE(symbols.find("stitch::CompileVerifiedGraph("), std::string::npos);
  // ...and nothing of the reference layer is.
  for (const char* reference : {"stitch::Evaluate(", "stitch::ReadNpy(", "stitch::WriteNpy(",
                                "stitch::ScaleForEmulation(", "stitch::Compare("}) {
    EXPECT_EQ(symbols.find(reference), std::string::npos) << reference;
  }
}

}  // namespace
}  // namespace stitch
