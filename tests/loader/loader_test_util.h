// Shared by the loader's tests: bundles built in code, and the stand-in driver
// (fake_cuda_driver.cc) loaded in-process to read back what the loader asked of it.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "stitch/v1/kernel_bundle.pb.h"

namespace stitch::loader::testing {

using Role = v1::KernelParam::Role;

// Returns the PTX (or, with `cubin`, a fake cubin: the ELF magic then the same text) of a
// kernel named `name` taking `params` pointer parameters, as the fake driver reads it.
inline std::string Image(const std::string& name, int params, bool cubin = false) {
  std::string text = ".version 8.0\n.target sm_90\n.visible .entry " + name + "(";
  for (int i = 0; i < params; ++i) {
    text += (i ? ", " : "") + std::string(".param .u64 p") + std::to_string(i);
  }
  text += ")\n{\n  ret;\n}\n";
  return cubin ? "\x7f"
                 "ELF " +
                     text
               : text;
}

// Appends a kernel of `block` threads on a 4-block grid taking `params` (plus the workspace
// pointer when `workspace` is nonzero).
inline v1::Kernel* AddKernel(v1::KernelBundle& b, const std::string& name,
                             const std::vector<std::pair<Role, int>>& params,
                             uint64_t workspace = 0, bool cubin = false, uint32_t block = 128) {
  v1::Kernel* k = b.add_kernels();
  k->set_name(name);
  const int count = static_cast<int>(params.size()) + (workspace ? 1 : 0);
  k->set_ptx(Image(name, count));
  if (cubin) k->set_cubin(Image(name, count, true));
  v1::LaunchDims* d = k->mutable_launch();
  d->set_grid_x(4);
  d->set_grid_y(1);
  d->set_grid_z(1);
  d->set_block_x(block);
  d->set_block_y(1);
  d->set_block_z(1);
  for (const auto& [role, index] : params) {
    v1::KernelParam* p = k->add_params();
    p->set_role(role);
    p->set_index(index);
  }
  k->set_workspace_bytes(workspace);
  // A workspace here stands for grid barriers; a test of a split reduction's clears it.
  k->set_cooperative(workspace != 0);
  return k;
}

// A bundle of two kernels: `scale` reads input 0 into temporary 0, `add` reads input 1 and
// the temporary and writes output 0.
inline v1::KernelBundle TwoKernelBundle(const std::string& key = "k2") {
  v1::KernelBundle b;
  b.set_key(key);
  b.set_target("sm_90");
  v1::TempBuffer* t = b.add_temporaries();
  t->set_bytes(3000);
  t->set_alignment(16);
  AddKernel(b, "scale", {{v1::KernelParam::INPUT, 0}, {v1::KernelParam::TEMPORARY, 0}});
  AddKernel(
      b, "add",
      {{v1::KernelParam::INPUT, 1}, {v1::KernelParam::TEMPORARY, 0}, {v1::KernelParam::OUTPUT, 0}});
  return b;
}

// A shape-generic bundle serving outer extents 33 to 64: `norm` takes the extent after its
// workspace, `tail` does not take it. Input 0 and output 0 vary (256 bytes per extent), input
// 1 is fixed, and the temporary is sized at the top.
inline v1::KernelBundle BucketBundle() {
  v1::KernelBundle b;
  b.set_key("bucket");
  b.set_target("sm_90");
  b.mutable_outer_extent()->set_lo(33);
  b.mutable_outer_extent()->set_hi(64);
  b.mutable_outer_extent()->add_parameters(0);
  v1::TempBuffer* t = b.add_temporaries();
  t->set_bytes(64 * 4);
  t->set_bytes_per_extent(4);
  t->set_alignment(16);
  v1::Kernel* norm =
      AddKernel(b, "norm", {{v1::KernelParam::INPUT, 0}, {v1::KernelParam::TEMPORARY, 0}},
                /*workspace=*/512);
  norm->set_ptx(Image("norm", 4));  // input, temporary, workspace, extent
  norm->set_takes_outer_extent(true);
  AddKernel(
      b, "tail",
      {{v1::KernelParam::INPUT, 1}, {v1::KernelParam::TEMPORARY, 0}, {v1::KernelParam::OUTPUT, 0}});
  const auto spec = [](v1::BufferSpec* s, uint64_t bytes, uint64_t per_extent, const char* shape) {
    s->set_bytes(bytes);
    s->set_bytes_per_extent(per_extent);
    s->set_shape(shape);
  };
  spec(b.add_inputs(), 64 * 256, 256, "f32[64,64]");
  spec(b.add_inputs(), 256, 0, "f32[64]");
  spec(b.add_outputs(), 64 * 256, 256, "f32[64,64]");
  return b;
}

#ifdef STITCH_FAKE_LOADER_DRIVER
// The stand-in driver's control and inspection functions.
class FakeDriver {
 public:
  static FakeDriver& Get() {
    static FakeDriver* f = new FakeDriver;
    return *f;
  }
  static const char* Path() { return STITCH_FAKE_LOADER_DRIVER; }

  // Every recorded line starting with `prefix`.
  std::vector<std::string> Events(const std::string& prefix = "") const {
    std::vector<std::string> out;
    std::istringstream in(events_());
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(prefix, 0) == 0) out.push_back(line);
    }
    return out;
  }
  void Reset() const { reset_(); }
  void SetCc(int major, int minor) const { set_cc_(major, minor); }
  void SetContext(int id) const { set_context_(id); }
  void SetInitResult(int r) const { set_init_(r); }
  int LiveAllocations() const { return live_allocations_(); }
  int LiveModules() const { return live_modules_(); }

 private:
  FakeDriver() {
    lib_ = dlopen(Path(), RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) {
      ADD_FAILURE() << "cannot load " << Path() << ": " << dlerror();
      std::abort();
    }
    Bind("stitch_fake_loader_events", events_);
    Bind("stitch_fake_loader_reset", reset_);
    Bind("stitch_fake_loader_set_cc", set_cc_);
    Bind("stitch_fake_loader_set_context", set_context_);
    Bind("stitch_fake_loader_set_init_result", set_init_);
    Bind("stitch_fake_loader_live_allocations", live_allocations_);
    Bind("stitch_fake_loader_live_modules", live_modules_);
  }
  template <typename Fn>
  void Bind(const char* name, Fn& fn) {
    fn = reinterpret_cast<Fn>(dlsym(lib_, name));
    if (fn == nullptr) {
      ADD_FAILURE() << Path() << " lacks " << name;
      std::abort();
    }
  }

  void* lib_ = nullptr;
  const char* (*events_)() = nullptr;
  void (*reset_)() = nullptr;
  void (*set_cc_)(int, int) = nullptr;
  void (*set_context_)(int) = nullptr;
  void (*set_init_)(int) = nullptr;
  int (*live_allocations_)() = nullptr;
  int (*live_modules_)() = nullptr;
};
#endif  // STITCH_FAKE_LOADER_DRIVER

// The key=value fields of one event line.
inline std::map<std::string, std::string> Fields(const std::string& line) {
  std::map<std::string, std::string> out;
  std::istringstream in(line);
  for (std::string word; in >> word;) {
    const size_t eq = word.find('=');
    if (eq != std::string::npos) out[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return out;
}

// The comma-separated numbers of a field ("1,2,3").
inline std::vector<uint64_t> Numbers(const std::string& field) {
  std::vector<uint64_t> out;
  std::istringstream in(field);
  for (std::string n; std::getline(in, n, ',');) out.push_back(std::stoull(n));
  return out;
}

}  // namespace stitch::loader::testing
