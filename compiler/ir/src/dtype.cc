#include "stitch/ir/dtype.h"

#include <array>
#include <utility>

namespace stitch {
namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  int bytes;
  int int_bits;  // 0 for floats
  bool is_signed;
};

constexpr std::array<DTypeInfo, 11> kDTypes = {{
    {DType::kPred, "pred", 1, 1, false},
    {DType::kS8, "s8", 1, 8, true},
    {DType::kS32, "s32", 4, 32, true},
    {DType::kS64, "s64", 8, 64, true},
    {DType::kU8, "u8", 1, 8, false},
    {DType::kU32, "u32", 4, 32, false},
    {DType::kU64, "u64", 8, 64, false},
    {DType::kF16, "f16", 2, 0, true},
    {DType::kBF16, "bf16", 2, 0, true},
    {DType::kF32, "f32", 4, 0, true},
    {DType::kF64, "f64", 8, 0, true},
}};

const DTypeInfo* Find(DType t) {
  for (const auto& info : kDTypes) {
    if (info.type == t) return &info;
  }
  return nullptr;
}

}  // namespace

std::string_view DTypeName(DType t) {
  const DTypeInfo* info = Find(t);
  return info ? info->name : "invalid";
}

std::optional<DType> ParseDType(std::string_view name) {
  for (const auto& info : kDTypes) {
    if (info.name == name) return info.type;
  }
  return std::nullopt;
}

int DTypeBytes(DType t) {
  const DTypeInfo* info = Find(t);
  return info ? info->bytes : 0;
}

bool IsFloat(DType t) {
  const DTypeInfo* info = Find(t);
  return info && info->int_bits == 0;
}

bool IsSignedInt(DType t) {
  const DTypeInfo* info = Find(t);
  return info && info->int_bits > 0 && info->is_signed;
}

bool IsUnsignedInt(DType t) {
  const DTypeInfo* info = Find(t);
  return info && info->int_bits > 0 && !info->is_signed;
}

int IntegerBits(DType t) {
  const DTypeInfo* info = Find(t);
  return info ? info->int_bits : 0;
}

}  // namespace stitch
