// Checks that fail on today's code, listed with their causes, for the suite's static and
// emulator checks (tests/bench/suite_*_checks_test.cc). The list is strict: a listed gap that
// starts passing fails its test, so a list only shrinks as the code improves.
#pragma once

#include <span>
#include <string_view>

#include "stitch/driver/compile.h"

namespace stitch::testing {

struct KnownGap {
  int id;             // the suite row
  const char* check;  // the check's name in its test
  const char* why;    // the cause, as evidence shows it
};

// Returns the gap of row `id` for `check` in `gaps`, or nullptr when none is listed.
inline const KnownGap* GapOf(std::span<const KnownGap> gaps, int id, std::string_view check) {
  for (const KnownGap& g : gaps) {
    if (g.id == id && check == g.check) return &g;
  }
  return nullptr;
}

// The options stitchd compiles with for an H100: sm_90, cubins assembled.
inline CompileOptions Sm90Compile() {
  CompileOptions o;
  o.codegen.target = *Target::Parse("sm_90");
  return o;
}

}  // namespace stitch::testing
