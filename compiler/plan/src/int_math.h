// Integer helpers the plan layer's sizing rules share.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace stitch {

// ceil(a / b) for a >= 0 and b > 0.
inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// `a` rounded up to a multiple of `unit` (> 0).
inline int64_t RoundUp(int64_t a, int64_t unit) { return CeilDiv(a, unit) * unit; }

inline bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace stitch
