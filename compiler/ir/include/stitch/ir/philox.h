// Philox-4x32-10, the counter-based generator behind `rng-uniform` (SEMANTICS.md, "Random
// numbers"). The interpreter and the kernel emitters must produce the same bits, so both use
// the definitions here (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
//
// Thread-safety: pure constexpr functions.
#pragma once

#include <array>
#include <cstdint>

namespace stitch {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;  // multiplier applied to counter word 0
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;  // multiplier applied to counter word 2
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // Weyl increment of key word 0
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // Weyl increment of key word 1
// The words of one Philox-4x32 evaluation, which `rng-uniform` spends on consecutive elements.
inline constexpr uint64_t kRngUniformWordsPerBlock = 4;

// Returns one Philox-4x32 round of `c` under round key `k`.
constexpr PhiloxCounter PhiloxRound(const PhiloxCounter& c, const PhiloxKey& k) {
  const uint64_t p0 = uint64_t{kPhiloxM0} * c[0];
  const uint64_t p1 = uint64_t{kPhiloxM1} * c[2];
  const auto hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const auto hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  return {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
}

// Returns Philox-4x32-10 of `counter` under `key`: ten rounds, the key bumped by the Weyl
// constants between consecutive rounds.
constexpr PhiloxCounter Philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kPhiloxW0;
      key[1] += kPhiloxW1;
    }
    counter = PhiloxRound(counter, key);
  }
  return counter;
}

// Returns the Philox word that `rng-uniform` uses at linear output index `index` of a node
// with stream id `stream` and seed `seed`: word index % 4 of the block for index / 4 (key =
// seed halves, counter = (index / 4) halves, stream low 32 bits, 0). Four consecutive
// elements share one evaluation, as every word of it is as random as the first.
constexpr uint32_t RngUniformBits(uint64_t seed, uint64_t index, int64_t stream) {
  const PhiloxKey key = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  const uint64_t block = index / kRngUniformWordsPerBlock;
  const PhiloxCounter ctr = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                             static_cast<uint32_t>(static_cast<uint64_t>(stream)), 0u};
  return Philox4x32_10(ctr, key)[index % kRngUniformWordsPerBlock];
}

// Returns the `rng-uniform` value at `index` before conversion to the node's dtype:
// (w >> 8) * 2^-24, exactly representable in f32 and in [0, 1).
constexpr double RngUniformValue(uint64_t seed, uint64_t index, int64_t stream) {
  return static_cast<double>(RngUniformBits(seed, index, stream) >> 8) * (1.0 / 16777216.0);
}

}  // namespace stitch
