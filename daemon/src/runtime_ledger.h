// The measured runtimes a node holds, per key: merged from jobs' usage reports, restored from
// and saved to the node's RocksDB, so that they survive restarts and can be exported as the
// training data of a learned cost model.
//
// A key gets a record with its first timings; invocations reported for keys without one are
// not recorded here (the metrics count them). The ledger is bounded: past `max_keys`, timings
// for new keys are dropped and counted.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "stitch/v1/kernel_bundle.pb.h"
#include "stitch/v1/kernel_service.pb.h"
#include "stitch/v1/runtimes.pb.h"

namespace stitch::daemon {

class RuntimeLedger {
 public:
  explicit RuntimeLedger(size_t max_keys);

  // Adds records saved by an earlier run (at start, before serving). Records past max_keys
  // are dropped.
  void Restore(std::vector<v1::KernelRuntimes> records);

  // Merges `record`'s timings and invocations into the key's runtimes. The fallback timing
  // goes under `baseline` (the reporting job's, see BaselineName); the model's figures are
  // refreshed from the bundle's `cost` and `target`. Returns the key's runtimes after the
  // merge, or nullopt when the key has none (the record carried no timings, or the ledger is
  // full).
  std::optional<v1::KernelRuntimes> Merge(const v1::UsageRecord& record,
                                          const std::string& baseline, const v1::CostEstimate& cost,
                                          const std::string& target, double now_unix_seconds);

  // Returns the records changed since the previous call, and forgets that they changed.
  std::vector<v1::KernelRuntimes> TakeChanged();
  // Marks `records` changed again (after a failed save, so the next save retries them).
  void MarkChanged(const std::vector<v1::KernelRuntimes>& records);

  // Returns up to `limit` records, most measured samples (stitched and fallback) first,
  // ties broken by key.
  std::vector<v1::KernelRuntimes> Top(size_t limit) const;

  // Returns the key's runtimes, or nullopt when the node holds no timings for it.
  std::optional<v1::KernelRuntimes> Find(const std::string& key) const;

  size_t size() const;
  // Timings dropped because the ledger was full.
  uint64_t dropped() const;

 private:
  const size_t max_keys_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, v1::KernelRuntimes> records_;
  std::unordered_set<std::string> changed_;
  uint64_t dropped_ = 0;
};

}  // namespace stitch::daemon
