// Runs the real stitchctl binary the way a user would and checks its output and exit codes.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

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
