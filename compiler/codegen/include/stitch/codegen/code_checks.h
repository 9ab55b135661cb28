// Static checks of a compiled kernel: what its PTX and cubin really do, set against what its
// plan promised and what the target needs to reach its bandwidth. Each check reads only the
// compiled code and the plan, so it runs without a GPU; each is a signal that predicted a
// slow kernel on a real one (a planned vector split into scalar accesses, local memory, a
// cubin whose registers cost the occupancy the plan counted on, too few loads in flight for
// the memory's latency, too many instructions per element, an inner loop slower to issue than
// its bytes are to move).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stitch/codegen/codegen.h"
#include "stitch/codegen/ptx_summary.h"
#include "stitch/codegen/sass_summary.h"
#include "stitch/ir/graph.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/plan.h"

namespace stitch {

// What the checks read of one kernel. FactsOf fills it from a compile; a kernel kept as
// files (a PTX, a cubin and its plan) fills it by hand.
struct KernelCodeFacts {
  std::string name;
  KernelKind kind = KernelKind::kLoop;
  ThreadMapping mapping;  // the plan's: launch, vector width, estimated registers, work
  // Elements of the kernel's largest buffer (its iteration space at full shapes).
  int64_t elements = 0;
  // The widest access the plan promises to that buffer's inputs and outputs, in bytes: the
  // vector width times the widest full-size element, at most 16; 0 when it promises none.
  int promised_load_bytes = 0;
  int promised_store_bytes = 0;
  std::string ptx;
  // The cubin's SASS (sass_summary.h); "" where the kernel was not assembled or no
  // disassembler was at hand, and the checks then read loads in flight from the PTX.
  std::string sass;
  // From the assembler's report and the cubin; 0 when the kernel was not assembled.
  int registers = 0;
  int local_bytes = 0;  // stack and spilled bytes per thread
  int instructions = 0;
};

// The widest access the plan promises a `kind` kernel with `vector_width` lanes on buffers of
// `element_bytes`-byte elements: their product, at most 16 bytes; 0 where the kind does not
// vectorise its full-size accesses (loop, row-stitch and column-reduce kernels do) or the width
// is 1.
int PromisedAccessBytes(KernelKind kind, int vector_width, int element_bytes);

// Returns the facts of `kernel`, compiled from `spec` of a plan for `g`, its cubin
// disassembled with `nvdisasm` where that is an executable.
KernelCodeFacts FactsOf(const Graph& g, const KernelSpec& spec, const CompiledKernel& kernel,
                        const std::string& nvdisasm = DefaultNvdisasmPath());

// The figures the checks compare, per kernel.
struct KernelCodeFigures {
  PtxMemorySummary ptx;
  // Blocks resident per SM with the plan's estimated registers, and with the cubin's (equal
  // to the first when the kernel was not assembled).
  int planned_blocks_per_sm = 0;
  int assembled_blocks_per_sm = 0;
  // The most global load bytes a thread keeps in flight: the SASS's widest burst where the
  // facts have SASS, else the PTX's (which ptxas's schedule may lengthen or split).
  int load_burst_bytes = 0;
  bool load_burst_from_sass = false;
  // Global load bytes in flight on a busy SM: its resident threads (the grid's blocks spread
  // over the SMs, at most assembled_blocks_per_sm each) times load_burst_bytes.
  int64_t bytes_in_flight_per_sm = 0;
  // What a busy SM needs in flight: the device's bandwidth share times its DRAM latency
  // (Little's law), or the kernel's whole load per busy SM when that is less.
  int64_t bytes_in_flight_needed = 0;
  // Instructions a thread runs per element of the kernel's iteration space: the cubin's
  // instructions, once per pass of the grid-stride loop over the elements a thread handles
  // per pass; in a row or column kernel that steps through its rows in loop mode, the
  // PTX's share in innermost loops once per trip (a vector per step). 0 when the kernel
  // was not assembled.
  double instructions_per_element = 0;
  // The time the SMs take to start the grid's blocks, each SM starting its share one after
  // another at the interval measured on the device (cost_model.h, fit-4's block starts; 0
  // where none was measured), and the time the kernel's bytes take at the device's fitted
  // bandwidth.
  double block_start_seconds = 0;
  double bytes_seconds = 0;
  // What the "block_starts" check lets the starts take: kBlockStartShareBound of the bytes'
  // time, or the launch's fitted overhead where that is more (starts shorter than a launch
  // do not set a kernel's time).
  double block_start_bound_seconds = 0;
  // Of the innermost SASS loops that move global memory (sass_summary.h), the one that takes
  // longest to issue against the time its bytes take: one trip's instructions and global
  // bytes, and the time every thread's trips take to issue at the fitted rate (an SM's
  // schedulers each issuing one warp instruction per issue_seconds) over the time their bytes
  // take at the fitted bandwidth. 0 without SASS, without such a loop, or on a device whose
  // model has no issue rate. The whole kernel's instructions per element cannot see a loop
  // that one phase of a global kernel, or a row in loop mode, runs many times.
  int loop_instructions = 0;
  int loop_global_bytes = 0;
  double loop_issue_share = 0;
};

// The share of its bytes' time an innermost loop may take to issue, for the "loop_issue"
// check. #17's batch statistics, one f16 element a load, took 77 instructions per 8 bytes,
// 1.01 of their bytes' time on the H100 at the fitted rates; with 16-byte loads, its kernel's
// most issue-bound loop takes 56 per 16 bytes (0.37). #30's Threefry rounds take 0.78.
inline constexpr double kLoopIssueShareBound = 0.75;

// The share of its bytes' time a kernel's block starts may take, for the "block_starts"
// check. Loops whose grids started blocks for as long as their bytes took ran 10-34% slower
// on the H200 than the same loops with half the blocks (suite rows #16, #18 and #25 in
// testdata/gpu/h200/2026-11-30_844bafc/mappings.csv); those that ran at bandwidth took half
// their bytes' time or less to start (#9, #23, #30).
inline constexpr double kBlockStartShareBound = 0.75;

// One check's verdict.
struct CodeCheck {
  // "width", "generic", "local", "registers", "in_flight", "instructions", "block_starts",
  // "loop_issue"
  std::string name;
  bool ok = true;
  std::string detail;  // what was found against what was expected
};

// The bound on instructions per element for a kernel of `kind`, for the "instructions"
// check.
double InstructionsPerElementBound(KernelKind kind);

// Returns the figures of `facts` on `device`.
KernelCodeFigures FiguresOf(const KernelCodeFacts& facts, const GpuDevice& device);

// Runs every check on `facts`, whose figures on the device are `figures` (FiguresOf), in the
// order of CodeCheck::name's list. Checks that need the cubin (registers, local memory from
// the report, instructions) pass when the kernel was not assembled.
std::vector<CodeCheck> CheckKernelCode(const KernelCodeFacts& facts,
                                       const KernelCodeFigures& figures);

}  // namespace stitch
