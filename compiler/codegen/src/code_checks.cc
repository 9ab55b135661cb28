#include "stitch/codegen/code_checks.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "stitch/plan/cost_model.h"
#include "stitch/plan/schedule.h"

namespace stitch {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The widest element among `buffers` of `elements` elements, in bytes; 0 for none.
int WidestFullSizeElement(const Graph& g, const std::vector<int>& buffers, int64_t elements) {
  int bytes = 0;
  for (int id : buffers) {
    const Shape& s = g.nodes[id].shape;
    if (s.elements() == elements) bytes = std::max(bytes, static_cast<int>(DTypeBytes(s.dtype)));
  }
  return bytes;
}

// Passes of the grid-stride loop over the whole launch: each is one block's trip through
// the loop body.
int64_t Passes(const KernelCodeFacts& f) {
  const int64_t blocks = std::max<int64_t>(f.mapping.launch.blocks(), 1);
  if (f.kind == KernelKind::kGlobalStitch || f.mapping.work_items <= 0) return blocks;
  return CeilDiv(f.mapping.work_items, std::max<int64_t>(ItemsPerPass(f.kind, f.mapping), 1));
}

// Elements of the iteration space one thread handles per run of the code outside innermost
// loops: a pass of the grid-stride loop, or the whole launch for a loop kernel that keeps each
// thread on its columns (its per-column work runs once per thread, before the loop).
double ElementsPerPass(const KernelCodeFacts& f) {
  if (f.kind == KernelKind::kLoop && f.mapping.column_period > 0) {
    return static_cast<double>(f.elements) /
           static_cast<double>(
               std::max<uint64_t>(f.mapping.launch.blocks() * f.mapping.launch.block_threads(), 1));
  }
  return static_cast<double>(f.elements) / static_cast<double>(std::max<int64_t>(Passes(f), 1)) /
         static_cast<double>(std::max<uint64_t>(f.mapping.launch.block_threads(), 1));
}

// Row and column kernels in loop mode step through their rows or columns in inner loops,
// a vector (times the loads per step) per trip, and so does a loop kernel that keeps each
// thread on its columns (its per-column work runs once, before the loop); the others handle
// a pass's elements in straight-line code (a loop kernel's vector, a thread's share of a row
// in registers).
bool StepsThroughRows(const KernelCodeFacts& f) {
  return ((f.kind == KernelKind::kRowReduce || f.kind == KernelKind::kRowStitch) &&
          f.mapping.values_per_thread == 0) ||
         f.kind == KernelKind::kColumnReduce ||
         (f.kind == KernelKind::kLoop && f.mapping.column_period > 0);
}

// Instructions per element: the cubin's instructions, split in the PTX's proportion between
// innermost loops (run once per trip) and the rest (once per pass).
double InstructionsPerElement(const KernelCodeFacts& f, const PtxMemorySummary& ptx) {
  const double per_pass = std::max(ElementsPerPass(f), 1e-9);
  if (!StepsThroughRows(f) || ptx.instructions == 0) return f.instructions / per_pass;
  const double per_trip =
      std::min(per_pass, static_cast<double>(std::max(f.mapping.vector_width, 1) *
                                             std::max(f.mapping.loads_per_step, 1)));
  const double in_loops =
      static_cast<double>(ptx.innermost_loop_instructions) / static_cast<double>(ptx.instructions);
  return f.instructions * (in_loops / per_trip + (1 - in_loops) / per_pass);
}

// KernelCodeFigures' loop_* figures of `f` on `device` at the `fitted` rates.
void SetLoopIssue(const KernelCodeFacts& f, const GpuDevice& device,
                  const CostModelParameters& fitted, KernelCodeFigures& x) {
  if (f.sass.empty() || fitted.issue_seconds <= 0) return;
  // Thread instructions the device issues per second, over the bytes it moves per second.
  const double instructions_per_byte_at_bandwidth =
      static_cast<double>(std::max(device.sms, 1)) * device.register_sub_partitions * 32 /
      fitted.issue_seconds / fitted.bandwidth_bytes_per_second;
  for (const SassLoop& loop : InnermostSassLoops(f.sass)) {
    if (loop.global_bytes == 0) continue;
    const double share = static_cast<double>(loop.instructions) /
                         static_cast<double>(loop.global_bytes) /
                         instructions_per_byte_at_bandwidth;
    if (share <= x.loop_issue_share) continue;
    x.loop_issue_share = share;
    x.loop_instructions = loop.instructions;
    x.loop_global_bytes = loop.global_bytes;
  }
}

std::string Format(const char* format, double a, double b) {
  char text[160];
  std::snprintf(text, sizeof(text), format, a, b);
  return text;
}

}  // namespace

