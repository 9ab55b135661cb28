// Tells AddressSanitizer and ThreadSanitizer when the block scheduler moves execution from
// one stack to another. Without it, ASan takes a fiber's stack for a wild region of the
// scheduler's (false stack-buffer-overflow reports, and fake frames freed on the wrong stack),
// and TSan attributes a fiber's accesses to whichever context it last saw. Boost.Context's
// own hooks (BOOST_USE_ASAN) exist only in its ucontext back end, and Debian's
// libboost_context is built for fcontext, so the scheduler annotates its own switches.
//
// Every function is a no-op in a build without those sanitizers.
//
// Thread-safety: the functions act on the calling OS thread's current fiber only.
#pragma once

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#define STITCH_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STITCH_FIBER_ASAN 1
#endif
#endif

#if defined(__SANITIZE_THREAD__)
#define STITCH_FIBER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STITCH_FIBER_TSAN 1
#endif
#endif

#if defined(STITCH_FIBER_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(STITCH_FIBER_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

namespace stitch::emu {

// One side of a switch: a stack and what the sanitizers keep for it.
struct FiberContext {
  const void* stack_bottom = nullptr;  // lowest address; null for an OS thread's own stack
  size_t stack_size = 0;
  void* asan_fake_stack = nullptr;  // ASan's saved fake frames while this side is suspended
  void* tsan_fiber = nullptr;       // TSan's fiber object
};

// Clears ASan's marks on [p, p + n), memory that becomes or stops being fiber stacks: stacks
// (and the canaries between them) are mapped again at addresses earlier stacks used, and
// ASan still marks those stacks' frames.
inline void ClearStackMarks(const void* p, size_t n) {
#if defined(STITCH_FIBER_ASAN)
  __asan_unpoison_memory_region(p, n);
#else
  (void)p;
  (void)n;
#endif
}

// Makes `fiber` the context of a stack [bottom, bottom + size), which starts clean. Call once,
// before the first switch to it; pair with DestroyFiberContext.
inline void CreateFiberContext(FiberContext& fiber, const void* bottom, size_t size) {
  fiber.stack_bottom = bottom;
  fiber.stack_size = size;
  ClearStackMarks(bottom, size);
#if defined(STITCH_FIBER_TSAN)
  fiber.tsan_fiber = __tsan_create_fiber(0);
#endif
}

// Releases what CreateFiberContext made, before its stack is unmapped: a suspended or
// abandoned fiber leaves its frames marked, and whatever is mapped there next must not
// inherit them. The fiber must not be running; a second call does nothing.
inline void DestroyFiberContext(FiberContext& fiber) {
  if (fiber.stack_bottom != nullptr) ClearStackMarks(fiber.stack_bottom, fiber.stack_size);
  fiber.stack_bottom = nullptr;
#if defined(STITCH_FIBER_TSAN)
  if (fiber.tsan_fiber != nullptr) __tsan_destroy_fiber(fiber.tsan_fiber);
  fiber.tsan_fiber = nullptr;
#endif
}

// Records the calling OS thread's own context into `self`, so a fiber can switch back to it.
inline void CaptureThreadContext(FiberContext& self) {
#if defined(STITCH_FIBER_TSAN)
  self.tsan_fiber = __tsan_get_current_fiber();
#else
  (void)self;
#endif
}

// Call immediately before switching from `self` to `to`. `self_ends` says the running fiber
// will never be resumed, so ASan may drop its fake frames.
inline void BeginSwitch(FiberContext& self, const FiberContext& to, bool self_ends = false) {
#if defined(STITCH_FIBER_ASAN)
  __sanitizer_start_switch_fiber(self_ends ? nullptr : &self.asan_fake_stack, to.stack_bottom,
                                 to.stack_size);
#endif
#if defined(STITCH_FIBER_TSAN)
  __tsan_switch_to_fiber(to.tsan_fiber, 0);
#endif
  (void)self;
  (void)to;
  (void)self_ends;
}

// Call first thing after `self` runs again (or runs for the first time). Stores the stack
// it came from into `from` when `from` is not null (a fiber learns the scheduler's stack so).
inline void EndSwitch(FiberContext& self, FiberContext* from) {
#if defined(STITCH_FIBER_ASAN)
  const void* bottom = nullptr;
  size_t size = 0;
  __sanitizer_finish_switch_fiber(self.asan_fake_stack, &bottom, &size);
  if (from != nullptr) {
    from->stack_bottom = bottom;
    from->stack_size = size;
  }
#endif
  (void)self;
  (void)from;
}

}  // namespace stitch::emu
