// A stand-in for libcuda.so.1 with the entry points gpu_bench uses, so its driver code runs in
// tests on machines without a GPU. Nothing executes: memory is address ranges only, kernels
// do nothing and events read a simulated device clock (each launch takes 2 us plus 1 ns per
// 64 threads, each memset 1 ns per 4 KiB), so timings are deterministic. What it checks, returning
// an error and printing "fake cuda: ..." on stderr when a check fails:
//   * every call after cuInit, with a current context where the driver needs one;
//   * copies and memsets stay inside one live allocation;
//   * modules are PTX (cubin is refused with CUDA_ERROR_NO_BINARY_FOR_GPU, as a GPU of another
//     architecture would), and a launch passes exactly as many arguments as the PTX entry
//     declares parameters, each pointing at a device pointer into a live allocation, but for
//     a shape-generic kernel's last one, its outer extent (codegen.h): an int64 by value,
//     taken as one where it is positive and below the first device address;
//   * launch dimensions are non-zero with at most 1024 threads per block;
//   * dynamic shared memory above 48 KiB has been allowed by cuFuncSetAttribute's
//     MAX_DYNAMIC_SHARED_SIZE_BYTES first, up to 227 KiB (an H100's opt-in limit);
//   * a cooperative launch (cuLaunchCooperativeKernel) has a grid that fits at once, by the
//     occupancy cuOccupancyMaxActiveBlocksPerMultiprocessor reports, or fails with
//     CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE as a real driver does.
// It records its last launches for tests that load it in-process: stitch_fake_cuda_log()
// returns one line per launch, oldest first,
//   "<entry point> <kernel> args=<n> last=<bytes of the last pointer's allocation>B[ zeroed]
//    [ extent=<outer extent>][ shared=<dynamic shared bytes>]"
// where "zeroed" says a cuMemsetD8 of 0 covered that whole allocation since it was made.
// Environment: STITCH_FAKE_CUDA_DEVICES sets the device count (default 1).
//
// It also stands in for CUPTI's activity API (kernel_activity.h), as the same library: while
// kernel activity is enabled each launch leaves a kernel record. On the simulated clock every
// launch first waits 1 us for the host (the gap CUDA events count and kernel records do not),
// then runs 2 us plus 1 ns per 64 threads. STITCH_FAKE_CUPTI_DROP=N makes CUPTI lose the N-th
// record of each recording (from 1), as a full buffer would.
#include <cuda.h>
#if __has_include(<cupti.h>)
#include <cupti.h>
#define STITCH_FAKE_CUPTI 1
#endif

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

struct CUctx_st {};
struct CUfunc_st {
  std::string name;
  int params = 0;
  int max_dynamic_shared = 48 * 1024;
};
struct CUmod_st {
  std::map<std::string, std::unique_ptr<CUfunc_st>> functions;
};
struct CUevent_st {
  uint64_t at_ns = 0;
  bool recorded = false;
};

