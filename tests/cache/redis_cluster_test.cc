// The Redis Cluster routing layer: CRC16 and hash tags against the specification and against
// a real cluster's CLUSTER KEYSLOT, then routing, MOVED, ASK, AUTH, deadlines and a failover
// on a real 3-master, 3-replica cluster of redis-server processes.
#include "stitch/cache/redis_cluster.h"

#include <gtest/gtest.h>

#include <random>

#include "support/redis_cluster.h"

namespace stitch::cache::redis {
namespace {

using std::chrono::milliseconds;
using stitch::testing::RedisCluster;

Deadline In(milliseconds ms) { return std::chrono::steady_clock::now() + ms; }

TEST(Crc16, MatchesTheSpecificationsCheckValue) {
  // The check value of CRC-16/XMODEM, which the cluster specification names.
  EXPECT_EQ(Crc16("123456789"), 0x31C3);
  EXPECT_EQ(Crc16(""), 0);
}

TEST(KeySlot, HashTagsFollowTheSpecification) {
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("{user1000}.followers"));
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  // An empty tag hashes the whole key; only the first '{' and the next '}' count.
  EXPECT_EQ(KeySlot("foo{}{bar}"), Crc16("foo{}{bar}") % kSlotCount);
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), KeySlot("{bar"));
  EXPECT_EQ(KeySlot("foo{bar}{zap}"), KeySlot("bar"));
  EXPECT_EQ(KeySlot("no-closing{brace"), Crc16("no-closing{brace") % kSlotCount);
}

TEST(ParseNodeAddress, AcceptsHostPortAndRejectsTheRest) {
  StatusOr<NodeAddress> a = ParseNodeAddress("10.0.0.7:6379");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->host, "10.0.0.7");
  EXPECT_EQ(a->port, 6379);
  StatusOr<NodeAddress> v6 = ParseNodeAddress("[::1]:7000");
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_EQ(v6->host, "::1");
  for (const char* bad :
       {"", "host", ":6379", "host:", "host:0", "host:70000", "host:12x", "[::1]7000", "[::1"}) {
    StatusOr<NodeAddress> r = ParseNodeAddress(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("cluster node"), std::string::npos);
  }
}

TEST(ClusterClient, CreateValidatesItsOptions) {
  EXPECT_EQ(ClusterClient::Create({}).status().code(), StatusCode::kInvalidArgument);
  ClusterOptions o;
  o.seeds = {{"127.0.0.1", 1}};
  o.max_connections_per_node = 0;
  EXPECT_EQ(ClusterClient::Create(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(ClusterClient, NothingListeningIsUnavailableNotAHang) {
  ClusterOptions o;
  o.seeds = {{"127.0.0.1", testing::PickRedisPort({})}};
  auto client = ClusterClient::Create(o);
  ASSERT_TRUE(client.ok());
  StatusOr<Reply> r = (*client)->Run("stitch:x", {"GET", "stitch:x"}, In(milliseconds(200)));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
}

class ClusterClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new RedisCluster(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(cluster_->ready()) << "the Redis cluster did not form"; }

  static ClusterOptions UserOptions() {
    ClusterOptions o;
    o.seeds = {{"127.0.0.1", cluster_->port(0)}};
    o.user = testing::kRedisUser;
    o.password = testing::kRedisUserPassword;
    return o;
  }
  static ClusterOptions AdminOptions() {
    ClusterOptions o;
    o.seeds = {{"127.0.0.1", cluster_->port(0)}};
    o.password = testing::kRedisAdminPassword;
    return o;
  }
  static std::unique_ptr<ClusterClient> Client(const ClusterOptions& o) {
    auto c = ClusterClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }
  static std::string NodeId(int i) {
    std::string id = cluster_->Cli(i, "CLUSTER MYID");
    while (!id.empty() && (id.back() == '\n' || id.back() == '\r')) id.pop_back();
    return id;
  }
  // Returns a key under the ACL user's prefix whose slot is `slot`.
  static std::string KeyInSlot(uint16_t slot, const std::string& stem) {
    for (int i = 0;; ++i) {
      std::string key = "stitch:" + stem + ":" + std::to_string(i);
      if (KeySlot(key) == slot) return key;
    }
  }

  static RedisCluster* cluster_;
};
RedisCluster* ClusterClientTest::cluster_ = nullptr;

TEST_F(ClusterClientTest, KeySlotAgreesWithTheServerOnRandomKeys) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::string alphabet = "abcXYZ019{}:_-";
  for (int i = 0; i < 100; ++i) {
    std::string key;
    const int length = 1 + static_cast<int>(rng() % 24);
    for (int j = 0; j < length; ++j) key.push_back(alphabet[rng() % alphabet.size()]);
    const std::string out = cluster_->Cli(0, "CLUSTER KEYSLOT '" + key + "'");
    EXPECT_EQ(std::stoi(out), KeySlot(key)) << key;
  }
}

TEST_F(ClusterClientTest, RoutesEveryKeyToItsMaster) {
  auto client = Client(UserOptions());
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 300; ++i) {
    const std::string key = "stitch:route:" + std::to_string(i);
    StatusOr<Reply> set =
        client->Run(key, {"SET", key, "v" + std::to_string(i)}, In(milliseconds(2000)));
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    ASSERT_EQ(set->text, "OK");
  }
  for (int i = 0; i < 300; ++i) {
    const std::string key = "stitch:route:" + std::to_string(i);
    StatusOr<Reply> get = client->Run(key, {"GET", key}, In(milliseconds(2000)));
    ASSERT_TRUE(get.ok()) << get.status().ToString();
    EXPECT_EQ(get->text, "v" + std::to_string(i));
  }
  // The keys spread over all three masters, and the client went straight to each.
  int masters_with_keys = 0;
  for (int m : cluster_->Masters()) {
    masters_with_keys += std::stoi(cluster_->Cli(m, "DBSIZE")) > 0 ? 1 : 0;
  }
  EXPECT_EQ(masters_with_keys, 3);
  EXPECT_EQ(client->Stats().moved, 0u);
  EXPECT_GE(client->Stats().slot_map_refreshes, 1u);
}

