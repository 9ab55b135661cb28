// Bit-exact scalar conversions shared by tensor.cc and the interpreter: rounding doubles to
// the narrow float formats, their storage bits, and integer wrapping.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "stitch/ir/dtype.h"

namespace stitch::internal {

// Returns `v` reduced to the value range of integer dtype `t`: sign-extended from its width
// for signed dtypes, zero-extended for unsigned ones (u64 keeps its bit pattern), 0 or 1 for
// pred (the low bit, so that arithmetic wraps modulo 2). Returns `v` unchanged for floats.
int64_t WrapInt(int64_t v, DType t);

// Returns the low IntegerBits(t) bits of `v` as an unsigned number (all 64 for 64-bit types).
uint64_t LowBits(int64_t v, DType t);

// Returns the storage bits of `v` in float dtype `t` (rounded to nearest even; overflow gives
// inf; NaN keeps its sign and the top payload bits that fit and stays a NaN). For integer
// dtypes, returns the low bits of `v` converted to int64 (callers pass integers as such).
uint64_t FloatToBits(double v, DType t);

// Returns the value of storage bits `bits` of float dtype `t`, exactly, as a double.
double BitsToFloat(uint64_t bits, DType t);

// Returns the integer `v` of integer dtype `src` converted to float dtype `dst`, rounded to
// nearest even once (no double rounding through f64 for 64-bit sources).
double IntToFloat(int64_t v, DType src, DType dst);

// Returns float `v` converted to integer dtype `dst`: truncated toward zero, saturated at
// the dtype's range, NaN -> 0; pred is v != 0.
int64_t FloatToInt(double v, DType dst);

}  // namespace stitch::internal
