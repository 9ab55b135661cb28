// The node tier: bundles in a local RocksDB, bounded in bytes with least-recently-used
// eviction, plus a few named counters that must survive a restart (the fleet-level totals
// the daemon exports).
//
// Thread-safety: all methods may be called concurrently. Writes are atomic (one WriteBatch
// each). Errors: Open fails with UNAVAILABLE when the directory cannot be created or the
// database cannot be opened (another process holding it included), naming the path.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "stitch/cache/kernel_store.h"

namespace stitch::cache {

struct RocksDbOptions {
  std::string path;                              // created if absent
  uint64_t capacity_bytes = 10ull << 30;         // LRU bound over stored entry sizes
  uint64_t block_cache_bytes = 64ull << 20;      // RocksDB's block cache
};

class RocksDbStore : public KernelStore {
 public:
  // Opens (creating if needed) the store at options.path.
  static StatusOr<std::unique_ptr<RocksDbStore>> Open(const RocksDbOptions& options);

  // Returns the counters last saved, or an empty map for a new store.
  virtual StatusOr<std::map<std::string, double>> LoadCounters() const = 0;

  // Replaces the saved values of the named counters, atomically.
  virtual Status SaveCounters(const std::map<std::string, double>& counters) = 0;

  // Flushes memtables and closes the database; later calls fail with UNAVAILABLE.
  // The destructor calls it.
  virtual Status Close() = 0;
};

}  // namespace stitch::cache
