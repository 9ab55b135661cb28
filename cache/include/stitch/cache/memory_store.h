// The hot tier: an in-memory LRU of bundles, bounded in bytes.
//
// Thread-safety: all methods may be called concurrently (one mutex; the critical sections
// are a hash lookup and a list splice). Never fails.
#pragma once

#include <cstdint>
#include <memory>

#include "stitch/cache/kernel_store.h"

namespace stitch::cache {

// Returns an empty memory tier holding at most `capacity_bytes` of bundles, accounted by
// their serialized size (ByteSizeLong). Hits return the stored shared_ptr itself. The tier
// never holds corrupt entries (Put checks the seal), so its `corrupt` counter stays 0.
std::unique_ptr<KernelStore> NewMemoryStore(uint64_t capacity_bytes);

}  // namespace stitch::cache
