// Tests of the grid-wide barrier (stitch.grid.sync, codegen.h): kernels built with IRBuilder
// the way the codegen builds them (noalias parameters, NVVM intrinsics, addrspace(3) shared
// memory) run on the emulator, whose blocks then run at once, and lower to PTX that
// assembles for sm_80 and sm_90.
#include <gtest/gtest.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "../../../compiler/codegen/src/grid_barrier.h"
#include "stitch/codegen/codegen.h"
#include "stitch/emulator/emulator.h"

namespace stitch {
namespace {

using codegen::EmitGridBarrier;

// One kernel under construction: `void name(ptr p0, ..., ptr pN-1)` with every parameter
// noalias and nocapture, and the first `inputs` of them readonly, as the codegen emits.
class KernelBuilder {
 public:
  KernelBuilder(const std::string& name, unsigned params, unsigned inputs)
      : module_(std::make_unique<llvm::Module>(name, ctx_)), b_(ctx_), name_(name) {
    module_->setTargetTriple("nvptx64-nvidia-cuda");
    module_->setDataLayout("e-i64:64-i128:128-v16:16-v32:32-n16:32:64");
    auto* ptr = llvm::PointerType::get(ctx_, 0);
    auto* type =
        llvm::FunctionType::get(b_.getVoidTy(), std::vector<llvm::Type*>(params, ptr), false);
    fn_ = llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage, name, *module_);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    for (unsigned i = 0; i < params; ++i) {
      llvm::Argument* arg = fn_->getArg(i);
      arg->addAttr(llvm::Attribute::NoAlias);
      arg->addAttr(llvm::Attribute::NoCapture);
      if (i < inputs) arg->addAttr(llvm::Attribute::ReadOnly);
    }
    llvm::Metadata* md[] = {llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(ctx_, "kernel"),
                            llvm::ConstantAsMetadata::get(b_.getInt32(1))};
    module_->getOrInsertNamedMetadata("nvvm.annotations")->addOperand(llvm::MDNode::get(ctx_, md));
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
  }

  llvm::LLVMContext& ctx() { return ctx_; }
  llvm::Module& module() { return *module_; }
  llvm::Function* fn() { return fn_; }
  llvm::IRBuilder<>& b() { return b_; }
  llvm::Value* Param(unsigned i) { return fn_->getArg(i); }

  llvm::Value* Sreg(llvm::Intrinsic::ID id) { return b_.CreateIntrinsic(id, {}, {}); }

  // Linear block index, threads per block, linear thread index within the block, and the
  // global index block * threads_per_block + thread, over 2-D grids and blocks.
  llvm::Value* BlockLinear() {
    using namespace llvm::Intrinsic;
    return b_.CreateAdd(
        Sreg(nvvm_read_ptx_sreg_ctaid_x),
        b_.CreateMul(Sreg(nvvm_read_ptx_sreg_nctaid_x), Sreg(nvvm_read_ptx_sreg_ctaid_y)));
  }
  llvm::Value* BlockThreads() {
    using namespace llvm::Intrinsic;
    return b_.CreateMul(Sreg(nvvm_read_ptx_sreg_ntid_x), Sreg(nvvm_read_ptx_sreg_ntid_y));
  }
  llvm::Value* ThreadLinear() {
    using namespace llvm::Intrinsic;
    return b_.CreateAdd(
        Sreg(nvvm_read_ptx_sreg_tid_x),
        b_.CreateMul(Sreg(nvvm_read_ptx_sreg_ntid_x), Sreg(nvvm_read_ptx_sreg_tid_y)));
  }
  llvm::Value* GlobalIndex() {
    return b_.CreateAdd(b_.CreateMul(BlockLinear(), BlockThreads()), ThreadLinear());
  }
  llvm::Value* GridThreads() {
    using namespace llvm::Intrinsic;
    llvm::Value* blocks =
        b_.CreateMul(Sreg(nvvm_read_ptx_sreg_nctaid_x), Sreg(nvvm_read_ptx_sreg_nctaid_y));
    return b_.CreateMul(blocks, BlockThreads());
  }

