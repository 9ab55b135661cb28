// Writes binary seed inputs for the fuzzers whose input is protobuf: from each HLO file
// given, the graphs it imports as stitch.v1.Graph bytes, CompileRequests carrying them (and
// the text itself), and sealed cache entries. Hand-written bytes would rarely get past the
// parsers; seeds of the real shapes let the fuzzers start deep.
//
// Usage: stitch_fuzz_seeds <out_dir> <file.hlo>...  (writes <out_dir>/{graph_verify,
// kernel_request,cache_entry}/<stem>.<n>)
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "stitch/cache/entry.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/graph_proto.h"
#include "stitch/v1/kernel_service.pb.h"

namespace fs = std::filesystem;

namespace {

void Write(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A small bundle of the shape the daemon stores: one kernel, a temporary, a cost.
stitch::v1::KernelBundle BundleFor(const stitch::Graph& g, const std::string& key) {
  stitch::v1::KernelBundle b;
  b.set_key(key);
  b.set_target("sm_90");
  stitch::v1::Kernel* k = b.add_kernels();
  k->set_name(g.name + "_k0");
  k->set_ptx("//\n.version 7.8\n.target sm_90\n.address_size 64\n");
  k->set_kind("loop");
  k->mutable_launch()->set_grid_x(static_cast<uint32_t>(g.nodes.size()));
  k->mutable_launch()->set_block_x(256);
  stitch::v1::KernelParam* p = k->add_params();
  p->set_role(stitch::v1::KernelParam::INPUT);
  b.add_temporaries()->set_bytes(1024);
  b.set_plan("fused " + std::to_string(g.nodes.size()) + " nodes");
  b.mutable_cost()->set_stitched_seconds(1e-5);
  b.mutable_cost()->set_shipped("stitch");
  stitch::cache::SealBundle(b);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <out_dir> <file.hlo>...\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  for (const char* dir : {"graph_verify", "kernel_request", "cache_entry"}) {
    fs::create_directories(out / dir);
  }
  for (int i = 2; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    const std::string stem = fs::path(argv[i]).stem().string();
    stitch::StatusOr<std::vector<stitch::Graph>> graphs = stitch::ImportHloModules(text.str());
    if (!graphs.ok()) continue;  // the corpus also holds texts stitch refuses
    int n = 0;
    for (const stitch::Graph& g : *graphs) {
      const std::string name = stem + "." + std::to_string(n++);
      const std::string graph_bytes = stitch::ToBinary(g);
      Write(out / "graph_verify" / name, graph_bytes);

      stitch::v1::CompileRequest by_graph;
      *by_graph.mutable_graph() = stitch::ToProto(g);
      by_graph.set_target(n % 2 == 0 ? "sm_80" : "sm_90");
      Write(out / "kernel_request" / (name + ".graph"), by_graph.SerializeAsString());

      Write(out / "cache_entry" / name, stitch::cache::EncodeEntry(BundleFor(g, name)));
    }
    if (graphs->size() == 1) {
      stitch::v1::CompileRequest by_text;
      by_text.set_hlo_text(text.str());
      by_text.set_ptx_only(true);
      Write(out / "kernel_request" / (stem + ".hlo"), by_text.SerializeAsString());
    }
  }
  return 0;
}
