#include "store_util.h"

#include <string>

#include "stitch/cache/entry.h"

namespace stitch::cache {

std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kMemory:
      return "memory";
    case Tier::kDisk:
      return "disk";
    case Tier::kCluster:
      return "cluster";
  }
  return "unknown";
}

Status ValidateForPut(std::string_view key, const BundlePtr& bundle) {
  if (bundle == nullptr) return InvalidArgument("no bundle to store under " + std::string(key));
  if (bundle->key() != key) {
    return InvalidArgument("bundle keyed " + bundle->key() + " cannot be stored under " +
                           std::string(key));
  }
  const Status sealed = CheckSealed(*bundle);
  if (!sealed.ok()) {
    return InvalidArgument("bundle " + std::string(key) + " is not sealed: " + sealed.ToString());
  }
  return Status::Ok();
}

EntryInfo MakeEntryInfo(std::string_view key, const v1::KernelBundle& bundle, uint64_t bytes) {
  EntryInfo info;
  info.key = std::string(key);
  info.target = bundle.target();
  info.kernels = static_cast<uint32_t>(bundle.kernels_size());
  info.bytes = bytes;
  info.compile_seconds = bundle.compile_seconds();
  const std::string& plan = bundle.plan();
  info.plan = plan.substr(0, plan.find('\n'));
  return info;
}

}  // namespace stitch::cache
