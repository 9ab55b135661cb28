// The cluster tier built from the daemon's config: secret and password files, and the
// errors an operator sees for each wrong one.
#include "../../daemon/src/cluster_tier.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace stitch::daemon {
namespace {

class ClusterTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/cluster_tier_test.XXXXXX";
    dir_ = ::mkdtemp(pattern);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  DaemonConfig Config() {
    DaemonConfig c;
    c.cluster_nodes = "127.0.0.1:7000,127.0.0.1:7001";
    c.cluster_secret_file = Write("secret", "0123456789abcdef0123\n");
    c.node_name = "node-1";
    return c;
  }
  std::string dir_;
};

TEST_F(ClusterTierTest, SecretFilesLoseOneTrailingNewline) {
  StatusOr<std::string> s = ReadSecretFile("cluster_secret_file", Write("a", "s3cret\n"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, "s3cret");
  s = ReadSecretFile("cluster_secret_file", Write("b", "s3cret\r\n"));
  EXPECT_EQ(*s, "s3cret");
  s = ReadSecretFile("cluster_secret_file", Write("c", "two\nlines\n"));
  EXPECT_EQ(*s, "two\nlines");
}

TEST_F(ClusterTierTest, UnreadableEmptyOrHugeSecretFilesNameTheKeyAndPath) {
  const std::string missing = dir_ + "/missing";
  StatusOr<std::string> s = ReadSecretFile("cluster_password_file", missing);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("cluster_password_file"), std::string::npos);
  EXPECT_NE(s.status().message().find(missing), std::string::npos);
  EXPECT_NE(ReadSecretFile("k", Write("empty", "\n")).status().message().find("empty"),
            std::string::npos);
  EXPECT_FALSE(ReadSecretFile("k", Write("huge", std::string(100000, 'x'))).ok());
  EXPECT_FALSE(ReadSecretFile("k", dir_).ok()) << "a directory is not a secret";
}

TEST_F(ClusterTierTest, BuildsTheTierWithoutConnecting) {
  StatusOr<std::unique_ptr<cache::ClusterStore>> store = OpenClusterTier(Config(), nullptr);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->tier(), cache::Tier::kCluster);
  EXPECT_EQ((*store)->EntryKey("abc").rfind("stitch:v", 0), 0u);
  EXPECT_EQ((*store)->lease_time(), std::chrono::milliseconds(30000));
}

TEST_F(ClusterTierTest, AShortSecretOrAMissingPasswordFileIsAnError) {
  DaemonConfig c = Config();
  c.cluster_secret_file = Write("short", "short\n");
  StatusOr<std::unique_ptr<cache::ClusterStore>> store = OpenClusterTier(c, nullptr);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("16 bytes"), std::string::npos);
  c = Config();
  c.cluster_password_file = dir_ + "/nope";
  store = OpenClusterTier(c, nullptr);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("cluster_password_file"), std::string::npos);
}

}  // namespace
}  // namespace stitch::daemon
