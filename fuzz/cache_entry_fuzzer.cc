// Fuzzes the cache's entry decoding: envelope framing, the payload's SHA-256, the format
// version, then the bundle's own seal. Stored values come back from disk and from the
// cluster, where they may be torn, bit-flipped or written by another version.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "quiet_protobuf.h"
#include "stitch/cache/entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  stitch::StatusOr<stitch::v1::KernelBundle> bundle = stitch::cache::DecodeEntry(bytes);
  if (!bundle.ok()) return 0;
  (void)stitch::cache::CheckSealed(*bundle);
  // A decoded bundle, sealed and encoded again, decodes again.
  stitch::v1::KernelBundle resealed = *bundle;
  stitch::cache::SealBundle(resealed);
  if (!stitch::cache::DecodeEntry(stitch::cache::EncodeEntry(resealed)).ok()) std::abort();
  return 0;
}
