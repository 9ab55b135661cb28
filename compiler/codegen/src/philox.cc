#include "philox.h"

#include "stitch/ir/philox.h"

namespace stitch::codegen {
namespace {

// The constants are the interpreter's, so device and reference bits cannot drift apart.
constexpr uint32_t kMul0 = kPhiloxM0;
constexpr uint32_t kMul1 = kPhiloxM1;
constexpr uint32_t kWeyl0 = kPhiloxW0;
constexpr uint32_t kWeyl1 = kPhiloxW1;

// (hi, lo) of the 64-bit product of two u32 values.
std::pair<llvm::Value*, llvm::Value*> MulHiLo(llvm::IRBuilder<>& b, uint32_t m, llvm::Value* x) {
  llvm::Value* p = b.CreateMul(b.CreateZExt(x, b.getInt64Ty()), b.getInt64(m));
  return {b.CreateTrunc(b.CreateLShr(p, 32), b.getInt32Ty()), b.CreateTrunc(p, b.getInt32Ty())};
}

}  // namespace

llvm::Value* EmitPhiloxWord(llvm::IRBuilder<>& b, llvm::Value* seed, llvm::Value* block,
                            llvm::Value* word, uint32_t stream) {
  llvm::Type* i32 = b.getInt32Ty();
  llvm::Value* k0 = b.CreateTrunc(seed, i32);
  llvm::Value* k1 = b.CreateTrunc(b.CreateLShr(seed, 32), i32);
  llvm::Value* c0 = b.CreateTrunc(block, i32);
  llvm::Value* c1 = b.CreateTrunc(b.CreateLShr(block, 32), i32);
  llvm::Value* c2 = b.getInt32(stream);
  llvm::Value* c3 = b.getInt32(0);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 = b.CreateAdd(k0, b.getInt32(kWeyl0));
      k1 = b.CreateAdd(k1, b.getInt32(kWeyl1));
    }
    auto [hi0, lo0] = MulHiLo(b, kMul0, c0);
    auto [hi1, lo1] = MulHiLo(b, kMul1, c2);
    llvm::Value* n0 = b.CreateXor(b.CreateXor(hi1, c1), k0);
    llvm::Value* n2 = b.CreateXor(b.CreateXor(hi0, c3), k1);
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  llvm::Value* v = b.CreateSelect(b.CreateICmpEQ(word, b.getInt32(1)), c1, c0);
  v = b.CreateSelect(b.CreateICmpEQ(word, b.getInt32(2)), c2, v);
  return b.CreateSelect(b.CreateICmpEQ(word, b.getInt32(3)), c3, v);
}

}  // namespace stitch::codegen
