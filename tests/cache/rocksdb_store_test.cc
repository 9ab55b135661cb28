#include "stitch/cache/rocksdb_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <thread>

#include "cache/cache_test_util.h"

namespace stitch::cache {
namespace {

using testing::HitKey;
using testing::RawBundle;
using testing::Sealed;
using testing::TempDir;
using testing::WriteRawEntry;

uint64_t SizeOf(const BundlePtr& b) { return EncodeEntry(*b).size(); }

std::unique_ptr<RocksDbStore> OpenOrDie(const std::string& path, uint64_t capacity = 1 << 30) {
  RocksDbOptions options;
  options.path = path;
  options.capacity_bytes = capacity;
  options.block_cache_bytes = 1 << 20;
  StatusOr<std::unique_ptr<RocksDbStore>> store = RocksDbStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

std::vector<std::string> ListedKeys(const KernelStore& store, size_t limit = 100) {
  std::vector<std::string> keys;
  for (const EntryInfo& e : store.List(limit)) keys.push_back(e.key);
  return keys;
}

TEST(RocksDbStoreTest, PutGetRoundTrip) {
  TempDir dir;
  auto store = OpenOrDie(dir.path() + "/db");
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->tier(), Tier::kDisk);
  EXPECT_EQ(HitKey(*store, "a"), "");
  const BundlePtr a = Sealed("a", 5000);
  ASSERT_TRUE(store->Put("a", a).ok());
  StatusOr<std::optional<Hit>> got = store->Get("a");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->tier, Tier::kDisk);
  EXPECT_NE((*got)->bundle.get(), a.get());
  EXPECT_EQ((*got)->bundle->SerializeAsString(), a->SerializeAsString());
  const StoreStats s = store->Stats();
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.bytes, SizeOf(a));
  EXPECT_EQ(s.corrupt, 0u);
}

TEST(RocksDbStoreTest, RejectsUnsealedAndMiskeyedBundles) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Put("a", std::make_shared<const v1::KernelBundle>(RawBundle("a"))).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Put("b", Sealed("a")).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Stats().entries, 0u);
  EXPECT_EQ(HitKey(*store, "a"), "");
  EXPECT_EQ(HitKey(*store, "b"), "");
}

TEST(RocksDbStoreTest, EntriesAndLruOrderSurviveReopen) {
  TempDir dir;
  const BundlePtr a = Sealed("a", 1000), b = Sealed("b", 1000), c = Sealed("c", 1000),
                  d = Sealed("d", 1000);
  const uint64_t capacity = SizeOf(a) + SizeOf(b) + SizeOf(c);
  {
    auto store = OpenOrDie(dir.path(), capacity);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Put("a", a).ok());
    ASSERT_TRUE(store->Put("b", b).ok());
    ASSERT_TRUE(store->Put("c", c).ok());
    // Order, oldest first: b, c, a.
    EXPECT_EQ(HitKey(*store, "a"), "a");
    EXPECT_EQ(ListedKeys(*store), (std::vector<std::string>{"a", "c", "b"}));
    ASSERT_TRUE(store->Close().ok());
  }
  auto store = OpenOrDie(dir.path(), capacity);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Stats().entries, 3u);
  EXPECT_EQ(store->Stats().bytes, capacity);
  EXPECT_EQ(ListedKeys(*store), (std::vector<std::string>{"a", "c", "b"}));
  ASSERT_TRUE(store->Put("d", d).ok());
  EXPECT_EQ(store->Stats().evictions, 1u);
  EXPECT_EQ(HitKey(*store, "b"), "") << "b was least recently used before the restart";
  EXPECT_EQ(HitKey(*store, "a"), "a");
  EXPECT_EQ(HitKey(*store, "c"), "c");
  EXPECT_EQ(HitKey(*store, "d"), "d");
}

TEST(RocksDbStoreTest, UseAfterReopenStillMovesAnEntryUp) {
  TempDir dir;
  const BundlePtr a = Sealed("a", 500), b = Sealed("b", 500), c = Sealed("c", 500);
  const uint64_t capacity = SizeOf(a) + SizeOf(b);
  {
    auto store = OpenOrDie(dir.path(), capacity);
    ASSERT_TRUE(store->Put("a", a).ok());
    ASSERT_TRUE(store->Put("b", b).ok());
  }
  {
    auto store = OpenOrDie(dir.path(), capacity);
    EXPECT_EQ(HitKey(*store, "a"), "a");  // now b is the oldest
  }
  auto store = OpenOrDie(dir.path(), capacity);
  ASSERT_TRUE(store->Put("c", c).ok());
  EXPECT_EQ(HitKey(*store, "b"), "");
  EXPECT_EQ(HitKey(*store, "a"), "a");
}

