// The host functions a retargeted kernel calls: thread geometry, barriers, warp operations,
// libdevice math and the half-precision conversions the x86 backend emits.
//
// Thread-safety: every function is safe to call from any OS thread; the ones that touch
// emulator state act on the block scheduler running on the calling OS thread.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace stitch::emu {

// Names of the runtime entry points the retargeted module refers to.
inline constexpr const char* kEntryName = "__stitch_emu_entry";
inline constexpr const char* kSharedName = "__stitch_emu_smem";
inline constexpr const char* kBarrierName = "__stitch_emu_barrier";
inline constexpr const char* kBarrierReduceName = "__stitch_emu_barrier_red";
inline constexpr const char* kWarpName = "__stitch_emu_warp";
inline constexpr const char* kGridBarrierName = "__stitch_emu_grid_sync";
// Returns the calling thread's block's shared memory in a grid-wide launch.
inline constexpr const char* kSharedBaseName = "__stitch_emu_smem_base";
inline constexpr const char* kTrapName = "__stitch_emu_trap";
inline constexpr const char* kSregPrefix = "__stitch_emu_sreg_";

using RuntimeSymbols = std::vector<std::pair<std::string, void*>>;

// Returns every symbol the JIT must resolve to the runtime: the emulator entry points,
// the libdevice replacements and the f16 conversion helpers.
const RuntimeSymbols& AllRuntimeSymbols();

// Returns true when `name` (e.g. "__nv_expf") has a host implementation.
bool HasLibdeviceFunction(const std::string& name);

// Sets the relative error the calling thread's approximate-math replacements give their
// results (EmulatorOptions::approximate_math_error) until it is set again; emulated threads
// run on the launching thread, so a launch sets it for all of its threads.
void SetApproximateMathError(double relative_error);

// Appends the libdevice replacements (libdevice.cc).
void AppendLibdeviceSymbols(RuntimeSymbols& out);

// IEEE binary16 conversions, round to nearest even (half.cc).
uint16_t FloatToHalf(float f);
uint16_t DoubleToHalf(double d);
float HalfToFloat(uint16_t h);

// Appends __extendhfsf2, __truncsfhf2, __truncdfhf2, __gnu_h2f_ieee and __gnu_f2h_ieee.
void AppendHalfSymbols(RuntimeSymbols& out);

}  // namespace stitch::emu
