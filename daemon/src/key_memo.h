// Remembers the cache key the daemon computed for the exact bytes of a request, so a job
// asking again for a subgraph it asked for before skips import, verification and
// canonicalisation: the hot path of a hit is one SHA-256 and two hash lookups.
//
// The memo is keyed by the SHA-256 of the request bytes, so it only ever returns a key the
// daemon itself derived from identical bytes; a client still cannot choose its key.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace stitch::daemon {

class KeyMemo {
 public:
  // Holds at most `capacity` request digests; past it the memo starts afresh (a miss only
  // costs the full derivation once more).
  explicit KeyMemo(size_t capacity) : capacity_(capacity) {}

  // Returns the 32-byte SHA-256 of `request_bytes`.
  static std::string Digest(std::string_view request_bytes);

  // Returns the key remembered for `digest`, or nullopt.
  std::optional<std::string> Find(const std::string& digest) const;

  // Remembers `key` for `digest`.
  void Remember(const std::string& digest, const std::string& key);

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::string> keys_;
};

}  // namespace stitch::daemon