TEST(RocksDbStoreTest, ReopenWithASmallerCapacityEvicts) {
  TempDir dir;
  const BundlePtr a = Sealed("a", 500), b = Sealed("b", 500), c = Sealed("c", 500);
  {
    auto store = OpenOrDie(dir.path());
    ASSERT_TRUE(store->Put("a", a).ok());
    ASSERT_TRUE(store->Put("b", b).ok());
    ASSERT_TRUE(store->Put("c", c).ok());
  }
  auto store = OpenOrDie(dir.path(), SizeOf(b) + SizeOf(c));
  EXPECT_EQ(store->Stats().entries, 2u);
  EXPECT_EQ(store->Stats().evictions, 1u);
  EXPECT_EQ(HitKey(*store, "a"), "");
  EXPECT_EQ(HitKey(*store, "c"), "c");
}

TEST(RocksDbStoreTest, CorruptValueIsAMissThatIsErasedAndReplaced) {
  TempDir dir;
  const BundlePtr a = Sealed("a", 800), b = Sealed("b", 800);
  {
    auto store = OpenOrDie(dir.path());
    ASSERT_TRUE(store->Put("a", a).ok());
    ASSERT_TRUE(store->Put("b", b).ok());
    ASSERT_TRUE(store->Close().ok());
  }
  std::string damaged = EncodeEntry(*a);
  damaged[damaged.size() / 2] = static_cast<char>(damaged[damaged.size() / 2] ^ 0x20);
  WriteRawEntry(dir.path(), "a", damaged);

  auto store = OpenOrDie(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Stats().entries, 2u);
  EXPECT_EQ(HitKey(*store, "a"), "");
  StoreStats s = store->Stats();
  EXPECT_EQ(s.corrupt, 1u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.bytes, SizeOf(b));
  EXPECT_EQ(ListedKeys(*store), std::vector<std::string>{"b"});
  // A second look neither finds it nor counts it again.
  EXPECT_EQ(HitKey(*store, "a"), "");
  EXPECT_EQ(store->Stats().corrupt, 1u);
  EXPECT_EQ(HitKey(*store, "b"), "b");

  ASSERT_TRUE(store->Put("a", a).ok());
  EXPECT_EQ(HitKey(*store, "a"), "a");
  ASSERT_TRUE(store->Close().ok());
  store = OpenOrDie(dir.path());
  EXPECT_EQ(HitKey(*store, "a"), "a");
  EXPECT_EQ(store->Stats().corrupt, 0u) << "the replacement is sound";
}

TEST(RocksDbStoreTest, GarbageAndMiskeyedValuesAreMisses) {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.path());
    ASSERT_TRUE(store->Put("a", Sealed("a")).ok());
    ASSERT_TRUE(store->Put("b", Sealed("b")).ok());
  }
  WriteRawEntry(dir.path(), "a", "not an entry");
  WriteRawEntry(dir.path(), "b", EncodeEntry(*Sealed("c")));
  auto store = OpenOrDie(dir.path());
  EXPECT_EQ(HitKey(*store, "a"), "");
  EXPECT_EQ(HitKey(*store, "b"), "");
  EXPECT_EQ(store->Stats().corrupt, 2u);
  EXPECT_EQ(store->Stats().entries, 0u);
  EXPECT_EQ(store->Stats().bytes, 0u);
}

TEST(RocksDbStoreTest, OtherFormatVersionIsAMiss) {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.path());
    ASSERT_TRUE(store->Put("a", Sealed("a")).ok());
  }
  v1::KernelBundle newer = *Sealed("a");
  newer.set_format_version(kBundleFormatVersion + 1);
  WriteRawEntry(dir.path(), "a", EncodeEntry(newer));
  auto store = OpenOrDie(dir.path());
  EXPECT_EQ(HitKey(*store, "a"), "");
  EXPECT_EQ(store->Stats().corrupt, 1u);
  EXPECT_EQ(store->Stats().entries, 0u);
  ASSERT_TRUE(store->Put("a", Sealed("a")).ok());
  EXPECT_EQ(HitKey(*store, "a"), "a");
}