KernelCodeFacts FactsOf(const Graph& g, const KernelSpec& spec, const CompiledKernel& kernel,
                        const std::string& nvdisasm) {
  KernelCodeFacts f;
  f.name = kernel.name;
  f.kind = spec.kind;
  f.mapping = spec.mapping;
  for (const auto* list : {&spec.inputs, &spec.outputs}) {
    for (int id : *list) f.elements = std::max(f.elements, g.nodes[id].shape.elements());
  }
  const int width = spec.mapping.vector_width;
  // A row tile loads its transposed operand p_width rows at a time (RowTileStaging); only
  // its stores take the rows' vectors.
  const bool row_tile = spec.kind == KernelKind::kRowStitch && spec.mapping.transpose_tile >= 0;
  const int load_width =
      row_tile ? static_cast<int>(RowTileStagingOf(g, spec.mapping).p_width) : width;
  f.promised_load_bytes =
      PromisedAccessBytes(spec.kind, load_width, WidestFullSizeElement(g, spec.inputs, f.elements));
  f.promised_store_bytes =
      PromisedAccessBytes(spec.kind, width, WidestFullSizeElement(g, spec.outputs, f.elements));
  // Rows staged in spans copy their staged buffers in 16-byte vectors.
  if (spec.mapping.staged_row_spans) {
    f.promised_load_bytes = kMaxVectorBytes;
    if (StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(g, spec);
        layout.ok() && !RowSpanStagingOf(g, spec, *layout).outputs.empty()) {
      f.promised_store_bytes = kMaxVectorBytes;
    }
  }
  f.ptx = kernel.ptx;
  f.registers = kernel.assembly.registers;
  f.local_bytes = kernel.assembly.stack_bytes + kernel.assembly.spill_store_bytes;
  f.instructions = kernel.assembly.instructions;
  if (!kernel.cubin.empty()) {
    StatusOr<std::string> sass = DisassembleCubin(kernel.cubin, nvdisasm);
    if (sass.ok()) f.sass = std::move(sass).value();
  }
  return f;
}

int PromisedAccessBytes(KernelKind kind, int vector_width, int element_bytes) {
  // Loop, row-stitch and column-reduce kernels vectorise their full-size accesses, and row
  // reductions their loads.
  if (vector_width <= 1 || (kind != KernelKind::kLoop && kind != KernelKind::kRowStitch &&
                            kind != KernelKind::kColumnReduce && kind != KernelKind::kRowReduce)) {
    return 0;
  }
  return std::min(16, element_bytes * vector_width);
}

double InstructionsPerElementBound(KernelKind kind) {
  switch (kind) {
    case KernelKind::kLoop:
      return 40;
    case KernelKind::kRowReduce:
    case KernelKind::kRowStitch:
    case KernelKind::kColumnReduce:
    case KernelKind::kGlobalStitch:
      return 60;
  }
  return 60;
}

