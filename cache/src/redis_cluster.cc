// ClusterClient: slot map, per-node connection pools, and the redirect loop.
#include "stitch/cache/redis_cluster.h"

#include <spdlog/spdlog.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "redis_connection.h"

namespace stitch::cache::redis {
namespace {

using Clock = std::chrono::steady_clock;

// A slot map read within this long is fresh enough: many threads seeing one failover must
// not each ask the cluster for its map.
constexpr auto kMinRefreshInterval = std::chrono::milliseconds(50);

// The connections to one node: at most `max` open, idle ones kept for reuse.
class NodePool {
 public:
  NodePool(NodeAddress node, const ClusterOptions& options)
      : node_(std::move(node)), options_(options) {}

  // Returns an idle connection, a new one while fewer than the maximum are open, or waits
  // for one to come back until `deadline` (DEADLINE_EXCEEDED).
  StatusOr<std::unique_ptr<Connection>> Acquire(Deadline deadline,
                                                std::atomic<uint64_t>& connects) {
    {
      std::unique_lock lock(mu_);
      const bool got = returned_.wait_until(lock, deadline, [&] {
        return !idle_.empty() || open_ < options_.max_connections_per_node;
      });
      if (!got) {
        return DeadlineExceeded("all " + std::to_string(options_.max_connections_per_node) +
                                " connections to " + node_.ToString() + " are busy");
      }
      if (!idle_.empty()) {
        std::unique_ptr<Connection> c = std::move(idle_.back());
        idle_.pop_back();
        return c;
      }
      ++open_;
    }
    StatusOr<std::unique_ptr<Connection>> opened = Connection::Open(node_, options_, deadline);
    if (!opened.ok()) {
      Release(nullptr);
      return opened.status();
    }
    connects.fetch_add(1, std::memory_order_relaxed);
    return opened;
  }

  // Returns a connection to the pool; a broken one (or none) is closed and frees its place.
  void Release(std::unique_ptr<Connection> connection) {
    {
      std::lock_guard lock(mu_);
      if (connection != nullptr && !connection->broken()) {
        idle_.push_back(std::move(connection));
      } else {
        --open_;
      }
    }
    returned_.notify_one();
  }

 private:
  const NodeAddress node_;
  const ClusterOptions& options_;
  std::mutex mu_;
  std::condition_variable returned_;
  std::vector<std::unique_ptr<Connection>> idle_;
  uint32_t open_ = 0;
};

// What a redirect reply asks for.
struct Redirect {
  enum class Kind { kNone, kMoved, kAsk } kind = Kind::kNone;
  NodeAddress node;
};

// Reads "MOVED <slot> <host:port>" or "ASK <slot> <host:port>".
Redirect ParseRedirect(const Reply& reply) {
  Redirect r;
  if (!reply.is_error()) return r;
  const std::string_view text = reply.text;
  if (text.rfind("MOVED ", 0) == 0) {
    r.kind = Redirect::Kind::kMoved;
  } else if (text.rfind("ASK ", 0) == 0) {
    r.kind = Redirect::Kind::kAsk;
  } else {
    return r;
  }
  const size_t space = text.rfind(' ');
  StatusOr<NodeAddress> node = ParseNodeAddress(text.substr(space + 1));
  if (!node.ok()) return Redirect{};
  r.node = std::move(*node);
  return r;
}

// True for the error replies a cluster gives while it cannot serve the slot at all.
bool IsClusterDown(const Reply& reply) {
  if (!reply.is_error()) return false;
  const std::string_view text = reply.text;
  return text.rfind("CLUSTERDOWN", 0) == 0 || text.rfind("TRYAGAIN", 0) == 0 ||
         text.rfind("LOADING", 0) == 0 || text.rfind("MASTERDOWN", 0) == 0;
}

class ClusterClientImpl : public ClusterClient {
 public:
  explicit ClusterClientImpl(ClusterOptions options) : options_(std::move(options)) {
    slot_owner_.fill(-1);
  }

  StatusOr<std::vector<Reply>> Pipeline(uint16_t slot, const std::vector<Command>& commands,
                                        Deadline deadline) override;
  StatusOr<std::vector<Reply>> RunOnMasters(const Command& command, Deadline deadline) override;
  ClusterClientStats Stats() const override;

 private:
  // Returns the master serving `slot`, reading the slot map first when it has none.
  StatusOr<NodeAddress> MasterFor(uint16_t slot, Deadline deadline);
  // Reads CLUSTER SLOTS from the first node that answers (known masters, then seeds).
  Status RefreshSlotMap(Deadline deadline);
  StatusOr<std::vector<Reply>> Exchange(const NodeAddress& node,
                                        const std::vector<Command>& commands, Deadline deadline);
  NodePool& PoolFor(const NodeAddress& node);
  void LearnOwner(uint16_t slot, const NodeAddress& node);
  Status Timeout(const std::string& what);