  // Address of element `index` (i32) of the i32 buffer in parameter `param`.
  llvm::Value* At(unsigned param, llvm::Value* index) {
    return b_.CreateInBoundsGEP(b_.getInt32Ty(), Param(param),
                                b_.CreateZExt(index, b_.getInt64Ty()));
  }
  llvm::Value* Load(unsigned param, llvm::Value* index) {
    return b_.CreateAlignedLoad(b_.getInt32Ty(), At(param, index), llvm::Align(4));
  }
  void Store(unsigned param, llvm::Value* index, llvm::Value* v) {
    b_.CreateAlignedStore(v, At(param, index), llvm::Align(4));
  }
  void GridSync(unsigned workspace_param) { EmitGridBarrier(b_, Param(workspace_param)); }
  void BlockSync() { b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {}); }

  // `if (cond) then()`, leaving the builder after it.
  void If(llvm::Value* cond, const std::function<void()>& then) {
    auto* then_bb = llvm::BasicBlock::Create(ctx_, "then", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "done", fn_);
    b_.CreateCondBr(cond, then_bb, done);
    b_.SetInsertPoint(then_bb);
    then();
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }

  CompiledKernel Finish(std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block) {
    b_.CreateRetVoid();
    std::string errors;
    llvm::raw_string_ostream os(errors);
    EXPECT_FALSE(llvm::verifyModule(*module_, &os)) << os.str();
    CompiledKernel k;
    k.name = name_;
    k.launch.grid = grid;
    k.launch.block = block;
    llvm::raw_string_ostream out(k.portable_ir);
    llvm::WriteBitcodeToFile(*module_, out);
    out.flush();
    return k;
  }

 private:
  llvm::LLVMContext ctx_;
  std::unique_ptr<llvm::Module> module_;
  llvm::IRBuilder<> b_;
  std::string name_;
  llvm::Function* fn_ = nullptr;
};

std::unique_ptr<Emulator> NewEmulator(bool random_order, uint64_t seed) {
  EmulatorOptions options;
  options.random_order = random_order;
  options.seed = seed;
  auto emu = Emulator::Create(options);
  EXPECT_TRUE(emu.ok()) << emu.status().ToString();
  return emu.ok() ? std::move(emu).value() : nullptr;
}

// The workspace as the host allocates it: one u32, zero-filled once. Its low 31 bits count
// the blocks that have arrived at a barrier; its top bit is the phase each barrier flips.
struct Workspace {
  uint32_t arrivals = 0;
};
constexpr uint32_t kPhase = 0x80000000u;

// Where TwoStage puts its grid barrier: between the stages (correct), before both (it
// orders nothing, but the kernel still runs grid-wide) or nowhere.
enum class Sync { kBetweenStages, kBeforeStages, kNone };

// Two stages behind one grid barrier: tmp[i] = 2 * in[i]; barrier; out[i] = tmp[j] with
// j = (i + threads per block) mod n, a value another block wrote. Parameters: in, tmp, out,
// workspace.
CompiledKernel TwoStage(std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block,
                        Sync sync = Sync::kBetweenStages) {
  KernelBuilder k("two_stage", 4, 1);
  llvm::IRBuilder<>& b = k.b();
  llvm::Value* i = k.GlobalIndex();
  if (sync == Sync::kBeforeStages) k.GridSync(3);
  k.Store(1, i, b.CreateMul(k.Load(0, i), b.getInt32(2)));
  if (sync == Sync::kBetweenStages) k.GridSync(3);
  llvm::Value* j = b.CreateURem(b.CreateAdd(i, k.BlockThreads()), k.GridThreads());
  k.Store(2, i, k.Load(1, j));
  return k.Finish(grid, block);
}