TEST(RocksDbStoreTest, CountersSurviveReopen) {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.path());
    StatusOr<std::map<std::string, double>> empty = store->LoadCounters();
    ASSERT_TRUE(empty.ok());
    EXPECT_TRUE(empty->empty());
    ASSERT_TRUE(store->SaveCounters({{"hits", 12345.0}, {"compile_seconds", 0.1 + 0.2}}).ok());
    ASSERT_TRUE(store
                    ->SaveCounters({{"hits", 12346.0},
                                    {"tiny", std::numeric_limits<double>::denorm_min()},
                                    {"negative", -2.5}})
                    .ok());
    ASSERT_TRUE(store->Close().ok());
  }
  auto store = OpenOrDie(dir.path());
  StatusOr<std::map<std::string, double>> loaded = store->LoadCounters();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const std::map<std::string, double> want = {{"compile_seconds", 0.1 + 0.2},
                                              {"hits", 12346.0},
                                              {"negative", -2.5},
                                              {"tiny", std::numeric_limits<double>::denorm_min()}};
  EXPECT_EQ(*loaded, want);  // exact: the bit pattern is stored
}

v1::KernelRuntimes Runtimes(const std::string& key, uint64_t samples) {
  v1::KernelRuntimes r;
  r.set_key(key);
  r.set_target("sm_80");
  r.mutable_stitched()->set_samples(samples);
  r.mutable_stitched()->set_seconds_sum(1e-5 * static_cast<double>(samples));
  (*r.mutable_fallback())["xla"].set_samples(1);
  (*r.mutable_modeled_fallback_seconds())["xla"] = 3e-5;
  return r;
}

TEST(RocksDbStoreTest, RuntimesSurviveReopenAndUnreadableOnesAreSkipped) {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.path());
    StatusOr<std::vector<v1::KernelRuntimes>> empty = store->LoadRuntimes();
    ASSERT_TRUE(empty.ok());
    EXPECT_TRUE(empty->empty());
    ASSERT_TRUE(store->SaveRuntimes({Runtimes("b", 1), Runtimes("a", 2)}).ok());
    ASSERT_TRUE(store->SaveRuntimes({Runtimes("b", 7)}).ok());  // replaces
    EXPECT_EQ(store->SaveRuntimes({v1::KernelRuntimes()}).code(), StatusCode::kInvalidArgument);
    ASSERT_TRUE(store->Close().ok());
    EXPECT_EQ(store->SaveRuntimes({Runtimes("c", 1)}).code(), StatusCode::kUnavailable);
  }
  WriteRawEntry(dir.path(), "garbage", "\xff\xff not a message", "runtimes");
  WriteRawEntry(dir.path(), "miskeyed", Runtimes("other", 1).SerializeAsString(), "runtimes");
  auto store = OpenOrDie(dir.path());
  StatusOr<std::vector<v1::KernelRuntimes>> loaded = store->LoadRuntimes();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->size(), 2u);
  EXPECT_EQ((*loaded)[0].SerializeAsString(), Runtimes("a", 2).SerializeAsString());
  EXPECT_EQ((*loaded)[1].SerializeAsString(), Runtimes("b", 7).SerializeAsString());
  // The runtimes are not entries: the LRU store stays empty.
  EXPECT_EQ(store->Stats().entries, 0u);
}

TEST(RocksDbStoreTest, SecondOpenOfAnOpenStoreIsUnavailableNamingThePath) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  ASSERT_NE(store, nullptr);
  RocksDbOptions options;
  options.path = dir.path();
  StatusOr<std::unique_ptr<RocksDbStore>> second = RocksDbStore::Open(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(dir.path()), std::string::npos)
      << second.status().message();
  // The first store is unaffected.
  EXPECT_TRUE(store->Put("a", Sealed("a")).ok());
  EXPECT_EQ(HitKey(*store, "a"), "a");
}

TEST(RocksDbStoreTest, OpenOfAnUncreatablePathIsUnavailable) {
  TempDir dir;
  const std::string file = dir.path() + "/plain_file";
  std::FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  RocksDbOptions options;
  options.path = file + "/db";
  StatusOr<std::unique_ptr<RocksDbStore>> store = RocksDbStore::Open(options);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(store.status().message().find(options.path), std::string::npos);
}

TEST(RocksDbStoreTest, EveryCallAfterCloseIsUnavailable) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  ASSERT_TRUE(store->Put("a", Sealed("a")).ok());
  ASSERT_TRUE(store->Close().ok());
  EXPECT_EQ(store->Get("a").status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(store->Put("a", Sealed("a")).code(), StatusCode::kUnavailable);
  EXPECT_EQ(store->Erase("a").code(), StatusCode::kUnavailable);
  EXPECT_EQ(store->LoadCounters().status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(store->SaveCounters({{"x", 1}}).code(), StatusCode::kUnavailable);
  EXPECT_TRUE(store->List(10).empty());
  EXPECT_TRUE(store->Close().ok()) << "closing twice is harmless";
  // The lock was released: the same path opens again, with the entry.
  auto again = OpenOrDie(dir.path());
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(HitKey(*again, "a"), "a");
}

TEST(RocksDbStoreTest, EraseRemovesEntryAcrossReopen) {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.path());
    ASSERT_TRUE(store->Put("a", Sealed("a")).ok());
    ASSERT_TRUE(store->Put("b", Sealed("b")).ok());
    ASSERT_TRUE(store->Erase("a").ok());
    ASSERT_TRUE(store->Erase("never").ok());
    EXPECT_EQ(HitKey(*store, "a"), "");
  }
  auto store = OpenOrDie(dir.path());
  EXPECT_EQ(HitKey(*store, "a"), "");
  EXPECT_EQ(HitKey(*store, "b"), "b");
  EXPECT_EQ(store->Stats().entries, 1u);
}