TEST_F(ClusterClientTest, BinaryValuesRoundTrip) {
  auto client = Client(UserOptions());
  ASSERT_NE(client, nullptr);
  std::string value;
  for (int i = 0; i < 4096; ++i) value.push_back(static_cast<char>(i * 7));
  const std::string key = "stitch:{binary}";
  ASSERT_TRUE(client->Run(key, {"SET", key, value}, In(milliseconds(2000))).ok());
  StatusOr<Reply> get = client->Run(key, {"GET", key}, In(milliseconds(2000)));
  ASSERT_TRUE(get.ok());
  EXPECT_EQ(get->text, value);
  StatusOr<std::vector<Reply>> pipeline = client->Pipeline(
      KeySlot(key), {{"GET", key}, {"PEXPIRE", key, "60000"}, {"GET", "stitch:{binary}:none"}},
      In(milliseconds(2000)));
  ASSERT_TRUE(pipeline.ok()) << pipeline.status().ToString();
  ASSERT_EQ(pipeline->size(), 3u);
  EXPECT_EQ((*pipeline)[0].text, value);
  EXPECT_EQ((*pipeline)[1].integer, 1);
  EXPECT_TRUE((*pipeline)[2].is_nil());
}

TEST_F(ClusterClientTest, AuthIsEnforcedAndTheAclUserIsLimited) {
  ClusterOptions wrong = UserOptions();
  wrong.password = "not-the-password";
  auto client = Client(wrong);
  StatusOr<Reply> r = client->Run("stitch:a", {"GET", "stitch:a"}, In(milliseconds(2000)));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_NE(r.status().message().find("stitchd"), std::string::npos) << r.status().ToString();

  auto user = Client(UserOptions());
  StatusOr<Reply> flush = user->Run("stitch:a", {"FLUSHALL"}, In(milliseconds(2000)));
  ASSERT_TRUE(flush.ok()) << flush.status().ToString();
  EXPECT_TRUE(flush->is_error()) << "the stitchd ACL user may not FLUSHALL";
  StatusOr<Reply> other = user->Run("other:key", {"GET", "other:key"}, In(milliseconds(2000)));
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->is_error()) << "the stitchd ACL user is limited to stitch:* keys";
}

TEST_F(ClusterClientTest, FollowsMovedAfterASlotChangesOwner) {
  auto client = Client(UserOptions());
  const std::string key = "stitch:{moved}";
  ASSERT_TRUE(client->Run(key, {"GET", key}, In(milliseconds(2000))).ok());  // learns the map
  const uint16_t slot = KeySlot(key);
  const int from = cluster_->MasterOfSlot(slot);
  ASSERT_GE(from, 0);
  int to = -1;
  for (int m : cluster_->Masters()) to = m != from && to < 0 ? m : to;
  ASSERT_GE(to, 0);
  // An empty slot can be handed over with SETSLOT NODE on every master.
  const std::string to_id = NodeId(to);
  for (int m : cluster_->Masters()) {
    cluster_->Cli(m, "CLUSTER SETSLOT " + std::to_string(slot) + " NODE " + to_id);
  }
  StatusOr<Reply> set = client->Run(key, {"SET", key, "after-move"}, In(milliseconds(3000)));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->text, "OK");
  EXPECT_GE(client->Stats().moved, 1u);
  EXPECT_EQ(cluster_->Cli(to, "GET " + key), "after-move\n");
  // The map learned from MOVED serves the next call without another redirect.
  const uint64_t moved = client->Stats().moved;
  ASSERT_TRUE(client->Run(key, {"GET", key}, In(milliseconds(2000))).ok());
  EXPECT_EQ(client->Stats().moved, moved);
}

