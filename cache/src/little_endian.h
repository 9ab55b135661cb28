// Little-endian integers, as the cache's framings (entry envelopes, cluster values,
// archives, LRU metadata) store them.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace stitch::cache {

// Appends the low `bytes` bytes of `v` to `out`, least significant first.
inline void AppendLittleEndian(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xffu));
}

// Returns the integer `in` holds, least significant byte first; `in` is at most 8 bytes.
inline uint64_t ReadLittleEndian(std::string_view in) {
  uint64_t v = 0;
  for (size_t i = 0; i < in.size(); ++i)
    v |= uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return v;
}

}  // namespace stitch::cache