  const ClusterOptions options_;

  mutable std::shared_mutex map_mu_;
  std::vector<NodeAddress> masters_;
  std::array<int16_t, kSlotCount> slot_owner_{};  // index into masters_, -1 when unknown
  Clock::time_point refreshed_at_{};

  std::mutex refresh_mu_;  // one refresh at a time
  std::mutex pools_mu_;
  std::map<std::string, std::unique_ptr<NodePool>> pools_;

  std::atomic<uint64_t> moved_{0}, ask_{0}, refreshes_{0}, connects_{0}, connection_errors_{0},
      timeouts_{0};
};

NodePool& ClusterClientImpl::PoolFor(const NodeAddress& node) {
  std::lock_guard lock(pools_mu_);
  std::unique_ptr<NodePool>& pool = pools_[node.ToString()];
  if (pool == nullptr) pool = std::make_unique<NodePool>(node, options_);
  return *pool;
}

Status ClusterClientImpl::Timeout(const std::string& what) {
  timeouts_.fetch_add(1, std::memory_order_relaxed);
  return DeadlineExceeded(what);
}

StatusOr<std::vector<Reply>> ClusterClientImpl::Exchange(const NodeAddress& node,
                                                         const std::vector<Command>& commands,
                                                         Deadline deadline) {
  NodePool& pool = PoolFor(node);
  StatusOr<std::unique_ptr<Connection>> connection = pool.Acquire(deadline, connects_);
  if (!connection.ok()) {
    if (connection.status().code() == StatusCode::kUnavailable) {
      connection_errors_.fetch_add(1, std::memory_order_relaxed);
    }
    return connection.status();
  }
  StatusOr<std::vector<Reply>> replies = (*connection)->Exchange(commands, deadline);
  if (!replies.ok() && replies.status().code() == StatusCode::kUnavailable) {
    connection_errors_.fetch_add(1, std::memory_order_relaxed);
  }
  pool.Release(std::move(*connection));
  return replies;
}

void ClusterClientImpl::LearnOwner(uint16_t slot, const NodeAddress& node) {
  std::unique_lock lock(map_mu_);
  auto it = std::find(masters_.begin(), masters_.end(), node);
  if (it == masters_.end()) it = masters_.insert(masters_.end(), node);
  slot_owner_[slot] = static_cast<int16_t>(it - masters_.begin());
}

Status ClusterClientImpl::RefreshSlotMap(Deadline deadline) {
  std::lock_guard refresh(refresh_mu_);
  std::vector<NodeAddress> candidates;
  {
    std::shared_lock lock(map_mu_);
    // Another thread refreshed while this one waited for the lock.
    if (Clock::now() - refreshed_at_ < kMinRefreshInterval) return Status::Ok();
    candidates = masters_;
  }
  for (const NodeAddress& seed : options_.seeds) {
    if (std::find(candidates.begin(), candidates.end(), seed) == candidates.end()) {
      candidates.push_back(seed);
    }
  }
  Status last = Unavailable("no cluster node configured");
  for (const NodeAddress& node : candidates) {
    if (Clock::now() >= deadline) return Timeout("no time left to read the cluster's slot map");
    StatusOr<std::vector<Reply>> replies = Exchange(node, {{"CLUSTER", "SLOTS"}}, deadline);
    if (!replies.ok()) {
      last = replies.status();
      continue;
    }
    const Reply& map = replies->front();
    if (map.type != Reply::Type::kArray || map.elements.empty()) {
      last = Unavailable("cluster node " + node.ToString() + " serves no slots" +
                         (map.is_error() ? ": " + map.text : ""));
      continue;
    }
    std::vector<NodeAddress> masters;
    std::array<int16_t, kSlotCount> owner;
    owner.fill(-1);
    for (const Reply& range : map.elements) {
      if (range.elements.size() < 3 || range.elements[2].elements.size() < 2) continue;
      const Reply& master = range.elements[2];
      NodeAddress address{master.elements[0].text, static_cast<int>(master.elements[1].integer)};
      // An empty host means "the address you reached me on".
      if (address.host.empty()) address.host = node.host;
      auto it = std::find(masters.begin(), masters.end(), address);
      if (it == masters.end()) it = masters.insert(masters.end(), address);
      const int64_t first = std::max<int64_t>(range.elements[0].integer, 0);
      const int64_t last_slot = std::min<int64_t>(range.elements[1].integer, kSlotCount - 1);
      for (int64_t s = first; s <= last_slot; ++s) {
        owner[static_cast<size_t>(s)] = static_cast<int16_t>(it - masters.begin());
      }
    }
    std::unique_lock lock(map_mu_);
    masters_ = std::move(masters);
    slot_owner_ = owner;
    refreshed_at_ = Clock::now();
    refreshes_.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }
  return last;
}

StatusOr<NodeAddress> ClusterClientImpl::MasterFor(uint16_t slot, Deadline deadline) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      std::shared_lock lock(map_mu_);
      const int16_t owner = slot_owner_[slot];
      if (owner >= 0) return masters_[static_cast<size_t>(owner)];
    }
    if (attempt == 0) STITCH_RETURN_IF_ERROR(RefreshSlotMap(deadline));
  }
  return Unavailable("no cluster node serves slot " + std::to_string(slot));
}

