#include "stitch/plan/target.h"

#include <algorithm>

namespace stitch {

struct Target::Info {
  std::string name;
  std::string llvm_cpu;
  std::string ptx_features;
  int compute_capability;
  std::string device;  // a GpuDevice name in KnownDevices()
};

namespace {

// One row per target stitch compiles for, each with the device that prices its plans. PTX
// versions: the first PTX ISA that lists the architecture (PTX ISA manual, "Release
// notes"); sm_89 and sm_90 need 7.8, the newest LLVM 16 emits.
const std::vector<Target::Info>& TargetTable() {
  static const std::vector<Target::Info> table = {
      {"sm_75", "sm_75", "+ptx63", 75, "T4"},
      {"sm_80", "sm_80", "+ptx70", 80, "A100"},
      {"sm_86", "sm_86", "+ptx71", 86, "A10"},
      {"sm_89", "sm_89", "+ptx78", 89, "L4"},
      {"sm_90", "sm_90", "+ptx78", 90, "H100"},
      // LLVM 16 has no sm_90a: its PTX is sm_90's, and the assembler builds the sm_90a cubin.
      {"sm_90a", "sm_90", "+ptx78", 90, "H100"},
  };
  return table;
}

// The spelling rule: "sm_", two or three digits, and an optional "a".
bool WellFormed(std::string_view s) {
  if (s.size() < 5 || s.substr(0, 3) != "sm_") return false;
  std::string_view rest = s.substr(3);
  if (rest.back() == 'a') rest.remove_suffix(1);
  if (rest.size() < 2 || rest.size() > 3) return false;
  return std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

Target::Target() : Target(&TargetTable()[4]) {}

StatusOr<Target> Target::Parse(std::string_view spelling) {
  if (!WellFormed(spelling)) {
    return InvalidArgument("target '" + std::string(spelling) +
                           "' is not a GPU architecture like sm_80, sm_90 or sm_90a");
  }
  for (const Info& info : TargetTable()) {
    if (info.name == spelling) return Target(&info);
  }
  return InvalidArgument("target '" + std::string(spelling) +
                         "' is not supported; stitch compiles for " + SupportedList());
}

const std::vector<Target>& Target::Supported() {
  static const std::vector<Target> all = [] {
    std::vector<Target> targets;
    for (const Info& info : TargetTable()) targets.push_back(Target(&info));
    return targets;
  }();
  return all;
}

std::string Target::SupportedList() {
  std::string list;
  for (const Info& info : TargetTable()) list += (list.empty() ? "" : ", ") + info.name;
  return list;
}

const std::string& Target::name() const { return info_->name; }

const std::string& Target::llvm_cpu() const { return info_->llvm_cpu; }

const std::string& Target::ptx_features() const { return info_->ptx_features; }

int Target::compute_capability() const { return info_->compute_capability; }

const GpuDevice& Target::device() const {
  // The table names only devices KnownDevices() lists (target_test checks every row).
  return *FindDevice(info_->device);
}

}  // namespace stitch
