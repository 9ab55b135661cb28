// A stand-in for libcuda.so.1 with the entry points the kernel loader uses, so its driver code
// runs in tests without a GPU. Nothing executes; every call the loader makes is recorded as
// one line of text the tests read back through the stitch_fake_loader_* functions below:
//   load ctx=<c> image=<cubin|ptx> module=<m>
//   unload module=<m>
//   alloc ptr=<p> bytes=<n>
//   free ptr=<p>
//   memset ptr=<p> value=<v> bytes=<n> stream=<s>
//   attr fn=<name> attr=<a> value=<v>
//   launch ctx=<c> fn=<name> coop=<0|1> grid=<x>,<y>,<z> block=<x>,<y>,<z> shared=<n>
//          stream=<s> args=<p0>,<p1>,...
//   cc                      (a query of the compute capability's major version)
//   push ctx=<c> / pop      (cuCtxPushCurrent / cuCtxPopCurrent)
// (launch is one line). Pointers and streams are decimal. The tests choose the device's
// compute capability and which fake context (by number, 0 for none) is current; every
// context is on device 0.
// Images are read as text (a test's cubin is the ELF magic followed by PTX-like text): each
// `.entry name(.param ..., ...)` declares a function and its parameter count, which a launch
// reads its arguments by; an image starting with the ELF magic counts as a cubin, anything
// else as PTX, and PTX containing "syntax error" fails to load with CUDA_ERROR_INVALID_PTX and a
// JIT log, as a real JIT would.
#include <cuda.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct CUctx_st {
  int id = 0;
};
struct CUfunc_st {
  std::string name;
  int params = 0;
};
struct CUmod_st {
  int id = 0;
  std::map<std::string, int> entries;  // parameter count of each .entry in the image
  std::map<std::string, std::unique_ptr<CUfunc_st>> functions;
};

namespace {

struct State {
  std::mutex mu;
  bool initialized = false;
  int init_result = CUDA_SUCCESS;
  int cc_major = 9;
  int cc_minor = 0;
  int current = 0;  // context id, 0 for none
  std::map<int, std::unique_ptr<CUctx_st>> contexts;
  std::map<CUmod_st*, std::unique_ptr<CUmod_st>> modules;
  int next_module = 1;
  CUdeviceptr next_ptr = 0x100000;
  std::map<CUdeviceptr, size_t> allocations;
  std::vector<std::string> events;
  std::string joined;  // what stitch_fake_loader_events returned last
};

State& S() {
  static State* s = new State;
  return *s;
}

CUctx_st* Context(int id) {
  auto& slot = S().contexts[id];
  if (!slot) {
    slot = std::make_unique<CUctx_st>();
    slot->id = id;
  }
  return slot.get();
}

std::string Num(uint64_t v) { return std::to_string(v); }

// Parameter count of each `.entry name(...)` in the image's text.
std::map<std::string, int> Entries(const std::string& text) {
  std::map<std::string, int> entries;
  size_t at = 0;
  while ((at = text.find(".entry ", at)) != std::string::npos) {
    at += 7;
    const size_t open = text.find('(', at);
    const size_t close = text.find(')', open);
    if (open == std::string::npos || close == std::string::npos) break;
    std::string name = text.substr(at, open - at);
    while (!name.empty() && name.back() == ' ') name.pop_back();
    int params = 0;
    for (size_t p = text.find(".param", open); p < close; p = text.find(".param", p + 1)) ++params;
    entries[name] = params;
    at = close;
  }
  return entries;
}

}  // namespace

extern "C" {

CUresult cuGetErrorName(CUresult error, const char** p) {
  switch (error) {
    case CUDA_SUCCESS:
      *p = "CUDA_SUCCESS";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_PTX:
      *p = "CUDA_ERROR_INVALID_PTX";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_CONTEXT:
      *p = "CUDA_ERROR_INVALID_CONTEXT";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE:
      *p = "CUDA_ERROR_NO_DEVICE";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_FOUND:
      *p = "CUDA_ERROR_NOT_FOUND";
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuInit(unsigned int) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().init_result != CUDA_SUCCESS) return static_cast<CUresult>(S().init_result);
  S().initialized = true;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* ctx) {
  std::lock_guard<std::mutex> lock(S().mu);
  *ctx = S().current == 0 ? nullptr : Context(S().current);
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().current == 0) return CUDA_ERROR_INVALID_CONTEXT;
  *device = 0;
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent(CUcontext ctx) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().events.push_back("push ctx=" + std::to_string(ctx->id));
  S().current = ctx->id;
  return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent(CUcontext* ctx) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (ctx) *ctx = S().current == 0 ? nullptr : Context(S().current);
  S().events.push_back("pop");
  S().current = 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) {
    S().events.push_back("cc");
    *v = S().cc_major;
  } else if (a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) {
    *v = S().cc_minor;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int n,
                            CUjit_option* options, void** values) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (!S().initialized || S().current == 0) return CUDA_ERROR_INVALID_CONTEXT;
  const char* text = static_cast<const char*>(image);
  const bool cubin = std::memcmp(text,
                                 "\x7f"
                                 "ELF",
                                 4) == 0;
  if (!cubin && std::strstr(text, "syntax error") != nullptr) {
    char* log = nullptr;
    size_t size = 0;
    for (unsigned int i = 0; i < n; ++i) {
      if (options[i] == CU_JIT_ERROR_LOG_BUFFER) log = static_cast<char*>(values[i]);
      if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
        size = reinterpret_cast<uintptr_t>(values[i]);
      }
    }
    const char kLog[] = "ptxas fatal: line 3: syntax error near 'bogus'";
    if (log != nullptr && size > 0) {
      std::strncpy(log, kLog, size - 1);
      log[size - 1] = '\0';
    }
    return CUDA_ERROR_INVALID_PTX;
  }
  auto m = std::make_unique<CUmod_st>();
  m->id = S().next_module++;
  m->entries = Entries(text);
  S().events.push_back("load ctx=" + std::to_string(S().current) +
                       " image=" + (cubin ? "cubin" : "ptx") + " module=" + Num(m->id));
  *module = m.get();
  S().modules.emplace(m.get(), std::move(m));
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (!S().modules.count(m)) return CUDA_ERROR_INVALID_VALUE;
  auto entry = m->entries.find(name);
  if (entry == m->entries.end()) return CUDA_ERROR_NOT_FOUND;
  auto& slot = m->functions[name];
  if (!slot) {
    slot = std::make_unique<CUfunc_st>();
    slot->name = name;
    slot->params = entry->second;
  }
  *f = slot.get();
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule m) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (!S().modules.count(m)) return CUDA_ERROR_INVALID_VALUE;
  S().events.push_back("unload module=" + Num(m->id) + " ctx=" + std::to_string(S().current));
  S().modules.erase(m);
  return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int value) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().events.push_back("attr fn=" + f->name + " attr=" + std::to_string(static_cast<int>(a)) +
                       " value=" + std::to_string(value));
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc(CUdeviceptr* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().current == 0) return CUDA_ERROR_INVALID_CONTEXT;
  *ptr = S().next_ptr;
  // Keep allocations 256-byte aligned and apart, as cuMemAlloc's are.
  S().next_ptr += (bytes + 255) / 256 * 256 + 256;
  S().allocations[*ptr] = bytes;
  S().events.push_back("alloc ptr=" + Num(*ptr) + " bytes=" + Num(bytes));
  return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr ptr) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (!S().allocations.erase(ptr)) return CUDA_ERROR_INVALID_VALUE;
  S().events.push_back("free ptr=" + Num(ptr));
  return CUDA_SUCCESS;
}

