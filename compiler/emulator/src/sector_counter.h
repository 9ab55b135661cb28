// Sector efficiency and re-reads of one launch (EmulatorOptions::count_sectors): groups the
// global accesses of the emulated threads into warp accesses and runs their sectors through
// a write-back LRU model of L2.
//
// Thread-safety: a SectorCounter belongs to one Emulator, used by one thread at a time.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "stitch/emulator/emulator.h"

namespace stitch::emu {

class SectorCounter {
 public:
  static constexpr uint64_t kSectorBytes = 32;

  // Starts a launch: the cache is empty, the counts zero. `warps` is the number of warps
  // the scheduler runs at once (a block's, or a grid-wide launch's), `sites` the kernel's
  // instrumented accesses (InstrumentGlobalTraffic).
  void StartLaunch(uint64_t window_bytes, uint32_t warps, uint32_t sites);
  // A new block reuses the warp indices: its threads' execution counts start at 0.
  void StartBlock();
  // One lane's access: `bytes` at `address` by the lane `lane` of warp `warp` at `site`
  // (InstrumentGlobalTraffic's, kSiteFollower included).
  void Record(uint32_t warp, uint32_t lane, uint32_t site, bool store, uint64_t address,
              uint64_t bytes);
  // Sends the warp accesses recorded since the last flush through the cache, ordered by
  // execution count, then warp, then first record. Called when a block ends, at a grid
  // barrier and at the end of a launch.
  void Flush();
  const SectorTraffic& loads() const { return traffic_[0]; }
  const SectorTraffic& stores() const { return traffic_[1]; }

 private:
  // One warp access being gathered; the sectors its lanes touch, in first-touch order, are
  // pool_[its index in pending_].
  struct Pending {
    uint32_t warp = 0;
    uint32_t execution = 0;
    bool store = false;
  };
  // A sector's state in the cache model.
  struct Line {
    uint64_t time = 0;  // of its last touch; 0: evicted
    bool loaded = false;
    bool stored = false;
    bool dirty = false;
  };

  // Runs one sector touch through the cache.
  void Touch(uint64_t sector, bool store);
  // Renumbers the live lines' times 1..n in order and drops those out of the window, so
  // the Fenwick tree stays about the window's size.
  void Compact();
  void TreeAdd(uint64_t at, int32_t delta);
  int64_t TreePrefix(uint64_t at) const;

  uint64_t window_bytes_ = 0;
  uint32_t sites_ = 0;
  uint32_t warps_ = 0;
  // Executions of each site by each thread: [(warp * 32 + lane) * sites + site].
  std::vector<uint32_t> executions_;
  std::unordered_map<uint64_t, uint32_t> pending_index_;  // (execution, warp, site) -> index
  std::vector<Pending> pending_;
  std::vector<std::vector<uint64_t>> pool_;  // sector lists, kept between flushes
  // The cache: each sector's line, and a Fenwick tree over touch times that marks each live
  // line's last touch, so that the distinct sectors touched since a line's last touch are
  // a range sum.
  std::unordered_map<uint64_t, Line> lines_;
  std::vector<int32_t> tree_;
  uint64_t now_ = 0;
  SectorTraffic traffic_[2];
};

}  // namespace stitch::emu
