// The kernel cache's one interface. Every tier (the in-memory LRU, the node's RocksDB, and
// the cluster tier on Redis Cluster) implements KernelStore, and TieredStore chains them, so the
// daemon sees one store whatever sits behind it.
//
// Thread-safety: every KernelStore implementation is safe to call from many threads at once.
// Errors: Get and Put return a non-OK Status only for failures of the backing medium (I/O,
// a closed database). A corrupt or outdated entry is not an error: it is a miss, logged,
// counted, and erased so that the next Put replaces it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/v1/kernel_bundle.pb.h"

namespace stitch::cache {

// Bundles are immutable once stored; hits share them without copying.
using BundlePtr = std::shared_ptr<const v1::KernelBundle>;

// Where an entry was found.
enum class Tier { kMemory, kDisk, kCluster };

// Returns "memory", "disk" or "cluster".
std::string_view TierName(Tier tier);

// A found entry: the shared bundle and the tier that held it.
struct Hit {
  BundlePtr bundle;
  Tier tier = Tier::kMemory;
};

// Occupancy and lifetime counters of one tier.
struct StoreStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;           // as the tier accounts them (serialized entry sizes)
  uint64_t capacity_bytes = 0;  // the bound past which least-recently-used entries go
  uint64_t evictions = 0;       // entries evicted for space since the store was opened
  uint64_t corrupt = 0;         // entries dropped for a bad digest, version or encoding
  uint64_t write_errors = 0;    // writes that did not reach the medium (a full disk, I/O errors)
};

// A line of `stitchctl cache ls`.
struct EntryInfo {
  std::string key;
  std::string target;
  uint32_t kernels = 0;
  uint64_t bytes = 0;
  double compile_seconds = 0;
  std::string plan;  // first line of the bundle's plan
};

class KernelStore {
 public:
  virtual ~KernelStore() = default;

  // Which tier this store is; a TieredStore reports the tier of the store that hit.
  virtual Tier tier() const = 0;

  // Returns the bundle stored under `key` (marking it most recently used), or nullopt on a
  // miss. An entry that fails its version or digest check is a miss (see the file comment).
  virtual StatusOr<std::optional<Hit>> Get(std::string_view key) = 0;

  // Stores `bundle` under `key`, atomically replacing any previous entry, then evicts
  // least-recently-used entries until the store is within capacity. A bundle larger than
  // the whole capacity is not stored (OK is returned; the next Get misses). Returns
  // INVALID_ARGUMENT when `bundle` is not sealed (see entry.h) or its key differs from `key`.
  virtual Status Put(std::string_view key, const BundlePtr& bundle) = 0;

  // Removes the entry under `key`; OK when there was none.
  virtual Status Erase(std::string_view key) = 0;

  // Returns up to `limit` entries, most recently used first.
  virtual std::vector<EntryInfo> List(size_t limit) const = 0;

  // Returns the tier's occupancy and counters.
  virtual StoreStats Stats() const = 0;
};

}  // namespace stitch::cache
