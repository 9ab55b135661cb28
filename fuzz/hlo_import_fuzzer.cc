// Fuzzes the HLO text parser and importer: any text must import or fail with a Status;
// every graph it returns must pass the verifier, as ImportHloModules promises.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  stitch::HloImportOptions options;
  options.source_name = "fuzz";
  // The daemon's default limits: an input that is slow or large under them is slow or large
  // for stitchd too.
  stitch::StatusOr<std::vector<stitch::Graph>> graphs = stitch::ImportHloModules(text, options);
  if (graphs.ok()) {
    for (const stitch::Graph& g : *graphs) {
      if (!stitch::Verify(g, options.limits).ok()) std::abort();
    }
  }
  // The extraction path parses the same text with its own walk over the computations.
  (void)stitch::ExtractMemoryIntensiveSubgraphs(text, options);
  return 0;
}
