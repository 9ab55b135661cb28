#include "emulator/block_scheduler.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <boost/context/preallocated.hpp>
#include <boost/context/stack_context.hpp>
#include <map>
#include <new>
#include <utility>

namespace stitch::emu {
namespace {

namespace ctx = boost::context;

thread_local ThreadState* tls_current = nullptr;

// Stacks are owned by the Worker (mmap with a guard page), so the fiber must not free them.
struct KeepStack {
  ctx::stack_context allocate() { return {}; }
  void deallocate(ctx::stack_context&) noexcept {}
};

bool IsShuffle(WarpOp op) { return static_cast<uint32_t>(op) <= 3; }

std::string BlockName(const BlockGeometry& g) {
  return "(" + std::to_string(g.ctaid[0]) + "," + std::to_string(g.ctaid[1]) + "," +
         std::to_string(g.ctaid[2]) + ")";
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
  void* map = nullptr;
  size_t map_bytes = 0;
  // Never destroyed once abandoned: destroying a suspended fiber would unwind through
  // JIT-compiled frames that have no unwind tables.
  union {
    ctx::fiber fiber;
  };
  ctx::fiber sched;  // the scheduler's continuation while this worker runs
  ThreadState* thread = nullptr;
  bool abandoned = false;

  Worker() : fiber() {}
  ~Worker() {
    if (!abandoned) fiber.~fiber();
    if (map != nullptr) munmap(map, map_bytes);
  }

  static ctx::fiber Main(Worker* w, ctx::fiber&& sched) {
    w->sched = std::move(sched);
    while (ThreadState* t = w->thread) {
      w->owner->entry_(w->owner->args_);
      t->status = ThreadStatus::kExited;
      w->sched = std::move(w->sched).resume();
    }
    return std::move(w->sched);
  }
};

BlockScheduler::BlockScheduler(size_t stack_bytes, bool random_order, uint64_t seed)
    : stack_bytes_(stack_bytes), random_order_(random_order), rng_(seed) {}

BlockScheduler::~BlockScheduler() {
  // Let idle workers return from their loop so their fibers end normally.
  for (auto& w : workers_) {
    if (w->abandoned || !w->fiber) continue;
    w->thread = nullptr;
    w->fiber = std::move(w->fiber).resume();
  }
}

ThreadState* BlockScheduler::Current() { return tls_current; }

Worker* BlockScheduler::AcquireWorker() {
  if (!idle_.empty()) {
    Worker* w = idle_.back();
    idle_.pop_back();
    return w;
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t usable = (stack_bytes_ + page - 1) / page * page;
  auto w = std::make_unique<Worker>();
  w->owner = this;
  w->map_bytes = usable + page;
  w->map = mmap(nullptr, w->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (w->map == MAP_FAILED) {
    w->map = nullptr;
    return nullptr;
  }
  // Guard page below the stack: an overflow faults instead of corrupting a neighbour.
  mprotect(w->map, page, PROT_NONE);
  ctx::stack_context sctx;
  sctx.size = usable;
  sctx.sp = static_cast<char*>(w->map) + w->map_bytes;
  Worker* raw = w.get();
  w->fiber =
      ctx::fiber(std::allocator_arg, ctx::preallocated(sctx.sp, sctx.size, sctx), KeepStack{},
                 [raw](ctx::fiber&& s) { return Worker::Main(raw, std::move(s)); });
  workers_.push_back(std::move(w));
  return raw;
}

void BlockScheduler::Resume(ThreadState* t) {
  if (t->worker == nullptr) {
    Worker* w = AcquireWorker();
    if (w == nullptr) {
      if (error_.empty()) error_ = "cannot allocate a fiber stack";
      return;
    }
    w->thread = t;
    t->worker = w;
  }
  Worker* w = t->worker;
  tls_current = t;
  w->fiber = std::move(w->fiber).resume();
  tls_current = nullptr;
  if (t->status == ThreadStatus::kExited) {
    t->worker = nullptr;
    w->thread = nullptr;
    idle_.push_back(w);
    OnExit(t);
  }
}

void BlockScheduler::Yield(ThreadState* t) {
  Worker* w = t->worker;
  w->sched = std::move(w->sched).resume();
}

void BlockScheduler::Fail(ThreadState* t, const std::string& message) {
  if (error_.empty()) error_ = message;
  t->status = ThreadStatus::kStuck;
  // The scheduler abandons this fiber; it is never resumed.
  for (;;) Yield(t);
}

void BlockScheduler::OnExit(ThreadState* t) {
  --live_;
  Warp& w = warps_[t->linear / kWarpSize];
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

bool BlockScheduler::TryReleaseBarrier() {
  bool have_site = false;
  uint32_t site = 0;
  uint32_t waiting = 0, popc = 0;
  for (const ThreadState& t : threads_) {
    if (t.status == ThreadStatus::kExited) continue;
    if (t.status != ThreadStatus::kAtBarrier) return false;
    if (have_site && t.barrier_site != site) return false;
    have_site = true;
    site = t.barrier_site;
    ++waiting;
    popc += t.barrier_pred & 1u;
  }
  if (waiting == 0 || waiting != live_) return false;
  for (ThreadState& t : threads_) {
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
        error_ = "deadlock in block " + BlockName(geometry_) + ": lanes of warp " +
                 std::to_string(w.first / kWarpSize) +
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
      // PTX shfl.sync: c packs the clamp value (bits 0-4) and the segment mask (bits 8-12).
      const int lane = static_cast<int>(i);
      const int bval = static_cast<int>(t.warp_b & 31u);
      const int cval = static_cast<int>(t.warp_c & 31u);
      const int segmask = static_cast<int>((t.warp_c >> 8) & 31u);
      const int max_lane = (lane & segmask) | (cval & ~segmask);
      const int min_lane = lane & segmask;
      int j = lane;
      bool pval = false;
      switch (t.warp_op) {
        case WarpOp::kShflUp:
          j = lane - bval;
          pval = j >= max_lane;
          break;
        case WarpOp::kShflDown:
          j = lane + bval;
          pval = j <= max_lane;
          break;
        case WarpOp::kShflBfly:
          j = lane ^ bval;
          pval = j <= max_lane;
          break;
        default:
          j = min_lane | (bval & ~segmask);
          pval = j <= max_lane;
          break;
      }
      if (!pval) j = lane;
      // A source lane that does not exist or did not take part: keep the own value.
      uint32_t value = t.warp_value;
      if (j >= 0 && j < static_cast<int>(w.size) && ((arrived_mask >> j) & 1u) != 0) {
        value = threads_[w.first + static_cast<uint32_t>(j)].warp_value;
      }
      result = value | (uint64_t{pval ? 1u : 0u} << 32);
    } else {
      const uint32_t votes = ballot & mask;
      switch (t.warp_op) {
        case WarpOp::kVoteAll:
          result = votes == mask ? 1 : 0;
          break;
        case WarpOp::kVoteAny:
          result = votes != 0 ? 1 : 0;
          break;
        case WarpOp::kVoteUni:
          result = (votes == 0 || votes == mask) ? 1 : 0;
          break;
        case WarpOp::kVoteBallot:
          result = votes;
          break;
        default:
          result = 0;
          break;
      }
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
  Warp& w = warps_[t->linear / kWarpSize];
  ++w.arrived;
  if (w.arrived == w.live) {
    // Last lane in: resolve the whole warp now (results go to per-lane slots, so nothing
    // can be overwritten before every lane has read it).
    CompleteWarp(w);
    if (!error_.empty()) Fail(t, error_);
    return t->warp_result;
  }
  Yield(t);
  return t->warp_result;
}

std::string BlockScheduler::DescribeStall() const {
  std::map<uint32_t, std::pair<uint32_t, const ThreadState*>> at_barrier;
  std::map<uint32_t, uint32_t> at_warp;
  uint32_t exited = 0;
  for (const ThreadState& t : threads_) {
    switch (t.status) {
      case ThreadStatus::kAtBarrier: {
        auto& e = at_barrier[t.barrier_site];
        if (e.first++ == 0) e.second = &t;
        break;
      }
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
  for (const auto& [warp, n] : at_warp) {
    sep();
    s += std::to_string(n) + " lane(s) of warp " + std::to_string(warp) +
         " wait at a warp operation";
  }
  sep();
  s += std::to_string(exited) + " of " + std::to_string(threads_.size()) + " thread(s) exited";
  return s;
}

void BlockScheduler::AbandonRunningWorkers() {
  for (ThreadState& t : threads_) {
    Worker* w = t.worker;
    if (w == nullptr) continue;
    t.worker = nullptr;
    w->abandoned = true;
    w->thread = nullptr;
    if (w->map != nullptr) {
      munmap(w->map, w->map_bytes);
      w->map = nullptr;
    }
  }
}

Status BlockScheduler::RunBlock(EntryFn entry, void** args, const BlockGeometry& geometry) {
  entry_ = entry;
  args_ = args;
  geometry_ = geometry;
  error_.clear();
  const uint32_t nx = geometry.ntid[0], ny = geometry.ntid[1], nz = geometry.ntid[2];
  const uint32_t n = nx * ny * nz;
  threads_.assign(n, ThreadState{});
  uint32_t linear = 0;
  for (uint32_t z = 0; z < nz; ++z) {
    for (uint32_t y = 0; y < ny; ++y) {
      for (uint32_t x = 0; x < nx; ++x, ++linear) {
        ThreadState& t = threads_[linear];
        t.tid = {x, y, z};
        t.linear = linear;
        t.scheduler = this;
      }
    }
  }
  warps_.assign((n + kWarpSize - 1) / kWarpSize, Warp{});
  for (uint32_t i = 0; i < warps_.size(); ++i) {
    warps_[i].first = i * kWarpSize;
    warps_[i].size = std::min(kWarpSize, n - i * kWarpSize);
    warps_[i].live = warps_[i].size;
  }
  live_ = n;

  std::vector<uint32_t> order;
  order.reserve(n);
  while (live_ > 0) {
    order.clear();
    for (uint32_t i = 0; i < n; ++i) {
      if (threads_[i].status == ThreadStatus::kRunnable) order.push_back(i);
    }
    if (order.empty()) {
      if (TryReleaseBarrier()) continue;
      const std::string what = DescribeStall();
      AbandonRunningWorkers();
      return Internal("deadlock in block " + BlockName(geometry_) + ": " + what);
    }
    if (random_order_) std::shuffle(order.begin(), order.end(), rng_);
    for (uint32_t i : order) {
      if (threads_[i].status != ThreadStatus::kRunnable) continue;
      Resume(&threads_[i]);
      if (!error_.empty()) {
        AbandonRunningWorkers();
        const std::string& e = error_;
        return Internal(
            e.rfind("deadlock", 0) == 0 ? e : "error in block " + BlockName(geometry_) + ": " + e);
      }
    }
  }
  return Status::Ok();
}

}  // namespace stitch::emu