struct TwoStageRun {
  StatusOr<LaunchStats> stats = Internal("not run");
  std::vector<int32_t> in, out;
  Workspace ws;
};

TwoStageRun RunTwoStage(Emulator& emu, const CompiledKernel& k) {
  const uint64_t n = k.launch.threads();
  TwoStageRun r;
  r.in.resize(n);
  for (uint64_t i = 0; i < n; ++i) r.in[i] = static_cast<int32_t>(3 * i + 1);
  std::vector<int32_t> tmp(n, -1);
  r.out.assign(n, -7);
  r.stats = emu.Launch(k, {r.in.data(), tmp.data(), r.out.data(), &r.ws});
  return r;
}

// True when out[i] == 2 * in[(i + block threads) % n] everywhere.
bool TwoStageCorrect(const CompiledKernel& k, const TwoStageRun& r) {
  const uint64_t n = k.launch.threads();
  const uint64_t bt = k.launch.block_threads();
  for (uint64_t i = 0; i < n; ++i) {
    if (r.out[i] != 2 * r.in[(i + bt) % n]) return false;
  }
  return true;
}

TEST(EmulatorGridBarrier, TwoStagesExchangeAcrossBlocks) {
  const std::array<std::array<uint32_t, 3>, 5> grids = {
      {{1, 1, 1}, {2, 1, 1}, {7, 1, 1}, {5, 3, 1}, {33, 1, 1}}};
  const std::array<std::array<uint32_t, 3>, 3> blocks = {{{32, 1, 1}, {48, 2, 1}, {128, 1, 1}}};
  std::vector<uint64_t> seeds = {1, 2, 3};
  seeds.push_back(std::random_device{}());
  std::cout << "random-order seeds: 1 2 3 " << seeds.back() << "\n";
  for (const auto& grid : grids) {
    for (const auto& block : blocks) {
      const CompiledKernel k = TwoStage(grid, block);
      for (size_t s = 0; s <= seeds.size(); ++s) {
        const bool random = s < seeds.size();
        const uint64_t seed = random ? seeds[s] : 0;
        SCOPED_TRACE("grid " + std::to_string(grid[0]) + "x" + std::to_string(grid[1]) +
                     ", block " + std::to_string(block[0]) + "x" + std::to_string(block[1]) +
                     (random ? ", random order, seed " + std::to_string(seed) : ", in order"));
        auto emu = NewEmulator(random, seed);
        ASSERT_NE(emu, nullptr);
        TwoStageRun r = RunTwoStage(*emu, k);
        ASSERT_TRUE(r.stats.ok()) << r.stats.status().ToString();
        EXPECT_TRUE(TwoStageCorrect(k, r));
        EXPECT_EQ(r.stats->grid_barriers, 1u);
        EXPECT_EQ(r.stats->barriers, 0u);
        EXPECT_EQ(r.stats->threads, k.launch.threads());
        // Each thread loads in[i] and tmp[j] and stores tmp[i] and out[i]; the barrier's own
        // workspace traffic is not counted.
        EXPECT_EQ(r.stats->global_bytes_loaded, 8 * k.launch.threads());
        EXPECT_EQ(r.stats->global_bytes_stored, 8 * k.launch.threads());
        // The workspace is back at a zero count, its phase flipped once.
        EXPECT_EQ(r.ws.arrivals, kPhase);
      }
    }
  }
}

TEST(EmulatorGridBarrier, PersistentGridOfAnH100) {
  // One block of 128 threads per SM of an H100: a grid the codegen might size for a real
  // GPU, with 16896 threads (and fiber stacks) alive at once.
  const CompiledKernel k = TwoStage({132, 1, 1}, {128, 1, 1});
  for (bool random : {false, true}) {
    auto emu = NewEmulator(random, 11);
    ASSERT_NE(emu, nullptr);
    TwoStageRun r = RunTwoStage(*emu, k);
    ASSERT_TRUE(r.stats.ok()) << r.stats.status().ToString();
    EXPECT_TRUE(TwoStageCorrect(k, r)) << "random order " << random;
    // The same emulator still runs ordinary kernels (its cached fibers survive).
    TwoStageRun again = RunTwoStage(*emu, k);
    ASSERT_TRUE(again.stats.ok()) << again.stats.status().ToString();
    EXPECT_TRUE(TwoStageCorrect(k, again));
  }
}

