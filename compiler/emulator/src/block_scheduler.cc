#include "block_scheduler.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <boost/context/preallocated.hpp>
#include <boost/context/stack_context.hpp>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>
#include <utility>

#include "fiber_sanitizer.h"

namespace stitch::emu {
namespace {

namespace ctx = boost::context;

thread_local ThreadState* tls_current = nullptr;

// Stacks are owned by the Worker (mmap with a guard page) or the scheduler's slab, so the
// fiber must not free them.
struct KeepStack {
  ctx::stack_context allocate() { return {}; }
  void deallocate(ctx::stack_context&) noexcept {}
};

// Slab stacks have no guard page (one per stack would exceed the kernel's limit on
// mappings for large grids). Below each lies a canary instead, checked whenever the fiber
// switches back, so an overflow fails the launch. Stacks are not page-aligned in the slab,
// so a canary usually shares its page with the hot top of the stack below it.
constexpr uint64_t kCanary = 0x5ca1ab1edeadc0deull;
constexpr size_t kCanaryWords = 8;
constexpr size_t kCanaryBytes = kCanaryWords * sizeof(uint64_t);

size_t PageSize() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

bool IsShuffle(WarpOp op) { return static_cast<uint32_t>(op) <= 3; }

// The lane a PTX shfl.sync reads for `lane`, and whether it is in range (the instruction's
// predicate); out of range, a lane reads its own value. `c` packs the clamp value (bits 0-4)
// and the segment mask (bits 8-12).
struct ShuffleSource {
  int lane;
  bool in_range;
};

ShuffleSource SourceLane(WarpOp op, int lane, uint32_t b, uint32_t c) {
  const int bval = static_cast<int>(b & 31u);
  const int cval = static_cast<int>(c & 31u);
  const int segmask = static_cast<int>((c >> 8) & 31u);
  const int max_lane = (lane & segmask) | (cval & ~segmask);
  const int min_lane = lane & segmask;
  int j = lane;
  bool in_range = false;
  switch (op) {
    case WarpOp::kShflUp:
      j = lane - bval;
      in_range = j >= max_lane;
      break;
    case WarpOp::kShflDown:
      j = lane + bval;
      in_range = j <= max_lane;
      break;
    case WarpOp::kShflBfly:
      j = lane ^ bval;
      in_range = j <= max_lane;
      break;
    default:
      j = min_lane | (bval & ~segmask);
      in_range = j <= max_lane;
      break;
  }
  return {in_range ? j : lane, in_range};
}

// The result of vote `op` over the `votes` of the lanes in `mask` that voted true.
uint64_t VoteResult(WarpOp op, uint32_t votes, uint32_t mask) {
  switch (op) {
    case WarpOp::kVoteAll:
      return votes == mask ? 1 : 0;
    case WarpOp::kVoteAny:
      return votes != 0 ? 1 : 0;
    case WarpOp::kVoteUni:
      return (votes == 0 || votes == mask) ? 1 : 0;
    case WarpOp::kVoteBallot:
      return votes;
    default:
      return 0;
  }
}

std::string BlockName(const std::array<uint32_t, 3>& ctaid) {
  return "(" + std::to_string(ctaid[0]) + "," + std::to_string(ctaid[1]) + "," +
         std::to_string(ctaid[2]) + ")";
}

std::string ThreadName(const ThreadState& t) {
  return "(" + std::to_string(t.tid[0]) + "," + std::to_string(t.tid[1]) + "," +
         std::to_string(t.tid[2]) + ")";
}

}  // namespace

// A fiber with its own stack that runs emulated threads one after another: a thread that
// finishes without blocking hands the same fiber (and its warm stack) to the next one.
struct Worker {
  BlockScheduler* owner = nullptr;
  void* map = nullptr;  // own mapping; null for a slab stack
  size_t map_bytes = 0;
  // The canary below a slab stack, null otherwise.
  uint64_t* canary = nullptr;
  // Never destroyed once abandoned: destroying a suspended fiber would unwind through
  // JIT-compiled frames that have no unwind tables.
  union {
    ctx::fiber fiber;
  };
  ctx::fiber sched;  // the scheduler's continuation while this worker runs
  ThreadState* thread = nullptr;
  bool abandoned = false;
  // This fiber's stack, and the scheduler's side of the last switch, for the sanitizers.
  FiberContext self;
  FiberContext scheduler;