CUresult cuMemsetD8Async(CUdeviceptr ptr, unsigned char value, size_t bytes, CUstream stream) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().events.push_back("memset ptr=" + Num(ptr) + " value=" + std::to_string(value) + " bytes=" +
                       Num(bytes) + " stream=" + Num(reinterpret_cast<uintptr_t>(stream)));
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoDAsync(CUdeviceptr to, CUdeviceptr from, size_t bytes, CUstream stream) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().current == 0) return CUDA_ERROR_INVALID_CONTEXT;
  S().events.push_back("copy to=" + Num(to) + " from=" + Num(from) + " bytes=" + Num(bytes) +
                       " stream=" + Num(reinterpret_cast<uintptr_t>(stream)));
  return CUDA_SUCCESS;
}

static CUresult RecordLaunch(bool coop, CUfunction f, unsigned int gx, unsigned int gy,
                             unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
                             unsigned int shared, CUstream stream, void** args, size_t nargs) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().current == 0) return CUDA_ERROR_INVALID_CONTEXT;
  std::string line = "launch ctx=" + std::to_string(S().current) + " fn=" + f->name +
                     " coop=" + (coop ? "1" : "0") + " grid=" + Num(gx) + "," + Num(gy) + "," +
                     Num(gz) + " block=" + Num(bx) + "," + Num(by) + "," + Num(bz) +
                     " shared=" + Num(shared) +
                     " stream=" + Num(reinterpret_cast<uintptr_t>(stream)) + " args=";
  for (size_t i = 0; i < nargs; ++i) {
    if (i) line += ",";
    line += Num(*static_cast<CUdeviceptr*>(args[i]));
  }
  S().events.push_back(line);
  return CUDA_SUCCESS;
}

static size_t ArgCount(CUfunction f) { return static_cast<size_t>(f->params); }

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                        CUstream stream, void** args, void** extra) {
  return RecordLaunch(false, f, gx, gy, gz, bx, by, bz, shared, stream, args, ArgCount(f));
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz,
                                   unsigned int shared, CUstream stream, void** args) {
  return RecordLaunch(true, f, gx, gy, gz, bx, by, bz, shared, stream, args, ArgCount(f));
}

// Inspection and control for the tests.

// Returns every recorded event since the last reset, one per line.
__attribute__((visibility("default"))) const char* stitch_fake_loader_events() {
  std::lock_guard<std::mutex> lock(S().mu);
  S().joined.clear();
  for (const std::string& e : S().events) S().joined += e + "\n";
  return S().joined.c_str();
}

// Forgets the recorded events (allocations and modules stay live).
__attribute__((visibility("default"))) void stitch_fake_loader_reset() {
  std::lock_guard<std::mutex> lock(S().mu);
  S().events.clear();
}

// Sets the device's compute capability.
__attribute__((visibility("default"))) void stitch_fake_loader_set_cc(int major, int minor) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().cc_major = major;
  S().cc_minor = minor;
}

// Makes fake context `id` current (0: none).
__attribute__((visibility("default"))) void stitch_fake_loader_set_context(int id) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().current = id;
}

// Makes cuInit return `result` (0 for success), as a machine without a GPU would.
__attribute__((visibility("default"))) void stitch_fake_loader_set_init_result(int result) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().init_result = result;
}

// Returns how many allocations and modules are live.
__attribute__((visibility("default"))) int stitch_fake_loader_live_allocations() {
  std::lock_guard<std::mutex> lock(S().mu);
  return static_cast<int>(S().allocations.size());
}
__attribute__((visibility("default"))) int stitch_fake_loader_live_modules() {
  std::lock_guard<std::mutex> lock(S().mu);
  return static_cast<int>(S().modules.size());
}

}  // extern "C"
