#include "stitch/plan/target.h"

#include <algorithm>
#include <cctype>

namespace stitch {

struct Target::Info {
  std::string name;
  std::string arch;
  std::string llvm_cpu;
  std::string ptx_features;
  int compute_capability;
  std::string device;  // a GpuDevice name in KnownDevices()
};

namespace {

// One row per target stitch compiles for, each with the device that prices its plans; an
// architecture's first row is its default device. PTX versions: the first PTX ISA that lists
// the architecture (PTX ISA manual, "Release notes"); sm_89 and sm_90 need 7.8, the newest
// LLVM 16 emits.
const std::vector<Target::Info>& TargetTable() {
  static const std::vector<Target::Info> table = {
      {"sm_75", "sm_75", "sm_75", "+ptx63", 75, "T4"},
      {"sm_80", "sm_80", "sm_80", "+ptx70", 80, "A100"},
      {"sm_86", "sm_86", "sm_86", "+ptx71", 86, "A10"},
      {"sm_89", "sm_89", "sm_89", "+ptx78", 89, "L4"},
      {"sm_90", "sm_90", "sm_90", "+ptx78", 90, "H100"},
      // The H200: the H100's die with 4.8 TB/s of HBM3e and 60 MiB of L2, and constants
      // fitted to its own measurements (cost_model.cc).
      {"sm_90/h200", "sm_90", "sm_90", "+ptx78", 90, "H200"},
      // LLVM 16 has no sm_90a: its PTX is sm_90's, and the assembler builds the sm_90a cubin.
      {"sm_90a", "sm_90a", "sm_90", "+ptx78", 90, "H100"},
  };
  return table;
}

// The spelling rule of an architecture: "sm_", two or three digits, and an optional "a".
bool WellFormedArch(std::string_view s) {
  if (s.size() < 5 || s.substr(0, 3) != "sm_") return false;
  std::string_view rest = s.substr(3);
  if (rest.back() == 'a') rest.remove_suffix(1);
  if (rest.size() < 2 || rest.size() > 3) return false;
  return std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A device name after the slash: letters and digits, as the device table spells them.
bool WellFormedDevice(std::string_view s) {
  return !s.empty() && s.size() <= 16 && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0;
  });
}

bool SameIgnoringCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// The architecture's row for `device`, or its first row when `device` is empty.
const Target::Info* FindRow(std::string_view arch, std::string_view device) {
  for (const Target::Info& info : TargetTable()) {
    if (info.arch == arch && (device.empty() || SameIgnoringCase(info.device, device))) {
      return &info;
    }
  }
  return nullptr;
}

// Whether `name` holds `word` with no letter or digit on either side ("NVIDIA H200" holds
// H200; "NVIDIA H2000" does not).
bool HoldsWord(std::string_view name, std::string_view word) {
  const auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  for (size_t at = name.find(word); at != std::string_view::npos; at = name.find(word, at + 1)) {
    const size_t end = at + word.size();
    if ((at == 0 || !alnum(name[at - 1])) && (end == name.size() || !alnum(name[end]))) {
      return true;
    }
  }
  return false;
}

}  // namespace

Target::Target() : Target(FindRow("sm_90", "")) {}

StatusOr<Target> Target::Parse(std::string_view spelling) {
  const size_t slash = spelling.find('/');
  const std::string_view arch = spelling.substr(0, slash);
  const std::string_view device =
      slash == std::string_view::npos ? std::string_view() : spelling.substr(slash + 1);
  if (!WellFormedArch(arch) || (slash != std::string_view::npos && !WellFormedDevice(device))) {
    return InvalidArgument("target '" + std::string(spelling) +
                           "' is not a GPU architecture like sm_80, sm_90 or sm_90a, optionally "
                           "with a device of it like sm_90/h200");
  }
  if (const Info* info = FindRow(arch, device)) return Target(info);
  return InvalidArgument("target '" + std::string(spelling) +
                         "' is not supported; stitch compiles for " + SupportedList());
}

StatusOr<Target> Target::ForGpu(std::string_view arch, std::string_view gpu_name) {
  STITCH_ASSIGN_OR_RETURN(Target own, Parse(arch));
  for (const Info& info : TargetTable()) {
    if (info.arch == own.arch() && HoldsWord(gpu_name, info.device)) return Target(&info);
  }
  return own;
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

const std::string& Target::arch() const { return info_->arch; }

const std::string& Target::llvm_cpu() const { return info_->llvm_cpu; }

const std::string& Target::ptx_features() const { return info_->ptx_features; }

int Target::compute_capability() const { return info_->compute_capability; }

const GpuDevice& Target::device() const {
  // The table names only devices KnownDevices() lists (target_test checks every row).
  return *FindDevice(info_->device);
}

}  // namespace stitch
