// The static code checks (code_checks.h) on the kernels that the first H100 run measured
// as slow: the PTX and cubins that commit ef5c71b shipped for suite rows #1, #5, #13 and
// #19 (testdata/gpu/h100_80gb_hbm3/2026-11-26_ef5c71b/kernels, with how they were made and
// checked against Nsight Compute). Each check the H100's evidence points at must fail on
// them; today's kernels for the same rows pass those checks (suite_codegen_checks_test).
#include "stitch/codegen/code_checks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "stitch/codegen/codegen.h"
#include "stitch/ir/dtype.h"
#include "stitch/plan/gpu_device.h"

namespace stitch {
namespace {

const std::string kFixtures =
    std::string(STITCH_SOURCE_DIR) + "/testdata/gpu/h100_80gb_hbm3/2026-11-26_ef5c71b/kernels/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

KernelKind KindNamed(const std::string& name) {
  for (KernelKind k : {KernelKind::kLoop, KernelKind::kRowReduce, KernelKind::kColumnReduce,
                       KernelKind::kRowStitch, KernelKind::kGlobalStitch}) {
    if (KernelKindName(k) == name) return k;
  }
  ADD_FAILURE() << "unknown kernel kind " << name;
  return KernelKind::kLoop;
}

std::array<uint32_t, 3> Dims3(const nlohmann::json& j) {
  return {j[0].get<uint32_t>(), j[1].get<uint32_t>(), j[2].get<uint32_t>()};
}

// The widest element among `buffers` of `elements` elements, in bytes.
int WidestElement(const nlohmann::json& buffers, int64_t elements) {
  int bytes = 0;
  for (const nlohmann::json& b : buffers) {
    int64_t n = 1;
    for (int64_t d : b["shape"]["dims"]) n *= d;
    const std::optional<DType> dtype = ParseDType(b["shape"]["dtype"].get<std::string>());
    EXPECT_TRUE(dtype.has_value()) << b["shape"]["dtype"];
    if (dtype && n == elements) bytes = std::max(bytes, static_cast<int>(DTypeBytes(*dtype)));
  }
  return bytes;
}

// The facts of the one kernel in `row`'s fixture: the plan's mapping from plan.json, the
// PTX, and the cubin read the way stitchd reads it (instructions) or, for the registers the
// commit's assembler did not report, as cuobjdump read them from the same cubin.
KernelCodeFacts FixtureFacts(const std::string& row) {
  const nlohmann::json plan = nlohmann::json::parse(ReadFile(kFixtures + row + "/plan.json"));
  const nlohmann::json& k = plan["kernels"][0];
  const nlohmann::json& m = k["spec"]["mapping"];
  KernelCodeFacts f;
  f.name = k["name"];
  f.kind = KindNamed(k["kind"]);
  f.mapping.launch.grid = Dims3(m["grid"]);
  f.mapping.launch.block = Dims3(m["block"]);
  f.mapping.vector_width = m["vector_width"];
  f.mapping.threads_per_row = m["threads_per_row"];
  f.mapping.rows_per_block = m["rows_per_block"];
  f.mapping.values_per_thread = m["values_per_thread"];
  f.mapping.loads_per_step = m["loads_per_step"];
  f.mapping.shared_bytes = m["shared_bytes"];
  f.mapping.registers_per_thread = m["registers_per_thread_estimate"];
  f.mapping.work_items = m["work_items"];
  f.mapping.bytes_loaded = m["bytes_loaded"];
  f.mapping.bytes_stored = m["bytes_stored"];
  f.elements = k["elements"];
  f.promised_load_bytes = PromisedAccessBytes(f.kind, f.mapping.vector_width,
                                              WidestElement(k["spec"]["inputs"], f.elements));
  f.promised_store_bytes = PromisedAccessBytes(f.kind, f.mapping.vector_width,
                                               WidestElement(k["spec"]["outputs"], f.elements));
  f.ptx = ReadFile(kFixtures + row + "/" + f.name + ".ptx");
  const std::string cubin = ReadFile(kFixtures + row + "/" + f.name + ".cubin");
  f.instructions = CubinInstructions(cubin, f.name);
  // cuobjdump -sass counted the same function's instructions from the same cubin.
  EXPECT_EQ(f.instructions,
            k["measured_from_cubin"]["sass_instructions_per_function"][f.name].get<int>())
      << row;
  f.registers = k["measured_from_cubin"]["registers"];
  f.local_bytes = k["measured_from_cubin"]["local_bytes"];
  return f;
}

std::set<std::string> Failed(const KernelCodeFacts& f) {
  std::set<std::string> failed;
  const GpuDevice& h100 = *FindDevice("H100");
  const KernelCodeFigures x = FiguresOf(f, h100);
  std::printf(
      "%s: load %d B / store %d B (promised %d / %d), %d registers, %d blocks/SM (planned %d), "
      "%lld B in flight per SM (need %lld), %.1f instructions per element\n",
      f.name.c_str(), x.ptx.widest_global_load, x.ptx.widest_global_store, f.promised_load_bytes,
      f.promised_store_bytes, f.registers, x.assembled_blocks_per_sm, x.planned_blocks_per_sm,
      static_cast<long long>(x.bytes_in_flight_per_sm),
      static_cast<long long>(x.bytes_in_flight_needed), x.instructions_per_element);
  for (const CodeCheck& c : CheckKernelCode(f, x)) {
    if (!c.ok) {
      failed.insert(c.name);
      std::printf("  fails %s: %s\n", c.name.c_str(), c.detail.c_str());
    }
  }
  return failed;
}

// #1, BERT's bias + layernorm: rows re-read in loop mode with 4-byte scalar accesses where
// the plan promised 16-byte vectors (1.6x slower than torch.compile).
TEST(CodeChecksOnTheFirstH100Kernels, Row1ScalarAccessesWhereVectorsWerePromised) {
  const std::set<std::string> failed = Failed(FixtureFacts("row01"));
  EXPECT_TRUE(failed.count("width"));
  EXPECT_TRUE(failed.count("registers"));
}

// #5, layernorm over rows of 12,288 f16: 2-byte loads, one 1024-thread block per SM, too
// few bytes in flight (2.4x slower).
TEST(CodeChecksOnTheFirstH100Kernels, Row5TooFewBytesInFlight) {
  const std::set<std::string> failed = Failed(FixtureFacts("row05"));
  EXPECT_TRUE(failed.count("width"));
  EXPECT_TRUE(failed.count("in_flight"));
}

// #13, the transposed softmax: 2-byte transposed loads, ~200 instructions per element by
// Nsight's count (4.5x slower).
TEST(CodeChecksOnTheFirstH100Kernels, Row13NarrowTransposedLoadsAndTooManyInstructions) {
  const std::set<std::string> failed = Failed(FixtureFacts("row13"));
  EXPECT_TRUE(failed.count("width"));
  EXPECT_TRUE(failed.count("in_flight"));
  EXPECT_TRUE(failed.count("instructions"));
}

// #19, EfficientNet's batch-norm gradient: per-channel values recomputed per element, ~150
// instructions per element by Nsight's count, at 96 registers (3.7x slower).
TEST(CodeChecksOnTheFirstH100Kernels, Row19TooManyInstructionsPerElement) {
  const std::set<std::string> failed = Failed(FixtureFacts("row19"));
  EXPECT_TRUE(failed.count("instructions"));
  EXPECT_TRUE(failed.count("registers"));
}

}  // namespace
}  // namespace stitch