  Worker() : fiber() {}
  ~Worker() {
    if (!abandoned) fiber.~fiber();
    DestroyFiberContext(self);
    if (map != nullptr) munmap(map, map_bytes);
  }

  bool CanaryIntact() const {
    if (canary == nullptr) return true;
    for (size_t i = 0; i < kCanaryWords; ++i) {
      if (canary[i] != kCanary) return false;
    }
    return true;
  }

  static ctx::fiber Main(Worker* w, ctx::fiber&& sched) {
    EndSwitch(w->self, &w->scheduler);
    w->sched = std::move(sched);
    while (ThreadState* t = w->thread) {
      w->owner->entry_(w->owner->args_);
      t->status = ThreadStatus::kExited;
      w->SwitchToScheduler();
    }
    BeginSwitch(w->self, w->scheduler, /*self_ends=*/true);
    return std::move(w->sched);
  }

  // Called on the scheduler's stack: runs this fiber until it switches back.
  void SwitchToFiber() {
    CaptureThreadContext(scheduler);
    BeginSwitch(scheduler, self);
    fiber = std::move(fiber).resume();
    EndSwitch(scheduler, nullptr);
  }

  // Called on this fiber's stack: suspends it and returns to the scheduler.
  void SwitchToScheduler() {
    BeginSwitch(self, scheduler);
    sched = std::move(sched).resume();
    EndSwitch(self, &scheduler);
  }

