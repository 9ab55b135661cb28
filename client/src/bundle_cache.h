// The in-process cache of bundles this process already received, keyed by a digest of the
// request's bytes. Bounded LRU; entries are shared, immutable bundles.
//
// Thread-safety: all methods may be called from many threads at once.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "stitch/v1/kernel_bundle.pb.h"
#include "stitch/v1/kernel_service.pb.h"

namespace stitch::client::internal {

// Returns the SHA-256 (32 raw bytes) of the deterministic serialization of `request`.
std::string RequestDigest(const v1::CompileRequest& request);

class BundleCache {
 public:
  struct Entry {
    std::shared_ptr<const v1::KernelBundle> bundle;
    std::string key;  // the daemon's key
  };

  // `capacity` 0 keeps nothing.
  explicit BundleCache(size_t capacity) : capacity_(capacity) {}

  // Returns the entry for `digest` and marks it most recently used.
  std::optional<Entry> Find(const std::string& digest);

  // Inserts or replaces the entry for `digest`, evicting the least recently used beyond
  // the capacity.
  void Insert(const std::string& digest, Entry entry);

  size_t size() const;

  // The lock fork() must not copy in a locked state (see client.cc).
  std::mutex& mutex() { return mu_; }

 private:
  using Order = std::list<std::string>;  // most recently used first
  struct Slot {
    Entry entry;
    Order::iterator position;
  };

  const size_t capacity_;
  mutable std::mutex mu_;
  Order order_;
  std::unordered_map<std::string, Slot> slots_;
};

}  // namespace stitch::client::internal
