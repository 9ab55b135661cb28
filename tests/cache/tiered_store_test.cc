#include "stitch/cache/tiered_store.h"

#include <gtest/gtest.h>

#include "cache/cache_test_util.h"
#include "stitch/cache/memory_store.h"
#include "stitch/cache/rocksdb_store.h"

namespace stitch::cache {
namespace {

using testing::HitKey;
using testing::RawBundle;
using testing::Sealed;
using testing::TempDir;
using testing::WriteRawEntry;

std::shared_ptr<RocksDbStore> OpenDisk(const std::string& path, uint64_t capacity = 1 << 30) {
  RocksDbOptions options;
  options.path = path;
  options.capacity_bytes = capacity;
  options.block_cache_bytes = 1 << 20;
  StatusOr<std::unique_ptr<RocksDbStore>> store = RocksDbStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::shared_ptr<RocksDbStore>(std::move(store).value()) : nullptr;
}

std::optional<Hit> GetOrDie(KernelStore& store, const std::string& key) {
  StatusOr<std::optional<Hit>> got = store.Get(key);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  return got.ok() ? *got : std::nullopt;
}

// A tier that always fails, as a disk that went away would.
class BrokenStore final : public KernelStore {
 public:
  Tier tier() const override { return Tier::kCluster; }
  StatusOr<std::optional<Hit>> Get(std::string_view) override { return Unavailable("down"); }
  Status Put(std::string_view, const BundlePtr&) override { return Unavailable("down"); }
  Status Erase(std::string_view) override { return Unavailable("down"); }
  std::vector<EntryInfo> List(size_t) const override { return {}; }
  StoreStats Stats() const override { return {}; }
};

TEST(TieredStoreTest, DiskHitIsPromotedToMemory) {
  TempDir dir;
  auto disk = OpenDisk(dir.path());
  std::shared_ptr<KernelStore> memory = NewMemoryStore(1 << 20);
  ASSERT_TRUE(disk->Put("a", Sealed("a")).ok());
  TieredStore tiered({memory, disk});
  EXPECT_EQ(tiered.tier(), Tier::kMemory);

  std::optional<Hit> first = GetOrDie(tiered, "a");
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->tier, Tier::kDisk);
  EXPECT_EQ(first->bundle->key(), "a");
  EXPECT_EQ(memory->Stats().entries, 1u);

  std::optional<Hit> second = GetOrDie(tiered, "a");
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->tier, Tier::kMemory);
  EXPECT_EQ(second->bundle.get(), first->bundle.get()) << "memory holds the promoted bundle";
}

TEST(TieredStoreTest, MissEverywhereIsAMiss) {
  TempDir dir;
  TieredStore tiered({NewMemoryStore(1 << 20), OpenDisk(dir.path())});
  EXPECT_FALSE(GetOrDie(tiered, "nothing").has_value());
}

TEST(TieredStoreTest, PutWritesThroughEveryTier) {
  TempDir dir;
  auto disk = OpenDisk(dir.path());
  std::shared_ptr<KernelStore> memory = NewMemoryStore(1 << 20);
  TieredStore tiered({memory, disk});
  ASSERT_TRUE(tiered.Put("a", Sealed("a")).ok());
  EXPECT_EQ(HitKey(*memory, "a"), "a");
  EXPECT_EQ(HitKey(*disk, "a"), "a");
  EXPECT_EQ(tiered.Put("a", std::make_shared<const v1::KernelBundle>(RawBundle("a"))).code(),
            StatusCode::kInvalidArgument);

  ASSERT_TRUE(tiered.Erase("a").ok());
  EXPECT_EQ(HitKey(*memory, "a"), "");
  EXPECT_EQ(HitKey(*disk, "a"), "");
}

TEST(TieredStoreTest, CorruptDiskEntryIsAMissAtBothTiers) {
  TempDir dir;
  {
    auto disk = OpenDisk(dir.path());
    ASSERT_TRUE(disk->Put("a", Sealed("a", 2000)).ok());
    ASSERT_TRUE(disk->Close().ok());
  }
  std::string damaged = EncodeEntry(*Sealed("a", 2000));
  damaged.resize(damaged.size() - 7);  // a torn write
  WriteRawEntry(dir.path(), "a", damaged);

  auto disk = OpenDisk(dir.path());
  std::shared_ptr<KernelStore> memory = NewMemoryStore(1 << 20);
  TieredStore tiered({memory, disk});
  EXPECT_FALSE(GetOrDie(tiered, "a").has_value());
  EXPECT_EQ(memory->Stats().entries, 0u);
  EXPECT_EQ(disk->Stats().entries, 0u);
  EXPECT_EQ(disk->Stats().corrupt, 1u);
  EXPECT_EQ(tiered.Stats().corrupt, 1u);
  EXPECT_FALSE(GetOrDie(tiered, "a").has_value());

  ASSERT_TRUE(tiered.Put("a", Sealed("a", 2000)).ok());
  std::optional<Hit> hit = GetOrDie(tiered, "a");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tier, Tier::kMemory);
  EXPECT_EQ(HitKey(*disk, "a"), "a");
}

