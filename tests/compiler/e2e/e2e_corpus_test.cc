// Every corpus graph that imports compiles to PTX (and cubin for sm_80 and sm_90 where the
// CUDA toolkit is present) at its real shapes, and runs on the emulator, in random thread
// order, at shapes scaled by the rule in stitch/reference/shape_scaling.h, matching the
// interpreter.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "stitch/driver/compile.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/reference/shape_scaling.h"
#include "support/emulator_check.h"

namespace stitch {
namespace {

namespace fs = std::filesystem;

StatusOr<std::vector<Graph>> Import(const std::string& rel) {
  fs::path path = fs::path(STITCH_CORPUS_DIR) / "hlo" / rel;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  HloImportOptions options;
  options.source_name = rel;
  return ImportHloModules(text.str(), options);
}

// The corpus files that import. The others are out of scope (convolutions, dots, complex
// types) and hlo_import_test's table checks each one's error.
std::vector<std::string> ImportableCorpusFiles() {
  std::vector<std::string> files;
  fs::path root = fs::path(STITCH_CORPUS_DIR) / "hlo";
  if (!fs::exists(root)) return files;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || e.path().extension() != ".hlo") continue;
    std::string rel = fs::relative(e.path(), root).generic_string();
    if (Import(rel).ok()) files.push_back(rel);
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string TestName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

class CorpusGraph : public ::testing::TestWithParam<std::string> {};

TEST_P(CorpusGraph, CompilesAndMatchesInterpreterOnEmulator) {
  StatusOr<std::vector<Graph>> graphs = Import(GetParam());
  ASSERT_TRUE(graphs.ok()) << graphs.status().ToString();
  for (size_t m = 0; m < graphs->size(); ++m) {
    const Graph& g = (*graphs)[m];
    SCOPED_TRACE("module " + std::to_string(m) + " '" + g.name + "'");
    for (const char* target : {"sm_90", "sm_80"}) {
      CompileOptions options;
      options.codegen.target = *Target::Parse(target);
      StatusOr<CompileResult> r = CompileGraph(g, options);
      ASSERT_TRUE(r.ok()) << target << ": " << r.status().ToString();
      for (const CompiledKernel& k : r->kernels) {
        EXPECT_NE(k.ptx.find(".entry " + k.name), std::string::npos) << k.name;
        if (CubinAvailable(options.codegen)) {
          EXPECT_FALSE(k.cubin.empty()) << k.name;
        }
      }
    }
    std::optional<ScaledGraph> scaled = ScaleForEmulation(g);
    ASSERT_TRUE(scaled.has_value()) << "no scaled shapes fit the emulator budget";
    EXPECT_TRUE(testing::CheckOnEmulator(scaled->graph, /*seed=*/1000 + m, /*random_order=*/true));
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusGraph, ::testing::ValuesIn(ImportableCorpusFiles()),
                         TestName);

// The corpus ships in the repository, so the suite above can never be empty.
TEST(Corpus, ShipsWithTheRepository) { EXPECT_GE(ImportableCorpusFiles().size(), 60u); }

}  // namespace
}  // namespace stitch
