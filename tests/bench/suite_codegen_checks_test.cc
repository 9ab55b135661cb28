// Static checks of the code shipped for the suite's 30 rows and for random graphs, read from
// the PTX and the assembler's report without a GPU. Each is a signal that predicted a slow
// row on the H100: a planned vector split into scalar accesses, accesses through generic
// addresses, local memory (a stack frame or spills).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>

#include "stitch/codegen/ptx_summary.h"
#include "stitch/driver/compile.h"
#include "suite/suite.h"
#include "support/random_graph.h"

namespace stitch::suite {
namespace {

// The width the plan promises for a kernel's widest access to its full-size buffers: the
// vector width times the widest element, at most 16 bytes. 0 when nothing is promised.
struct Promise {
  int load_bytes = 0;
  int store_bytes = 0;
};

Promise Promised(const Graph& g, const KernelSpec& k) {
  Promise p;
  const int width = k.mapping.vector_width;
  if (width <= 1 || (k.kind != KernelKind::kLoop && k.kind != KernelKind::kRowStitch)) return p;
  int64_t full = 0;
  for (const auto* list : {&k.inputs, &k.outputs}) {
    for (int id : *list) full = std::max(full, g.nodes[id].shape.elements());
  }
  auto widest = [&](const std::vector<int>& buffers) {
    int bytes = 0;
    for (int id : buffers) {
      const Shape& s = g.nodes[id].shape;
      if (s.elements() == full) bytes = std::max<int>(bytes, static_cast<int>(DTypeBytes(s.dtype)));
    }
    return std::min(16, bytes * width);
  };
  p.load_bytes = widest(k.inputs);
  p.store_bytes = widest(k.outputs);
  return p;
}

// Checks that fail on today's code, each with its cause. A gap that starts passing fails the
// test too, so the list only shrinks.
struct KnownGap {
  int id;
  const char* check;  // "width" or "local"
  const char* why;
};
constexpr KnownGap kKnownGaps[] = {
    {3, "local", "ptxas caps the 256-thread kernel at 64 registers and spills 4 bytes"},
    {7, "width", "bf16 is i16 in LLVM 16's NVPTX backend, whose widest i16 vector is 8 bytes"},
    {8, "width", "bf16 is i16 in LLVM 16's NVPTX backend, whose widest i16 vector is 8 bytes"},
    {9, "width", "bf16 is i16 in LLVM 16's NVPTX backend, whose widest i16 vector is 8 bytes"},
    {13, "width", "the input is read transposed, 2 bytes at a time: no shared-memory tiles yet"},
    {24, "width", "the input is read transposed, 4 bytes at a time: no shared-memory tiles yet"},
};

const KnownGap* GapOf(int id, const std::string& check) {
  for (const KnownGap& g : kKnownGaps) {
    if (g.id == id && check == g.check) return &g;
  }
  return nullptr;
}

// What one kernel's checks found.
struct Findings {
  bool width_ok = true;
  bool local_ok = true;
};

CompileOptions FullCompile() {
  CompileOptions o;
  o.codegen.target = *Target::Parse("sm_90");
  return o;
}

// Checks every shipped kernel of `r`, prints one line per kernel, and returns what the width
// and local-memory checks found over all of them; those two are asserted by the callers.
Findings CheckShipped(const std::string& what, const CompileResult& r) {
  Findings f;
  EXPECT_EQ(r.kernels.size(), r.plan.kernels.size()) << what;
  if (r.kernels.size() != r.plan.kernels.size()) return f;
  for (size_t i = 0; i < r.kernels.size(); ++i) {
    const CompiledKernel& k = r.kernels[i];
    const KernelSpec& spec = r.plan.kernels[i];
    const PtxMemorySummary s = SummarizePtx(k.ptx);
    const Promise p = Promised(r.graph, spec);
    std::printf(
        "%s %-26s %-13s width %d: widest load %2d B (promised %2d), store %2d B "
        "(promised %2d), registers %3d, local %d B\n",
        what.c_str(), k.name.c_str(), std::string(KernelKindName(k.kind)).c_str(),
        spec.mapping.vector_width, s.widest_global_load, p.load_bytes, s.widest_global_store,
        p.store_bytes, k.assembly.registers, k.assembly.stack_bytes + k.assembly.spill_store_bytes);
    SCOPED_TRACE(what + " " + k.name);
    EXPECT_EQ(s.generic_accesses, 0) << "global accesses lost their address space";
    f.local_ok &=
        s.local_accesses == 0 &&
        (!k.assembly.reported || k.assembly.stack_bytes + k.assembly.spill_store_bytes == 0);
    f.width_ok &= s.widest_global_load >= p.load_bytes && s.widest_global_store >= p.store_bytes;
  }
  return f;
}

class SuiteCodegenChecks : public ::testing::TestWithParam<int> {};

TEST_P(SuiteCodegenChecks, ShippedKernelsKeepTheirPromises) {
  StatusOr<SuiteEntry> entry = BuildSuiteEntry(GetParam());
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  StatusOr<CompileResult> r = CompileGraph(entry->graph, FullCompile());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Findings f = CheckShipped("#" + std::to_string(GetParam()), *r);
  for (const auto& [check, ok, message] :
       {std::tuple<std::string, bool, const char*>{"width", f.width_ok,
                                                   "the plan's vector accesses are not in the PTX"},
        {"local", f.local_ok, "a shipped kernel uses local memory (stack or spills)"}}) {
    if (const KnownGap* gap = GapOf(GetParam(), check)) {
      EXPECT_FALSE(ok) << "known gap '" << check << "' of #" << GetParam()
                       << " is closed: remove it from kKnownGaps (" << gap->why << ")";
      if (!ok) std::printf("known gap (%s): %s\n", check.c_str(), gap->why);
    } else {
      EXPECT_TRUE(ok) << message;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, SuiteCodegenChecks, ::testing::Range(1, kSuiteSize + 1),
                         [](const auto& info) { return "id" + std::to_string(info.param); });

TEST(RandomGraphCodegenChecks, ShippedKernelsKeepTheirPromises) {
  const uint64_t base = 7100;
  std::printf("random graphs: seeds %llu..%llu\n", static_cast<unsigned long long>(base),
              static_cast<unsigned long long>(base + 11));
  int local_kernels = 0;
  for (uint64_t seed = base; seed < base + 12; ++seed) {
    testing::RandomGraphBuilder builder =
        testing::RandomGraphBuilder::Large(seed, int64_t{1} << 22);
    const Graph g = builder.Build();
    StatusOr<CompileResult> r = CompileGraph(g, FullCompile());
    ASSERT_TRUE(r.ok()) << "seed " << seed << ": " << r.status().ToString();
    const Findings f = CheckShipped("seed " + std::to_string(seed), *r);
    EXPECT_TRUE(f.width_ok) << "seed " << seed << ": the plan's vector accesses are not in the PTX";
    // Local memory is printed, not asserted, here: grid-barrier kernels cap their registers
    // to stay co-resident, and ptxas's own register targets spill a few bytes in some
    // random graphs (the suite rows assert it, with their known gaps).
    local_kernels += f.local_ok ? 0 : 1;
  }
  std::printf("random graphs with local memory in a shipped kernel: %d of 12\n", local_kernels);
}

TEST(PtxSummary, ReadsWidthsSpacesAndPredicates) {
  const PtxMemorySummary s = SummarizePtx(
      "\tld.param.u64 %rd1, [p];\n"
      "\tld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd2];\n"
      "\t@%p1 ld.global.nc.b16 %h1, [%rd3];\n"
      "\tst.global.v2.b32 [%rd4], {%r1, %r2};\n"
      "\tld.f32 %f5, [%rd5];\n"
      "\tst.local.u32 [%rd6], %r3;\n"
      "\tld.shared.f32 %f6, [%r4];\n");
  EXPECT_EQ(s.widest_global_load, 16);
  EXPECT_EQ(s.global_loads_by_bytes[16], 1);
  EXPECT_EQ(s.global_loads_by_bytes[2], 1);
  EXPECT_EQ(s.widest_global_store, 8);
  EXPECT_EQ(s.generic_accesses, 1);
  EXPECT_EQ(s.local_accesses, 1);
  EXPECT_EQ(SummarizePtx("not ptx at all").widest_global_load, 0);
}

}  // namespace
}  // namespace stitch::suite