TEST(TieredStoreTest, StatsAndListComeFromTheLastTier) {
  TempDir dir;
  const BundlePtr a = Sealed("a", 1000), b = Sealed("b", 1000);
  // The memory tier holds one bundle, so the second Put evicts there only.
  std::shared_ptr<KernelStore> memory = NewMemoryStore(a->ByteSizeLong() + 10);
  auto disk = OpenDisk(dir.path());
  TieredStore tiered({memory, disk});
  ASSERT_TRUE(tiered.Put("a", a).ok());
  ASSERT_TRUE(tiered.Put("b", b).ok());
  const StoreStats s = tiered.Stats();
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.bytes, disk->Stats().bytes);
  EXPECT_EQ(s.capacity_bytes, disk->Stats().capacity_bytes);
  EXPECT_EQ(s.evictions, 1u);
  std::vector<std::string> keys;
  for (const EntryInfo& e : tiered.List(10)) keys.push_back(e.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"b", "a"}));
  const auto per_tier = tiered.TierStats();
  ASSERT_EQ(per_tier.size(), 2u);
  EXPECT_EQ(per_tier[0].first, Tier::kMemory);
  EXPECT_EQ(per_tier[0].second.entries, 1u);
  EXPECT_EQ(per_tier[1].first, Tier::kDisk);
  EXPECT_EQ(per_tier[1].second.entries, 2u);
}

TEST(TieredStoreTest, FailingTierIsAMissForGetAndAnErrorForPut) {
  std::shared_ptr<KernelStore> memory = NewMemoryStore(1 << 20);
  TieredStore tiered({memory, std::make_shared<BrokenStore>()});
  EXPECT_FALSE(GetOrDie(tiered, "a").has_value());
  const Status put = tiered.Put("a", Sealed("a"));
  EXPECT_EQ(put.code(), StatusCode::kUnavailable);
  EXPECT_EQ(HitKey(*memory, "a"), "a") << "the healthy tier was still written";
  EXPECT_EQ(GetOrDie(tiered, "a")->tier, Tier::kMemory);
}

TEST(TieredStoreTest, TierNames) {
  EXPECT_EQ(TierName(Tier::kMemory), "memory");
  EXPECT_EQ(TierName(Tier::kDisk), "disk");
  EXPECT_EQ(TierName(Tier::kCluster), "cluster");
}

}  // namespace
}  // namespace stitch::cache

namespace stitch::cache {
namespace {

TEST(TieredStoreClusterTest, StatsAndListSkipTheClusterTier) {
  testing::TempDir dir;
  auto disk = OpenDisk(dir.path());
  TieredStore tiered({NewMemoryStore(1 << 20), disk, std::make_shared<BrokenStore>()});
  ASSERT_TRUE(disk->Put("a", Sealed("a")).ok());
  EXPECT_EQ(tiered.Stats().entries, 1u);
  ASSERT_EQ(tiered.List(10).size(), 1u);
  EXPECT_EQ(tiered.List(10)[0].key, "a");
}

TEST(TieredStoreClusterTest, PromoteFillsOnlyTheTiersAboveTheHit) {
  testing::TempDir dir;
  auto disk = OpenDisk(dir.path());
  std::shared_ptr<KernelStore> memory = NewMemoryStore(1 << 20);
  auto cluster = std::make_shared<BrokenStore>();  // a Put into it would fail and log
  TieredStore tiered({memory, disk, cluster});
  tiered.Promote("c", Hit{Sealed("c"), Tier::kCluster});
  EXPECT_EQ(HitKey(*memory, "c"), "c");
  EXPECT_EQ(HitKey(*disk, "c"), "c");
  tiered.Promote("d", Hit{Sealed("d"), Tier::kDisk});
  EXPECT_EQ(HitKey(*memory, "d"), "d");
  EXPECT_EQ(HitKey(*disk, "d"), "") << "the tier that held the hit is not written again";
}

}  // namespace
}  // namespace stitch::cache
