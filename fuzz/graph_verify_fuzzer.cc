// Fuzzes the graph verifier on arbitrary stitch.v1.Graph bytes: parsing, conversion to the
// IR, and verification must fail with a Status or succeed; a graph that passes Verify must
// also survive what the daemon does next with it (the canonical key) and round-trip.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "quiet_protobuf.h"
#include "stitch/ir/graph_proto.h"
#include "stitch/ir/key.h"
#include "stitch/ir/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  stitch::StatusOr<stitch::Graph> graph = stitch::ParseGraphBinary(bytes);
  if (!graph.ok()) return 0;
  if (!stitch::Verify(*graph).ok()) return 0;
  const std::string canonical = stitch::CanonicalForm(*graph);
  (void)stitch::ComputeKey(*graph, stitch::KeyContext{});
  // A verified graph written out and read back is the same graph.
  stitch::StatusOr<stitch::Graph> again = stitch::ParseGraphBinary(stitch::ToBinary(*graph));
  if (!again.ok() || !stitch::Verify(*again).ok() || stitch::CanonicalForm(*again) != canonical) {
    std::abort();
  }
  return 0;
}