  // Lets an idle worker return from Main so that its fiber ends normally.
  void Finish() {
    if (abandoned || !fiber) return;
    thread = nullptr;
    SwitchToFiber();
  }
};

BlockScheduler::BlockScheduler(size_t stack_bytes, bool random_order, uint64_t seed)
    : stack_bytes_(stack_bytes), random_order_(random_order), rng_(seed) {}

BlockScheduler::~BlockScheduler() {
  for (auto& w : workers_) w->Finish();
  ReleaseSlab();
}

ThreadState* BlockScheduler::Current() { return tls_current; }

Worker* BlockScheduler::NewWorker() {
  const size_t page = PageSize();
  const size_t usable = (stack_bytes_ + page - 1) / page * page;
  auto w = std::make_unique<Worker>();
  w->owner = this;
  void* bottom = nullptr;
  size_t size = usable;
  if (slab_.used < slab_.capacity) {
    // A slab stack: the canary, then the stack.
    uint8_t* lo = slab_.base + size_t{slab_.used++} * slab_.stride;
    w->canary = reinterpret_cast<uint64_t*>(lo);
    std::fill_n(w->canary, kCanaryWords, kCanary);
    bottom = lo + kCanaryBytes;
    size = slab_.stride - kCanaryBytes;
  } else {
    w->map_bytes = usable + page;
    w->map =
        mmap(nullptr, w->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (w->map == MAP_FAILED) {
      w->map = nullptr;
      return nullptr;
    }
    // Guard page below the stack: an overflow faults instead of corrupting a neighbour.
    mprotect(w->map, page, PROT_NONE);
    bottom = static_cast<char*>(w->map) + page;
  }
  ctx::stack_context sctx;
  sctx.size = size;
  sctx.sp = static_cast<char*>(bottom) + size;
  CreateFiberContext(w->self, bottom, size);
  Worker* raw = w.get();
  w->fiber =
      ctx::fiber(std::allocator_arg, ctx::preallocated(sctx.sp, sctx.size, sctx), KeepStack{},
                 [raw](ctx::fiber&& s) { return Worker::Main(raw, std::move(s)); });
  workers_.push_back(std::move(w));
  return raw;
}

Worker* BlockScheduler::AcquireWorker() {
  if (!idle_.empty()) {
    Worker* w = idle_.back();
    idle_.pop_back();
    return w;
  }
  return NewWorker();
}

bool BlockScheduler::MapSlab(uint32_t stacks) {
  ReleaseSlab();
  if (stacks == 0) return true;
  const size_t page = PageSize();
  const size_t stride =
      (stack_bytes_ + kCanaryBytes - 1) / kCanaryBytes * kCanaryBytes + kCanaryBytes;
  // One guard page below the whole slab; MAP_NORESERVE because most of every stack is never
  // touched.
  const size_t bytes = size_t{stacks} * stride + page;
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) return false;
  mprotect(map, page, PROT_NONE);
  ClearStackMarks(static_cast<uint8_t*>(map) + page, bytes - page);
  slab_.base = static_cast<uint8_t*>(map) + page;
  slab_.bytes = bytes;
  slab_.stride = stride;
  slab_.capacity = stacks;
  slab_.used = 0;
  return true;
}

void BlockScheduler::ReleaseSlab() {
  if (slab_.base == nullptr) return;
  // Slab workers end with the slab: idle ones leave their fibers normally, abandoned ones
  // are dropped without touching their (now unmapped) stacks.
  std::vector<std::unique_ptr<Worker>> keep;
  for (auto& w : workers_) {
    if (w->canary == nullptr) {
      keep.push_back(std::move(w));
    } else {
      w->Finish();
    }
  }
  std::erase_if(idle_, [](const Worker* w) { return w->canary != nullptr; });
  workers_ = std::move(keep);
  ClearStackMarks(slab_.base, slab_.bytes - PageSize());
  munmap(slab_.base - PageSize(), slab_.bytes);
  slab_ = Slab{};
}

void BlockScheduler::Resume(ThreadState* t) {
  if (t->worker == nullptr) {
    Worker* w = AcquireWorker();
    if (w == nullptr) {
      if (error_.empty()) {
        error_ = "error in block " + BlockName(t->ctaid) + ": cannot allocate a fiber stack";
      }
      return;
    }
    w->thread = t;
    t->worker = w;
  }
  Worker* w = t->worker;
  tls_current = t;
  w->SwitchToFiber();
  tls_current = nullptr;
  if (!w->CanaryIntact()) {
    // Neighbouring stacks may be damaged: the launch is abandoned as a whole.
    if (error_.empty()) {
      error_ = "error in block " + BlockName(t->ctaid) + ": thread " + ThreadName(*t) +
               " overflowed its " + std::to_string(stack_bytes_) + "-byte fiber stack";
    }
    return;
  }
  if (t->status == ThreadStatus::kExited) {
    t->worker = nullptr;
    w->thread = nullptr;
    idle_.push_back(w);
    OnExit(t);
  }
}

void BlockScheduler::Yield(ThreadState* t) { t->worker->SwitchToScheduler(); }

void BlockScheduler::Fail(ThreadState* t, std::string&& message) {
  if (error_.empty()) {
    error_ = message.rfind("deadlock", 0) == 0
                 ? message
                 : "error in block " + BlockName(t->ctaid) + ": " + message;
  }
  // The caller's frames are never unwound, so the message would never be destroyed: its
  // buffer is released here.
  std::string().swap(message);
  Park(t);
}

void BlockScheduler::Park(ThreadState* t) {
  t->status = ThreadStatus::kStuck;
  // The scheduler abandons this fiber; it is never resumed.
  for (;;) Yield(t);
}

void BlockScheduler::OnExit(ThreadState* t) {
  --live_;
  --blocks_[t->block].live;
  Warp& w = warps_[t->warp];
  --w.live;
  if (w.arrived > 0 && w.arrived == w.live) CompleteWarp(w);
}

void BlockScheduler::Barrier(ThreadState* t, uint32_t site) {
  t->barrier_site = site;
  t->barrier_pred = 0;
  t->status = ThreadStatus::kAtBarrier;
  Yield(t);
}

uint32_t BlockScheduler::BarrierReduce(ThreadState* t, uint32_t site, uint32_t op, uint32_t pred) {
  t->barrier_site = site;
  // Encode the reduction in the predicate slot: bit 0 = predicate, bits 1.. = op + 1.
  t->barrier_pred = (pred != 0 ? 1u : 0u) | ((op + 1) << 1);
  t->status = ThreadStatus::kAtBarrier;
  Yield(t);
  return t->barrier_result;
}

void BlockScheduler::GridBarrier(ThreadState* t, uint32_t site, void* workspace) {
  if (!grid_mode_) Fail(t, "grid barrier outside a grid-wide launch");
  t->barrier_site = site;
  t->grid_workspace = workspace;
  t->status = ThreadStatus::kAtGridBarrier;
  ++grid_waiting_;
  Yield(t);
}

bool BlockScheduler::TryReleaseBarrier(const Block& block) {
  bool have_site = false;
  uint32_t site = 0;
  uint32_t waiting = 0, popc = 0;
  const auto first = threads_.begin() + block.first;
  const auto last = first + block.size;
  for (auto it = first; it != last; ++it) {
    const ThreadState& t = *it;
    if (t.status == ThreadStatus::kExited) continue;
    if (t.status != ThreadStatus::kAtBarrier) return false;
    if (have_site && t.barrier_site != site) return false;
    have_site = true;
    site = t.barrier_site;
    ++waiting;
    popc += t.barrier_pred & 1u;
  }
  if (waiting == 0 || waiting != block.live) return false;
  for (auto it = first; it != last; ++it) {
    ThreadState& t = *it;
    if (t.status != ThreadStatus::kAtBarrier) continue;
    switch (t.barrier_pred >> 1) {
      case 1:  // popc
        t.barrier_result = popc;
        break;
      case 2:  // and
        t.barrier_result = popc == waiting ? 1 : 0;
        break;
      case 3:  // or
        t.barrier_result = popc != 0 ? 1 : 0;
        break;
      default:
        t.barrier_result = 0;
        break;
    }
    t.status = ThreadStatus::kRunnable;
  }
  ++barriers_;
  return true;
}

bool BlockScheduler::TryReleaseGridBarrier() {
  // Every thread of the grid must be there: one that returned can never arrive.
  if (grid_waiting_ == 0 || grid_waiting_ != threads_.size()) return false;
  void* workspace = threads_[0].grid_workspace;
  for (const ThreadState& t : threads_) {
    if (t.grid_workspace != workspace) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), "%p and %p", workspace, t.grid_workspace);
      error_ = "grid barrier #" + std::to_string(t.barrier_site) + ": thread " + ThreadName(t) +
               " of block " + BlockName(t.ctaid) + " passes a different workspace (" + buf +
               ") than thread (0,0,0) of block " + BlockName(threads_[0].ctaid);
      return false;
    }
  }
  if (workspace == nullptr) {
    error_ = "grid barrier #" + std::to_string(threads_[0].barrier_site) + ": null workspace";
    return false;
  }
  // Mirror the device's protocol on the workspace: the count of arrived blocks (its low 31
  // bits) must be 0 on entry (the host zero-fills it once) and the phase (its top bit)
  // flips.
  constexpr uint32_t kPhase = 0x80000000u;
  uint32_t arrivals;
  std::memcpy(&arrivals, workspace, sizeof(arrivals));
  if ((arrivals & ~kPhase) != 0) {
    error_ = "grid barrier #" + std::to_string(threads_[0].barrier_site) +
             ": its workspace's arrival count is " + std::to_string(arrivals & ~kPhase) +
             ", not 0; the host must zero-fill the workspace before the first launch";
    return false;
  }
  arrivals ^= kPhase;
  std::memcpy(workspace, &arrivals, sizeof(arrivals));
  for (ThreadState& t : threads_) t.status = ThreadStatus::kRunnable;
  grid_waiting_ = 0;
  ++grid_barriers_;
  return true;
}

