// Pieces shared by the store implementations.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

#include "stitch/cache/kernel_store.h"

namespace stitch::cache {

// Returns OK when `bundle` may be stored under `key`: present, sealed, and carrying `key`;
// INVALID_ARGUMENT naming the key and the reason otherwise.
Status ValidateForPut(std::string_view key, const BundlePtr& bundle);

// Returns the `stitchctl cache ls` line of `bundle`, accounted at `bytes`.
EntryInfo MakeEntryInfo(std::string_view key, const v1::KernelBundle& bundle, uint64_t bytes);

}  // namespace stitch::cache