TEST_F(ClusterClientTest, FollowsAskWhileASlotMigrates) {
  auto client = Client(UserOptions());
  const std::string key = "stitch:{ask}";
  ASSERT_TRUE(client->Run(key, {"GET", key}, In(milliseconds(2000))).ok());
  const uint16_t slot = KeySlot(key);
  const int from = cluster_->MasterOfSlot(slot);
  int to = -1;
  for (int m : cluster_->Masters()) to = m != from && to < 0 ? m : to;
  ASSERT_GE(from, 0);
  ASSERT_GE(to, 0);
  const std::string s = std::to_string(slot);
  cluster_->Cli(to, "CLUSTER SETSLOT " + s + " IMPORTING " + NodeId(from));
  cluster_->Cli(from, "CLUSTER SETSLOT " + s + " MIGRATING " + NodeId(to));
  // The key is not on the source, so the source answers ASK and the write lands on the target.
  StatusOr<Reply> set = client->Run(key, {"SET", key, "during-migration"}, In(milliseconds(3000)));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->text, "OK");
  StatusOr<Reply> get = client->Run(key, {"GET", key}, In(milliseconds(3000)));
  ASSERT_TRUE(get.ok()) << get.status().ToString();
  EXPECT_EQ(get->text, "during-migration");
  EXPECT_GE(client->Stats().ask, 2u);
  EXPECT_EQ(client->Stats().moved, 0u) << "ASK must not rewrite the slot map";
  for (int m : cluster_->Masters())
    cluster_->Cli(m, "CLUSTER SETSLOT " + s + " NODE " + NodeId(to));
  StatusOr<Reply> after = client->Run(key, {"GET", key}, In(milliseconds(3000)));
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->text, "during-migration");
}

TEST_F(ClusterClientTest, APausedNodeCostsTheDeadlineAndNoMore) {
  auto client = Client(UserOptions());
  const std::string key = "stitch:{paused}";
  ASSERT_TRUE(client->Run(key, {"SET", key, "1"}, In(milliseconds(2000))).ok());
  const int master = cluster_->MasterOfSlot(KeySlot(key));
  ASSERT_GE(master, 0);
  cluster_->Pause(master);
  const auto start = std::chrono::steady_clock::now();
  StatusOr<Reply> r = client->Run(key, {"GET", key}, In(milliseconds(50)));
  const auto took = std::chrono::steady_clock::now() - start;
  cluster_->Resume(master);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_GE(client->Stats().timeouts, 1u);
  // A generous bound: the call must end near its deadline, not hang on the paused node.
  EXPECT_LT(took, std::chrono::seconds(2));
  // The broken connection is dropped; the next call works on a fresh one.
  StatusOr<Reply> again = client->Run(key, {"GET", key}, In(milliseconds(2000)));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->text, "1");
}

// Last: it changes which nodes are masters.
TEST_F(ClusterClientTest, ZFailoverOfAKilledMasterIsFollowed) {
  auto client = Client(UserOptions());
  const std::string key = "stitch:{failover}";
  ASSERT_TRUE(client->Run(key, {"SET", key, "survives"}, In(milliseconds(2000))).ok());
  const int master = cluster_->MasterOfSlot(KeySlot(key));
  ASSERT_GE(master, 0);
  // Let the replica have the write before its master dies.
  cluster_->Cli(master, "WAIT 1 2000");
  cluster_->Kill(master);
  bool served = false;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int failures = 0;
  while (!served && std::chrono::steady_clock::now() < end) {
    StatusOr<Reply> r = client->Run(key, {"GET", key}, In(milliseconds(200)));
    if (r.ok() && !r->is_error()) {
      EXPECT_EQ(r->text, "survives");
      served = true;
    } else {
      ++failures;
      std::this_thread::sleep_for(milliseconds(100));
    }
  }
  EXPECT_TRUE(served) << "the replica never took over";
  EXPECT_GT(failures, 0) << "the killed master's slots cannot have answered at once";
  EXPECT_GE(client->Stats().connection_errors, 1u);
  EXPECT_GE(client->Stats().slot_map_refreshes, 2u);
  cluster_->Restart(master);
}

}  // namespace
}  // namespace stitch::cache::redis