void BlockScheduler::CompleteWarp(Warp& w) {
  const WarpOp op0 = [&] {
    for (uint32_t i = 0; i < w.size; ++i) {
      const ThreadState& t = threads_[w.first + i];
      if (t.status == ThreadStatus::kAtWarp) return t.warp_op;
    }
    return WarpOp::kSync;
  }();
  uint32_t arrived_mask = 0;
  uint32_t ballot = 0;
  for (uint32_t i = 0; i < w.size; ++i) {
    const ThreadState& t = threads_[w.first + i];
    if (t.status != ThreadStatus::kAtWarp) continue;
    const bool same = IsShuffle(op0) ? IsShuffle(t.warp_op) : t.warp_op == op0;
    if (!same) {
      if (error_.empty()) {
        error_ = "deadlock in block " + BlockName(t.ctaid) + ": lanes of warp " +
                 std::to_string(t.linear / kWarpSize) +
                 " wait at different warp operations (thread " + ThreadName(t) + ")";
      }
      return;
    }
    arrived_mask |= 1u << i;
    if (t.warp_value != 0) ballot |= 1u << i;
  }
  for (uint32_t i = 0; i < w.size; ++i) {
    ThreadState& t = threads_[w.first + i];
    if (t.status != ThreadStatus::kAtWarp) continue;
    const uint32_t mask = t.warp_mask & arrived_mask;
    uint64_t result = 0;
    if (IsShuffle(t.warp_op)) {
      const ShuffleSource source = SourceLane(t.warp_op, static_cast<int>(i), t.warp_b, t.warp_c);
      // A source lane that does not exist or did not take part: keep the own value.
      uint32_t value = t.warp_value;
      const int j = source.lane;
      if (j >= 0 && j < static_cast<int>(w.size) && ((arrived_mask >> j) & 1u) != 0) {
        value = threads_[w.first + static_cast<uint32_t>(j)].warp_value;
      }
      result = value | (uint64_t{source.in_range ? 1u : 0u} << 32);
    } else {
      result = VoteResult(t.warp_op, ballot & mask, mask);
    }
    t.warp_result = result;
    t.status = ThreadStatus::kRunnable;
  }
  w.arrived = 0;
}