// The sum of in[0..n) by repeated halving, one grid barrier per step: buf[i] = in[i]; for
// s = n/2 .. 1: barrier; if (i < s) buf[i] += buf[i + s]; then barrier; out[i] = buf[0].
// n (the grid's threads) must be a power of two. Parameters: in, buf, out, workspace.
CompiledKernel HalvingSum(std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block) {
  KernelBuilder k("halving_sum", 4, 1);
  llvm::IRBuilder<>& b = k.b();
  llvm::Value* i = k.GlobalIndex();
  k.Store(1, i, k.Load(0, i));
  llvm::Value* half = b.CreateLShr(k.GridThreads(), 1);
  llvm::BasicBlock* pre = b.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(k.ctx(), "step", k.fn());
  auto* exit = llvm::BasicBlock::Create(k.ctx(), "summed", k.fn());
  b.CreateBr(header);
  b.SetInsertPoint(header);
  llvm::PHINode* s = b.CreatePHI(b.getInt32Ty(), 2, "s");
  s->addIncoming(half, pre);
  k.GridSync(3);
  k.If(b.CreateICmpULT(i, s),
       [&] { k.Store(1, i, b.CreateAdd(k.Load(1, i), k.Load(1, b.CreateAdd(i, s)))); });
  llvm::Value* next = b.CreateLShr(s, 1);
  s->addIncoming(next, b.GetInsertBlock());
  b.CreateCondBr(b.CreateICmpNE(next, b.getInt32(0)), header, exit);
  b.SetInsertPoint(exit);
  k.GridSync(3);
  k.Store(2, i, k.Load(1, b.getInt32(0)));
  return k.Finish(grid, block);
}

TEST(EmulatorGridBarrier, RepeatedBarriersReuseTheWorkspace) {
  struct Case {
    std::array<uint32_t, 3> grid, block;
  };
  const Case cases[] = {{{2, 1, 1}, {32, 1, 1}},
                        {{8, 1, 1}, {64, 1, 1}},
                        {{4, 4, 1}, {16, 2, 1}},
                        {{64, 1, 1}, {128, 1, 1}}};
  for (const Case& c : cases) {
    const CompiledKernel k = HalvingSum(c.grid, c.block);
    const uint64_t n = k.launch.threads();
    uint32_t steps = 0;
    while ((uint64_t{1} << steps) < n) ++steps;
    ASSERT_EQ(uint64_t{1} << steps, n);
    std::vector<int32_t> in(n);
    for (uint64_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>(i % 1000) - 300;
    int64_t want = 0;
    for (int32_t v : in) want += v;
    for (uint64_t seed : {0, 5, 6}) {
      SCOPED_TRACE(std::to_string(n) + " threads, seed " + std::to_string(seed));
      auto emu = NewEmulator(seed != 0, seed);
      ASSERT_NE(emu, nullptr);
      // One workspace, zero-filled once, serves every barrier of both launches.
      Workspace ws;
      for (int launch = 1; launch <= 2; ++launch) {
        std::vector<int32_t> buf(n, 0x5a5a5a5a), out(n, -1);
        auto stats = emu->Launch(k, {in.data(), buf.data(), out.data(), &ws});
        ASSERT_TRUE(stats.ok()) << stats.status().ToString();
        EXPECT_EQ(stats->grid_barriers, steps + 1);
        for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], want) << "thread " << i;
        // Each barrier flips the phase and leaves the count at 0.
        EXPECT_EQ(ws.arrivals, (launch * (steps + 1)) % 2 == 1 ? kPhase : 0u);
      }
    }
  }
}

