#include "cluster_tier.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace stitch::daemon {
namespace {

// Secrets are small; a larger file is a wrong path, not a secret.
constexpr std::streamsize kMaxSecretBytes = 64 * 1024;

std::string DefaultNodeName() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') {
    std::strncpy(host, "stitchd", sizeof host - 1);
  }
  return std::string(host) + ":" + std::to_string(::getpid());
}

StatusOr<std::vector<cache::redis::NodeAddress>> SeedNodes(const std::string& list) {
  std::vector<cache::redis::NodeAddress> seeds;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    StatusOr<cache::redis::NodeAddress> node = cache::redis::ParseNodeAddress(item);
    if (!node.ok()) return node.status().WithContext("cluster_nodes");
    seeds.push_back(std::move(*node));
  }
  return seeds;
}

}  // namespace

StatusOr<std::string> ReadSecretFile(const std::string& key, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return InvalidArgument(key + ": cannot read " + path + ": " + std::strerror(errno));
  }
  std::string text(static_cast<size_t>(kMaxSecretBytes) + 1, '\0');
  in.read(text.data(), kMaxSecretBytes + 1);
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > static_cast<size_t>(kMaxSecretBytes)) {
    return InvalidArgument(key + ": " + path + " is over 64 KiB; is it the right file?");
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.back() == '\r') text.pop_back();
  if (text.empty()) return InvalidArgument(key + ": " + path + " is empty");
  return text;
}

StatusOr<std::unique_ptr<cache::ClusterStore>> OpenClusterTier(const DaemonConfig& config,
                                                               cache::ClusterObserver* observer) {
  cache::ClusterStoreOptions o;
  STITCH_ASSIGN_OR_RETURN(o.cluster.seeds, SeedNodes(config.cluster_nodes));
  o.cluster.user = config.cluster_user;
  if (!config.cluster_password_file.empty()) {
    STITCH_ASSIGN_OR_RETURN(o.cluster.password,
                            ReadSecretFile("cluster_password_file", config.cluster_password_file));
  }
  STITCH_ASSIGN_OR_RETURN(o.secret,
                          ReadSecretFile("cluster_secret_file", config.cluster_secret_file));
  o.key_prefix = config.cluster_key_prefix;
  o.node_name = config.node_name.empty() ? DefaultNodeName() : config.node_name;
  o.read_timeout = std::chrono::milliseconds(config.cluster_read_timeout_ms);
  o.write_timeout = std::chrono::milliseconds(config.cluster_write_timeout_ms);
  o.ttl = std::chrono::seconds(config.cluster_ttl_seconds);
  o.lease_time = std::chrono::milliseconds(config.cluster_lease_ms);
  o.breaker_failures = config.cluster_breaker_failures;
  o.breaker_open_for = std::chrono::milliseconds(config.cluster_breaker_open_ms);
  StatusOr<std::unique_ptr<cache::ClusterStore>> store =
      cache::ClusterStore::Create(std::move(o), observer);
  if (!store.ok()) return store.status().WithContext("cluster tier");
  return store;
}

}  // namespace stitch::daemon