uint64_t BlockScheduler::WarpRendezvous(ThreadState* t, WarpOp op, uint32_t mask, uint32_t value,
                                        uint32_t b, uint32_t c) {
  t->warp_op = op;
  t->warp_mask = mask;
  t->warp_value = value;
  t->warp_b = b;
  t->warp_c = c;
  t->status = ThreadStatus::kAtWarp;
  Warp& w = warps_[t->warp];
  ++w.arrived;
  if (w.arrived == w.live) {
    // Last lane in: resolve the whole warp now (results go to per-lane slots, so nothing
    // can be overwritten before every lane has read it).
    CompleteWarp(w);
    if (!error_.empty()) Park(t);
    return t->warp_result;
  }
  Yield(t);
  return t->warp_result;
}

std::string BlockScheduler::DescribeStall(const Block& block) const {
  std::map<uint32_t, std::pair<uint32_t, const ThreadState*>> at_barrier;
  std::map<uint32_t, uint32_t> at_warp;
  uint32_t exited = 0, at_grid = 0;
  for (uint32_t i = block.first; i < block.first + block.size; ++i) {
    const ThreadState& t = threads_[i];
    switch (t.status) {
      case ThreadStatus::kAtBarrier: {
        auto& e = at_barrier[t.barrier_site];
        if (e.first++ == 0) e.second = &t;
        break;
      }
      case ThreadStatus::kAtGridBarrier:
        ++at_grid;
        break;
      case ThreadStatus::kAtWarp:
        ++at_warp[t.linear / kWarpSize];
        break;
      case ThreadStatus::kExited:
        ++exited;
        break;
      default:
        break;
    }
  }
  std::string s;
  auto sep = [&] {
    if (!s.empty()) s += ", ";
  };
  for (const auto& [site, e] : at_barrier) {
    sep();
    s += std::to_string(e.first) + " thread(s) wait at barrier #" + std::to_string(site) +
         " (first " + ThreadName(*e.second) + ")";
  }
  if (at_grid > 0) {
    sep();
    s += std::to_string(at_grid) + " thread(s) wait at a grid barrier";
  }
  for (const auto& [warp, n] : at_warp) {
    sep();
    s += std::to_string(n) + " lane(s) of warp " + std::to_string(warp) +
         " wait at a warp operation";
  }
  sep();
  s += std::to_string(exited) + " of " + std::to_string(block.size) + " thread(s) exited";
  return s;
}

