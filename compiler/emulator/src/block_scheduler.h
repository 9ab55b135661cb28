// Runs the threads of one block as fibers on the calling OS thread and implements the
// synchronisation the retargeted kernel asks for (block barriers, warp rendezvous). A kernel
// that uses the grid-wide barrier instead runs with every block of its grid at once
// (RunGrid), so that the barrier can park each thread until all threads of the grid arrive.
//
// Thread-safety: a BlockScheduler belongs to one OS thread at a time. While a block runs,
// the runtime entry points (runtime.cc) find the scheduler through a thread_local pointer,
// so two schedulers may run blocks concurrently on different OS threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "stitch/base/status.h"

namespace stitch::emu {

inline constexpr uint32_t kWarpSize = 32;

// The kinds of warp-wide rendezvous. All lanes waiting at one rendezvous must use the same
// kind; shuffles with different modes are still resolved lane by lane.
enum class WarpOp : uint32_t {
  kShflUp = 0,
  kShflDown = 1,
  kShflBfly = 2,
  kShflIdx = 3,
  kVoteAll = 4,
  kVoteAny = 5,
  kVoteUni = 6,
  kVoteBallot = 7,
  kSync = 8,
};

enum class ThreadStatus : uint8_t {
  kRunnable,
  kAtBarrier,
  kAtGridBarrier,
  kAtWarp,
  kExited,
  kStuck,
};

struct Worker;
class BlockScheduler;

// One emulated GPU thread. The runtime reads the ids from here.
struct ThreadState {
  std::array<uint32_t, 3> tid{};
  std::array<uint32_t, 3> ctaid{};
  uint32_t linear = 0;  // index within the block
  uint32_t block = 0;   // index of the block among those the scheduler runs
  uint32_t warp = 0;    // index of the warp among those the scheduler runs
  ThreadStatus status = ThreadStatus::kRunnable;
  uint32_t barrier_site = 0;
  uint32_t barrier_pred = 0;
  uint32_t barrier_result = 0;
  // Warp rendezvous: what this lane brought, and what it gets back.
  WarpOp warp_op = WarpOp::kSync;
  uint32_t warp_mask = 0;
  uint32_t warp_value = 0;
  uint32_t warp_b = 0;
  uint32_t warp_c = 0;
  uint64_t warp_result = 0;
  // Grid barrier: the workspace this thread passed.
  void* grid_workspace = nullptr;
  // The block's shared memory when blocks run concurrently (null otherwise: the kernel then
  // uses the module's own shared-memory global).
  uint8_t* shared = nullptr;
  Worker* worker = nullptr;
  BlockScheduler* scheduler = nullptr;
};

// The kernel entry the scheduler calls for every thread: __stitch_emu_entry(args).
using EntryFn = void (*)(void** args);

struct BlockGeometry {
  std::array<uint32_t, 3> ntid{1, 1, 1};
  std::array<uint32_t, 3> ctaid{0, 0, 0};
  std::array<uint32_t, 3> nctaid{1, 1, 1};
};

class BlockScheduler {
 public:
  // Fibers get stacks of `stack_bytes` (plus a guard page; the extra stacks of a grid-wide
  // launch share one mapping and get a checked canary page instead). Randomised order uses
  // `seed`.
  BlockScheduler(size_t stack_bytes, bool random_order, uint64_t seed);
  ~BlockScheduler();
  BlockScheduler(const BlockScheduler&) = delete;
  BlockScheduler& operator=(const BlockScheduler&) = delete;

  // Runs every thread of the block described by `geometry` to completion. Returns INTERNAL
  // "deadlock in block (x,y,z): ..." when the threads cannot all finish, or when a warp
  // operation is used inconsistently; the block's fibers are then abandoned.
  Status RunBlock(EntryFn entry, void** args, const BlockGeometry& geometry);

  // Runs the blocks `blocks` of the grid described by `geometry` (ctaid ignored) at once, for
  // a kernel that uses the grid-wide barrier: blocks are resumed round-robin (in
  // random-order mode, their threads in one random order), and a thread at a grid barrier
  // waits until every thread of those blocks is there. A sample of the grid's blocks runs as
  // if it were the whole grid: the barrier waits for the sampled threads only, and every
  // thread still sees the grid's own size. The i-th block's shared memory is
  // `shared + i * shared_stride` (shared may be null when the kernel has none). Returns
  // INTERNAL "deadlock ..." when the threads cannot all finish (e.g. some returned while
  // others wait at a grid barrier) and INTERNAL for a misused barrier workspace.
  Status RunGrid(EntryFn entry, void** args, const BlockGeometry& geometry,
                 const std::vector<std::array<uint32_t, 3>>& blocks, uint8_t* shared,
                 uint64_t shared_stride);

