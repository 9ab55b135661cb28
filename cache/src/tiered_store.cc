#include "stitch/cache/tiered_store.h"

#include <spdlog/spdlog.h>

#include <cassert>

namespace stitch::cache {

TieredStore::TieredStore(std::vector<std::shared_ptr<KernelStore>> tiers)
    : tiers_(std::move(tiers)) {
  assert(!tiers_.empty() && "a TieredStore needs at least one tier");
}

Tier TieredStore::tier() const { return tiers_.empty() ? Tier::kMemory : tiers_.front()->tier(); }

StatusOr<std::optional<Hit>> TieredStore::Get(std::string_view key) {
  for (size_t i = 0; i < tiers_.size(); ++i) {
    StatusOr<std::optional<Hit>> got = tiers_[i]->Get(key);
    if (!got.ok()) {
      // One broken tier must not take the cache down: the daemon can still compile.
      spdlog::warn("cache: {} tier failed to get {}: {}", TierName(tiers_[i]->tier()), key,
                   got.status().ToString());
      continue;
    }
    if (!got->has_value()) continue;
    Promote(key, **got);
    return got;
  }
  return std::optional<Hit>();
}

void TieredStore::Promote(std::string_view key, const Hit& hit) {
  for (const auto& t : tiers_) {
    if (t->tier() == hit.tier) return;
    const Status s = t->Put(key, hit.bundle);
    if (!s.ok()) {
      spdlog::warn("cache: cannot promote {} into the {} tier: {}", key, TierName(t->tier()),
                   s.ToString());
    }
  }
}

Status TieredStore::Put(std::string_view key, const BundlePtr& bundle) {
  Status first;
  for (const auto& t : tiers_) {
    const Status s = t->Put(key, bundle);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

Status TieredStore::Erase(std::string_view key) {
  Status first;
  for (const auto& t : tiers_) {
    const Status s = t->Erase(key);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

const KernelStore& TieredStore::LargestLocalTier() const {
  for (auto it = tiers_.rbegin(); it != tiers_.rend(); ++it) {
    if ((*it)->tier() != Tier::kCluster) return **it;
  }
  return *tiers_.back();
}

std::vector<EntryInfo> TieredStore::List(size_t limit) const {
  if (tiers_.empty()) return {};
  return LargestLocalTier().List(limit);
}

StoreStats TieredStore::Stats() const {
  if (tiers_.empty()) return {};
  StoreStats out = LargestLocalTier().Stats();
  out.evictions = 0;
  out.corrupt = 0;
  out.write_errors = 0;
  for (const auto& t : tiers_) {
    const StoreStats s = t->Stats();
    out.evictions += s.evictions;
    out.corrupt += s.corrupt;
    out.write_errors += s.write_errors;
  }
  return out;
}

std::vector<std::pair<Tier, StoreStats>> TieredStore::TierStats() const {
  std::vector<std::pair<Tier, StoreStats>> out;
  out.reserve(tiers_.size());
  for (const auto& t : tiers_) out.emplace_back(t->tier(), t->Stats());
  return out;
}

}  // namespace stitch::cache
