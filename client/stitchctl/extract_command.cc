#include <cstdio>
#include <filesystem>
#include <iostream>

#include "commands.h"
#include "graph_input.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/graph_proto.h"

namespace stitch::ctl {

int RunExtract(const ExtractArgs& args) {
  StatusOr<std::string> text = ReadFile(args.module);
  if (!text.ok()) return Fail(text.status().ToString());
  HloImportOptions options;
  options.source_name = args.module;
  StatusOr<std::vector<Graph>> graphs = ExtractMemoryIntensiveSubgraphs(*text, options);
  if (!graphs.ok()) return Fail(graphs.status().ToString());
  std::error_code ec;
  std::filesystem::create_directories(args.out_dir, ec);
  if (ec) return Fail("cannot create " + args.out_dir + ": " + ec.message());
  for (size_t i = 0; i < graphs->size(); ++i) {
    const Graph& g = (*graphs)[i];
    char prefix[32];
    std::snprintf(prefix, sizeof prefix, "%03zu_", i);
    std::string path = (std::filesystem::path(args.out_dir) / (prefix + g.name + ".json")).string();
    Status s = WriteFile(path, ToJson(g));
    if (!s.ok()) return Fail(s.ToString());
    std::printf("%-60s %5zu nodes %3zu params %3zu outputs\n", path.c_str(), g.nodes.size(),
                g.Parameters().size(), g.outputs.size());
  }
  std::printf("%zu subgraphs written to %s\n", graphs->size(), args.out_dir.c_str());
  return 0;
}

}  // namespace stitch::ctl