  // Block-wide barriers completed since construction (counted once per block).
  uint64_t barriers() const { return barriers_; }
  // Grid-wide barriers completed since construction (counted once per grid).
  uint64_t grid_barriers() const { return grid_barriers_; }

  const BlockGeometry& geometry() const { return geometry_; }

  // The thread whose fiber is running on this OS thread; null outside a block.
  static ThreadState* Current();

  // Called from the running fiber. Each returns once the rendezvous completes.
  void Barrier(ThreadState* t, uint32_t site);
  // Barrier that also reduces `pred` over the block: op 0 = popc, 1 = and, 2 = or.
  uint32_t BarrierReduce(ThreadState* t, uint32_t site, uint32_t op, uint32_t pred);
  // Shuffle, vote or warp sync. Returns the value in the low 32 bits and, for shuffles,
  // the PTX predicate in bit 32.
  uint64_t WarpRendezvous(ThreadState* t, WarpOp op, uint32_t mask, uint32_t value, uint32_t b,
                          uint32_t c);
  // Grid-wide barrier: returns once every thread of the grid has arrived. Only valid while
  // RunGrid runs; under RunBlock it fails the launch.
  void GridBarrier(ThreadState* t, uint32_t site, void* workspace);
  // Marks the block failed with `message` and parks the calling fiber for good.
  [[noreturn]] void Fail(ThreadState* t, std::string&& message);

 private:
  struct Warp {
    uint32_t first = 0;  // index of lane 0 in threads_
    uint32_t size = 0;
    uint32_t live = 0;
    uint32_t arrived = 0;
  };
  struct Block {
    std::array<uint32_t, 3> ctaid{};
    uint32_t first = 0;  // index of its thread 0 in threads_
    uint32_t size = 0;
    uint32_t live = 0;
  };
  // Fiber stacks for RunGrid beyond the cached workers, carved from one mapping.
  struct Slab {
    uint8_t* base = nullptr;
    size_t bytes = 0;
    size_t stride = 0;
    uint32_t capacity = 0;
    uint32_t used = 0;
  };

  // Sets up threads_, warps_ and blocks_ for the blocks `ctaids` of the grid.
  void Populate(const BlockGeometry& geometry, const std::vector<std::array<uint32_t, 3>>& ctaids,
                uint8_t* shared, uint64_t shared_stride);
  Status Run();
  Worker* AcquireWorker();
  // A fiber with a stack from the slab while it has room, else with its own mapping.
  Worker* NewWorker();
  // Maps room for `stacks` stacks; returns false when the mapping fails.
  bool MapSlab(uint32_t stacks);
  // Ends the slab's workers and unmaps it.
  void ReleaseSlab();
  void Resume(ThreadState* t);
  // Parks the calling fiber for good (the launch has failed).
  [[noreturn]] void Park(ThreadState* t);
  void Yield(ThreadState* t);
  void OnExit(ThreadState* t);
  void CompleteWarp(Warp& w);
  bool TryReleaseBarrier(const Block& block);
  bool TryReleaseGridBarrier();
  std::string DescribeStall(const Block& block) const;
  std::string DescribeGridStall() const;
  void AbandonRunningWorkers();

  size_t stack_bytes_;
  bool random_order_;
  std::mt19937_64 rng_;
  EntryFn entry_ = nullptr;
  void** args_ = nullptr;
  BlockGeometry geometry_;
  std::vector<ThreadState> threads_;
  std::vector<Warp> warps_;
  std::vector<Block> blocks_;
  uint32_t live_ = 0;
  bool grid_mode_ = false;
  uint32_t grid_waiting_ = 0;  // threads at a grid barrier
  uint64_t barriers_ = 0;
  uint64_t grid_barriers_ = 0;
  std::string error_;  // the complete message of a failed run
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<Worker*> idle_;
  Slab slab_;

  friend struct Worker;
};

}  // namespace stitch::emu
