// Serialized bundles for the hot path. A cache hit is answered with a reference to bytes
// serialized once per bundle, not with a fresh serialization and copy per request: on a node
// serving thousands of hits a second, that copy is a measurable share of each hit.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "stitch/cache/kernel_store.h"
#include "stitch/v1/kernel_service.pb.h"

namespace stitch::daemon {

class ResponseBytes {
 public:
  // Keeps at most `max_bytes` of serialized bundles; past it the set starts afresh.
  explicit ResponseBytes(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Returns the serialized CompileResponse {source, key, bundle, runtimes} as a buffer whose
  // bundle part references the shared serialization of `bundle`. `runtimes` may be null (the
  // response then carries none).
  grpc::ByteBuffer Response(v1::CompileResponse::Source source, const std::string& key,
                            const cache::BundlePtr& bundle,
                            const v1::KernelRuntimes* runtimes = nullptr);

 private:
  std::shared_ptr<const std::string> Serialized(const cache::BundlePtr& bundle);

  const size_t max_bytes_;
  std::mutex mu_;
  size_t bytes_ = 0;
  // Keyed by the bundle's address; the entry holds the bundle, so the address stays its own.
  std::unordered_map<const v1::KernelBundle*,
                     std::pair<cache::BundlePtr, std::shared_ptr<const std::string>>>
      serialized_;
};

}  // namespace stitch::daemon
