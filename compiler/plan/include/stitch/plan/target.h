// The GPU a compile is for. A target is parsed once from its spelling ("sm_90", "sm_90a",
// "sm_90/h200"), with one rule, and resolved at that moment to the device whose figures the
// scheduler and the cost model use; every later stage takes the Target, never the string.
//
// A spelling names an architecture and, after a slash, a device of it. The architecture alone
// names its first device (sm_90 plans for an H100): devices that share an architecture run
// the same code but differ in bandwidth, L2 and the fitted constants, so their plans (and
// cache keys) differ while their bundles load on either.
//
// Thread-safety: Target is an immutable value; the target table is a constant.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/plan/gpu_device.h"

namespace stitch {

class Target {
 public:
  // The target of a compile that names none: sm_90, planned as an H100.
  Target();

  // Parses `spelling`: "sm_" followed by the compute capability's digits and, for the
  // architecture-specific variant, "a" ("sm_80", "sm_90", "sm_90a"), optionally followed by
  // "/" and a device of that architecture, in any case ("sm_90/h200"; "sm_90/h100" is
  // "sm_90"). Returns INVALID_ARGUMENT naming the spelling when it is malformed, and naming
  // the supported targets when it is well formed but not one of them (stitch plans every
  // kernel for a known device, so an unknown GPU gets an error, never a guess).
  static StatusOr<Target> Parse(std::string_view spelling);

  // Returns the target of a GPU as its driver describes it: its architecture ("sm_90") and
  // its name ("NVIDIA H200"). The architecture's row whose device the name holds as a word,
  // else the architecture's first device (a GPU of a supported architecture that the device
  // table lacks is planned as that device). INVALID_ARGUMENT, as Parse, when the
  // architecture is not supported.
  static StatusOr<Target> ForGpu(std::string_view arch, std::string_view gpu_name);

  // Returns every target Parse accepts (one per architecture and device), in ascending order
  // of compute capability.
  static const std::vector<Target>& Supported();

  // Returns the supported targets as one line ("sm_75, sm_80, ..., sm_90/h200"), for error
  // messages and help text.
  static std::string SupportedList();

  // The spelling, in canonical form ("sm_90", "sm_90/h200"): what the cache key, the compile
  // profile and the configuration name.
  const std::string& name() const;
  // The architecture ("sm_90" for sm_90/h200): what the assembler's -arch, the bundle's
  // target field and the loader's image choice take.
  const std::string& arch() const;
  // The processor LLVM's NVPTX backend is asked for. It differs from name() where LLVM 16
  // lacks the variant (sm_90a is emitted as sm_90 PTX and assembled for sm_90a).
  const std::string& llvm_cpu() const;
  // The PTX ISA feature LLVM emits for this target ("+ptx78"): the oldest version that has
  // the architecture, so older drivers still load the PTX.
  const std::string& ptx_features() const;
  // The compute capability times ten (90 for sm_90 and sm_90a).
  int compute_capability() const;
  // The GPU whose figures plan and price kernels for this target.
  const GpuDevice& device() const;

  bool operator==(const Target& other) const { return info_ == other.info_; }

  struct Info;

 private:
  explicit Target(const Info* info) : info_(info) {}
  const Info* info_;
};

}  // namespace stitch
