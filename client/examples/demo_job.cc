// A demo training job: it does what a framework integration does at graph-compile time.
// It splits an HLO module into memory-intensive subgraphs, asks the node's stitchd for the
// kernels of each (falling back to "framework kernels" when the daemon cannot help), then
// pretends to run a number of training steps and reports the invocations.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "stitch/client/client.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/graph_proto.h"

int main(int argc, char** argv) {
  CLI::App app{"Ask stitchd for the stitched kernels of a model's subgraphs"};
  std::string module_path, address = "unix:///run/stitchd/stitchd.sock";
  int steps = 100;
  app.add_option("module", module_path, "HLO module text of one training step")->required();
  app.add_option("--daemon", address, "stitchd address: unix:///path or host:port");
  app.add_option("--steps", steps, "training steps whose kernel launches are reported");
  CLI11_PARSE(app, argc, argv);

  std::ifstream in(module_path);
  if (!in) {
    std::fprintf(stderr, "demo_job: cannot read %s\n", module_path.c_str());
    return 1;
  }
  std::stringstream text;
  text << in.rdbuf();
  stitch::HloImportOptions import_options;
  import_options.source_name = module_path;
  auto subgraphs = stitch::ExtractMemoryIntensiveSubgraphs(text.str(), import_options);
  if (!subgraphs.ok()) {
    std::fprintf(stderr, "demo_job: %s\n", subgraphs.status().ToString().c_str());
    return 1;
  }

  stitch::client::ClientOptions options;
  options.address = address;
  // The model is a PyTorch/XLA training step: without stitchd it runs XLA's kernels, so its
  // savings are priced against the XLA model.
  options.fallback = stitch::v1::FALLBACK_XLA;
  stitch::client::Client client(options);
  std::map<std::string, int> outcomes;
  std::string first_fallback;
  size_t kernels = 0;
  auto start = std::chrono::steady_clock::now();
  for (const stitch::Graph& g : *subgraphs) {
    stitch::v1::CompileRequest request;
    *request.mutable_graph() = stitch::ToProto(g);
    stitch::client::Result r = client.Compile(request);
    ++outcomes[stitch::client::OutcomeName(r.outcome)];
    if (!r.ok()) {
      if (first_fallback.empty()) first_fallback = g.name + ": " + r.reason;
      continue;
    }
    kernels += static_cast<size_t>(r.bundle->kernels_size());
    // Each step launches this subgraph's kernels once.
    client.RecordInvocations(r.key, static_cast<uint64_t>(steps));
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto usage = client.FlushUsage();

  std::printf("%zu subgraphs in %.2f s:", subgraphs->size(), seconds);
  for (const auto& [name, n] : outcomes) std::printf(" %s=%d", name.c_str(), n);
  std::printf("; %zu kernels\n", kernels);
  if (!first_fallback.empty()) std::printf("first fallback: %s\n", first_fallback.c_str());
  if (usage.ok()) {
    std::printf("reported %d steps of usage for %u bundles\n", steps, usage->accepted());
  } else {
    std::printf("usage report failed: %s\n", usage.status().ToString().c_str());
  }
  return 0;
}