namespace {

struct Allocation {
  size_t bytes = 0;
  bool zeroed = false;  // a memset of 0 has covered all of it, and nothing else was set since
};

constexpr int kSms = 132;
constexpr size_t kLogLines = 256;
constexpr CUdeviceptr kFirstAddress = 0x10000000;

struct State {
  bool initialized = false;
  bool context_current = false;
  CUctx_st context;
  CUdeviceptr next = kFirstAddress;
  uint64_t clock_ns = 0;                          // the simulated device clock
  std::map<CUdeviceptr, Allocation> allocations;  // by base
  std::set<CUmod_st*> modules;
  std::deque<std::string> launches;  // the last kLogLines launches
  std::string log;                   // what stitch_fake_cuda_log returned last
  // CUPTI: whether kernel activity is recorded, and the kernels since it was enabled.
  bool kernel_activity = false;
  std::vector<std::pair<uint64_t, uint64_t>> kernel_records;  // start, end
  size_t dropped = 0;
};

State& S() {
  static State* s = new State;
  return *s;
}

CUresult Fail(CUresult r, const std::string& why) {
  std::fprintf(stderr, "fake cuda: %s\n", why.c_str());
  return r;
}

int DeviceCount() {
  const char* env = std::getenv("STITCH_FAKE_CUDA_DEVICES");
  return env ? std::atoi(env) : 1;
}

// Whether [ptr, ptr + bytes) lies inside one live allocation.
bool InAllocation(CUdeviceptr ptr, size_t bytes) {
  auto& a = S().allocations;
  auto it = a.upper_bound(ptr);
  if (it == a.begin()) return false;
  --it;
  const size_t size = std::max<size_t>(it->second.bytes, 1);
  return ptr >= it->first && ptr + bytes <= it->first + size;
}

// The live allocation holding `ptr`, or null.
std::pair<const CUdeviceptr, Allocation>* AllocationAt(CUdeviceptr ptr) {
  auto& a = S().allocations;
  auto it = a.upper_bound(ptr);
  if (it == a.begin()) return nullptr;
  --it;
  return ptr < it->first + std::max<size_t>(it->second.bytes, 1) ? &*it : nullptr;
}

int DropAt() {
  const char* env = std::getenv("STITCH_FAKE_CUPTI_DROP");
  return env ? std::atoi(env) : 0;
}

void RecordKernel(uint64_t start, uint64_t end) {
  if (static_cast<int>(S().kernel_records.size() + S().dropped) + 1 == DropAt()) {
    ++S().dropped;
    return;
  }
  S().kernel_records.emplace_back(start, end);
}

// Blocks of `block_size` threads that fit on one SM (2048 threads per SM).
int BlocksPerSm(int block_size) { return block_size > 0 ? 2048 / block_size : 0; }

CUresult Ready(bool need_context) {
  if (!S().initialized) return Fail(CUDA_ERROR_NOT_INITIALIZED, "called before cuInit");
  if (need_context && !S().context_current) {
    return Fail(CUDA_ERROR_INVALID_CONTEXT, "no current context");
  }
  return CUDA_SUCCESS;
}

// Parameter count of each `.entry name(...)` in PTX text.
std::map<std::string, int> PtxEntries(const std::string& ptx) {
  std::map<std::string, int> entries;
  size_t at = 0;
  while ((at = ptx.find(".entry ", at)) != std::string::npos) {
    at += 7;
    const size_t open = ptx.find('(', at);
    const size_t close = ptx.find(')', open);
    if (open == std::string::npos || close == std::string::npos) break;
    std::string name = ptx.substr(at, open - at);
    while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
    int params = 0;
    for (size_t p = ptx.find(".param", open); p < close; p = ptx.find(".param", p + 1)) ++params;
    entries[name] = params;
    at = close;
  }
  return entries;
}

}  // namespace

CUresult cuGetErrorName(CUresult error, const char** p) {
  switch (error) {
    case CUDA_SUCCESS:
      *p = "CUDA_SUCCESS";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE:
      *p = "CUDA_ERROR_INVALID_VALUE";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
      *p = "CUDA_ERROR_NO_BINARY_FOR_GPU";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_FOUND:
      *p = "CUDA_ERROR_NOT_FOUND";
      return CUDA_SUCCESS;
    default:
      *p = "CUDA_ERROR_FAKE";
      return CUDA_SUCCESS;
  }
}

CUresult cuGetErrorString(CUresult error, const char** p) {
  *p = "reported by the fake driver";
  return CUDA_SUCCESS;
}

CUresult cuInit(unsigned int flags) {
  if (flags != 0) return Fail(CUDA_ERROR_INVALID_VALUE, "cuInit flags must be 0");
  S().initialized = true;
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* v) {
  *v = 12080;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  if (CUresult r = Ready(false)) return r;
  *count = DeviceCount();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (CUresult r = Ready(false)) return r;
  if (ordinal < 0 || ordinal >= DeviceCount()) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice) {
  std::snprintf(name, static_cast<size_t>(len), "NVIDIA Fake H100 (host)");
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *v = 9;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *v = kSms;
      break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      *v = 50 << 20;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      *v = 2619000;  // kHz
      break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      *v = 5120;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t* bytes, CUdevice) {
  *bytes = size_t{80} << 30;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice) {
  if (CUresult r = Ready(false)) return r;
  *ctx = &S().context;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }

