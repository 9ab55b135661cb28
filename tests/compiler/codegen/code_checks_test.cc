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
#include <vector>

#include "stitch/codegen/codegen.h"
#include "stitch/codegen/sass_summary.h"
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

// The fixture's facts with its cubin's SASS, as FactsOf reads a compile's; nullopt where no
// disassembler was found when the build was configured.
std::optional<KernelCodeFacts> WithSass(KernelCodeFacts f, const std::string& row) {
  StatusOr<std::string> sass =
      DisassembleCubin(ReadFile(kFixtures + row + "/" + f.name + ".cubin"), DefaultNvdisasmPath());
  if (!sass.ok()) return std::nullopt;
  f.sass = std::move(sass).value();
  return f;
}

std::set<std::string> Failed(const KernelCodeFacts& f, const char* device = "H100") {
  std::set<std::string> failed;
  const KernelCodeFigures x = FiguresOf(f, *FindDevice(device));
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

// #5, layernorm over rows of 12,288 f16: 2-byte loads, one 1024-thread block per SM (2.4x
// slower). Its PTX converts each loaded half before the next load, so read from the PTX it
// keeps 2 bytes a thread in flight; ptxas's schedule issues ten of them together (20 B a
// thread, 20 KiB per SM, above the 9.5 KiB the H100's latency needs), and Nsight Compute
// agrees that loads in flight were not what held it back: 28% of its warps' time waited on
// memory, its SM pipes were half busy with 15.7 million load requests.
TEST(CodeChecksOnTheFirstH100Kernels, Row5NarrowLoadsNotTooFewInFlight) {
  const KernelCodeFacts f = FixtureFacts("row05");
  const std::set<std::string> from_ptx = Failed(f);
  EXPECT_TRUE(from_ptx.count("width"));
  EXPECT_TRUE(from_ptx.count("in_flight"));
  const std::optional<KernelCodeFacts> with_sass = WithSass(f, "row05");
  if (!with_sass) GTEST_SKIP() << "no nvdisasm: the SASS reading is not checked";
  EXPECT_EQ(WidestSassLoadBurst(with_sass->sass), 20);
  const std::set<std::string> from_sass = Failed(*with_sass);
  EXPECT_TRUE(from_sass.count("width"));
  EXPECT_FALSE(from_sass.count("in_flight"));
}

// #13, the transposed softmax: 2-byte transposed loads, ~200 instructions per element by
// Nsight's count (4.5x slower). Its warps waited on memory (67% of their time) because each
// load request took 16 sectors, which the width check and the emulator's sector count catch;
// by its SASS it keeps 24 B a thread in flight, 30 KiB per SM.
TEST(CodeChecksOnTheFirstH100Kernels, Row13NarrowTransposedLoadsAndTooManyInstructions) {
  const KernelCodeFacts f = FixtureFacts("row13");
  const std::set<std::string> failed = Failed(f);
  EXPECT_TRUE(failed.count("width"));
  EXPECT_TRUE(failed.count("in_flight"));  // as read from the PTX
  EXPECT_TRUE(failed.count("instructions"));
  const std::optional<KernelCodeFacts> with_sass = WithSass(f, "row13");
  if (!with_sass) GTEST_SKIP() << "no nvdisasm: the SASS reading is not checked";
  EXPECT_EQ(WidestSassLoadBurst(with_sass->sass), 24);
  const std::set<std::string> from_sass = Failed(*with_sass);
  EXPECT_TRUE(from_sass.count("width"));
  EXPECT_TRUE(from_sass.count("instructions"));
  EXPECT_FALSE(from_sass.count("in_flight"));
}

// #19, EfficientNet's batch-norm gradient: per-channel values recomputed per element, ~150
// instructions per element by Nsight's count, at 96 registers (3.7x slower). Its SASS keeps
// 20 B a thread in flight on the 640 threads its registers leave an SM: 12.8 KiB, above the
// H100's 9.5 KiB but short of the 19.2 KiB the H200's bandwidth and latency need.
TEST(CodeChecksOnTheFirstH100Kernels, Row19TooManyInstructionsPerElement) {
  const KernelCodeFacts f = FixtureFacts("row19");
  const std::set<std::string> failed = Failed(f);
  EXPECT_TRUE(failed.count("instructions"));
  EXPECT_TRUE(failed.count("registers"));
  const std::optional<KernelCodeFacts> with_sass = WithSass(f, "row19");
  if (!with_sass) GTEST_SKIP() << "no nvdisasm: the SASS reading is not checked";
  EXPECT_EQ(WidestSassLoadBurst(with_sass->sass), 20);
  EXPECT_FALSE(Failed(*with_sass).count("in_flight"));
  EXPECT_TRUE(Failed(*with_sass, "H200").count("in_flight"));
}

// #18's normalize loop as it shipped in testdata/gpu/h200/2026-11-30_844bafc: 401,408 blocks
// of 128 threads, 2-element f16 vectors, over four 205.5 MB tensors (three read, one
// written). The H200 ran it in 245.2 us, and in 183.5 us as 200,704 blocks of 4-element
// vectors (mappings.csv): its SMs spent as long starting blocks as moving its bytes. The
// check holds the grid's starts to 75% of its bytes' time; a grid of one wave passes.
TEST(CodeChecksOnTheH200Sweep, Row18ManyShortBlocksStartForAsLongAsTheirBytesTake) {
  KernelCodeFacts f;
  f.name = "stitch_k1_loop";
  f.kind = KernelKind::kLoop;
  f.elements = int64_t{128} * 112 * 112 * 64;
  f.mapping.vector_width = 2;
  f.mapping.launch.block = {128, 1, 1};
  f.mapping.launch.grid = {401408, 1, 1};
  f.mapping.work_items = f.elements;
  f.mapping.bytes_loaded = 3 * f.elements * 2;
  f.mapping.bytes_stored = f.elements * 2;
  for (const char* device : {"H100", "H200"}) {
    EXPECT_TRUE(Failed(f, device).count("block_starts")) << device;
    const KernelCodeFigures x = FiguresOf(f, *FindDevice(device));
    EXPECT_GT(x.block_start_seconds, 0.9 * x.bytes_seconds) << device;
  }
  f.mapping.vector_width = 4;
  f.mapping.launch.grid = {200704, 1, 1};
  EXPECT_FALSE(Failed(f, "H200").count("block_starts"));
  // A device without a measured start interval has nothing to check.
  f.mapping.vector_width = 2;
  f.mapping.launch.grid = {401408, 1, 1};
  EXPECT_FALSE(Failed(f, "A100").count("block_starts"));
  // Starts shorter than a launch pass whatever the bytes: a block of a few elements.
  f.elements = f.mapping.work_items = 1024;
  f.mapping.bytes_loaded = 3 * 1024 * 2;
  f.mapping.bytes_stored = 1024 * 2;
  f.mapping.launch.grid = {4, 1, 1};
  EXPECT_FALSE(Failed(f, "H100").count("block_starts"));
}

// The SASS reading on machine code written out: a burst runs until an instruction reads or
// overwrites a register a load of it writes, an address depends on one, or control leaves
// the straight line.
TEST(SassLoadBursts, RunUntilALoadedRegisterIsNeeded) {
  // Three independent loads, the address arithmetic between them touching no loaded
  // register (IMAD.WIDE writes R14 and R15, neither loaded yet), then a use of R5.
  EXPECT_EQ(WidestSassLoadBurst("        /*0240*/ LDG.E.U16.CONSTANT R5, desc[UR4][R12.64] ;\n"
                                "        /*0250*/ IMAD.WIDE R14, R43, 0x2, R6 ;\n"
                                "        /*0260*/ LDG.E.128.CONSTANT R8, desc[UR4][R14.64] ;\n"
                                "        /*0270*/ @P0 LDG.E.64 R16, desc[UR4][R20.64] ;\n"
                                "        /*0280*/ HADD2.F32 R5, -RZ, R5.H0_H0 ;\n"
                                "        /*0290*/ LDG.E R22, desc[UR4][R24.64] ;\n"),
            2 + 16 + 8);
  // A load whose address was loaded waits for it: two bursts of 4 B.
  EXPECT_EQ(WidestSassLoadBurst("        /*0000*/ LDG.E.64 R2, desc[UR4][R10.64] ;\n"
                                "        /*0010*/ LDG.E R4, desc[UR4][R2.64] ;\n"),
            8);
  // Overwriting the third register of a 128-bit load in flight waits for it.
  EXPECT_EQ(WidestSassLoadBurst("        /*0000*/ LDG.E.128 R8, desc[UR4][R2.64] ;\n"
                                "        /*0010*/ MOV R10, 0x1 ;\n"
                                "        /*0020*/ LDG.E.128 R12, desc[UR4][R4.64] ;\n"),
            16);
  // Uniform and special registers, RZ and predicates are not general registers.
  const std::string first = "        /*0000*/ LDG.E R4, desc[UR4][R2.64] ;\n";
  const std::string second = "        /*0040*/ LDG.E R5, desc[UR4][R2.64] ;\n";
  EXPECT_EQ(WidestSassLoadBurst(first + "        /*0010*/ S2R R9, SR_TID.X ;\n" +
                                "        /*0020*/ ISETP.GE.AND P0, PT, R9, UR4, PT ;\n" + second),
            8);
  // Storing a loaded value, a label and a branch each end a burst.
  for (const char* between : {"        /*0030*/ STG.E desc[UR4][R6.64], R4 ;\n", ".L_x_3:\n",
                              "        /*0030*/ @P0 BRA `(.L_x_3) ;\n"}) {
    EXPECT_EQ(WidestSassLoadBurst(first + between + second), 4) << between;
  }
  EXPECT_EQ(WidestSassLoadBurst("        /*0000*/ LDS R4, [R2] ;\n"), 0);
}

// Innermost loops on machine code written out: a body runs from a label to a branch back to
// it, a loop holding another is not innermost, and a forward branch makes no loop.
TEST(SassLoops, InnermostBodiesRunFromALabelToTheBranchBackToIt) {
  const std::string sass =
      "        /*0000*/ S2R R0, SR_TID.X ;\n"
      ".L_x_0:\n"
      "        /*0010*/ IMAD R2, R0, 0x4, RZ ;\n"
      ".L_x_1:\n"
      "        /*0020*/ LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;\n"
      "        /*0030*/ @P1 BRA `(.L_x_2) ;\n"
      "        /*0040*/ LDG.E.U16 R8, desc[UR4][R6.64] ;\n"
      ".L_x_2:\n"
      "        /*0050*/ FADD R9, R4, R5 ;\n"
      "        /*0060*/ @!P0 BRA `(.L_x_1) ;\n"
      "        /*0070*/ STG.E.64 desc[UR4][R10.64], R8 ;\n"
      "        /*0080*/ @P2 BRA `(.L_x_0) ;\n"
      "        /*0090*/ LDS R4, [R2] ;\n"
      ".L_x_3:\n"
      "        /*00a0*/ LDS R5, [R2+0x4] ;\n"
      "        /*00b0*/ BRA `(.L_x_3) ;\n"
      "        /*00c0*/ EXIT ;\n";
  const std::vector<SassLoop> loops = InnermostSassLoops(sass);
  ASSERT_EQ(loops.size(), 2u);
  // .L_x_1's body: both loads (the forward branch's sides both counted), the add, the branch.
  EXPECT_EQ(loops[0].instructions, 5);
  EXPECT_EQ(loops[0].global_bytes, 16 + 2);
  // A loop over shared memory moves no global bytes.
  EXPECT_EQ(loops[1].instructions, 2);
  EXPECT_EQ(loops[1].global_bytes, 0);
  EXPECT_TRUE(InnermostSassLoops("        /*0000*/ @P0 BRA `(.L_x_9) ;\n.L_x_9:\n").empty());
}

// The loop check on a phase written out, on the H100's fitted rates: one f16 element a load
// (a 2-byte load, 19 instructions) takes longer to issue than its bytes, a 16-byte vector
// with the same instructions does not, and kernels without SASS pass.
TEST(SassLoops, TheLoopCheckSetsATripsIssueAgainstItsBytes) {
  auto facts_with_loop = [](const char* load) {
    KernelCodeFacts f;
    f.name = "phase";
    f.kind = KernelKind::kGlobalStitch;
    f.elements = 1 << 20;
    f.mapping.launch.block = {256, 1, 1};
    f.mapping.launch.grid = {132, 1, 1};
    f.sass = std::string(".L_x_0:\n        /*0000*/ ") + load + " R4, desc[UR4][R2.64] ;\n";
    for (int i = 0; i < 17; ++i) f.sass += "        /*0010*/ IMAD R2, R0, 0x4, R2 ;\n";
    f.sass += "        /*0020*/ @P0 BRA `(.L_x_0) ;\n";
    return f;
  };
  const GpuDevice& h100 = *FindDevice("H100");
  const KernelCodeFacts scalar = facts_with_loop("LDG.E.U16.CONSTANT");
  const KernelCodeFigures x = FiguresOf(scalar, h100);
  EXPECT_EQ(x.loop_instructions, 19);
  EXPECT_EQ(x.loop_global_bytes, 2);
  EXPECT_GT(x.loop_issue_share, 1.0);
  EXPECT_TRUE(Failed(scalar).count("loop_issue"));
  const KernelCodeFacts vector = facts_with_loop("LDG.E.128.CONSTANT");
  EXPECT_NEAR(FiguresOf(vector, h100).loop_issue_share, x.loop_issue_share / 8, 1e-9);
  EXPECT_FALSE(Failed(vector).count("loop_issue"));
  KernelCodeFacts without_sass = scalar;
  without_sass.sass.clear();
  EXPECT_EQ(FiguresOf(without_sass, h100).loop_issue_share, 0);
  EXPECT_FALSE(Failed(without_sass).count("loop_issue"));
}

TEST(SassLoadBursts, DisassemblingNeedsTheProgram) {
  const StatusOr<std::string> sass = DisassembleCubin("not a cubin", "/nonexistent/nvdisasm");
  EXPECT_EQ(sass.status().code(), StatusCode::kUnavailable);
  if (DefaultNvdisasmPath().empty()) GTEST_SKIP() << "no nvdisasm";
  const StatusOr<std::string> bad = DisassembleCubin("not a cubin", DefaultNvdisasmPath());
  EXPECT_EQ(bad.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace stitch
