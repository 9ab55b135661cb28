#include "sector_counter.h"

#include <algorithm>
#include <numeric>

#include "retarget.h"

namespace stitch::emu {
namespace {

constexpr uint32_t kLanes = 32;
// The Fenwick tree's smallest size, in touches.
constexpr uint64_t kMinTreeTimes = uint64_t{1} << 16;

}  // namespace

void SectorCounter::StartLaunch(uint64_t window_bytes, uint32_t warps, uint32_t sites) {
  window_bytes_ = window_bytes;
  warps_ = warps;
  sites_ = sites;
  executions_.assign(size_t{warps} * kLanes * sites, 0);
  pending_index_.clear();
  pending_.clear();
  lines_.clear();
  tree_.assign(kMinTreeTimes + 1, 0);
  now_ = 0;
  traffic_[0] = traffic_[1] = SectorTraffic{};
}

void SectorCounter::StartBlock() { std::fill(executions_.begin(), executions_.end(), 0); }

void SectorCounter::Record(uint32_t warp, uint32_t lane, uint32_t site, bool store,
                           uint64_t address, uint64_t bytes) {
  const bool follower = (site & kSiteFollower) != 0;
  site &= ~kSiteFollower;
  if (bytes == 0 || warp >= warps_ || site >= sites_) return;
  // A follower belongs to the execution its site's leader began.
  uint32_t& count = executions_[(size_t{warp} * kLanes + lane) * sites_ + site];
  const uint32_t execution = follower ? std::max<uint32_t>(count, 1) - 1 : count++;
  // Unique: execution < 2^32, warps <= 2^11 (at most 65536 threads run at once) and sites
  // are far below 2^21.
  const uint64_t key = (uint64_t{execution} * warps_ + warp) * sites_ + site;
  auto [it, fresh] = pending_index_.try_emplace(key, static_cast<uint32_t>(pending_.size()));
  if (fresh) {
    if (pool_.size() <= pending_.size()) pool_.emplace_back();
    pool_[pending_.size()].clear();
    pending_.push_back({warp, execution, store});
    ++traffic_[store ? 1 : 0].warp_accesses;
  }
  traffic_[store ? 1 : 0].used_bytes += bytes;
  std::vector<uint64_t>& sectors = pool_[it->second];
  const uint64_t last = (address + bytes - 1) / kSectorBytes;
  for (uint64_t s = address / kSectorBytes; s <= last; ++s) {
    // Lanes of a coalesced access touch the same few sectors in turn: look from the back.
    if (std::find(sectors.rbegin(), sectors.rend(), s) == sectors.rend()) sectors.push_back(s);
  }
}

namespace {

// `order` stably sorted by `key` (below `keys`), by counting: no recursion, since Flush runs
// on an emulated thread's fiber, whose stack a sort's recursion overflows under ASan.
template <typename Key>
std::vector<uint32_t> CountingSorted(const std::vector<uint32_t>& order, size_t keys, Key key) {
  std::vector<uint32_t> start(keys + 1, 0);
  for (uint32_t i : order) ++start[key(i) + 1];
  for (size_t k = 1; k < start.size(); ++k) start[k] += start[k - 1];
  std::vector<uint32_t> sorted(order.size());
  for (uint32_t i : order) sorted[start[key(i)]++] = i;
  return sorted;
}

}  // namespace

void SectorCounter::Flush() {
  // By execution, then warp, then arrival: sorted by warp, then stably by execution.
  std::vector<uint32_t> order(pending_.size());
  std::iota(order.begin(), order.end(), 0u);
  uint32_t executions = 0;
  for (const Pending& p : pending_) executions = std::max(executions, p.execution + 1);
  order = CountingSorted(order, warps_, [&](uint32_t i) { return pending_[i].warp; });
  order = CountingSorted(order, executions, [&](uint32_t i) { return pending_[i].execution; });
  for (uint32_t i : order) {
    const Pending& p = pending_[i];
    traffic_[p.store ? 1 : 0].fetched_bytes += pool_[i].size() * kSectorBytes;
    for (uint64_t s : pool_[i]) Touch(s, p.store);
  }
  pending_.clear();
  pending_index_.clear();
}

void SectorCounter::Touch(uint64_t sector, bool store) {
  Line& line = lines_[sector];
  bool resident = false;
  if (line.time != 0) {
    const int64_t since = TreePrefix(now_) - TreePrefix(line.time);
    resident = static_cast<uint64_t>(since) * kSectorBytes <= window_bytes_;
    TreeAdd(line.time, -1);
  }
  // An evicted sector was written back, if dirty, as it left.
  if (!resident) line.dirty = false;
  SectorTraffic& t = traffic_[store ? 1 : 0];
  bool& seen = store ? line.stored : line.loaded;
  const bool moves = store ? !line.dirty : !resident;
  if (moves) {
    t.dram_bytes += kSectorBytes;
    if (seen) t.reread_bytes += kSectorBytes;
  }
  if (!seen) {
    seen = true;
    t.distinct_bytes += kSectorBytes;
  }
  if (store) line.dirty = true;
  if (now_ + 1 >= tree_.size()) Compact();
  line.time = ++now_;
  TreeAdd(line.time, 1);
}

void SectorCounter::Compact() {
  // The live lines, most recent first: the i-th has i distinct sectors touched after it.
  // Their times are distinct, so they are bucketed by time rather than sorted: Compact runs
  // on an emulated thread's fiber, whose stack a sort's recursion can overflow (under ASan).
  std::vector<Line*> by_time(now_ + 1, nullptr);
  for (auto& [sector, line] : lines_) {
    if (line.time != 0) by_time[line.time] = &line;
  }
  std::vector<Line*> live;
  for (uint64_t t = now_; t > 0; --t) {
    if (by_time[t] != nullptr) live.push_back(by_time[t]);
  }
  size_t keep = live.size();
  for (size_t i = 0; i < live.size(); ++i) {
    if (i * kSectorBytes > window_bytes_) {
      keep = i;
      break;
    }
  }
  for (size_t i = keep; i < live.size(); ++i) {
    live[i]->time = 0;
    live[i]->dirty = false;
  }
  tree_.assign(std::max<uint64_t>(kMinTreeTimes, 2 * uint64_t{keep}) + 1, 0);
  now_ = 0;
  for (size_t i = keep; i-- > 0;) {
    live[i]->time = ++now_;
    TreeAdd(now_, 1);
  }
}

void SectorCounter::TreeAdd(uint64_t at, int32_t delta) {
  for (; at < tree_.size(); at += at & (~at + 1)) tree_[at] += delta;
}

int64_t SectorCounter::TreePrefix(uint64_t at) const {
  int64_t sum = 0;
  for (; at > 0; at -= at & (~at + 1)) sum += tree_[at];
  return sum;
}

}  // namespace stitch::emu