TEST(RocksDbStoreTest, CapacityBoundHoldsOverManyPuts) {
  TempDir dir;
  const uint64_t capacity = 40000;
  auto store = OpenOrDie(dir.path(), capacity);
  uint64_t stored = 0;
  for (int i = 0; i < 400; ++i) {
    const std::string key = "k" + std::to_string(i);
    const BundlePtr b = Sealed(key, 300 + static_cast<size_t>(i % 17) * 211);
    ASSERT_TRUE(store->Put(key, b).ok());
    stored += 1;
    const StoreStats s = store->Stats();
    ASSERT_LE(s.bytes, capacity) << "after " << key;
    ASSERT_EQ(HitKey(*store, key), key) << "the newest entry always fits";
  }
  const StoreStats s = store->Stats();
  EXPECT_EQ(s.entries + s.evictions, stored);
  EXPECT_GT(s.evictions, 300u);
  uint64_t listed = 0;
  for (const EntryInfo& e : store->List(1000)) listed += e.bytes;
  EXPECT_EQ(listed, s.bytes);
  ASSERT_TRUE(store->Close().ok());
  auto again = OpenOrDie(dir.path(), capacity);
  EXPECT_EQ(again->Stats().bytes, s.bytes);
  EXPECT_EQ(again->Stats().entries, s.entries);
}

TEST(RocksDbStoreTest, ListReadsBundleDetails) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  const BundlePtr a = Sealed("a", 10, "row reduce\nthen a loop");
  ASSERT_TRUE(store->Put("a", a).ok());
  ASSERT_TRUE(store->Put("b", Sealed("b")).ok());
  const std::vector<EntryInfo> listed = store->List(1);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].key, "b");
  EXPECT_EQ(HitKey(*store, "a"), "a");
  const EntryInfo info = store->List(1).at(0);
  EXPECT_EQ(info.key, "a");
  EXPECT_EQ(info.plan, "row reduce");
  EXPECT_EQ(info.target, "sm_90");
  EXPECT_EQ(info.kernels, 1u);
  EXPECT_EQ(info.bytes, SizeOf(a));
}

TEST(RocksDbStoreTest, ConcurrentCallsKeepIndexAndDiskInStep) {
  TempDir dir;
  const uint64_t capacity = 30000;
  std::vector<BundlePtr> bundles;
  for (int i = 0; i < 32; ++i) {
    bundles.push_back(Sealed("k" + std::to_string(i), 500 + static_cast<size_t>(i) * 40));
  }
  {
    auto store = OpenOrDie(dir.path(), capacity);
    std::atomic<int> wrong{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(static_cast<unsigned>(t));
        for (int i = 0; i < 500; ++i) {
          const size_t k = rng() % bundles.size();
          const std::string key = bundles[k]->key();
          switch (rng() % 4) {
            case 0:
              if (!store->Put(key, bundles[k]).ok()) ++wrong;
              break;
            case 1:
              if (!store->Erase(key).ok()) ++wrong;
              break;
            default: {
              StatusOr<std::optional<Hit>> got = store->Get(key);
              if (!got.ok() || (got->has_value() && (*got)->bundle->key() != key)) ++wrong;
            }
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(wrong.load(), 0);
    EXPECT_LE(store->Stats().bytes, capacity);
    EXPECT_EQ(store->Stats().corrupt, 0u);
    const StoreStats before = store->Stats();
    ASSERT_TRUE(store->Close().ok());
    auto again = OpenOrDie(dir.path(), capacity);
    EXPECT_EQ(again->Stats().entries, before.entries);
    EXPECT_EQ(again->Stats().bytes, before.bytes);
    for (const EntryInfo& e : again->List(100)) EXPECT_EQ(HitKey(*again, e.key), e.key);
    EXPECT_EQ(again->Stats().corrupt, 0u);
  }
}

}  // namespace
}  // namespace stitch::cache