TEST(EmulatorGridBarrier, WithoutItTheExchangeGoesWrong) {
  // With no barrier the blocks run one after another, and block b reads block b + 1's
  // values before that block has written them. With the barrier before both stages the
  // kernel still runs grid-wide, but in order each block reads the next one's values before
  // they are written, and random order interleaves the whole grid.
  for (Sync sync : {Sync::kNone, Sync::kBeforeStages}) {
    const CompiledKernel k = TwoStage({8, 1, 1}, {64, 1, 1}, sync);
    for (uint64_t seed : {0, 1, 2, 3}) {
      auto emu = NewEmulator(seed != 0, seed);
      ASSERT_NE(emu, nullptr);
      TwoStageRun r = RunTwoStage(*emu, k);
      ASSERT_TRUE(r.stats.ok()) << r.stats.status().ToString();
      EXPECT_EQ(r.stats->grid_barriers, sync == Sync::kNone ? 0u : 1u);
      EXPECT_FALSE(TwoStageCorrect(k, r))
          << "seed " << seed << " hid the misplaced barrier (" << static_cast<int>(sync) << ")";
    }
  }
}

// a = buf[i + 1]; barrier; buf[i] = 10 * a; barrier; out[i] = buf[i + 1]. The second load
// of buf[i + 1] must see the other thread's store: with buf noalias, the optimiser would
// otherwise reuse the first load across the two opaque calls. Parameters: buf (n + 1
// elements), out, workspace.
CompiledKernel ReloadAfterBarrier(std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block) {
  KernelBuilder k("reload_after_barrier", 3, 0);
  llvm::IRBuilder<>& b = k.b();
  llvm::Value* i = k.GlobalIndex();
  llvm::Value* next = b.CreateAdd(i, b.getInt32(1), "next", /*HasNUW=*/true, /*HasNSW=*/true);
  llvm::Value* a = k.Load(0, next);
  k.GridSync(2);
  k.Store(0, i, b.CreateMul(a, b.getInt32(10)));
  k.GridSync(2);
  k.Store(1, i, k.Load(0, next));
  return k.Finish(grid, block);
}

TEST(EmulatorGridBarrier, WritableBuffersAreReloadedAfterTheBarrier) {
  const CompiledKernel k = ReloadAfterBarrier({4, 1, 1}, {32, 1, 1});
  const uint64_t n = k.launch.threads();
  auto emu = NewEmulator(false, 0);
  ASSERT_NE(emu, nullptr);
  std::vector<int32_t> buf(n + 1), out(n, -1);
  for (uint64_t i = 0; i <= n; ++i) buf[i] = static_cast<int32_t>(i);
  Workspace ws;
  auto stats = emu->Launch(k, {buf.data(), out.data(), &ws});
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  for (uint64_t i = 0; i < n; ++i) {
    const int32_t want = i + 1 < n ? static_cast<int32_t>(10 * (i + 2)) : static_cast<int32_t>(n);
    ASSERT_EQ(out[i], want) << i;
  }
}