StatusOr<std::vector<Reply>> ClusterClientImpl::Pipeline(uint16_t slot,
                                                         const std::vector<Command>& commands,
                                                         Deadline deadline) {
  std::optional<NodeAddress> ask_node;
  Status last = Unavailable("no attempt made");
  for (uint32_t attempt = 0; attempt <= options_.max_redirects; ++attempt) {
    if (Clock::now() >= deadline) {
      return Timeout("cluster call for slot " + std::to_string(slot) + " ran out of time (" +
                     last.ToString() + ")");
    }
    NodeAddress node;
    std::vector<Command> sent;
    if (ask_node) {
      // ASKING admits only the command right after it, so it precedes each one.
      node = *ask_node;
      for (const Command& c : commands) {
        sent.push_back({"ASKING"});
        sent.push_back(c);
      }
    } else {
      StatusOr<NodeAddress> master = MasterFor(slot, deadline);
      if (!master.ok()) return master.status();
      node = std::move(*master);
    }
    StatusOr<std::vector<Reply>> replies = Exchange(node, ask_node ? sent : commands, deadline);
    if (!replies.ok()) {
      if (replies.status().code() == StatusCode::kDeadlineExceeded) {
        return Timeout(replies.status().message());
      }
      if (replies.status().code() == StatusCode::kFailedPrecondition) return replies.status();
      // The node may have failed over or left: read the map again before the next try.
      last = replies.status();
      ask_node.reset();
      const Status refreshed = RefreshSlotMap(deadline);
      if (!refreshed.ok()) return last;
      continue;
    }
    if (ask_node) {
      std::vector<Reply> kept;
      for (size_t i = 1; i < replies->size(); i += 2) kept.push_back(std::move((*replies)[i]));
      *replies = std::move(kept);
      ask_node.reset();
    }
    Redirect redirect;
    for (const Reply& r : *replies) {
      redirect = ParseRedirect(r);
      if (redirect.kind != Redirect::Kind::kNone) break;
      if (IsClusterDown(r)) return Unavailable("cluster node " + node.ToString() + ": " + r.text);
    }
    if (redirect.kind == Redirect::Kind::kMoved) {
      moved_.fetch_add(1, std::memory_order_relaxed);
      LearnOwner(slot, redirect.node);
      last = Unavailable("MOVED to " + redirect.node.ToString());
      continue;
    }
    if (redirect.kind == Redirect::Kind::kAsk) {
      ask_.fetch_add(1, std::memory_order_relaxed);
      ask_node = redirect.node;
      last = Unavailable("ASK to " + redirect.node.ToString());
      continue;
    }
    return replies;
  }
  return Unavailable("cluster call for slot " + std::to_string(slot) + " redirected more than " +
                     std::to_string(options_.max_redirects) + " times (" + last.ToString() + ")");
}

StatusOr<std::vector<Reply>> ClusterClientImpl::RunOnMasters(const Command& command,
                                                             Deadline deadline) {
  STITCH_RETURN_IF_ERROR(RefreshSlotMap(deadline));
  std::vector<NodeAddress> masters;
  {
    std::shared_lock lock(map_mu_);
    masters = masters_;
  }
  std::vector<Reply> out;
  for (const NodeAddress& node : masters) {
    StatusOr<std::vector<Reply>> replies = Exchange(node, {command}, deadline);
    if (!replies.ok()) return replies.status();
    out.push_back(std::move(replies->front()));
  }
  return out;
}

ClusterClientStats ClusterClientImpl::Stats() const {
  ClusterClientStats s;
  s.moved = moved_.load();
  s.ask = ask_.load();
  s.slot_map_refreshes = refreshes_.load();
  s.connects = connects_.load();
  s.connection_errors = connection_errors_.load();
  s.timeouts = timeouts_.load();
  return s;
}

}  // namespace

StatusOr<std::unique_ptr<ClusterClient>> ClusterClient::Create(ClusterOptions options) {
  if (options.seeds.empty()) return InvalidArgument("the cluster needs at least one seed node");
  if (options.max_connections_per_node == 0) {
    return InvalidArgument("max_connections_per_node must be at least 1");
  }
  if (options.connect_timeout.count() <= 0) {
    return InvalidArgument("the cluster connect timeout must be positive");
  }
  return std::unique_ptr<ClusterClient>(new ClusterClientImpl(std::move(options)));
}

}  // namespace stitch::cache::redis
