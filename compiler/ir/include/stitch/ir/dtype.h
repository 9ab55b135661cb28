// Element types of tensors in a stitch graph.
//
// Thread-safety: pure functions over constants; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace stitch {

// The dtypes of DESIGN.md. The numeric values are part of the canonical key and of the
// wire format (stitch.v1.DType): never renumber, only append.
enum class DType : uint8_t {
  kPred = 1,
  kS8 = 2,
  kS32 = 3,
  kS64 = 4,
  kU8 = 5,
  kU32 = 6,
  kU64 = 7,
  kF16 = 8,
  kBF16 = 9,
  kF32 = 10,
  kF64 = 11,
};

// Returns the HLO spelling ("f32", "pred", ...).
std::string_view DTypeName(DType t);

// Parses an HLO spelling; returns nullopt for anything else (e.g. "c64", "f8e4m3").
std::optional<DType> ParseDType(std::string_view name);

// Returns the storage size of one element in bytes (pred is stored as one byte).
int DTypeBytes(DType t);

bool IsFloat(DType t);
bool IsSignedInt(DType t);
bool IsUnsignedInt(DType t);  // pred counts as unsigned
inline bool IsInteger(DType t) { return IsSignedInt(t) || IsUnsignedInt(t); }

// Number of value bits of an integer type (pred: 1, s8/u8: 8, ...); 0 for floats.
int IntegerBits(DType t);

}  // namespace stitch
