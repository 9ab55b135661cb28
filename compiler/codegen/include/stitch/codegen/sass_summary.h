// SASS, the machine code the assembler made of a kernel, read for what its PTX cannot tell:
// which of a thread's global loads run in flight together. ptxas reorders a kernel's
// instructions: it hoists independent loads above the instructions that use earlier ones
// (suite row #14's twelve 2-byte loads, one after another in SASS, each used at once in its
// PTX) and unrolls loops further (a row reduction's four loads a trip become sixteen), but it
// also splits a PTX burst its registers cannot hold (#1's 316 bytes a thread become 116).
// So Little's law is read from SASS where a disassembler is at hand.
//
// Thread-safety: pure functions; DisassembleCubin runs a program in a private folder per
// call.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "stitch/base/status.h"

namespace stitch {

// The nvdisasm found when stitchd was built (the CUDA toolkit's, else the one scripts/setup
// installs into .venv-tools from PyPI), or "" where there was none.
std::string DefaultNvdisasmPath();

// Returns the SASS of `cubin` as `nvdisasm -c` prints it. UNAVAILABLE when `nvdisasm` is not
// an executable; INTERNAL, with its message, when it fails (a cubin it cannot read).
StatusOr<std::string> DisassembleCubin(const std::string& cubin, const std::string& nvdisasm);

// The most bytes of global loads (LDG) one thread issues before it has to wait for any of
// them, in the SASS text `sass`: a burst runs until an instruction reads or overwrites a
// register one of its loads writes, a load's address depends on one of them, or control
// leaves the straight line (a label, a branch, a barrier, an exit). 0 when there is no LDG.
int WidestSassLoadBurst(std::string_view sass);

// One innermost loop of a kernel's SASS: a body from a label to a branch back to it that holds
// no other such body. What a thread runs per trip: its instructions (the branch back
// included, both sides of any branch inside counted), and the bytes its global loads (LDG)
// and stores (STG) move.
struct SassLoop {
  int instructions = 0;
  int global_bytes = 0;
};

// The innermost loops of the SASS text `sass`, in the text's order; none when it has no loop.
std::vector<SassLoop> InnermostSassLoops(std::string_view sass);

}  // namespace stitch