std::string BlockScheduler::DescribeGridStall() const {
  // Blocks whose threads are stuck at something other than the grid barrier.
  std::vector<const Block*> stuck;
  for (const Block& b : blocks_) {
    for (uint32_t i = b.first; i < b.first + b.size; ++i) {
      const ThreadStatus st = threads_[i].status;
      if (st == ThreadStatus::kAtBarrier || st == ThreadStatus::kAtWarp) {
        stuck.push_back(&b);
        break;
      }
    }
  }
  if (grid_waiting_ == 0 && !stuck.empty()) {
    return "deadlock in block " + BlockName(stuck[0]->ctaid) + ": " + DescribeStall(*stuck[0]);
  }
  const ThreadState* first = nullptr;
  for (const ThreadState& t : threads_) {
    if (t.status == ThreadStatus::kAtGridBarrier) {
      first = &t;
      break;
    }
  }
  const uint64_t exited = threads_.size() - live_;
  std::string s = "deadlock at a grid barrier: " + std::to_string(grid_waiting_) + " of " +
                  std::to_string(threads_.size()) + " thread(s) wait at it";
  if (first != nullptr) {
    s += " (first thread " + ThreadName(*first) + " of block " + BlockName(first->ctaid) +
         " at grid barrier #" + std::to_string(first->barrier_site) + ")";
  }
  if (exited > 0) s += ", " + std::to_string(exited) + " returned without arriving";
  constexpr size_t kMaxBlocksNamed = 2;
  for (size_t i = 0; i < stuck.size() && i < kMaxBlocksNamed; ++i) {
    s += "; block " + BlockName(stuck[i]->ctaid) + ": " + DescribeStall(*stuck[i]);
  }
  if (stuck.size() > kMaxBlocksNamed) {
    s += "; " + std::to_string(stuck.size() - kMaxBlocksNamed) + " more block(s) stalled";
  }
  return s;
}

void BlockScheduler::AbandonRunningWorkers() {
  for (ThreadState& t : threads_) {
    Worker* w = t.worker;
    if (w == nullptr) continue;
    t.worker = nullptr;
    w->abandoned = true;
    w->thread = nullptr;
    DestroyFiberContext(w->self);
    if (w->map != nullptr) {
      munmap(w->map, w->map_bytes);
      w->map = nullptr;
    }
  }
}

