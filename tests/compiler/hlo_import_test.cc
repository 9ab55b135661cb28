#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "stitch/compiler/hlo_import.h"
#include "stitch/compiler/verifier.h"

namespace stitch {
namespace {

std::string ReadFile(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(HloCorpusScan, Scan) {
  namespace fs = std::filesystem;
  std::string root = std::string(STITCH_CORPUS_DIR) + "/hlo";
  std::vector<std::string> files;
  for (auto& e : fs::recursive_directory_iterator(root)) {
    if (e.path().extension() == ".hlo") files.push_back(fs::relative(e.path(), root).string());
  }
  std::sort(files.begin(), files.end());
  int ok = 0;
  for (auto& f : files) {
    HloImportOptions o;
    o.source_name = f;
    auto r = ImportHloModules(ReadFile(root + "/" + f), o);
    if (r.ok()) ++ok;
    printf("%s | %s\n", f.c_str(), r.ok() ? ("OK " + std::to_string(r->size())).c_str() : r.status().ToString().c_str());
  }
  printf("imported %d of %zu\n", ok, files.size());
}

}  // namespace
}  // namespace stitch