CUresult cuDevicePrimaryCtxReset(CUdevice) {
  S().context_current = false;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (ctx != &S().context) return Fail(CUDA_ERROR_INVALID_CONTEXT, "unknown context");
  S().context_current = true;
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize() { return Ready(true); }

CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int, CUjit_option*,
                            void**) {
  if (CUresult r = Ready(true)) return r;
  const char* text = static_cast<const char*>(image);
  if (std::memcmp(text,
                  "\x7f"
                  "ELF",
                  4) == 0)
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
  const std::map<std::string, int> entries = PtxEntries(text);
  if (entries.empty()) return Fail(CUDA_ERROR_INVALID_PTX, "no .entry in the PTX");
  auto m = std::make_unique<CUmod_st>();
  for (const auto& [name, params] : entries) {
    auto f = std::make_unique<CUfunc_st>();
    f->name = name;
    f->params = params;
    m->functions[name] = std::move(f);
  }
  *module = m.release();
  S().modules.insert(*module);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  if (!S().modules.count(m)) return Fail(CUDA_ERROR_INVALID_HANDLE, "unknown module");
  auto it = m->functions.find(name);
  if (it == m->functions.end()) return Fail(CUDA_ERROR_NOT_FOUND, std::string("no entry ") + name);
  *f = it->second.get();
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule m) {
  if (!S().modules.erase(m)) return Fail(CUDA_ERROR_INVALID_HANDLE, "unloading unknown module");
  delete m;
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc(CUdeviceptr* ptr, size_t bytes) {
  if (CUresult r = Ready(true)) return r;
  if (bytes == 0) return Fail(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc of 0 bytes");
  *ptr = S().next;
  S().allocations[*ptr] = Allocation{bytes, false};
  S().next += (bytes + 0xffff) & ~CUdeviceptr{0xffff};
  return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr ptr) {
  if (!S().allocations.erase(ptr)) return Fail(CUDA_ERROR_INVALID_VALUE, "freeing unknown memory");
  return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD(CUdeviceptr dst, const void*, size_t bytes) {
  if (CUresult r = Ready(true)) return r;
  if (!InAllocation(dst, bytes)) return Fail(CUDA_ERROR_INVALID_VALUE, "copy outside memory");
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t bytes) {
  if (CUresult r = Ready(true)) return r;
  if (!InAllocation(src, bytes)) return Fail(CUDA_ERROR_INVALID_VALUE, "copy outside memory");
  std::memset(dst, 0, bytes);
  return CUDA_SUCCESS;
}

CUresult cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t bytes) {
  if (CUresult r = Ready(true)) return r;
  if (!InAllocation(dst, bytes)) return Fail(CUDA_ERROR_INVALID_VALUE, "memset outside memory");
  auto* a = AllocationAt(dst);
  if (value != 0) {
    a->second.zeroed = false;
  } else if (dst == a->first && bytes >= a->second.bytes) {
    a->second.zeroed = true;
  }
  S().clock_ns += bytes >> 12;
  return CUDA_SUCCESS;
}

namespace {

// The checks both launch entry points make; records the launch as `entry`.
CUresult CheckLaunch(const char* entry, CUfunction f, unsigned int gx, unsigned int gy,
                     unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
                     unsigned int shared, void** params) {
  if (CUresult r = Ready(true)) return r;
  if (gx * gy * gz == 0 || bx * by * bz == 0 || bx * by * bz > 1024) {
    return Fail(CUDA_ERROR_INVALID_VALUE, "bad launch dimensions for " + f->name);
  }
  if (shared > static_cast<unsigned int>(f->max_dynamic_shared)) {
    return Fail(CUDA_ERROR_INVALID_VALUE, f->name + ": " + std::to_string(shared) +
                                              " bytes of dynamic shared memory, above its limit " +
                                              std::to_string(f->max_dynamic_shared));
  }
  if (f->params > 0 && params == nullptr) return Fail(CUDA_ERROR_INVALID_VALUE, "no params");
  // The ABI: every parameter is a pointer, so every slot holds a device pointer into a live
  // allocation, but a last one that holds the outer extent, 8 bytes by value. (Surplus slots
  // past the declared count cannot be seen from here.)
  int pointers = f->params;
  const CUdeviceptr last_value =
      f->params > 0 ? *static_cast<const CUdeviceptr*>(params[f->params - 1]) : 0;
  const bool extent = f->params > 1 && last_value > 0 && last_value < kFirstAddress;
  if (extent) --pointers;
  for (int i = 0; i < pointers; ++i) {
    const CUdeviceptr p = *static_cast<const CUdeviceptr*>(params[i]);
    if (!InAllocation(p, 1)) {
      return Fail(CUDA_ERROR_INVALID_VALUE,
                  f->name + ": argument " + std::to_string(i) + " is not device memory");
    }
  }
  std::string line = std::string(entry) + " " + f->name + " args=" + std::to_string(f->params);
  if (pointers > 0) {
    const auto* last = AllocationAt(*static_cast<const CUdeviceptr*>(params[pointers - 1]));
    line += " last=" + std::to_string(last->second.bytes) + "B";
    if (last->second.zeroed) line += " zeroed";
  }
  if (extent) line += " extent=" + std::to_string(last_value);
  if (shared > 0) line += " shared=" + std::to_string(shared);
  S().launches.push_back(std::move(line));
  if (S().launches.size() > kLogLines) S().launches.pop_front();
  S().clock_ns += 1000;  // the host's launch
  const uint64_t start = S().clock_ns;
  S().clock_ns += 2000 + uint64_t{gx} * gy * gz * bx * by * bz / 64;
  if (S().kernel_activity) RecordKernel(start, S().clock_ns);
  return CUDA_SUCCESS;
}

}  // namespace

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                        CUstream stream, void** params, void** extra) {
  if (extra != nullptr) return Fail(CUDA_ERROR_INVALID_VALUE, "extra is not used");
  return CheckLaunch("cuLaunchKernel", f, gx, gy, gz, bx, by, bz, shared, params);
}

CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attribute, int value) {
  if (CUresult r = Ready(true)) return r;
  if (attribute != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    return Fail(CUDA_ERROR_INVALID_VALUE, "unexpected function attribute");
  }
  if (value < 0 || value > 227 * 1024) {
    return Fail(CUDA_ERROR_INVALID_VALUE,
                f->name + ": dynamic shared memory limit " + std::to_string(value));
  }
  f->max_dynamic_shared = value;
  return CUDA_SUCCESS;
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz,
                                   unsigned int shared, CUstream stream, void** params) {
  const uint64_t blocks = uint64_t{gx} * gy * gz;
  const uint64_t resident = uint64_t(BlocksPerSm(static_cast<int>(bx * by * bz))) * kSms;
  if (blocks > resident) {
    return Fail(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
                f->name + ": " + std::to_string(blocks) + " blocks, only " +
                    std::to_string(resident) + " fit at once");
  }
  return CheckLaunch("cuLaunchCooperativeKernel", f, gx, gy, gz, bx, by, bz, shared, params);
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction, int block_size,
                                                     size_t) {
  *blocks = BlocksPerSm(block_size);
  return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent* e, unsigned int) {
  if (CUresult r = Ready(true)) return r;
  *e = new CUevent_st;
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent e, CUstream) {
  e->at_ns = S().clock_ns;
  e->recorded = true;
  return CUDA_SUCCESS;
}

