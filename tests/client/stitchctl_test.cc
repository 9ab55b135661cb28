// Runs the real stitchctl binary the way a user would and checks its output and exit codes.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>

#include "support/command.h"

namespace {

namespace fs = std::filesystem;

using stitch::testing::Outcome;
using stitch::testing::RunStitchctl;

std::string Corpus(const std::string& rel) { return std::string(STITCH_CORPUS_DIR) + "/" + rel; }

fs::path TempDir(const std::string& name) {
  fs::path p =
      fs::temp_directory_path() / ("stitchctl_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

TEST(Stitchctl, CompilePrintsKeyKernelsAndTime) {
  Outcome o = RunStitchctl("compile " + Corpus("hlo/extracted/layernorm_fwd_2d1_f32.hlo") +
                           " --target sm_80");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_NE(o.out.find("key "), std::string::npos) << o.out;
  // The stitching planner makes the layernorm one row-stitched kernel.
  EXPECT_NE(o.out.find("plan  stitch, 1 kernel(s)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("row_stitch"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("ms to PTX"), std::string::npos) << o.out;
}

TEST(Stitchctl, CompileJsonAndPtx) {
  Outcome o =
      RunStitchctl("compile " + Corpus("hlo/xla_emit_reduce_row_epilogue.hlo") + " --json --ptx");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_NE(o.out.find("\"kernels\""), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(".entry"), std::string::npos) << o.out;
}

TEST(Stitchctl, CompileDumpDirWritesEachKernelsIrAndPtx) {
  fs::path out = TempDir("dump");
  Outcome o = RunStitchctl("compile " + Corpus("hlo/xla_emit_reduce_row_epilogue.hlo") +
                           " --dump-dir " + out.string());
  ASSERT_EQ(o.exit_code, 0) << o.out;
  int bitcode = 0, ptx = 0;
  for (const auto& entry : fs::directory_iterator(out)) {
    const std::string ext = entry.path().extension().string();
    bitcode += ext == ".bc" && fs::file_size(entry.path()) > 0;
    if (ext == ".ptx") {
      ++ptx;
      std::ifstream in(entry.path());
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      EXPECT_NE(text.find(".entry"), std::string::npos) << entry.path();
    }
  }
  EXPECT_GT(ptx, 0) << o.out;
  EXPECT_EQ(bitcode, ptx) << "one portable module per kernel";
  // A daemon returns bundles without the portable IR, so the flag is refused with it.
  Outcome refused = RunStitchctl("compile " + Corpus("hlo/xla_emit_reduce_row_epilogue.hlo") +
                                 " --daemon unix:///nonexistent.sock --dump-dir " + out.string());
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.out.find("--dump-dir"), std::string::npos) << refused.out;
}

TEST(Stitchctl, RunOnEmulatorPassesAndWritesNpy) {
  fs::path out = TempDir("run");
  Outcome o = RunStitchctl("run " + Corpus("hlo/extracted/layernorm_fwd_2d1_f32.hlo") +
                           " --emulate --seed 3 --outputs " + out.string());
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_NE(o.out.find("PASS"), std::string::npos) << o.out;
  EXPECT_TRUE(fs::exists(out / "graph0_out0.npy"));

  // Feed the output back as an input of a one-parameter graph: the .npy path round trips.
  Outcome again = RunStitchctl("run " + Corpus("hlo/xla_emit_transpose_transpose_10.hlo") +
                               " --emulate --json");
  EXPECT_EQ(again.exit_code, 0) << again.out;
  EXPECT_NE(again.out.find("\"pass\": true"), std::string::npos) << again.out;
}

// A row softmax over `rows` rows of 64 features, as HLO text.
std::string RowSoftmaxHlo(int64_t rows) {
  const std::string r = std::to_string(rows);
  return "HloModule row_softmax_" + r +
         "\n\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
         "  ROOT s = f32[] add(a, b)\n}\n\nENTRY main {\n"
         "  x = f32[" +
         r + ",64]{1,0} parameter(0)\n  y = f32[64]{0} parameter(1)\n  e = f32[" + r +
         ",64]{1,0} exponential(x)\n  zero = f32[] constant(0)\n  s = f32[" + r +
         "]{0} reduce(e, zero), dimensions={1}, to_apply=add\n  b = f32[" + r +
         ",64]{1,0} broadcast(s), dimensions={0}\n  yb = f32[" + r +
         ",64]{1,0} broadcast(y), dimensions={1}\n  d = f32[" + r +
         ",64]{1,0} divide(e, b)\n  ROOT o = f32[" + r + ",64]{1,0} multiply(d, yb)\n}\n";
}

std::string WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path.string();
}

// The JSON report of `run --json` in the output (stderr may precede it).
nlohmann::json RunReport(const Outcome& o) {
  const size_t start = o.out.find('{');
  if (start == std::string::npos) return nullptr;
  return nlohmann::json::parse(o.out.substr(start), nullptr, /*allow_exceptions=*/false);
}

TEST(Stitchctl, RunWithOuterParametersRunsTheBucketsKernelsAtTheGraphsExtent) {
  std::random_device device;
  const uint64_t seed = device();
  std::printf("run --outer-parameters: seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  // Inside the bucket (32, 64], below its top: the kernels are emitted for 64 rows and must
  // stop at the graph's own.
  const int64_t rows = 33 + static_cast<int64_t>(rng() % 31);
  fs::path dir = TempDir("outer");
  const std::string file = WriteFile(dir / "softmax.hlo", RowSoftmaxHlo(rows));
  const std::string seed_flag = " --seed " + std::to_string(rng() % 1000);

  Outcome o = RunStitchctl("run " + file + " --emulate --outer-parameters 0 --json" + seed_flag);
  ASSERT_EQ(o.exit_code, 0) << rows << " rows\n" << o.out;
  nlohmann::json report = RunReport(o);
  ASSERT_TRUE(report.is_object()) << o.out;
  EXPECT_EQ(report["pass"], true) << o.out;
  EXPECT_EQ(report["served"], nlohmann::json::array({33, 64})) << o.out;
  EXPECT_FALSE(report.contains("not_generic")) << o.out;
  EXPECT_EQ(report["outputs"][0]["shape"], "f32[" + std::to_string(rows) + ",64]") << o.out;
  EXPECT_EQ(report["shipped"]["in_bounds"], true) << o.out;
  EXPECT_EQ(report["shipped"]["served"], nlohmann::json::array({33, 64})) << o.out;

  // Without the flag, the same file compiles and runs for its exact shapes.
  Outcome exact = RunStitchctl("run " + file + " --emulate --json" + seed_flag);
  ASSERT_EQ(exact.exit_code, 0) << exact.out;
  nlohmann::json exact_report = RunReport(exact);
  ASSERT_TRUE(exact_report.is_object()) << exact.out;
  EXPECT_EQ(exact_report["served"], nlohmann::json::array({0, 0})) << exact.out;
  EXPECT_NE(exact_report["key"], report["key"]);

  // Parameter 1 does not vary with the rows: the graph cannot follow an extent there, so it
  // compiles exact, runs as it is, and says why.
  Outcome not_generic =
      RunStitchctl("run " + file + " --emulate --outer-parameters 0,1 --json" + seed_flag);
  ASSERT_EQ(not_generic.exit_code, 0) << not_generic.out;
  nlohmann::json ng = RunReport(not_generic);
  ASSERT_TRUE(ng.is_object()) << not_generic.out;
  EXPECT_EQ(ng["pass"], true) << not_generic.out;
  EXPECT_EQ(ng["served"], nlohmann::json::array({rows, rows})) << not_generic.out;
  EXPECT_TRUE(ng.contains("not_generic")) << not_generic.out;

  Outcome text = RunStitchctl("run " + file + " --emulate --outer-parameters 0" + seed_flag);
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("shape-generic: extents 33..64, run at " + std::to_string(rows)),
            std::string::npos)
      << text.out;
}

TEST(Stitchctl, BadOuterParametersFailWithAMessage) {
  fs::path dir = TempDir("outer_bad");
  const std::string file = WriteFile(dir / "softmax.hlo", RowSoftmaxHlo(40));
  const std::pair<std::string, std::string> cases[] = {
      {"x", "'x' is not a parameter number"},     {"0,,1", "'' is not a parameter number"},
      {"0.5", "'0.5' is not a parameter number"}, {"-1", "-1 is negative"},
      {"2", "names parameter 2, but graph"},      {"0,0", "named twice"},
  };
  for (const auto& [flag, message] : cases) {
    Outcome o = RunStitchctl("run " + file + " --emulate --outer-parameters=" + flag);
    EXPECT_NE(o.exit_code, 0) << flag;
    EXPECT_EQ(o.out.rfind("stitchctl: ", 0), 0u) << flag << ": " << o.out;
    EXPECT_NE(o.out.find(message), std::string::npos) << flag << ": " << o.out;
    EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1) << o.out;
  }
}

TEST(Stitchctl, KeyExplainListsComponentsAndDifferences) {
  std::string f = Corpus("hlo/extracted/layernorm_fwd_2d1_f32.hlo");
  Outcome o = RunStitchctl("key " + f + " --explain");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  for (const char* c : {"graph", "target", "compiler", "options", "salt"}) {
    EXPECT_NE(o.out.find(c), std::string::npos) << c << "\n" << o.out;
  }
  Outcome d =
      RunStitchctl("key " + f + " --against " + Corpus("hlo/extracted/layernorm_fwd_4d3_f32.hlo"));
  ASSERT_EQ(d.exit_code, 0) << d.out;
  EXPECT_NE(d.out.find("graph:"), std::string::npos) << d.out;
}

TEST(Stitchctl, ExtractMobilenetWritesSubgraphsThatCompile) {
  fs::path out = TempDir("extract");
  Outcome o =
      RunStitchctl("extract " + Corpus("hlo/real_models/mobilenet_v2_pytorchxla_train_bs96.hlo") +
                   " --out " + out.string());
  ASSERT_EQ(o.exit_code, 0) << o.out;
  int count = 0;
  for (const auto& e : fs::directory_iterator(out)) {
    ++count;
    if (count > 3) continue;  // every subgraph's compile is covered by hlo_extract_test
    Outcome c = RunStitchctl("compile " + e.path().string() + " --no-cubin");
    EXPECT_EQ(c.exit_code, 0) << e.path() << "\n" << c.out;
  }
  EXPECT_GT(count, 10);
}

TEST(Stitchctl, FailuresExitNonZeroWithOneLine) {
  fs::path dir = TempDir("bad");
  std::string garbage = (dir / "garbage.bin").string();
  FILE* f = fopen(garbage.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  fputs("\x01\x02 definitely not a graph \xff", f);
  fclose(f);
  for (const std::string& args :
       {std::string("compile /nonexistent/file.hlo"), "compile " + garbage,
        "run " + Corpus("hlo/extracted/layernorm_fwd_2d1_f32.hlo") + " --emulate --inputs " +
            garbage}) {
    Outcome o = RunStitchctl(args);
    EXPECT_NE(o.exit_code, 0) << args;
    EXPECT_EQ(o.out.rfind("stitchctl: ", 0), 0u) << o.out;
    EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1) << o.out;
  }
}

}  // namespace
