// Random Put/Get/Erase sequences against a reference LRU model, for each store.
#include <gtest/gtest.h>

#include <functional>
#include <list>
#include <map>
#include <random>

#include "cache/cache_test_util.h"
#include "stitch/cache/memory_store.h"
#include "stitch/cache/rocksdb_store.h"

namespace stitch::cache {
namespace {

using testing::Sealed;
using testing::TempDir;

// The obviously correct LRU: a list, most recently used first.
class ModelLru {
 public:
  explicit ModelLru(uint64_t capacity) : capacity_(capacity) {}

  bool Get(const std::string& key) {
    const auto it = Find(key);
    if (it == order_.end()) return false;
    order_.splice(order_.begin(), order_, it);
    return true;
  }

  void Put(const std::string& key, uint64_t size) {
    Erase(key);
    if (size > capacity_) return;
    order_.emplace_front(key, size);
    bytes_ += size;
    while (bytes_ > capacity_) {
      bytes_ -= order_.back().second;
      order_.pop_back();
      ++evictions_;
    }
  }

  void Erase(const std::string& key) {
    const auto it = Find(key);
    if (it == order_.end()) return;
    bytes_ -= it->second;
    order_.erase(it);
  }

  std::vector<std::string> Keys() const {
    std::vector<std::string> keys;
    for (const auto& [k, s] : order_) keys.push_back(k);
    return keys;
  }

  uint64_t bytes() const { return bytes_; }
  size_t entries() const { return order_.size(); }
  uint64_t evictions() const { return evictions_; }
  void ResetEvictions() { evictions_ = 0; }

 private:
  std::list<std::pair<std::string, uint64_t>>::iterator Find(const std::string& key) {
    for (auto it = order_.begin(); it != order_.end(); ++it) {
      if (it->first == key) return it;
    }
    return order_.end();
  }

  uint64_t capacity_;
  std::list<std::pair<std::string, uint64_t>> order_;
  uint64_t bytes_ = 0;
  uint64_t evictions_ = 0;
};

struct Subject {
  std::function<KernelStore&()> store;
  std::function<uint64_t(const BundlePtr&)> size_of;
  // Closes and reopens the store; empty for a store that does not persist.
  std::function<void()> reopen;
};

void RunRandomOps(uint64_t seed, int steps, uint64_t capacity, Subject& subject) {
  std::mt19937_64 rng(seed);
  ModelLru model(capacity);
  std::map<std::string, BundlePtr> last_put;
  const auto pick = [&](uint64_t n) { return rng() % n; };
  for (int step = 0; step < steps; ++step) {
    const std::string key = "key" + std::to_string(pick(16));
    const uint64_t op = pick(100);
    std::string what;
    if (op < 45) {
      what = "get " + key;
      StatusOr<std::optional<Hit>> got = subject.store().Get(key);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      const bool want = model.Get(key);
      ASSERT_EQ(got->has_value(), want) << "step " << step << ": " << what;
      if (want) {
        ASSERT_EQ((*got)->bundle->SerializeAsString(), last_put.at(key)->SerializeAsString())
            << "step " << step << ": " << what;
      }
    } else if (op < 85) {
      // Mostly small bundles, sometimes one near or past the whole capacity.
      const size_t ptx = pick(20) == 0 ? static_cast<size_t>(capacity - 200 + pick(400))
                                       : static_cast<size_t>(pick(capacity / 5));
      const BundlePtr bundle = Sealed(key, ptx);
      what = "put " + key + " (" + std::to_string(subject.size_of(bundle)) + " bytes)";
      ASSERT_TRUE(subject.store().Put(key, bundle).ok());
      model.Put(key, subject.size_of(bundle));
      last_put[key] = bundle;
    } else if (op < 97 || !subject.reopen) {
      what = "erase " + key;
      ASSERT_TRUE(subject.store().Erase(key).ok());
      model.Erase(key);
    } else {
      what = "reopen";
      subject.reopen();
      model.ResetEvictions();
    }
    const StoreStats s = subject.store().Stats();
    ASSERT_LE(s.bytes, capacity) << "step " << step << ": " << what;
    ASSERT_EQ(s.bytes, model.bytes()) << "step " << step << ": " << what;
    ASSERT_EQ(s.entries, model.entries()) << "step " << step << ": " << what;
    ASSERT_EQ(s.evictions, model.evictions()) << "step " << step << ": " << what;
    ASSERT_EQ(s.corrupt, 0u);
    if (step % 16 == 0 || what == "reopen") {
      std::vector<std::string> listed;
      for (const EntryInfo& e : subject.store().List(100)) listed.push_back(e.key);
      ASSERT_EQ(listed, model.Keys()) << "step " << step << ": " << what;
    }
  }
}

TEST(StorePropertyTest, MemoryStoreMatchesTheModel) {
  const uint64_t seed = testing::TestSeed();
  const uint64_t capacity = 20000;
  std::unique_ptr<KernelStore> store = NewMemoryStore(capacity);
  Subject subject{[&]() -> KernelStore& { return *store; },
                  [](const BundlePtr& b) { return uint64_t{b->ByteSizeLong()}; }, nullptr};
  RunRandomOps(seed, 20000, capacity, subject);
}

TEST(StorePropertyTest, RocksDbStoreMatchesTheModelAcrossRestarts) {
  const uint64_t seed = testing::TestSeed();
  const uint64_t capacity = 20000;
  TempDir dir;
  RocksDbOptions options;
  options.path = dir.path();
  options.capacity_bytes = capacity;
  options.block_cache_bytes = 1 << 20;
  std::unique_ptr<RocksDbStore> store = std::move(RocksDbStore::Open(options)).value();
  Subject subject{[&]() -> KernelStore& { return *store; },
                  [](const BundlePtr& b) { return uint64_t{EncodeEntry(*b).size()}; },
                  [&] {
                    ASSERT_TRUE(store->Close().ok());
                    StatusOr<std::unique_ptr<RocksDbStore>> again = RocksDbStore::Open(options);
                    ASSERT_TRUE(again.ok()) << again.status().ToString();
                    store = std::move(again).value();
                  }};
  RunRandomOps(seed, 4000, capacity, subject);
}

}  // namespace
}  // namespace stitch::cache
