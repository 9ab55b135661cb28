// gpu_bench --mappings: every loop and row-stitched kernel of each suite row's stitched plan
// timed under each mapping the scheduler chose among (mapping_variants.h), beside the cost
// model's price of it. The scheduler picks a loop kernel's block size, vector width and grid,
// and a row kernel's threads per row, by the planning model, whose stretch of a partial last
// wave favoured narrow vectors that measured slower (suite row #18's normalize loop), and
// whose short row kernels keep few loads in flight (#1, #4); these are the measurements the
// choices and the model's terms are to be calibrated on. Global kernels with column phases
// are timed with more bytes in flight per column lane (#20's phase keeps a third of #18's).
//
// Per variant: the kernel's median duration among the plan's (CUPTI, as gpu_bench's kernel
// times), and, with verification, whether the plan's outputs equal those of the plan as it
// ships, at full shape on the same random inputs (a mapping changes which thread computes an
// element, not how).
//
// Thread-safety: as Gpu's, one thread at a time.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "gpu/gpu_runner.h"
#include "stitch/base/status.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/target.h"
#include "suite/suite.h"

namespace stitch::gpu {

struct MappingSweepOptions {
  Target target;                         // compiled for
  const GpuDevice* priced_on = nullptr;  // the device-table entry the model prices on
  TimingOptions timing;
  bool verify = true;
};

// One variant of one kernel; -1 (or "-") where not measured.
struct MappingRow {
  int id = 0;
  int kernel = 0;  // index in the stitched plan
  std::string kernel_name;
  int candidate = -1;  // index among the kernel's candidates; -1: the plan's own
  // The plan's kernels [kernel, kernel + span) the variant runs as `kernels` kernels: 1 and 1
  // but for a regrouping, whose figures below are its kernels' sums (the time, the prices),
  // its first kernel's (blocks, vector width) or left out (waves, stretch, registers,
  // instructions).
  int span = 1;
  int kernels = 1;
  std::string mapping;  // VariantText
  std::string code;     // the re-mapped kernel's digest (code_digest.h)
  int64_t blocks = 0;
  int vector_width = 1;
  double waves = 0;                  // blocks over the co-resident slots, as the model counts them
  double imbalance = 1;              // the model's stretch of memory time (KernelCost::imbalance)
  double planning_us = -1;           // the planning model's price, which the scheduler chose by
  double model_us = -1;              // the current model's, with the assembler's registers
  double model_unstretched_us = -1;  // the same with memory time at the mean slot's pace
  // The scheduler's estimate of the kernel's registers per thread, which it chose the
  // mapping by, and the assembler's registers and cubin instructions (0 without a cubin).
  int registers_planned = 0;
  int registers = 0;
  int instructions = 0;
  double kernel_us = -1;      // measured: the kernel's median duration
  std::string matches = "-";  // outputs equal to the shipped mapping's: "yes", "NO", "-"
  std::string error;
};

// The variants of `e`'s stitched plan's loop, row-stitched and column-phase global kernels,
// priced and, given a GPU, timed and verified. A row whose plan has none gives none; a compile
// failure gives one row with the error.
std::vector<MappingRow> SweepMappings(const suite::SuiteEntry& e,
                                      const MappingSweepOptions& options, Gpu* gpu);

// The table, and a summary per kernel: the fastest mapping measured against the shipped one,
// and where the current model's cheapest is not the fastest; and, timed or not, how far the
// scheduler's register estimates are from the assembler's.
// `header`: print the table's header first; a sweep prints it once, then each suite row's
// lines as that row finishes.
void PrintMappingTable(const std::vector<MappingRow>& rows, std::ostream& out, bool header = true);
void PrintMappingSummary(const std::vector<MappingRow>& rows, bool timed, std::ostream& out);

// Writes the rows as CSV (one line per variant, the fields above), replacing `path` whole:
// a sweep rewrites it after each suite row, so a run cut short keeps the rows it finished.
Status WriteMappingCsv(const std::string& path, const std::vector<MappingRow>& rows);

// True when every row compiled and, timed, was measured and matched the shipped mapping.
bool MappingSweepOk(const std::vector<MappingRow>& rows, bool timed);

}  // namespace stitch::gpu
