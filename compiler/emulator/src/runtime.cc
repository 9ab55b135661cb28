// Entry points called by retargeted kernels. They run on a fiber's stack and find the
// current emulated thread through the scheduler's thread_local pointer.
#include "runtime.h"

#include "block_scheduler.h"

namespace stitch::emu {
namespace {

ThreadState& Self() { return *BlockScheduler::Current(); }

uint32_t TidX() { return Self().tid[0]; }
uint32_t TidY() { return Self().tid[1]; }
uint32_t TidZ() { return Self().tid[2]; }
uint32_t NtidX() { return Self().scheduler->geometry().ntid[0]; }
uint32_t NtidY() { return Self().scheduler->geometry().ntid[1]; }
uint32_t NtidZ() { return Self().scheduler->geometry().ntid[2]; }
uint32_t CtaidX() { return Self().ctaid[0]; }
uint32_t CtaidY() { return Self().ctaid[1]; }
uint32_t CtaidZ() { return Self().ctaid[2]; }
uint32_t NctaidX() { return Self().scheduler->geometry().nctaid[0]; }
uint32_t NctaidY() { return Self().scheduler->geometry().nctaid[1]; }
uint32_t NctaidZ() { return Self().scheduler->geometry().nctaid[2]; }
uint32_t LaneId() { return Self().linear % kWarpSize; }

void Barrier(uint32_t site) {
  ThreadState& t = Self();
  t.scheduler->Barrier(&t, site);
}

uint32_t BarrierReduce(uint32_t site, uint32_t op, uint32_t pred) {
  ThreadState& t = Self();
  return t.scheduler->BarrierReduce(&t, site, op, pred);
}

void GridSync(uint32_t site, void* workspace) {
  ThreadState& t = Self();
  t.scheduler->GridBarrier(&t, site, workspace);
}

void* SharedBase() { return Self().shared; }

uint64_t Warp(uint32_t op, uint32_t mask, uint32_t value, uint32_t b, uint32_t c) {
  ThreadState& t = Self();
  if (op > static_cast<uint32_t>(WarpOp::kSync)) {
    t.scheduler->Fail(&t, "unknown warp operation " + std::to_string(op));
  }
  return t.scheduler->WarpRendezvous(&t, static_cast<WarpOp>(op), mask, value, b, c);
}

[[noreturn]] void Trap() {
  ThreadState& t = Self();
  t.scheduler->Fail(&t, "thread (" + std::to_string(t.tid[0]) + "," + std::to_string(t.tid[1]) +
                            "," + std::to_string(t.tid[2]) + ") executed llvm.trap");
}

RuntimeSymbols BuildSymbols() {
  RuntimeSymbols s;
  auto add = [&](const std::string& name, auto* fn) {
    s.emplace_back(name, reinterpret_cast<void*>(fn));
  };
  const std::string p = kSregPrefix;
  add(p + "tid_x", &TidX);
  add(p + "tid_y", &TidY);
  add(p + "tid_z", &TidZ);
  add(p + "ntid_x", &NtidX);
  add(p + "ntid_y", &NtidY);
  add(p + "ntid_z", &NtidZ);
  add(p + "ctaid_x", &CtaidX);
  add(p + "ctaid_y", &CtaidY);
  add(p + "ctaid_z", &CtaidZ);
  add(p + "nctaid_x", &NctaidX);
  add(p + "nctaid_y", &NctaidY);
  add(p + "nctaid_z", &NctaidZ);
  add(p + "laneid", &LaneId);
  add(kBarrierName, &Barrier);
  add(kBarrierReduceName, &BarrierReduce);
  add(kWarpName, &Warp);
  add(kGridBarrierName, &GridSync);
  add(kSharedBaseName, &SharedBase);
  add(kTrapName, &Trap);
  AppendLibdeviceSymbols(s);
  AppendHalfSymbols(s);
  return s;
}

}  // namespace

const RuntimeSymbols& AllRuntimeSymbols() {
  static const RuntimeSymbols symbols = BuildSymbols();
  return symbols;
}

}  // namespace stitch::emu