// Shared memory stays per block while blocks run at once: smem[t] = 1000 * block + t;
// block barrier; grid barrier (every block has written its copy); out[i] = smem[(t + 1) % B]
// and out2[i] = smem[5] (through a constant address). Parameters: out, out2, workspace.
CompiledKernel SharedPerBlock(std::array<uint32_t, 3> grid, uint32_t threads) {
  KernelBuilder k("shared_per_block", 3, 0);
  llvm::IRBuilder<>& b = k.b();
  auto* type = llvm::ArrayType::get(b.getInt32Ty(), threads);
  auto* smem = new llvm::GlobalVariable(k.module(), type, false, llvm::GlobalValue::InternalLinkage,
                                        llvm::UndefValue::get(type), "smem", nullptr,
                                        llvm::GlobalValue::NotThreadLocal, 3);
  smem->setAlignment(llvm::Align(4));
  llvm::Value* t = k.ThreadLinear();
  llvm::Value* blk = k.BlockLinear();
  llvm::Value* i = k.GlobalIndex();
  auto slot = [&](llvm::Value* index) {
    llvm::Value* indices[] = {b.getInt32(0), index};
    return b.CreateInBoundsGEP(type, smem, indices);
  };
  b.CreateAlignedStore(b.CreateAdd(b.CreateMul(blk, b.getInt32(1000)), t), slot(t), llvm::Align(4));
  k.BlockSync();
  k.GridSync(2);
  llvm::Value* next = b.CreateURem(b.CreateAdd(t, b.getInt32(1)), b.getInt32(threads));
  k.Store(0, i, b.CreateAlignedLoad(b.getInt32Ty(), slot(next), llvm::Align(4)));
  llvm::Value* fixed = b.CreateConstInBoundsGEP2_32(type, smem, 0, 5);
  EXPECT_TRUE(llvm::isa<llvm::Constant>(fixed));
  k.Store(1, i, b.CreateAlignedLoad(b.getInt32Ty(), fixed, llvm::Align(4)));
  return k.Finish(grid, {threads, 1, 1});
}

TEST(EmulatorGridBarrier, SharedMemoryIsPerBlock) {
  constexpr uint32_t kThreads = 64;
  const CompiledKernel k = SharedPerBlock({6, 2, 1}, kThreads);
  for (uint64_t seed : {0, 9}) {
    auto emu = NewEmulator(seed != 0, seed);
    ASSERT_NE(emu, nullptr);
    const uint64_t n = k.launch.threads();
    std::vector<int32_t> out(n, -1), out2(n, -1);
    Workspace ws;
    auto stats = emu->Launch(k, {out.data(), out2.data(), &ws});
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_EQ(stats->barriers, k.launch.blocks());
    EXPECT_EQ(stats->grid_barriers, 1u);
    for (uint64_t i = 0; i < n; ++i) {
      const int32_t blk = static_cast<int32_t>(i / kThreads);
      const int32_t t = static_cast<int32_t>(i % kThreads);
      ASSERT_EQ(out[i], 1000 * blk + (t + 1) % static_cast<int32_t>(kThreads)) << i;
      ASSERT_EQ(out2[i], 1000 * blk + 5) << i;
    }
  }
}

// Parameters: out, workspace. Each variant calls the barrier a different number of times in
// some threads.
CompiledKernel Mismatched(int variant) {
  KernelBuilder k("mismatched_" + std::to_string(variant), 2, 0);
  llvm::IRBuilder<>& b = k.b();
  llvm::Value* blk = k.BlockLinear();
  llvm::Value* t = k.ThreadLinear();
  switch (variant) {
    case 0:  // block 0 calls it twice, the others once
      k.GridSync(1);
      k.If(b.CreateICmpEQ(blk, b.getInt32(0)), [&] { k.GridSync(1); });
      break;
    case 1:  // thread 0 of every block never calls it
      k.If(b.CreateICmpNE(t, b.getInt32(0)), [&] { k.GridSync(1); });
      break;
    default:  // in block 1, thread 0 waits at a block barrier instead
      k.If(b.CreateICmpEQ(b.CreateOr(b.CreateXor(blk, b.getInt32(1)), t), b.getInt32(0)),
           [&] { k.BlockSync(); });
      k.If(b.CreateICmpNE(b.CreateOr(b.CreateXor(blk, b.getInt32(1)), t), b.getInt32(0)),
           [&] { k.GridSync(1); });
      break;
  }
  k.Store(0, k.GlobalIndex(), b.getInt32(1));
  return k.Finish({4, 1, 1}, {64, 1, 1});
}

