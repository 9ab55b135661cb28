#include "stitch/cache/memory_store.h"

#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "store_util.h"

namespace stitch::cache {
namespace {

class MemoryStore final : public KernelStore {
 public:
  explicit MemoryStore(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  Tier tier() const override { return Tier::kMemory; }

  StatusOr<std::optional<Hit>> Get(std::string_view key) override {
    std::lock_guard lock(mu_);
    const auto it = index_.find(key);
    if (it == index_.end()) return std::optional<Hit>();
    lru_.splice(lru_.begin(), lru_, it->second);
    return std::optional<Hit>(Hit{it->second->bundle, Tier::kMemory});
  }

  Status Put(std::string_view key, const BundlePtr& bundle) override {
    STITCH_RETURN_IF_ERROR(ValidateForPut(key, bundle));
    const uint64_t bytes = bundle->ByteSizeLong();
    // Nodes are built outside the lock, and evicted bundles are released outside it too,
    // since freeing a large bundle is the slowest thing a Put does.
    std::list<Node> fresh;
    std::list<Node> dropped;
    if (bytes <= capacity_) fresh.push_back(Node{std::string(key), bundle, bytes});
    {
      std::lock_guard lock(mu_);
      RemoveLocked(key, dropped);
      if (fresh.empty()) return Status::Ok();
      lru_.splice(lru_.begin(), fresh);
      index_.emplace(lru_.front().key, lru_.begin());
      bytes_ += bytes;
      while (bytes_ > capacity_) {
        auto victim = std::prev(lru_.end());
        bytes_ -= victim->bytes;
        index_.erase(victim->key);
        dropped.splice(dropped.end(), lru_, victim);
        ++evictions_;
      }
    }
    return Status::Ok();
  }

  Status Erase(std::string_view key) override {
    std::list<Node> dropped;
    std::lock_guard lock(mu_);
    RemoveLocked(key, dropped);
    return Status::Ok();
  }

  std::vector<EntryInfo> List(size_t limit) const override {
    std::vector<std::pair<std::string, BundlePtr>> picked;
    std::vector<uint64_t> sizes;
    {
      std::lock_guard lock(mu_);
      for (auto it = lru_.begin(); it != lru_.end() && picked.size() < limit; ++it) {
        picked.emplace_back(it->key, it->bundle);
        sizes.push_back(it->bytes);
      }
    }
    std::vector<EntryInfo> out;
    out.reserve(picked.size());
    for (size_t i = 0; i < picked.size(); ++i) {
      out.push_back(MakeEntryInfo(picked[i].first, *picked[i].second, sizes[i]));
    }
    return out;
  }

  StoreStats Stats() const override {
    std::lock_guard lock(mu_);
    StoreStats s;
    s.entries = index_.size();
    s.bytes = bytes_;
    s.capacity_bytes = capacity_;
    s.evictions = evictions_;
    return s;
  }

 private:
  struct Node {
    std::string key;
    BundlePtr bundle;
    uint64_t bytes = 0;
  };

  // Moves the entry under `key`, if any, onto `dropped` so that the caller frees it.
  void RemoveLocked(std::string_view key, std::list<Node>& dropped) {
    const auto it = index_.find(key);
    if (it == index_.end()) return;
    const auto node = it->second;
    bytes_ -= node->bytes;
    index_.erase(it);
    dropped.splice(dropped.end(), lru_, node);
  }

  const uint64_t capacity_;
  mutable std::mutex mu_;
  // Most recently used first. List nodes never move in memory, so the index can key on
  // views of the nodes' own strings and look up a string_view without building a string.
  std::list<Node> lru_;
  std::unordered_map<std::string_view, std::list<Node>::iterator> index_;
  uint64_t bytes_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace

std::unique_ptr<KernelStore> NewMemoryStore(uint64_t capacity_bytes) {
  return std::make_unique<MemoryStore>(capacity_bytes);
}

}  // namespace stitch::cache
