// The node tier: bundles in a local RocksDB, bounded in bytes with least-recently-used
// eviction, plus a few named counters that must survive a restart (the fleet-level totals
// the daemon exports) and the GPU times jobs measured per key.
//
// Layout: entries (key -> envelope, see entry.h) in the default column family; per-key LRU
// metadata (access sequence number, entry size) in "lru", from which Open rebuilds the
// recency order; counters in "counters"; measured runtimes (key -> v1::KernelRuntimes) in
// "runtimes", which the LRU bound does not cover: they outlive their bundles. Writes go to
// RocksDB's WAL without fsync: a crashed process loses nothing, a lost machine may lose the last
// writes (a cache can afford that).
//
// Thread-safety: all methods may be called concurrently, Close included (it waits for calls
// in flight). Writes are atomic (one WriteBatch each). Errors: Open fails with UNAVAILABLE
// when the directory cannot be created or the database cannot be opened (another process
// holding it included), naming the path; I/O failures later are UNAVAILABLE (DATA_LOSS when
// RocksDB reports its own files corrupt).
//
// A failed write (a full disk) is logged once and counted (StoreStats::write_errors); later
// writes fail at once without touching the database, except for one try a second, which
// first calls DB::Resume() to clear RocksDB's background error, so the store writes again as
// soon as there is space. Reads keep working meanwhile. RocksDB's own log goes to the
// process's log (spdlog), not to a LOG file in the store's directory.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "stitch/cache/kernel_store.h"
#include "stitch/v1/runtimes.pb.h"

namespace stitch::cache {

struct RocksDbOptions {
  std::string path;                          // created if absent
  uint64_t capacity_bytes = 10ull << 30;     // LRU bound over stored envelope sizes
  uint64_t block_cache_bytes = 64ull << 20;  // RocksDB's block cache
};

class RocksDbStore : public KernelStore {
 public:
  // Opens (creating if needed) the store at options.path, rebuilds its LRU order, and evicts
  // least-recently-used entries if they exceed options.capacity_bytes (the bound may have
  // shrunk since the last run). Returns the store, or UNAVAILABLE naming the path.
  static StatusOr<std::unique_ptr<RocksDbStore>> Open(const RocksDbOptions& options);

  // Returns the counters last saved, or an empty map for a new store; UNAVAILABLE once
  // closed.
  virtual StatusOr<std::map<std::string, double>> LoadCounters() const = 0;

  // Replaces the saved values of the named counters, atomically; counters not named keep
  // their values. Values are stored as their IEEE-754 bit pattern, so they load exactly.
  virtual Status SaveCounters(const std::map<std::string, double>& counters) = 0;

  // Returns every runtime record saved, in key order. A value that does not parse, or holds
  // another key's record, is skipped with a warning. UNAVAILABLE once closed, or (DATA_LOSS
  // for RocksDB's own corruption) when a read fails.
  virtual StatusOr<std::vector<v1::KernelRuntimes>> LoadRuntimes() const = 0;

  // Writes the records, each replacing the one saved under its key, in one atomic batch.
  // INVALID_ARGUMENT for a record without a key; UNAVAILABLE once closed or when the write
  // fails.
  virtual Status SaveRuntimes(const std::vector<v1::KernelRuntimes>& records) = 0;

  // Calls `visit` with the key and bundle of every entry, most recently used first, and
  // writes nothing: recency is left as it was, and an entry that does not decode or holds
  // another key's bundle is skipped and left for the next Get to drop. Entries Put or erased
  // while it runs may or may not be visited. `visit` must not call this store. Returns the
  // number of entries skipped, the first non-OK Status of `visit` (which stops the walk), or
  // UNAVAILABLE (DATA_LOSS for RocksDB's own corruption) when the store is closed or a read
  // fails.
  using EntryVisitor = std::function<Status(std::string_view key, const v1::KernelBundle& bundle)>;
  virtual StatusOr<uint64_t> ForEach(const EntryVisitor& visit) const = 0;

  // Flushes memtables and closes the database, releasing its lock. Returns the first flush
  // or close error. Afterwards Get, Put, Erase and the counter and runtime
  // calls fail with
  // UNAVAILABLE, List is empty, and Close returns OK. The destructor calls it.
  virtual Status Close() = 0;
};

}  // namespace stitch::cache