CUresult cuEventSynchronize(CUevent e) {
  return e->recorded ? CUDA_SUCCESS : Fail(CUDA_ERROR_INVALID_HANDLE, "event never recorded");
}

CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  if (!start->recorded || !end->recorded) return Fail(CUDA_ERROR_INVALID_HANDLE, "unrecorded");
  *ms = static_cast<float>(static_cast<double>(end->at_ns - start->at_ns) / 1e6);
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy(CUevent e) {
  delete e;
  return CUDA_SUCCESS;
}

// Not a driver entry point: the recent launches (see the top of this file).
extern "C" __attribute__((visibility("default"))) const char* stitch_fake_cuda_log() {
  S().log.clear();
  for (const std::string& line : S().launches) S().log += line + "\n";
  return S().log.c_str();
}

#ifdef STITCH_FAKE_CUPTI
// CUPTI's activity API, as far as kernel_activity.cc uses it. Buffers hold whole
// CUpti_ActivityKernel10 records back to back.
namespace {
CUpti_BuffersCallbackRequestFunc buffer_requested = nullptr;
CUpti_BuffersCallbackCompleteFunc buffer_completed = nullptr;
}  // namespace

CUptiResult cuptiGetResultString(CUptiResult result, const char** text) {
  *text = result == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "CUPTI_ERROR_FAKE";
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                           CUpti_BuffersCallbackCompleteFunc completed) {
  if (requested == nullptr || completed == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  buffer_requested = requested;
  buffer_completed = completed;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  if (kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) return CUPTI_ERROR_NOT_COMPATIBLE;
  if (buffer_requested == nullptr) {
    std::fprintf(stderr, "fake cuda: cuptiActivityEnable before the callbacks\n");
    return CUPTI_ERROR_INVALID_OPERATION;
  }
  S().kernel_activity = true;
  S().kernel_records.clear();
  S().dropped = 0;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) return CUPTI_ERROR_NOT_COMPATIBLE;
  S().kernel_activity = false;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushAll(uint32_t) {
  while (!S().kernel_records.empty()) {
    uint8_t* buffer = nullptr;
    size_t size = 0, max_records = 0;
    buffer_requested(&buffer, &size, &max_records);
    const size_t fit = size / sizeof(CUpti_ActivityKernel10);
    if (buffer == nullptr || fit == 0) return CUPTI_ERROR_OUT_OF_MEMORY;
    const size_t n = std::min(fit, S().kernel_records.size());
    for (size_t i = 0; i < n; ++i) {
      CUpti_ActivityKernel10 record;
      std::memset(&record, 0, sizeof(record));
      record.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
      record.start = S().kernel_records[i].first;
      record.end = S().kernel_records[i].second;
      std::memcpy(buffer + i * sizeof(record), &record, sizeof(record));
    }
    S().kernel_records.erase(S().kernel_records.begin(),
                             S().kernel_records.begin() + static_cast<std::ptrdiff_t>(n));
    buffer_completed(nullptr, 0, buffer, size, n * sizeof(CUpti_ActivityKernel10));
  }
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  const size_t at = *record == nullptr
                        ? 0
                        : static_cast<size_t>(reinterpret_cast<uint8_t*>(*record) - buffer) +
                              sizeof(CUpti_ActivityKernel10);
  if (at + sizeof(CUpti_ActivityKernel10) > valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(buffer + at);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  *dropped = S().dropped;
  return CUPTI_SUCCESS;
}
#endif  // STITCH_FAKE_CUPTI
