// A Redis Cluster client: the slot routing that the shared tier needs on top of hiredis's
// RESP. It works against anything that speaks the cluster protocol (Redis 7, Valkey,
// Kvrocks) and uses only commands all three support.
//
// Routing follows the cluster specification: a key's slot is the CRC16 of its hash tag (the
// text between the first '{' and the next '}', when non-empty) or of the whole key, modulo
// 16384. A slot map from CLUSTER SLOTS sends each command to the master serving its slot; a
// MOVED reply updates the map (and schedules a full refresh), an ASK reply sends the command
// once to the importing node after ASKING, and a connection error drops the connection and
// refreshes the map before the one retry the deadline allows.
//
// Thread-safety: ClusterClient is safe to call from many threads at once. Each node has a
// bounded pool of blocking connections; a call holds one connection for its round trip.
//
// Errors: every call has a deadline and never blocks past it. Calls return
// DEADLINE_EXCEEDED when the deadline passes first; UNAVAILABLE when no node answers, the
// cluster reports itself down, or redirects go past the limit; FAILED_PRECONDITION naming the
// user when AUTH is refused; and the replies otherwise: a Redis error reply to a command
// (other than a redirect) is a Reply of type kError, not a Status.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "stitch/base/status.h"

namespace stitch::cache::redis {

inline constexpr uint16_t kSlotCount = 16384;

// Returns the CRC16 (XMODEM: polynomial 0x1021, initial value 0) of `bytes`, the checksum
// the cluster specification hashes keys with.
uint16_t Crc16(std::string_view bytes);

// Returns the hash slot of `key`, honouring hash tags.
uint16_t KeySlot(std::string_view key);

// One RESP reply.
struct Reply {
  enum class Type { kNil, kString, kStatus, kInteger, kArray, kError };
  Type type = Type::kNil;
  std::string text;  // kString, kStatus and kError
  int64_t integer = 0;
  std::vector<Reply> elements;  // kArray

  bool is_error() const { return type == Type::kError; }
  bool is_nil() const { return type == Type::kNil; }
};

// host:port of one node.
struct NodeAddress {
  std::string host;
  int port = 0;
  std::string ToString() const { return host + ":" + std::to_string(port); }
  friend bool operator==(const NodeAddress& a, const NodeAddress& b) {
    return a.host == b.host && a.port == b.port;
  }
};

// Parses "host:port" (a bracketed IPv6 host allowed); INVALID_ARGUMENT naming the text.
StatusOr<NodeAddress> ParseNodeAddress(std::string_view text);

struct ClusterOptions {
  std::vector<NodeAddress> seeds;  // any nodes of the cluster; the slot map is read from them
  std::string user;                // ACL user for AUTH; empty: the default user
  std::string password;            // empty: no AUTH
  std::chrono::milliseconds connect_timeout{200};
  uint32_t max_connections_per_node = 8;
  uint32_t max_redirects = 5;
};

// Counters of the routing layer, for metrics.
struct ClusterClientStats {
  uint64_t moved = 0;               // MOVED replies followed
  uint64_t ask = 0;                 // ASK replies followed
  uint64_t slot_map_refreshes = 0;  // CLUSTER SLOTS read successfully
  uint64_t connects = 0;            // connections opened
  uint64_t connection_errors = 0;   // connections that failed to open or broke mid-call
  uint64_t timeouts = 0;            // calls that ran out of deadline
};

using Command = std::vector<std::string>;
using Deadline = std::chrono::steady_clock::time_point;

class ClusterClient {
 public:
  // Returns a client for the cluster reachable through `options.seeds`; INVALID_ARGUMENT when
  // there are no seeds or a limit is zero. It connects lazily, so a cluster that is down at
  // startup is not an error here.
  static StatusOr<std::unique_ptr<ClusterClient>> Create(ClusterOptions options);
  virtual ~ClusterClient() = default;

  // Runs `commands` as one pipeline on the master serving `slot`: every command must address
  // keys of that slot only. Returns one reply per command, in order.
  virtual StatusOr<std::vector<Reply>> Pipeline(uint16_t slot, const std::vector<Command>& commands,
                                                Deadline deadline) = 0;

  // Runs one command on the master serving KeySlot(`routing_key`).
  StatusOr<Reply> Run(std::string_view routing_key, const Command& command, Deadline deadline);

  // Runs `command` on every master known to the slot map (after refreshing it) and returns
  // their replies; for administration (FLUSHALL in tests, INFO). The first failure wins.
  virtual StatusOr<std::vector<Reply>> RunOnMasters(const Command& command, Deadline deadline) = 0;

  // Returns the routing counters.
  virtual ClusterClientStats Stats() const = 0;
};

}  // namespace stitch::cache::redis