void BlockScheduler::Populate(const BlockGeometry& geometry,
                              const std::vector<std::array<uint32_t, 3>>& ctaids, uint8_t* shared,
                              uint64_t shared_stride) {
  const uint32_t nx = geometry.ntid[0], ny = geometry.ntid[1], nz = geometry.ntid[2];
  const uint32_t per_block = nx * ny * nz;
  const uint32_t warps_per_block = (per_block + kWarpSize - 1) / kWarpSize;
  const uint32_t num_blocks = static_cast<uint32_t>(ctaids.size());
  threads_.assign(size_t{per_block} * num_blocks, ThreadState{});
  warps_.assign(size_t{warps_per_block} * num_blocks, Warp{});
  blocks_.assign(num_blocks, Block{});
  uint32_t index = 0;
  auto add_block = [&](const std::array<uint32_t, 3>& ctaid) {
    Block& block = blocks_[index];
    block.ctaid = ctaid;
    block.first = index * per_block;
    block.size = per_block;
    block.live = per_block;
    uint8_t* block_shared = shared == nullptr ? nullptr : shared + index * shared_stride;
    uint32_t linear = 0;
    for (uint32_t z = 0; z < nz; ++z) {
      for (uint32_t y = 0; y < ny; ++y) {
        for (uint32_t x = 0; x < nx; ++x, ++linear) {
          ThreadState& t = threads_[block.first + linear];
          t.tid = {x, y, z};
          t.ctaid = ctaid;
          t.linear = linear;
          t.block = index;
          t.warp = index * warps_per_block + linear / kWarpSize;
          t.shared = block_shared;
          t.scheduler = this;
        }
      }
    }
    for (uint32_t i = 0; i < warps_per_block; ++i) {
      Warp& w = warps_[index * warps_per_block + i];
      w.first = block.first + i * kWarpSize;
      w.size = std::min(kWarpSize, per_block - i * kWarpSize);
      w.live = w.size;
    }
    ++index;
  };
  for (const std::array<uint32_t, 3>& ctaid : ctaids) add_block(ctaid);
  live_ = per_block * num_blocks;
  grid_waiting_ = 0;
}

Status BlockScheduler::Run() {
  const uint32_t n = static_cast<uint32_t>(threads_.size());
  std::vector<uint32_t> order;
  order.reserve(n);
  while (live_ > 0) {
    order.clear();
    for (uint32_t i = 0; i < n; ++i) {
      if (threads_[i].status == ThreadStatus::kRunnable) order.push_back(i);
    }
    if (order.empty()) {
      bool released = false;
      for (const Block& b : blocks_) {
        if (b.live > 0 && TryReleaseBarrier(b)) released = true;
      }
      if (released) continue;
      if (grid_mode_ && TryReleaseGridBarrier()) continue;
      std::string what = error_;
      if (what.empty()) {
        what = grid_mode_ ? DescribeGridStall()
                          : "deadlock in block " + BlockName(blocks_[0].ctaid) + ": " +
                                DescribeStall(blocks_[0]);
      }
      AbandonRunningWorkers();
      return Internal(what);
    }
    // Each pass resumes every runnable thread once: in a grid-wide launch that is a
    // round-robin over the blocks, or one random order over the whole grid.
    if (random_order_) std::shuffle(order.begin(), order.end(), rng_);
    for (uint32_t i : order) {
      if (threads_[i].status != ThreadStatus::kRunnable) continue;
      Resume(&threads_[i]);
      if (!error_.empty()) {
        AbandonRunningWorkers();
        return Internal(error_);
      }
    }
  }
  return Status::Ok();
}

Status BlockScheduler::RunBlock(EntryFn entry, void** args, const BlockGeometry& geometry) {
  entry_ = entry;
  args_ = args;
  geometry_ = geometry;
  error_.clear();
  grid_mode_ = false;
  Populate(geometry, {geometry.ctaid}, nullptr, 0);
  return Run();
}

Status BlockScheduler::RunGrid(EntryFn entry, void** args, const BlockGeometry& geometry,
                               const std::vector<std::array<uint32_t, 3>>& blocks, uint8_t* shared,
                               uint64_t shared_stride) {
  entry_ = entry;
  args_ = args;
  geometry_ = geometry;
  error_.clear();
  Populate(geometry, blocks, shared, shared_stride);
  // Every thread of the grid may be alive at once: cached workers first, then slab stacks.
  const size_t n = threads_.size();
  const size_t missing = n > idle_.size() ? n - idle_.size() : 0;
  if (!MapSlab(static_cast<uint32_t>(missing))) {
    return ResourceExhausted("cannot map fiber stacks for " + std::to_string(n) +
                             " threads of a grid-wide launch");
  }
  grid_mode_ = true;
  Status status = Run();
  grid_mode_ = false;
  ReleaseSlab();
  return status;
}

}  // namespace stitch::emu
