// The cluster tier on a real Redis Cluster: round trips, TTL refresh on hits, entries that
// must never be served (written with redis-cli as an attacker or a broken node would), leases,
// and the circuit breaker.
#include "stitch/cache/cluster_store.h"

#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "cache_test_util.h"
#include "stitch/cache/memory_store.h"
#include "stitch/cache/tiered_store.h"
#include "support/redis_cluster.h"

namespace stitch::cache {
namespace {

using std::chrono::milliseconds;
using stitch::testing::RedisCluster;
using testing::Sealed;

constexpr const char* kSecret = "a-cluster-secret-of-32-bytes-ok!";

ClusterStoreOptions OptionsFor(const RedisCluster& cluster, const std::string& node) {
  ClusterStoreOptions o;
  o.cluster.seeds = {{"127.0.0.1", cluster.port(0)}, {"127.0.0.1", cluster.port(1)}};
  o.cluster.user = stitch::testing::kRedisUser;
  o.cluster.password = stitch::testing::kRedisUserPassword;
  o.secret = kSecret;
  o.node_name = node;
  // Generous: the loaded 2-core test machine must not turn these tests into timeout tests.
  o.read_timeout = milliseconds(2000);
  o.write_timeout = milliseconds(2000);
  return o;
}

std::unique_ptr<ClusterStore> MakeStore(ClusterStoreOptions o) {
  auto s = ClusterStore::Create(std::move(o));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(ClusterStoreCreate, RejectsBadOptions) {
  ClusterStoreOptions o;
  o.cluster.seeds = {{"127.0.0.1", 7000}};
  o.node_name = "n";
  o.secret = "short";
  EXPECT_NE(ClusterStore::Create(o).status().message().find("secret"), std::string::npos);
  o.secret = kSecret;
  o.node_name = "";
  EXPECT_EQ(ClusterStore::Create(o).status().code(), StatusCode::kInvalidArgument);
  o.node_name = "n";
  o.key_prefix = "bad{prefix}";
  EXPECT_EQ(ClusterStore::Create(o).status().code(), StatusCode::kInvalidArgument);
  o.key_prefix = "stitch";
  o.read_timeout = milliseconds(0);
  EXPECT_EQ(ClusterStore::Create(o).status().code(), StatusCode::kInvalidArgument);
  o.read_timeout = milliseconds(20);
  o.cluster.seeds.clear();
  EXPECT_EQ(ClusterStore::Create(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(ClusterStoreBreaker, ADeadClusterOpensTheBreakerAndCostsNoRoundTrips) {
  ClusterStoreOptions o;
  o.cluster.seeds = {{"127.0.0.1", stitch::testing::PickRedisPort({})}};
  o.secret = kSecret;
  o.node_name = "n";
  o.breaker_failures = 3;
  o.breaker_open_for = milliseconds(300);
  auto store = MakeStore(o);
  for (int i = 0; i < 3; ++i) {
    StatusOr<std::optional<Hit>> got = store->Get("k");
    EXPECT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status().ToString();
  }
  ClusterStoreStats s = store->ClusterStats();
  EXPECT_EQ(s.errors[static_cast<int>(ClusterError::kUnavailable)], 3u);
  EXPECT_EQ(s.breaker, BreakerState::kOpen);
  EXPECT_EQ(s.breaker_trips, 1u);
  // Open: a plain miss, a no-op write, no lease; nothing reaches the network.
  StatusOr<std::optional<Hit>> skipped = store->Get("k");
  ASSERT_TRUE(skipped.ok());
  EXPECT_FALSE(skipped->has_value());
  EXPECT_TRUE(store->Put("k", Sealed("k")).ok());
  EXPECT_EQ(store->TryLease("k").state, LeaseResult::State::kUnavailable);
  s = store->ClusterStats();
  EXPECT_EQ(s.skipped_by_breaker, 3u);
  EXPECT_EQ(s.errors[static_cast<int>(ClusterError::kUnavailable)], 3u);
  // After the open period one probe goes out; it fails, so the breaker opens again.
  std::this_thread::sleep_for(milliseconds(400));
  EXPECT_FALSE(store->Get("k").ok());
  s = store->ClusterStats();
  EXPECT_EQ(s.breaker, BreakerState::kOpen);
  EXPECT_EQ(s.breaker_trips, 2u);
  EXPECT_EQ(s.errors[static_cast<int>(ClusterError::kUnavailable)], 4u);
}

TEST(ClusterStoreBreaker, TieredStoreFallsThroughADeadCluster) {
  ClusterStoreOptions o;
  o.cluster.seeds = {{"127.0.0.1", stitch::testing::PickRedisPort({})}};
  o.secret = kSecret;
  o.node_name = "n";
  std::shared_ptr<KernelStore> cluster = MakeStore(o);
  TieredStore tiers({NewMemoryStore(1 << 20), cluster});
  EXPECT_FALSE(tiers.Put("k", Sealed("k")).ok()) << "the cluster's failure is reported";
  EXPECT_EQ(testing::HitKey(tiers, "k"), "k") << "the memory tier still serves";
  EXPECT_EQ(testing::HitKey(tiers, "absent"), "") << "a failing cluster is a miss";
}

class ClusterStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new RedisCluster(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(cluster_->ready()) << "the Redis cluster did not form";
    store_ = MakeStore(OptionsFor(*cluster_, "node-a"));
    ASSERT_NE(store_, nullptr);
  }

  // Writes `value` under `redis_key` with redis-cli, as an operator or an attacker could.
  static void WriteWithCli(const std::string& redis_key, const std::string& value) {
    const std::string file = cluster_->dir() + "/value.bin";
    std::ofstream(file, std::ios::binary) << value;
    int status = -1;
    cluster_->Cli(0, "-c -x SET '" + redis_key + "' < " + file, &status);
    ASSERT_EQ(status, 0);
  }
  static int64_t Pttl(const std::string& redis_key) {
    return std::stoll(cluster_->Cli(0, "-c PTTL '" + redis_key + "'"));
  }

  static RedisCluster* cluster_;
  std::unique_ptr<ClusterStore> store_;
};
RedisCluster* ClusterStoreTest::cluster_ = nullptr;

TEST_F(ClusterStoreTest, RoundTripsBundlesAcrossNodes) {
  auto other = MakeStore(OptionsFor(*cluster_, "node-b"));
  for (int i = 0; i < 20; ++i) {
    const std::string key = "roundtrip" + std::to_string(i);
    ASSERT_TRUE(store_->Put(key, Sealed(key, 100 + i * 50)).ok());
  }
  for (int i = 0; i < 20; ++i) {
    const std::string key = "roundtrip" + std::to_string(i);
    StatusOr<std::optional<Hit>> got = other->Get(key);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(got->has_value()) << key;
    EXPECT_EQ((*got)->tier, Tier::kCluster);
    EXPECT_EQ((*got)->bundle->SerializeAsString(), Sealed(key, 100 + i * 50)->SerializeAsString());
  }
  EXPECT_EQ(testing::HitKey(*other, "never-written"), "");
  EXPECT_EQ(other->ClusterStats().hits, 20u);
  EXPECT_EQ(other->ClusterStats().misses, 1u);
  EXPECT_EQ(store_->ClusterStats().writes, 20u);
  // An entry and its lease share a slot through the hash tag.
  EXPECT_EQ(redis::KeySlot(store_->EntryKey("roundtrip0")),
            redis::KeySlot(store_->EntryKey("roundtrip0") + ":lease"));
}

TEST_F(ClusterStoreTest, EntriesExpireAndHitsRefreshTheirTtl) {
  ClusterStoreOptions o = OptionsFor(*cluster_, "node-a");
  o.ttl = std::chrono::seconds(60);
  auto store = MakeStore(o);
  ASSERT_TRUE(store->Put("ttl", Sealed("ttl")).ok());
  const std::string redis_key = store->EntryKey("ttl");
  const int64_t fresh = Pttl(redis_key);
  EXPECT_GT(fresh, 50000);
  EXPECT_LE(fresh, 60000);
  cluster_->Cli(0, "-c PEXPIRE '" + redis_key + "' 5000");
  EXPECT_LE(Pttl(redis_key), 5000);
  EXPECT_EQ(testing::HitKey(*store, "ttl"), "ttl");
  EXPECT_GT(Pttl(redis_key), 50000) << "a hit refreshes the TTL";
}

TEST_F(ClusterStoreTest, BadEntriesAreNeverServedAndEachIsCounted) {
  // A node that has the secret but a bug writes a consistent MAC over a bad entry; an
  // attacker without the secret cannot. Both kinds are written here.
  ClusterStoreOptions wrong_secret = OptionsFor(*cluster_, "intruder");
  wrong_secret.secret = "not-this-clusters-secret-at-all!";
  auto intruder = MakeStore(wrong_secret);
  const std::string good = store_->EncodeValue("bad-hmac", *Sealed("bad-hmac"));

  WriteWithCli(store_->EntryKey("bad-hmac"),
               intruder->EncodeValue("bad-hmac", *Sealed("bad-hmac")));

  std::string other_version = store_->EncodeValue("bad-version", *Sealed("bad-version"));
  other_version[4 + 4 + 32 + 4] = static_cast<char>(kBundleFormatVersion + 1);  // envelope u32
  WriteWithCli(store_->EntryKey("bad-version"), other_version);

  const std::string whole = store_->EncodeValue("bad-truncated", *Sealed("bad-truncated", 4000));
  WriteWithCli(store_->EntryKey("bad-truncated"), whole.substr(0, whole.size() / 2));

  v1::KernelBundle tampered = *Sealed("bad-digest");
  tampered.set_plan("a plan the digest does not cover");
  WriteWithCli(store_->EntryKey("bad-digest"), store_->EncodeValue("bad-digest", tampered));

  WriteWithCli(store_->EntryKey("bad-key"), store_->EncodeValue("bad-key", *Sealed("another")));

  WriteWithCli(store_->EntryKey("bad-garbage"), "not an entry at all");

  for (const char* key :
       {"bad-hmac", "bad-version", "bad-truncated", "bad-digest", "bad-key", "bad-garbage"}) {
    StatusOr<std::optional<Hit>> got = store_->Get(key);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_FALSE(got->has_value()) << key << " was served";
  }
  const ClusterStoreStats s = store_->ClusterStats();
  EXPECT_EQ(s.rejected[static_cast<int>(Rejection::kHmac)], 1u);
  EXPECT_EQ(s.rejected[static_cast<int>(Rejection::kVersion)], 1u);
  EXPECT_EQ(s.rejected[static_cast<int>(Rejection::kTruncated)], 2u);  // cut, and garbage
  EXPECT_EQ(s.rejected[static_cast<int>(Rejection::kDigest)], 1u);
  EXPECT_EQ(s.rejected[static_cast<int>(Rejection::kKey)], 1u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(store_->Stats().corrupt, 6u);
  // Rejected entries stay (a node with the wrong secret must not erase its peers' entries);
  // a good Put replaces one.
  EXPECT_NE(cluster_->Cli(0, "-c EXISTS '" + store_->EntryKey("bad-hmac") + "'"), "0\n");
  ASSERT_TRUE(store_->Put("bad-hmac", Sealed("bad-hmac")).ok());
  EXPECT_EQ(testing::HitKey(*store_, "bad-hmac"), "bad-hmac");
  EXPECT_EQ(good, store_->EncodeValue("bad-hmac", *Sealed("bad-hmac")));
  // The intruder, for its part, rejects what the cluster's nodes write.
  EXPECT_EQ(testing::HitKey(*intruder, "bad-hmac"), "");
}

TEST_F(ClusterStoreTest, OneNodeHoldsALeaseUntilItReleasesOrItRunsOut) {
  ClusterStoreOptions short_lease = OptionsFor(*cluster_, "node-a");
  short_lease.lease_time = milliseconds(500);
  auto a = MakeStore(short_lease);
  short_lease.node_name = "node-b";
  auto b = MakeStore(short_lease);

  LeaseResult first = a->TryLease("leased");
  EXPECT_EQ(first.state, LeaseResult::State::kAcquired);
  EXPECT_EQ(first.holder, "node-a");
  LeaseResult second = b->TryLease("leased");
  EXPECT_EQ(second.state, LeaseResult::State::kHeldElsewhere);
  EXPECT_EQ(second.holder, "node-a");
  LeaseProbe waiting = b->Probe("leased");
  ASSERT_TRUE(waiting.status.ok()) << waiting.status.ToString();
  EXPECT_TRUE(waiting.lease_held);
  EXPECT_FALSE(waiting.hit.has_value());

  // The holder publishes and releases; the waiter finds the entry and no lease.
  ASSERT_TRUE(a->Put("leased", Sealed("leased")).ok());
  b->ReleaseLease("leased");  // not b's lease: nothing happens
  EXPECT_TRUE(b->Probe("leased").lease_held);
  a->ReleaseLease("leased");
  LeaseProbe done = b->Probe("leased");
  EXPECT_FALSE(done.lease_held);
  ASSERT_TRUE(done.hit.has_value());
  EXPECT_EQ(done.hit->bundle->key(), "leased");

  // A holder that dies never releases; its lease runs out and another node takes over.
  EXPECT_EQ(a->TryLease("orphaned").state, LeaseResult::State::kAcquired);
  EXPECT_EQ(b->TryLease("orphaned").state, LeaseResult::State::kHeldElsewhere);
  std::this_thread::sleep_for(milliseconds(800));
  EXPECT_FALSE(b->Probe("orphaned").lease_held);
  LeaseResult takeover = b->TryLease("orphaned");
  EXPECT_EQ(takeover.state, LeaseResult::State::kAcquired);
  EXPECT_EQ(takeover.holder, "node-b");
}

TEST_F(ClusterStoreTest, AnswersFromTheReplicaAfterItsMasterIsKilled) {
  ASSERT_TRUE(store_->Put("failover", Sealed("failover")).ok());
  const int master = cluster_->MasterOfSlot(redis::KeySlot(store_->EntryKey("failover")));
  ASSERT_GE(master, 0);
  cluster_->Cli(master, "WAIT 1 2000");
  cluster_->Kill(master);
  ClusterStoreOptions o = OptionsFor(*cluster_, "node-a");
  o.read_timeout = milliseconds(200);
  o.breaker_open_for = milliseconds(200);
  auto store = MakeStore(o);
  bool served = false;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!served && std::chrono::steady_clock::now() < end) {
    StatusOr<std::optional<Hit>> got = store->Get("failover");
    served = got.ok() && got->has_value();
    if (!served) std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE(served);
  cluster_->Restart(master);
}

}  // namespace
}  // namespace stitch::cache