TEST(EmulatorGridBarrier, MismatchedCountsAreADeadlockNotAHang) {
  for (bool random : {false, true}) {
    auto emu = NewEmulator(random, 4);
    ASSERT_NE(emu, nullptr);
    for (int variant = 0; variant < 3; ++variant) {
      SCOPED_TRACE("variant " + std::to_string(variant) + (random ? ", random order" : ""));
      const CompiledKernel k = Mismatched(variant);
      std::vector<int32_t> out(k.launch.threads(), 0);
      Workspace ws;
      auto stats = emu->Launch(k, {out.data(), &ws});
      ASSERT_FALSE(stats.ok());
      EXPECT_EQ(stats.status().code(), StatusCode::kInternal);
      const std::string& m = stats.status().message();
      EXPECT_NE(m.find("deadlock at a grid barrier"), std::string::npos) << m;
      if (variant == 2) {
        EXPECT_NE(m.find("block (1,0,0)"), std::string::npos) << m;
      }
    }
    // The emulator stays usable.
    const CompiledKernel good = TwoStage({3, 1, 1}, {32, 1, 1});
    TwoStageRun r = RunTwoStage(*emu, good);
    ASSERT_TRUE(r.stats.ok()) << r.stats.status().ToString();
    EXPECT_TRUE(TwoStageCorrect(good, r));
  }
}

TEST(EmulatorGridBarrier, WorkspaceMustStartAtZero) {
  const CompiledKernel k = TwoStage({2, 1, 1}, {32, 1, 1});
  auto emu = NewEmulator(false, 0);
  ASSERT_NE(emu, nullptr);
  std::vector<int32_t> in(64, 1), tmp(64), out(64);
  // As a fresh intermediate buffer would be: not zero-filled.
  Workspace ws{0xffffffffu};
  auto stats = emu->Launch(k, {in.data(), tmp.data(), out.data(), &ws});
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), StatusCode::kInternal);
  EXPECT_NE(stats.status().message().find("zero-fill"), std::string::npos)
      << stats.status().message();
  // Either phase will do once the count is 0.
  ws.arrivals = kPhase;
  stats = emu->Launch(k, {in.data(), tmp.data(), out.data(), &ws});
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(ws.arrivals, 0u);
}

TEST(EmulatorGridBarrier, GridsBeyondTheLimitAreRefused) {
  // 65 x 1024 threads would all be alive at once.
  const CompiledKernel k = TwoStage({65, 1, 1}, {1024, 1, 1});
  auto emu = NewEmulator(false, 0);
  ASSERT_NE(emu, nullptr);
  std::vector<int32_t> in(1), tmp(1), out(1);
  Workspace ws;
  auto stats = emu->Launch(k, {in.data(), tmp.data(), out.data(), &ws});
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), StatusCode::kResourceExhausted) << stats.status().ToString();
}

TEST(EmulatorGridBarrier, BarrierWithABodyOrAnotherTypeIsRejected) {
  for (int variant = 0; variant < 2; ++variant) {
    KernelBuilder k("bad_barrier_" + std::to_string(variant), 1, 0);
    llvm::IRBuilder<>& b = k.b();
    llvm::Function* f = nullptr;
    if (variant == 0) {
      f = codegen::DeclareGridBarrier(k.module());
      llvm::IRBuilder<> body(llvm::BasicBlock::Create(k.ctx(), "entry", f));
      body.CreateRetVoid();
      b.CreateCall(f, {k.Param(0)});
    } else {
      auto* type = llvm::FunctionType::get(b.getVoidTy(), {b.getInt32Ty()}, false);
      f = llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage,
                                 codegen::kGridBarrierFunction, k.module());
      b.CreateCall(f, {b.getInt32(0)});
    }
    CompiledKernel kernel = k.Finish({1, 1, 1}, {32, 1, 1});
    auto emu = NewEmulator(false, 0);
    ASSERT_NE(emu, nullptr);
    Workspace ws;
    auto stats = emu->Launch(kernel, {&ws});
    ASSERT_FALSE(stats.ok());
    EXPECT_EQ(stats.status().code(), StatusCode::kInvalidArgument) << stats.status().ToString();
    Status lowered = LowerToPtx(kernel, CodegenOptions{});
    EXPECT_EQ(lowered.code(), StatusCode::kInvalidArgument) << lowered.ToString();
  }
}

