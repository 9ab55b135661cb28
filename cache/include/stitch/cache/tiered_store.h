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
  // Lists the last (largest) tier this node holds; the cluster tier cannot be enumerated.
  std::vector<EntryInfo> List(size_t limit) const override;
  // Returns the stats of the tier List reads, with evictions, corrupt and write_errors summed
  // over tiers.
  StoreStats Stats() const override;

  // Copies `hit`, found by a lookup of its own tier, into every tier above that tier (a
  // failed copy is logged), as Get does with the hits it finds.
  void Promote(std::string_view key, const Hit& hit);

  // Returns each tier with its stats, in lookup order.
  std::vector<std::pair<Tier, StoreStats>> TierStats() const;

 private:
  // The last tier that is not the cluster's.
  const KernelStore& LargestLocalTier() const;

  std::vector<std::shared_ptr<KernelStore>> tiers_;
};

}  // namespace stitch::cache
