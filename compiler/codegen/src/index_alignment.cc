#include "index_alignment.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Operator.h>

#include <algorithm>

namespace stitch::codegen {
namespace {

constexpr int kUnknown = 0;
constexpr int kAll = 63;
// Index expressions are a few dozen instructions deep; the limit only bounds the walk.
constexpr int kMaxDepth = 24;
// Distances compare two such expressions, branching where they share operands.
constexpr int kMaxDistanceDepth = 8;

int Walk(const llvm::Value* v, int depth);

int ConstantZeros(const llvm::ConstantInt* c) {
  const llvm::APInt& bits = c->getValue();
  return bits.isZero() ? kAll
                       : static_cast<int>(std::min<unsigned>(bits.countTrailingZeros(), kAll));
}

// A loop's induction variable: a phi whose incoming values are either independent of it or
// the phi plus a step. Every value it takes is then a start plus a sum of steps.
int InductionZeros(const llvm::PHINode* phi, int depth) {
  int zeros = kAll;
  for (const llvm::Value* in : phi->incoming_values()) {
    const auto* add = llvm::dyn_cast<llvm::BinaryOperator>(in);
    if (add && add->getOpcode() == llvm::Instruction::Add &&
        (add->getOperand(0) == phi || add->getOperand(1) == phi)) {
      const llvm::Value* step = add->getOperand(0) == phi ? add->getOperand(1) : add->getOperand(0);
      zeros = std::min(zeros, Walk(step, depth + 1));
    } else {
      zeros = std::min(zeros, Walk(in, depth + 1));
    }
  }
  return zeros;
}

int BinaryZeros(const llvm::BinaryOperator* op, int depth) {
  const llvm::Value* lhs = op->getOperand(0);
  const llvm::Value* rhs = op->getOperand(1);
  auto shift = [&]() -> int {
    const auto* c = llvm::dyn_cast<llvm::ConstantInt>(rhs);
    return c && c->getValue().ult(64) ? static_cast<int>(c->getZExtValue()) : -1;
  };
  switch (op->getOpcode()) {
    case llvm::Instruction::Add:
    case llvm::Instruction::Sub:
    case llvm::Instruction::Or:
      return std::min(Walk(lhs, depth + 1), Walk(rhs, depth + 1));
    case llvm::Instruction::Mul:
      return std::min(kAll, Walk(lhs, depth + 1) + Walk(rhs, depth + 1));
    case llvm::Instruction::And:
      return std::max(Walk(lhs, depth + 1), Walk(rhs, depth + 1));
    case llvm::Instruction::Shl: {
      const int s = shift();
      return s < 0 ? kUnknown : std::min(kAll, Walk(lhs, depth + 1) + s);
    }
    case llvm::Instruction::LShr:
    case llvm::Instruction::AShr: {
      // Only the zeros above the shifted-out bits remain known.
      const int s = shift();
      return s < 0 ? kUnknown : std::max(0, Walk(lhs, depth + 1) - s);
    }
    case llvm::Instruction::URem:
    case llvm::Instruction::SRem:
      // x - c * q: a multiple of every power of two dividing both x and c.
      return std::min(Walk(lhs, depth + 1), Walk(rhs, depth + 1));
    default:
      return kUnknown;
  }
}

int Walk(const llvm::Value* v, int depth) {
  if (const auto* c = llvm::dyn_cast<llvm::ConstantInt>(v)) return ConstantZeros(c);
  if (depth > kMaxDepth) return kUnknown;
  if (const auto* op = llvm::dyn_cast<llvm::BinaryOperator>(v)) return BinaryZeros(op, depth);
  if (const auto* cast = llvm::dyn_cast<llvm::CastInst>(v)) {
    switch (cast->getOpcode()) {
      case llvm::Instruction::ZExt:
      case llvm::Instruction::SExt:
        return Walk(cast->getOperand(0), depth + 1);
      case llvm::Instruction::Trunc:
        return std::min<int>(Walk(cast->getOperand(0), depth + 1),
                             static_cast<int>(cast->getType()->getIntegerBitWidth()));
      default:
        return kUnknown;
    }
  }
  if (const auto* f = llvm::dyn_cast<llvm::FreezeInst>(v)) return Walk(f->getOperand(0), depth + 1);
  if (const auto* s = llvm::dyn_cast<llvm::SelectInst>(v)) {
    return std::min(Walk(s->getTrueValue(), depth + 1), Walk(s->getFalseValue(), depth + 1));
  }
  if (const auto* phi = llvm::dyn_cast<llvm::PHINode>(v)) return InductionZeros(phi, depth);
  return kUnknown;
}

// An add that does not wrap as a signed sum, whose operands are then exact integers.
const llvm::BinaryOperator* SignedAdd(const llvm::Value* v) {
  const auto* add = llvm::dyn_cast<llvm::BinaryOperator>(v);
  return add && add->getOpcode() == llvm::Instruction::Add && add->hasNoSignedWrap() ? add
                                                                                     : nullptr;
}

// Splits `v` into a value plus the constant its non-wrapping adds of constants add up to.
const llvm::Value* StripConstantAdds(const llvm::Value* v, int64_t& offset) {
  for (int depth = 0; depth < kMaxDepth; ++depth) {
    const llvm::BinaryOperator* add = SignedAdd(v);
    if (add == nullptr) break;
    const auto* c = llvm::dyn_cast<llvm::ConstantInt>(add->getOperand(1));
    const llvm::Value* rest = add->getOperand(0);
    if (c == nullptr) {
      c = llvm::dyn_cast<llvm::ConstantInt>(add->getOperand(0));
      rest = add->getOperand(1);
    }
    if (c == nullptr || c->getBitWidth() > 64) break;
    offset += c->getSExtValue();
    v = rest;
  }
  return v;
}

std::optional<int64_t> Distance(const llvm::Value* a, const llvm::Value* b, int depth) {
  int64_t da = 0;
  int64_t db = 0;
  a = StripConstantAdds(a, da);
  b = StripConstantAdds(b, db);
  if (a == b) return da - db;
  const auto* ca = llvm::dyn_cast<llvm::ConstantInt>(a);
  const auto* cb = llvm::dyn_cast<llvm::ConstantInt>(b);
  if (ca && cb && ca->getBitWidth() <= 64 && cb->getBitWidth() <= 64) {
    return ca->getSExtValue() + da - cb->getSExtValue() - db;
  }
  const llvm::BinaryOperator* sa = SignedAdd(a);
  const llvm::BinaryOperator* sb = SignedAdd(b);
  if (sa == nullptr || sb == nullptr || depth >= kMaxDistanceDepth) return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      if (sa->getOperand(i) != sb->getOperand(j)) continue;
      std::optional<int64_t> d = Distance(sa->getOperand(1 - i), sb->getOperand(1 - j), depth + 1);
      if (d) return *d + da - db;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> ConstantDistance(const llvm::Value* a, const llvm::Value* b) {
  return Distance(a, b, 0);
}

int KnownTrailingZeros(const llvm::Value* index) { return Walk(index, 0); }

uint64_t ElementAlignment(const llvm::Value* index, uint64_t element_bytes) {
  constexpr uint64_t kBaseAlignment = 16;
  const int zeros = std::min(KnownTrailingZeros(index), 4);
  return std::min(kBaseAlignment, std::max<uint64_t>(element_bytes, 1) << zeros);
}

}  // namespace stitch::codegen
