// Tiers chained into one store: a Get asks each tier in order and copies a hit into the
// tiers above it; a Put writes through every tier.
//
// Thread-safety: as safe as the tiers it holds (all KernelStores are). Errors: a failing
// lower tier is logged and treated as a miss for Get; Put returns the first error after
// trying every tier.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "stitch/cache/kernel_store.h"

namespace stitch::cache {

class TieredStore : public KernelStore {
 public:
  // `tiers` in lookup order, fastest first; at least one.
  explicit TieredStore(std::vector<std::shared_ptr<KernelStore>> tiers);

  // Returns the first tier's.
  Tier tier() const override;
  // Returns the first hit in lookup order, its tier naming the store that held it, after
  // copying it into every tier above (a failed copy is logged); nullopt when all miss. Never
  // fails: a failing tier is logged and skipped.
  StatusOr<std::optional<Hit>> Get(std::string_view key) override;
  // Writes through every tier; returns OK, or the first tier's error (INVALID_ARGUMENT for an
  // unsealed or miskeyed bundle).
  Status Put(std::string_view key, const BundlePtr& bundle) override;
  // Erases from every tier; returns OK, or the first tier's error.
  Status Erase(std::string_view key) override;
  // Lists the last (largest) tier.
  std::vector<EntryInfo> List(size_t limit) const override;
  // Returns the last tier's stats, with evictions and corrupt summed over tiers.
  StoreStats Stats() const override;

  // Returns each tier with its stats, in lookup order.
  std::vector<std::pair<Tier, StoreStats>> TierStats() const;

 private:
  std::vector<std::shared_ptr<KernelStore>> tiers_;
};

}  // namespace stitch::cache
