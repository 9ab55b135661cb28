// Builds the cluster tier from the daemon's configuration: seed nodes, the AUTH password and
// the HMAC secret read from their files (Kubernetes Secrets in production), timeouts, TTL,
// lease time and breaker settings.
//
// Thread-safety: reentrant.
#pragma once

#include <memory>

#include "stitch/base/status.h"
#include "stitch/cache/cluster_store.h"
#include "stitch/daemon/config.h"

namespace stitch::daemon {

// Returns the cluster tier `config` describes, reporting its round trips to `observer` (may
// be null). Returns INVALID_ARGUMENT naming the config key and the path for a secret or
// password file that cannot be read or is empty, and the tier's own INVALID_ARGUMENT for a
// secret shorter than 16 bytes. Does not connect.
StatusOr<std::unique_ptr<cache::ClusterStore>> OpenClusterTier(const DaemonConfig& config,
                                                               cache::ClusterObserver* observer);

// Returns the contents of a secret file less one trailing newline (what `echo` or an editor
// adds), or INVALID_ARGUMENT naming `key` and the path when it cannot be read or is empty.
StatusOr<std::string> ReadSecretFile(const std::string& key, const std::string& path);

}  // namespace stitch::daemon