KernelCodeFigures FiguresOf(const KernelCodeFacts& f, const GpuDevice& device) {
  KernelCodeFigures x;
  x.ptx = SummarizePtx(f.ptx);
  x.planned_blocks_per_sm = ResidentBlocksPerSm(device, f.mapping);
  ThreadMapping assembled = f.mapping;
  if (f.registers > 0) assembled.registers_per_thread = f.registers;
  x.assembled_blocks_per_sm = ResidentBlocksPerSm(device, assembled);

  const int64_t sms = std::max(device.sms, 1);
  const int64_t busy_blocks = std::min<int64_t>(f.mapping.launch.blocks(), Passes(f));
  const int64_t busy_sms = std::max<int64_t>(std::min(busy_blocks, sms), 1);
  const int64_t blocks_per_sm =
      std::min<int64_t>(x.assembled_blocks_per_sm, CeilDiv(std::max<int64_t>(busy_blocks, 1), sms));
  x.load_burst_from_sass = !f.sass.empty();
  x.load_burst_bytes =
      x.load_burst_from_sass ? WidestSassLoadBurst(f.sass) : x.ptx.widest_load_burst;
  x.bytes_in_flight_per_sm = blocks_per_sm * f.mapping.launch.block_threads() * x.load_burst_bytes;
  // The calibrated bandwidth, loaded latency and launch where the cost model has them (the
  // datasheet's figures elsewhere).
  const CostModelParameters fitted = CostModelParametersFor(device, kCurrentCostModel);
  if (f.mapping.bytes_loaded > 0) {
    // What the kernel must cover to run at bandwidth.
    const double need =
        fitted.bandwidth_bytes_per_second / static_cast<double>(sms) * fitted.dram_latency_seconds;
    x.bytes_in_flight_needed =
        std::min(static_cast<int64_t>(need), CeilDiv(f.mapping.bytes_loaded, busy_sms));
  }
  if (f.instructions > 0 && f.elements > 0) {
    x.instructions_per_element = InstructionsPerElement(f, x.ptx);
  }
  x.block_start_seconds =
      BlockStartSeconds(static_cast<int64_t>(f.mapping.launch.blocks()), device,
                        CostModelParametersFor(device, CostModelVersion::kFit4));
  x.bytes_seconds = static_cast<double>(f.mapping.bytes_loaded + f.mapping.bytes_stored) /
                    fitted.bandwidth_bytes_per_second;
  x.block_start_bound_seconds =
      std::max(kBlockStartShareBound * x.bytes_seconds, fitted.launch_seconds);
  SetLoopIssue(f, device, fitted, x);
  return x;
}

std::vector<CodeCheck> CheckKernelCode(const KernelCodeFacts& f, const KernelCodeFigures& x) {
  std::vector<CodeCheck> checks;
  checks.push_back(
      {"width",
       x.ptx.widest_global_load >= f.promised_load_bytes &&
           x.ptx.widest_global_store >= f.promised_store_bytes,
       Format("widest load %.0f B, store %.0f B", x.ptx.widest_global_load,
              x.ptx.widest_global_store) +
           Format(" (promised %.0f B, %.0f B)", f.promised_load_bytes, f.promised_store_bytes)});
  checks.push_back(
      {"generic", x.ptx.generic_accesses == 0,
       std::to_string(x.ptx.generic_accesses) + " global accesses through generic addresses"});
  checks.push_back({"local", x.ptx.local_accesses == 0 && f.local_bytes == 0,
                    Format("%.0f local accesses in the PTX, %.0f B of stack and spills",
                           x.ptx.local_accesses, f.local_bytes)});
  checks.push_back(
      {"registers", f.registers == 0 || x.assembled_blocks_per_sm >= x.planned_blocks_per_sm,
       Format("%.0f registers: %.0f blocks per SM", f.registers, x.assembled_blocks_per_sm) +
           Format(" (the plan counted on %.0f at %.0f registers)", x.planned_blocks_per_sm,
                  f.mapping.registers_per_thread)});
  checks.push_back({"in_flight", x.bytes_in_flight_per_sm >= x.bytes_in_flight_needed,
                    Format("%.0f B of loads in flight per SM (needed %.0f B)",
                           static_cast<double>(x.bytes_in_flight_per_sm),
                           static_cast<double>(x.bytes_in_flight_needed)) +
                        ", " + std::to_string(x.load_burst_bytes) + " B a thread by its " +
                        (x.load_burst_from_sass ? "SASS" : "PTX")});
  checks.push_back(
      {"instructions",
       f.instructions == 0 || x.instructions_per_element <= InstructionsPerElementBound(f.kind),
       Format("%.1f instructions per element (bound %.0f)", x.instructions_per_element,
              InstructionsPerElementBound(f.kind))});
  checks.push_back({"block_starts", x.block_start_seconds <= x.block_start_bound_seconds,
                    Format("%.1f us to start the blocks, %.1f us bound",
                           x.block_start_seconds * 1e6, x.block_start_bound_seconds * 1e6) +
                        Format(" (%.0f%% of the bytes' %.1f us, at least a launch)",
                               kBlockStartShareBound * 100, x.bytes_seconds * 1e6)});
  checks.push_back({"loop_issue", x.loop_issue_share <= kLoopIssueShareBound,
                    Format("innermost loop: %.0f instructions per %.0f B of global memory a trip",
                           x.loop_instructions, x.loop_global_bytes) +
                        Format(", %.2f of the bytes' time to issue (bound %.2f)",
                               x.loop_issue_share, kLoopIssueShareBound)});
  return checks;
}

}  // namespace stitch
