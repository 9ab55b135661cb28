// The on-disk entry format and bundle integrity.
//
// A bundle is *sealed* before it is stored: its format_version is set to
// kBundleFormatVersion and its digest to the SHA-256 of its deterministic serialization with
// the digest field empty. An entry on disk is an envelope around the sealed bundle:
//
//   "STK" + format byte | u32 little-endian bundle format version | 32-byte SHA-256 of the
//   payload | payload (the serialized bundle)
//
// so a torn or bit-flipped value, or one written by another version, is detected before
// protobuf parses it.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "stitch/base/status.h"
#include "stitch/v1/kernel_bundle.pb.h"

namespace stitch::cache {

// Bumped whenever a change to the bundle or its meaning makes older entries unusable.
// 2: Kernel.workspace_bytes (a kernel may take a trailing workspace argument).
// 3: Kernel.cooperative (a workspace no longer implies a cooperative launch).
inline constexpr uint32_t kBundleFormatVersion = 3;

// Sets `bundle`'s format_version and digest.
void SealBundle(v1::KernelBundle& bundle);

// Returns OK when `bundle` carries kBundleFormatVersion and a digest matching its contents;
// FAILED_PRECONDITION naming both versions for another version, DATA_LOSS for a bad digest.
Status CheckSealed(const v1::KernelBundle& bundle);

// Returns the envelope of a sealed bundle. The header carries the bundle's own
// format_version, so an entry written by another version is recognised as such.
std::string EncodeEntry(const v1::KernelBundle& bundle);

// Parses and checks an envelope. Returns DATA_LOSS for a short, misframed or corrupt value
// (a payload not matching its SHA-256, or a header version disagreeing with the bundle's),
// FAILED_PRECONDITION naming both versions for an entry of another format version, and the
// bundle otherwise. The envelope's digest covers the payload byte for byte, so the bundle's
// own digest is not recomputed here.
StatusOr<v1::KernelBundle> DecodeEntry(std::string_view bytes);

}  // namespace stitch::cache
