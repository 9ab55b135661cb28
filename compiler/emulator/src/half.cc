#include <cstring>

#include "runtime.h"

namespace stitch::emu {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Shifts `mant` right by `shift` bits, rounding to nearest even.
uint64_t ShiftRoundEven(uint64_t mant, unsigned shift) {
  if (shift == 0) return mant;
  if (shift >= 64) return 0;
  const uint64_t kept = mant >> shift;
  const uint64_t rem = mant & ((uint64_t{1} << shift) - 1);
  const uint64_t half = uint64_t{1} << (shift - 1);
  if (rem > half || (rem == half && (kept & 1) != 0)) return kept + 1;
  return kept;
}

// The x86 backend (LLVM >= 15) passes and returns `half` in the low 16 bits of an XMM
// register; a float parameter or result occupies the same register, so these wrappers
// use float and move the bits.
float ExtendHfSf2(float packed) { return HalfToFloat(static_cast<uint16_t>(FloatBits(packed))); }
float TruncSfHf2(float f) { return BitsFloat(FloatToHalf(f)); }
float TruncDfHf2(double d) { return BitsFloat(DoubleToHalf(d)); }
float GnuH2F(uint16_t h) { return HalfToFloat(h); }
uint16_t GnuF2H(float f) { return FloatToHalf(f); }

}  // namespace

uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN; keep NaNs quiet and non-zero
    if (abs == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow
  const int exp = static_cast<int>(abs >> 23);
  if (exp >= 113) {  // normal half: rebias and round; a carry moves into the exponent
    return static_cast<uint16_t>(sign | ShiftRoundEven(abs - 0x38000000u, 13));
  }
  if (exp < 102) return sign;  // below 2^-25: rounds to zero
  const uint64_t mant = (abs & 0x7fffffu) | 0x800000u;
  return static_cast<uint16_t>(sign | ShiftRoundEven(mant, static_cast<unsigned>(126 - exp)));
}

uint16_t DoubleToHalf(double d) {
  uint64_t x;
  std::memcpy(&x, &d, sizeof x);
  const uint16_t sign = static_cast<uint16_t>((x >> 48) & 0x8000u);
  const uint64_t abs = x & 0x7fffffffffffffffull;
  if (abs >= 0x7ff0000000000000ull) {
    if (abs == 0x7ff0000000000000ull) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 42) & 0x3ffu));
  }
  if (abs >= 0x40effe0000000000ull) return sign | 0x7c00u;  // >= 65520
  const int exp = static_cast<int>(abs >> 52);
  if (exp >= 1009) {
    return static_cast<uint16_t>(sign | ShiftRoundEven(abs - (uint64_t{1008} << 52), 42));
  }
  if (exp < 988) return sign;
  const uint64_t mant = (abs & 0xfffffffffffffull) | (uint64_t{1} << 52);
  return static_cast<uint16_t>(sign | ShiftRoundEven(mant, static_cast<unsigned>(1051 - exp)));
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return BitsFloat(sign);
    // Subnormal: normalise so the leading one becomes the implicit bit.
    exp = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    return BitsFloat(sign | (exp << 23) | ((mant & 0x3ffu) << 13));
  }
  return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

void AppendHalfSymbols(RuntimeSymbols& out) {
  out.emplace_back("__extendhfsf2", reinterpret_cast<void*>(&ExtendHfSf2));
  out.emplace_back("__truncsfhf2", reinterpret_cast<void*>(&TruncSfHf2));
  out.emplace_back("__truncdfhf2", reinterpret_cast<void*>(&TruncDfHf2));
  out.emplace_back("__gnu_h2f_ieee", reinterpret_cast<void*>(&GnuH2F));
  out.emplace_back("__gnu_f2h_ieee", reinterpret_cast<void*>(&GnuF2H));
}

}  // namespace stitch::emu
