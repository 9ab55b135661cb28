#include "stitch/cache/memory_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "cache/cache_test_util.h"

namespace stitch::cache {
namespace {

using testing::HitKey;
using testing::RawBundle;
using testing::Sealed;

uint64_t SizeOf(const BundlePtr& b) { return b->ByteSizeLong(); }

std::vector<std::string> ListedKeys(const KernelStore& store, size_t limit = 100) {
  std::vector<std::string> keys;
  for (const EntryInfo& e : store.List(limit)) keys.push_back(e.key);
  return keys;
}

TEST(MemoryStoreTest, MissThenHitSharesTheStoredBundle) {
  auto store = NewMemoryStore(1 << 20);
  EXPECT_EQ(store->tier(), Tier::kMemory);
  EXPECT_EQ(HitKey(*store, "a"), "");
  const BundlePtr a = Sealed("a");
  ASSERT_TRUE(store->Put("a", a).ok());
  StatusOr<std::optional<Hit>> got = store->Get("a");
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->bundle.get(), a.get()) << "a hit must not copy the bundle";
  EXPECT_EQ((*got)->tier, Tier::kMemory);
}

TEST(MemoryStoreTest, RejectsUnsealedAndMiskeyedBundles) {
  auto store = NewMemoryStore(1 << 20);
  const auto unsealed = std::make_shared<const v1::KernelBundle>(RawBundle("a"));
  EXPECT_EQ(store->Put("a", unsealed).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Put("b", Sealed("a")).code(), StatusCode::kInvalidArgument);
  v1::KernelBundle tampered = *Sealed("a");
  tampered.set_target("sm_80");
  EXPECT_EQ(store->Put("a", std::make_shared<const v1::KernelBundle>(tampered)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Put("a", nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Stats().entries, 0u);
}

TEST(MemoryStoreTest, EvictsLeastRecentlyUsedByBytes) {
  const BundlePtr a = Sealed("a", 1000), b = Sealed("b", 1000), c = Sealed("c", 1000),
                  d = Sealed("d", 1000);
  // Room for exactly three of them.
  auto store = NewMemoryStore(SizeOf(a) + SizeOf(b) + SizeOf(c));
  ASSERT_TRUE(store->Put("a", a).ok());
  ASSERT_TRUE(store->Put("b", b).ok());
  ASSERT_TRUE(store->Put("c", c).ok());
  EXPECT_EQ(store->Stats().evictions, 0u);
  // Using "a" makes "b" the oldest.
  EXPECT_EQ(HitKey(*store, "a"), "a");
  ASSERT_TRUE(store->Put("d", d).ok());
  EXPECT_EQ(HitKey(*store, "b"), "");
  EXPECT_EQ(HitKey(*store, "a"), "a");
  EXPECT_EQ(HitKey(*store, "c"), "c");
  EXPECT_EQ(HitKey(*store, "d"), "d");
  const StoreStats s = store->Stats();
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(s.bytes, SizeOf(a) + SizeOf(c) + SizeOf(d));
  EXPECT_EQ(s.capacity_bytes, SizeOf(a) + SizeOf(b) + SizeOf(c));
  EXPECT_EQ(s.evictions, 1u);
}

TEST(MemoryStoreTest, ALargeBundleEvictsSeveral) {
  const BundlePtr small1 = Sealed("s1", 100), small2 = Sealed("s2", 100), big = Sealed("big", 2000);
  auto store = NewMemoryStore(SizeOf(big) + SizeOf(small1) / 2);
  ASSERT_TRUE(store->Put("s1", small1).ok());
  ASSERT_TRUE(store->Put("s2", small2).ok());
  ASSERT_TRUE(store->Put("big", big).ok());
  EXPECT_EQ(ListedKeys(*store), std::vector<std::string>{"big"});
  EXPECT_EQ(store->Stats().evictions, 2u);
}

TEST(MemoryStoreTest, OversizeBundleIsNotStoredAndDropsTheOldEntry) {
  const BundlePtr small = Sealed("a", 10);
  auto store = NewMemoryStore(SizeOf(small) + 10);
  ASSERT_TRUE(store->Put("a", small).ok());
  ASSERT_TRUE(store->Put("x", Sealed("x", 10)).ok());
  EXPECT_EQ(HitKey(*store, "a"), "");  // evicted by x
  ASSERT_TRUE(store->Put("a", small).ok());
  EXPECT_TRUE(store->Put("a", Sealed("a", 5000)).ok());
  EXPECT_EQ(HitKey(*store, "a"), "") << "a Put that is not stored must not leave the old bundle";
  const BundlePtr huge = Sealed("huge", 5000);
  EXPECT_TRUE(store->Put("huge", huge).ok());
  EXPECT_EQ(HitKey(*store, "huge"), "");
  EXPECT_EQ(store->Stats().entries, 0u);
  EXPECT_EQ(store->Stats().bytes, 0u);
}

TEST(MemoryStoreTest, ReplacingAnEntryAccountsTheNewSize) {
  auto store = NewMemoryStore(1 << 20);
  ASSERT_TRUE(store->Put("a", Sealed("a", 100)).ok());
  const BundlePtr bigger = Sealed("a", 900);
  ASSERT_TRUE(store->Put("a", bigger).ok());
  EXPECT_EQ(store->Stats().entries, 1u);
  EXPECT_EQ(store->Stats().bytes, SizeOf(bigger));
  EXPECT_EQ(store->Get("a")->value().bundle.get(), bigger.get());
}

TEST(MemoryStoreTest, EraseRemovesAndIsIdempotent) {
  auto store = NewMemoryStore(1 << 20);
  ASSERT_TRUE(store->Put("a", Sealed("a")).ok());
  EXPECT_TRUE(store->Erase("a").ok());
  EXPECT_TRUE(store->Erase("a").ok());
  EXPECT_EQ(HitKey(*store, "a"), "");
  EXPECT_EQ(store->Stats().entries, 0u);
  EXPECT_EQ(store->Stats().bytes, 0u);
  EXPECT_EQ(store->Stats().evictions, 0u);
}

TEST(MemoryStoreTest, ListsMostRecentlyUsedFirstWithBundleDetails) {
  auto store = NewMemoryStore(1 << 20);
  const BundlePtr a = Sealed("a", 10, "first line\nsecond line");
  ASSERT_TRUE(store->Put("a", a).ok());
  ASSERT_TRUE(store->Put("b", Sealed("b")).ok());
  ASSERT_TRUE(store->Put("c", Sealed("c")).ok());
  EXPECT_EQ(ListedKeys(*store), (std::vector<std::string>{"c", "b", "a"}));
  EXPECT_EQ(HitKey(*store, "a"), "a");
  EXPECT_EQ(ListedKeys(*store), (std::vector<std::string>{"a", "c", "b"}));
  EXPECT_EQ(ListedKeys(*store, 2), (std::vector<std::string>{"a", "c"}));
  EXPECT_TRUE(store->List(0).empty());
  const EntryInfo info = store->List(1).at(0);
  EXPECT_EQ(info.target, "sm_90");
  EXPECT_EQ(info.kernels, 1u);
  EXPECT_EQ(info.bytes, SizeOf(a));
  EXPECT_DOUBLE_EQ(info.compile_seconds, 0.25);
  EXPECT_EQ(info.plan, "first line");
}

TEST(MemoryStoreTest, ConcurrentGetPutEraseKeepsTheBound) {
  constexpr int kKeys = 64;
  std::vector<BundlePtr> bundles;
  uint64_t total = 0;
  for (int i = 0; i < kKeys; ++i) {
    bundles.push_back(Sealed("k" + std::to_string(i), 200 + 37 * static_cast<size_t>(i)));
    total += SizeOf(bundles.back());
  }
  const uint64_t capacity = total / 3;
  auto store = NewMemoryStore(capacity);
  std::atomic<int> wrong{0};
  std::atomic<uint64_t> hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      for (int i = 0; i < 20000; ++i) {
        const int k = static_cast<int>(rng() % kKeys);
        const std::string key = "k" + std::to_string(k);
        const auto op = rng() % 10;
        if (op < 6) {
          StatusOr<std::optional<Hit>> got = store->Get(key);
          if (!got.ok()) {
            ++wrong;
          } else if (got->has_value()) {
            ++hits;
            if ((*got)->bundle != bundles[static_cast<size_t>(k)]) ++wrong;
          }
        } else if (op < 9) {
          if (!store->Put(key, bundles[static_cast<size_t>(k)]).ok()) ++wrong;
        } else {
          if (!store->Erase(key).ok()) ++wrong;
        }
        if (i % 1000 == 0 && store->Stats().bytes > capacity) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(hits.load(), 0u);
  const StoreStats s = store->Stats();
  EXPECT_LE(s.bytes, capacity);
  EXPECT_GT(s.evictions, 0u);
  // The counters agree with what is actually held.
  const std::vector<EntryInfo> listed = store->List(kKeys);
  EXPECT_EQ(listed.size(), s.entries);
  uint64_t listed_bytes = 0;
  for (const EntryInfo& e : listed) listed_bytes += e.bytes;
  EXPECT_EQ(listed_bytes, s.bytes);
}

// A hit is the stored bundle itself, shared with every other reader: the service serializes
// it into answers (which writes protobuf's cached sizes) and lists it while other threads
// replace, evict and erase the same key. Under TSan (scripts/sanitize tsan) a write to a
// shared bundle, or an access outside the store's lock, fails this test; in every build each
// reader must see one complete, correctly sealed version.
TEST(MemoryStoreTest, SharedHitsAreReadConcurrentlyWhileTheKeyIsReplaced) {
  constexpr int kVersions = 4;
  std::vector<BundlePtr> versions;
  std::vector<std::string> encoded;
  for (int v = 0; v < kVersions; ++v) {
    versions.push_back(
        Sealed("hot", 300 + 100 * static_cast<size_t>(v), "plan v" + std::to_string(v)));
    encoded.push_back(versions.back()->SerializeAsString());
  }
  // Room for about two versions, so replacing also evicts the filler entries.
  auto store = NewMemoryStore(2 * versions.back()->ByteSizeLong() + 200);
  ASSERT_TRUE(store->Put("hot", versions[0]).ok());
  std::atomic<int> wrong{0};
  std::atomic<uint64_t> reads{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) + 100);
      for (int i = 0; i < 3000; ++i) {
        if (t < 4) {
          StatusOr<std::optional<Hit>> got = store->Get("hot");
          if (!got.ok()) ++wrong;
          if (!got.ok() || !got->has_value()) continue;
          const v1::KernelBundle& b = *(*got)->bundle;
          const std::string bytes = b.SerializeAsString();
          if (std::find(encoded.begin(), encoded.end(), bytes) == encoded.end()) ++wrong;
          if (!CheckSealed(b).ok() || b.ByteSizeLong() != bytes.size()) ++wrong;
          ++reads;
        } else if (t == 4) {
          const auto v = rng() % kVersions;
          if (!store->Put("hot", versions[v]).ok()) ++wrong;
          if (!store
                   ->Put("filler" + std::to_string(i % 3), Sealed("filler" + std::to_string(i % 3)))
                   .ok())
            ++wrong;
          if (i % 50 == 0 && !store->Erase("hot").ok()) ++wrong;
        } else {
          for (const EntryInfo& e : store->List(8)) {
            if (e.key == "hot" && e.plan.rfind("plan v", 0) != 0) ++wrong;
          }
          if (store->Stats().bytes > store->Stats().capacity_bytes) ++wrong;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(reads.load(), 0u);
}

}  // namespace
}  // namespace stitch::cache
