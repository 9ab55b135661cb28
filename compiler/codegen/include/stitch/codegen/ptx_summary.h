// What a kernel's PTX does with memory, read from its text: the width of every global load
// and store, and whether it touches local memory. The static checks of the generated code
// (suite_codegen_checks_test) compare these with what the plan promised, since a planned
// vector that the backend split into scalar accesses is invisible anywhere else without a GPU.
#pragma once

#include <array>
#include <string>

namespace stitch {

struct PtxMemorySummary {
  // Instructions per access width in bytes (1, 2, 4, 8 or 16; index = bytes).
  std::array<int, 17> global_loads_by_bytes{};
  std::array<int, 17> global_stores_by_bytes{};
  int widest_global_load = 0;   // bytes; 0 when the kernel loads nothing from global memory
  int widest_global_store = 0;  // bytes; 0 when it stores nothing
  // ld.local / st.local instructions: a stack frame or spills, which the emitters never ask
  // for.
  int local_accesses = 0;
  // Global accesses through generic addresses (plain ld/st of a cvta'd pointer): the
  // backend lost the address space, and with it the read-only path and vector merging.
  int generic_accesses = 0;
  // The most bytes of global loads one thread issues back to back before it reads any of
  // the loaded values (within one basic block, up to a branch or barrier): the loads the
  // code keeps in flight per thread, for Little's law, as opposed to what the plan promised
  // (ThreadMapping::load_bytes_in_flight_per_thread). ptxas's schedule may hoist loads
  // above their uses, and split a burst its registers cannot hold: the SASS tells
  // (sass_summary.h).
  int widest_load_burst = 0;
  // Instructions in the text, and those inside innermost loops (a body from a label to a
  // branch back to it, holding no other such body): the share of the code a thread runs
  // once per trip of its innermost loop rather than once per pass.
  int instructions = 0;
  int innermost_loop_instructions = 0;
};

// Summarises `ptx` (one or more entry functions). Never fails: text that is not PTX gives
// an empty summary.
PtxMemorySummary SummarizePtx(const std::string& ptx);

}  // namespace stitch
