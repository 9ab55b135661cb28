// The cluster tier: kernel bundles shared by every node of a cluster through a Redis Cluster
// engine (Redis, Valkey or Kvrocks), behind the same KernelStore interface as the node's own
// tiers, plus the leases that let one node compile a key for the whole cluster.
//
// Layout. For a cache key K and format version V, the entry lives under
// "<prefix>:v<V>:{K}" and its lease under "<prefix>:v<V>:{K}:lease": the hash tag puts both in
// one slot, and the version in the name keeps daemons of different versions apart during a
// rolling upgrade. The value is
//
//   "STC" + format byte | HMAC-SHA256 (32 bytes) | the envelope the node's RocksDB stores
//
// where the HMAC is taken under the cluster secret over the Redis key and the envelope, so an
// entry cannot be forged, or moved to another key, by anyone without the secret. Entries
// expire after the TTL; every hit refreshes it (GET and PEXPIRE in one round trip).
//
// Fail-open. Every call has its own deadline (reads are short, writes longer). Failures are
// counted by kind; after `breaker_failures` failures in a row the circuit breaker opens and
// the tier answers every call as a miss, without a round trip, for `breaker_open_for`; then
// one call probes the cluster and closes the breaker again if it succeeds. A cluster that is
// down, slow or failing over therefore costs a node's local hits nothing.
//
// Integrity. An entry that is short, misframed, fails its HMAC, belongs to another format
// version, fails its digest, or carries another key is never served: it is a miss, logged
// and counted by reason. It is not erased, because a node configured with the wrong secret
// must not be able to destroy its peers' entries; the compile that follows overwrites it.
//
// Thread-safety: every method may be called from many threads at once. Errors: Get and Put
// return UNAVAILABLE or DEADLINE_EXCEEDED when the cluster fails them (TieredStore treats
// that as a miss); a breaker that is open makes Get a plain miss and Put a no-op (OK).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "stitch/cache/kernel_store.h"
#include "stitch/cache/redis_cluster.h"

namespace stitch::cache {

struct ClusterStoreOptions {
  redis::ClusterOptions cluster;
  // The HMAC key every node of the cluster shares; at least 16 bytes.
  std::string secret;
  // The first component of every Redis key, so that one Redis can serve several deployments.
  std::string key_prefix = "stitch";
  // Names this node in the leases it takes, e.g. "gpu-node-17:4242".
  std::string node_name;
  std::chrono::milliseconds read_timeout{20};
  std::chrono::milliseconds write_timeout{250};
  std::chrono::seconds ttl{std::chrono::hours(24 * 7)};
  // How long a lease holds a key for its compile; a lease of a node that died runs out then.
  std::chrono::milliseconds lease_time{std::chrono::seconds(30)};
  uint32_t breaker_failures = 5;
  std::chrono::milliseconds breaker_open_for{std::chrono::seconds(5)};
};

// Why an entry read from the cluster was not served.
enum class Rejection { kTruncated, kHmac, kVersion, kDigest, kKey };
inline constexpr int kRejectionKinds = 5;

// Returns "truncated", "hmac", "version", "digest" or "key".
std::string_view RejectionName(Rejection reason);

// What went wrong with a cluster call.
enum class ClusterError { kTimeout, kUnavailable, kAuth, kReply };
inline constexpr int kClusterErrorKinds = 4;

// Returns "timeout", "unavailable", "auth" or "reply".
std::string_view ClusterErrorName(ClusterError kind);

enum class BreakerState { kClosed, kOpen, kHalfOpen };

struct ClusterStoreStats {
  uint64_t hits = 0;
  uint64_t misses = 0;  // answered misses, rejected entries included
  uint64_t writes = 0;
  uint64_t errors[kClusterErrorKinds] = {};
  uint64_t rejected[kRejectionKinds] = {};
  uint64_t skipped_by_breaker = 0;  // calls answered without a round trip
  uint64_t breaker_trips = 0;       // times the breaker opened
  BreakerState breaker = BreakerState::kClosed;
  redis::ClusterClientStats routing;
};

// Receives the duration and outcome of every cluster round trip, e.g. for a histogram.
class ClusterObserver {
 public:
  virtual ~ClusterObserver() = default;
  // `operation` is "get", "put", "erase", "lease" or "probe".
  virtual void OnCall(std::string_view operation, double seconds, const Status& status) = 0;
};

// The outcome of TryLease.
struct LeaseResult {
  enum class State {
    kAcquired,       // this node holds the lease and should compile
    kHeldElsewhere,  // `holder` holds it: wait for its entry
    kUnavailable,    // the cluster did not answer: compile locally (fail-open)
  };
  State state = State::kUnavailable;
  std::string holder;
};

// What one look at the cluster found for a key another node is compiling.
struct LeaseProbe {
  std::optional<Hit> hit;   // the entry, once it is there and valid
  bool lease_held = false;  // someone still holds the lease
  Status status;            // not OK when the cluster did not answer
};

class ClusterStore : public KernelStore {
 public:
  // Returns the tier, or INVALID_ARGUMENT for a missing or short secret, an empty node name,
  // non-positive timeouts, TTL or lease time, or bad cluster options. It does not connect:
  // a cluster that is down at startup is a sick cluster, not a configuration error.
  static StatusOr<std::unique_ptr<ClusterStore>> Create(ClusterStoreOptions options,
                                                        ClusterObserver* observer = nullptr);

  // Tries to take the lease on `key` for this node (SET NX PX).
  virtual LeaseResult TryLease(std::string_view key) = 0;

  // Gives up this node's lease on `key` if it still holds it; failures are ignored (the
  // lease runs out by itself).
  virtual void ReleaseLease(std::string_view key) = 0;

  // Extends the lease on `key` by the lease time from now, so that a compile longer than the
  // lease keeps it; a lease that already ran out is not recreated. Failures are ignored.
  virtual void RenewLease(std::string_view key) = 0;

  // The lease time, for callers that schedule renewals.
  virtual std::chrono::milliseconds lease_time() const = 0;

  // Looks for `key`'s entry and whether its lease is held, in one round trip.
  virtual LeaseProbe Probe(std::string_view key) = 0;

  // Returns the counters and the breaker's state.
  virtual ClusterStoreStats ClusterStats() const = 0;

  // The Redis key of `key`'s entry (for tests and `redis-cli` debugging).
  virtual std::string EntryKey(std::string_view key) const = 0;
  // The Redis value this node would store for `bundle` under `key`.
  virtual std::string EncodeValue(std::string_view key, const v1::KernelBundle& bundle) const = 0;
};

}  // namespace stitch::cache