TEST(EmulatorGridBarrier, DeviceBodyReplacesTheDeclaration) {
  KernelBuilder k("device_body", 4, 1);
  k.GridSync(3);
  k.GridSync(3);
  k.Finish({1, 1, 1}, {32, 1, 1});
  ASSERT_TRUE(codegen::DefineGridBarrier(k.module()).ok());
  llvm::Function* f = k.module().getFunction(codegen::kGridBarrierFunction);
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(f->isDeclaration());
  EXPECT_TRUE(f->hasInternalLinkage());
  EXPECT_TRUE(f->hasFnAttribute(llvm::Attribute::AlwaysInline));
  EXPECT_TRUE(f->isConvergent());
  EXPECT_FALSE(llvm::verifyModule(k.module(), &llvm::errs()));
  // Values pass between threads through the writable buffers: they lose noalias, the
  // read-only input keeps it.
  EXPECT_TRUE(k.fn()->getArg(0)->hasNoAliasAttr());
  for (unsigned i = 1; i < 4; ++i) EXPECT_FALSE(k.fn()->getArg(i)->hasNoAliasAttr()) << i;
  // A module without the barrier is left alone.
  KernelBuilder plain("plain", 1, 0);
  plain.Finish({1, 1, 1}, {32, 1, 1});
  ASSERT_TRUE(codegen::DefineGridBarrier(plain.module()).ok());
  EXPECT_EQ(plain.module().getFunction(codegen::kGridBarrierFunction), nullptr);
  EXPECT_TRUE(plain.fn()->getArg(0)->hasNoAliasAttr());
}

size_t Occurrences(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

TEST(EmulatorGridBarrier, PtxHasTheBarrierInlinedAndAssembles) {
  for (const char* target : {"sm_80", "sm_90"}) {
    SCOPED_TRACE(target);
    CompiledKernel k = HalvingSum({132, 1, 1}, {256, 1, 1});
    CodegenOptions options;
    options.target = *Target::Parse(target);
    Status s = LowerToPtx(k, options);
    ASSERT_TRUE(s.ok()) << s.ToString();
    const std::string& ptx = k.ptx;
    // Inlined: no call to the barrier function remains.
    EXPECT_EQ(ptx.find("grid_$_sync"), std::string::npos);
    EXPECT_EQ(ptx.find("call.uni"), std::string::npos);
    for (const char* want : {"bar.sync", "membar.gl", "atom.global.add.u32",
                             "ld.volatile.global.u32", "%nctaid.x", "%ctaid.x"}) {
      EXPECT_NE(ptx.find(want), std::string::npos) << "PTX lacks " << want;
    }
    // A block arrives with one atomic add at each of the kernel's two barriers, and the last
    // arrival's add releases the grid: no second atomic, no store to the workspace.
    EXPECT_EQ(Occurrences(ptx, "atom.global.add.u32"), 2u) << ptx;
    EXPECT_EQ(ptx.find("st.volatile"), std::string::npos) << ptx;
    // buf[i + 1] is loaded again after the barriers (buf lost noalias).
    CompiledKernel reload = ReloadAfterBarrier({132, 1, 1}, {256, 1, 1});
    s = LowerToPtx(reload, options);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(Occurrences(reload.ptx, "ld.global.u32"), 2u) << reload.ptx;
    if (!CubinAvailable(options)) {
      std::cout << "no ptxas or nvJitLink: " << target << " PTX not assembled\n";
      continue;
    }
    s = AssembleCubin(k, options);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_FALSE(k.cubin.empty());
  }
}

}  // namespace
}  // namespace stitch
