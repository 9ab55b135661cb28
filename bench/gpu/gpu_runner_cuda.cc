// Gpu on the CUDA driver API. cuda.h supplies the types and prototypes only: every entry
// point is looked up with dlsym in the library OpenGpu is given, under its versioned ABI
// name (cuMemAlloc_v2, ...), so nothing here links against libcuda.
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <utility>

#include "gpu/dynamic_symbols.h"
#include "gpu/gpu_runner.h"
#include "gpu/kernel_activity.h"
#include "stitch/ir/aliasing.h"
#include "stitch/plan/gpu_device.h"

namespace stitch::gpu {
namespace {

// The shared memory a block may use, static and dynamic together, before the function opts
// in to more (CUDA's programming guide).
constexpr uint64_t kDefaultSharedLimit = 48 * 1024;

// The driver entry points used here; decltype of the cuda.h prototypes gives their types.
struct DriverApi {
  decltype(&::cuGetErrorName) GetErrorName = nullptr;
  decltype(&::cuGetErrorString) GetErrorString = nullptr;
  decltype(&::cuInit) Init = nullptr;
  decltype(&::cuDriverGetVersion) DriverGetVersion = nullptr;
  decltype(&::cuDeviceGetCount) DeviceGetCount = nullptr;
  decltype(&::cuDeviceGet) DeviceGet = nullptr;
  decltype(&::cuDeviceGetName) DeviceGetName = nullptr;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute = nullptr;
  decltype(&::cuDeviceTotalMem) DeviceTotalMem = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) PrimaryCtxRetain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) PrimaryCtxRelease = nullptr;
  decltype(&::cuDevicePrimaryCtxReset) PrimaryCtxReset = nullptr;
  decltype(&::cuCtxSetCurrent) CtxSetCurrent = nullptr;
  decltype(&::cuCtxSynchronize) CtxSynchronize = nullptr;
  decltype(&::cuModuleLoadDataEx) ModuleLoadDataEx = nullptr;
  decltype(&::cuModuleGetFunction) ModuleGetFunction = nullptr;
  decltype(&::cuModuleUnload) ModuleUnload = nullptr;
  decltype(&::cuMemAlloc) MemAlloc = nullptr;
  decltype(&::cuMemFree) MemFree = nullptr;
  decltype(&::cuMemcpyHtoD) MemcpyHtoD = nullptr;
  decltype(&::cuMemcpyDtoH) MemcpyDtoH = nullptr;
  decltype(&::cuMemsetD8) MemsetD8 = nullptr;
  decltype(&::cuLaunchKernel) LaunchKernel = nullptr;
  decltype(&::cuFuncSetAttribute) FuncSetAttribute = nullptr;
  // Optional: only kernels with a workspace need it (null when the driver lacks it).
  decltype(&::cuLaunchCooperativeKernel) LaunchCooperativeKernel = nullptr;
  decltype(&::cuOccupancyMaxActiveBlocksPerMultiprocessor) OccupancyMaxActiveBlocks = nullptr;
  decltype(&::cuEventCreate) EventCreate = nullptr;
  decltype(&::cuEventRecord) EventRecord = nullptr;
  decltype(&::cuEventSynchronize) EventSynchronize = nullptr;
  decltype(&::cuEventElapsedTime) EventElapsedTime = nullptr;
  decltype(&::cuEventDestroy) EventDestroy = nullptr;
};

// Resolves every entry point; returns the first missing symbol's name, or empty.
std::string ResolveAll(void* lib, DriverApi& api) {
  struct Entry {
    const char* symbol;
    bool found;
  };
  // cuEventElapsedTime_v2 is new in 12.8; older drivers have only the first version.
  const bool elapsed = ResolveSymbol(lib, "cuEventElapsedTime_v2", api.EventElapsedTime) ||
                       ResolveSymbol(lib, "cuEventElapsedTime", api.EventElapsedTime);
  // A driver without cooperative launches still runs every kernel without a workspace; the
  // others fail one by one (CudaGpu::Load).
  (void)ResolveSymbol(lib, "cuLaunchCooperativeKernel", api.LaunchCooperativeKernel);
  const Entry entries[] = {
      {"cuGetErrorName", ResolveSymbol(lib, "cuGetErrorName", api.GetErrorName)},
      {"cuGetErrorString", ResolveSymbol(lib, "cuGetErrorString", api.GetErrorString)},
      {"cuInit", ResolveSymbol(lib, "cuInit", api.Init)},
      {"cuDriverGetVersion", ResolveSymbol(lib, "cuDriverGetVersion", api.DriverGetVersion)},
      {"cuDeviceGetCount", ResolveSymbol(lib, "cuDeviceGetCount", api.DeviceGetCount)},
      {"cuDeviceGet", ResolveSymbol(lib, "cuDeviceGet", api.DeviceGet)},
      {"cuDeviceGetName", ResolveSymbol(lib, "cuDeviceGetName", api.DeviceGetName)},
      {"cuDeviceGetAttribute", ResolveSymbol(lib, "cuDeviceGetAttribute", api.DeviceGetAttribute)},
      {"cuDeviceTotalMem_v2", ResolveSymbol(lib, "cuDeviceTotalMem_v2", api.DeviceTotalMem)},
      {"cuDevicePrimaryCtxRetain",
       ResolveSymbol(lib, "cuDevicePrimaryCtxRetain", api.PrimaryCtxRetain)},
      {"cuDevicePrimaryCtxRelease_v2",
       ResolveSymbol(lib, "cuDevicePrimaryCtxRelease_v2", api.PrimaryCtxRelease)},
      {"cuDevicePrimaryCtxReset_v2",
       ResolveSymbol(lib, "cuDevicePrimaryCtxReset_v2", api.PrimaryCtxReset)},
      {"cuCtxSetCurrent", ResolveSymbol(lib, "cuCtxSetCurrent", api.CtxSetCurrent)},
      {"cuCtxSynchronize", ResolveSymbol(lib, "cuCtxSynchronize", api.CtxSynchronize)},
      {"cuModuleLoadDataEx", ResolveSymbol(lib, "cuModuleLoadDataEx", api.ModuleLoadDataEx)},
      {"cuModuleGetFunction", ResolveSymbol(lib, "cuModuleGetFunction", api.ModuleGetFunction)},
      {"cuModuleUnload", ResolveSymbol(lib, "cuModuleUnload", api.ModuleUnload)},
      {"cuMemAlloc_v2", ResolveSymbol(lib, "cuMemAlloc_v2", api.MemAlloc)},
      {"cuMemFree_v2", ResolveSymbol(lib, "cuMemFree_v2", api.MemFree)},
      {"cuMemcpyHtoD_v2", ResolveSymbol(lib, "cuMemcpyHtoD_v2", api.MemcpyHtoD)},
      {"cuMemcpyDtoH_v2", ResolveSymbol(lib, "cuMemcpyDtoH_v2", api.MemcpyDtoH)},
      {"cuMemsetD8_v2", ResolveSymbol(lib, "cuMemsetD8_v2", api.MemsetD8)},
      {"cuLaunchKernel", ResolveSymbol(lib, "cuLaunchKernel", api.LaunchKernel)},
      {"cuFuncSetAttribute", ResolveSymbol(lib, "cuFuncSetAttribute", api.FuncSetAttribute)},
      {"cuOccupancyMaxActiveBlocksPerMultiprocessor",
       ResolveSymbol(lib, "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                     api.OccupancyMaxActiveBlocks)},
      {"cuEventCreate", ResolveSymbol(lib, "cuEventCreate", api.EventCreate)},
      {"cuEventRecord", ResolveSymbol(lib, "cuEventRecord", api.EventRecord)},
      {"cuEventSynchronize", ResolveSymbol(lib, "cuEventSynchronize", api.EventSynchronize)},
      {"cuEventElapsedTime", elapsed},
      {"cuEventDestroy_v2", ResolveSymbol(lib, "cuEventDestroy_v2", api.EventDestroy)},
  };
  for (const Entry& e : entries) {
    if (!e.found) return e.symbol;
  }
  return "";
}

// "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)", or the number when the
// driver cannot name the code (a stub library names nothing).
std::string ErrorText(const DriverApi& api, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.GetErrorName == nullptr || api.GetErrorName(r, &name) != CUDA_SUCCESS || !name) {
    // The codes cuInit gives where there is no working driver.
    switch (r) {
      case CUDA_ERROR_STUB_LIBRARY:
        return "CUDA_ERROR_STUB_LIBRARY";
      case CUDA_ERROR_NO_DEVICE:
        return "CUDA_ERROR_NO_DEVICE";
      case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
        return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
      default:
        return "CUresult " + std::to_string(static_cast<int>(r));
    }
  }
  std::string out = name;
  if (api.GetErrorString && api.GetErrorString(r, &text) == CUDA_SUCCESS && text) {
    out += std::string(" (") + text + ")";
  }
  return out;
}

// Checks `outer_extent` against the compile before anything is allocated: a shape-generic
// compile needs one inside its bucket and `g` at it, since the buffers are sized from `g`
// and the kernels index up to the extent; an exact compile takes none.
Status CheckOuterExtent(const Graph& g, const CompileResult& compiled, int64_t outer_extent) {
  if (!compiled.shape_generic()) {
    if (outer_extent == 0) return Status::Ok();
    return InvalidArgument("outer extent " + std::to_string(outer_extent) +
                           " given for an exact compile, whose kernels take none");
  }
  const Bucket& b = compiled.served;
  if (outer_extent < b.lo || outer_extent > b.hi) {
    return InvalidArgument((outer_extent == 0
                                ? std::string("no outer extent given")
                                : "outer extent " + std::to_string(outer_extent) + " is outside") +
                           " for a bucket compile serving extents " + std::to_string(b.lo) + ".." +
                           std::to_string(b.hi));
  }
  const std::vector<int64_t>& factor = compiled.shape_class.factor;
  if (g.nodes.size() != factor.size()) {
    return InvalidArgument("the graph is not the compiled graph at the run's extent");
  }
  for (size_t i = 0; i < factor.size(); ++i) {
    if (factor[i] > 0 && g.nodes[i].shape.dims[0] != factor[i] * outer_extent) {
      return InvalidArgument("node " + std::to_string(i) + " is " + g.nodes[i].shape.ToString() +
                             ", not at outer extent " + std::to_string(outer_extent));
    }
  }
  return Status::Ok();
}

struct Spread {
  double median = 0, min = 0, max = 0;
};

// The median and range of timed runs; `us` is not empty.
Spread SpreadOf(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  const size_t n = us.size();
  return {n % 2 ? us[n / 2] : (us[n / 2 - 1] + us[n / 2]) / 2, us.front(), us.back()};
}

// A device allocation, freed on destruction (errors on a broken context are ignored).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DriverApi* api, CUdeviceptr ptr, size_t bytes)
      : api_(api), ptr_(ptr), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(api_, o.api_);
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != 0) (void)api_->MemFree(ptr_);
  }
  CUdeviceptr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  const DriverApi* api_ = nullptr;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

// The modules of one plan and the launch of each kernel, with its arguments bound.
struct LoadedPlan {
  struct Launch {
    std::string name;
    CUfunction function = nullptr;
    LaunchDims dims;
    uint32_t dynamic_shared_bytes = 0;  // CompiledKernel::dynamic_shared_bytes
    // A kernel with grid barriers (CompiledKernel::cooperative): cuLaunchCooperativeKernel,
    // which refuses a grid that cannot be resident at once instead of hanging.
    bool cooperative = false;
    DeviceBuffer workspace;             // CompiledKernel::workspace_bytes, zero-filled once
    std::vector<CUdeviceptr> pointers;  // in param_nodes order, then the workspace
    int64_t outer_extent = 0;           // the last argument where the kernel takes it
    std::vector<void*> args;            // &pointers[i] (and &outer_extent), for cuLaunchKernel
  };
  const DriverApi* api = nullptr;
  std::vector<CUmodule> modules;
  std::vector<Launch> launches;
  std::string loaded_from;

  LoadedPlan() = default;
  LoadedPlan(const LoadedPlan&) = delete;
  LoadedPlan& operator=(const LoadedPlan&) = delete;
  ~LoadedPlan() {
    for (CUmodule m : modules) (void)api->ModuleUnload(m);
  }
};

class CudaGpu final : public Gpu {
 public:
  CudaGpu(void* library, const DriverApi& api) : library_(library), api_(api) {}
  ~CudaGpu() override {
    flush_ = DeviceBuffer();
    if (context_ != nullptr) (void)api_.PrimaryCtxRelease(device_);
    // The library stays loaded: unloading a driver that has run kernels is not worth the
    // risk at exit.
    (void)library_;
  }

  Status Open(int ordinal);
  // Kernel times come from `activity` when it is set; `how` says where they come from, or why
  // there are none.
  void SetKernelActivity(std::unique_ptr<KernelActivity> activity, std::string how) {
    activity_ = std::move(activity);
    info_.kernel_timing = std::move(how);
  }
  const DeviceInfo& info() const override { return info_; }
  StatusOr<PlanTiming> TimePlan(const Graph& g, const CompileResult& compiled,
                                const TimingOptions& options, int64_t outer_extent) override;
  StatusOr<std::vector<Tensor>> RunPlan(const Graph& g, const CompileResult& compiled,
                                        const std::vector<Tensor>& params,
                                        int64_t outer_extent) override;
  StatusOr<std::vector<std::vector<uint8_t>>> RunPlanOnBytes(
      const Graph& g, const CompileResult& compiled,
      const std::vector<std::vector<uint8_t>>& params, int64_t outer_extent) override;

 private:
  using Buffers = std::map<int, DeviceBuffer>;

  Status Check(CUresult r, const std::string& what) const {
    if (r == CUDA_SUCCESS) return Status::Ok();
    return Internal(what + ": " + ErrorText(api_, r));
  }
  StatusOr<DeviceBuffer> Allocate(size_t bytes);
  Status Load(const CompileResult& compiled, LoadedPlan& plan);
  // A kernel with grid-wide barriers hangs unless its whole grid is resident at once; the
  // compiler sized it for its device table, which may have more SMs than this GPU.
  // Returns FAILED_PRECONDITION naming the kernel when the grid does not fit.
  Status CheckCoResident(const CompiledKernel& k, CUfunction f);
  // Allocates a buffer for every parameter of `g` and every node a kernel takes.
  Status AllocateBuffers(const Graph& g, const CompileResult& compiled, Buffers& buffers);
  // Sets every launch's arguments; allocates and zero-fills each kernel's workspace, which
  // then serves all of that kernel's launches of the plan (they run one at a time), and
  // passes `outer_extent` to the kernels that take it.
  Status Bind(const CompileResult& compiled, Buffers& buffers, int64_t outer_extent,
              LoadedPlan& plan);
  Status FillRandom(const DeviceBuffer& buffer, const Shape& shape, std::mt19937_64& rng);
  Status Launch(const LoadedPlan& plan);
  Status FlushL2(int round);
  // Queues `repeats` runs of the plan, each after an L2 flush where asked, between CUDA events.
  Status QueueTimedRuns(const LoadedPlan& plan, const TimingOptions& options,
                        std::vector<CUevent>& events);
  // The kernel figures of `timing` from the recording of `runs` runs of `plan`.
  void AddKernelTime(const LoadedPlan& plan, int runs, PlanTiming& timing);
  StatusOr<PlanTiming> Time(const Graph& g, const CompileResult& compiled,
                            const TimingOptions& options, int64_t outer_extent);
  // Runs the plan once on parameters in device storage bytes; returns each output's bytes.
  StatusOr<std::vector<std::vector<uint8_t>>> Run(const Graph& g, const CompileResult& compiled,
                                                  const std::vector<std::vector<uint8_t>>& params,
                                                  int64_t outer_extent);
  // After a failure: a kernel fault leaves the context unusable, so reset it then.
  void Recover();

  void* library_;
  DriverApi api_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  DeviceInfo info_;
  DeviceBuffer flush_;
  std::unique_ptr<KernelActivity> activity_;
};

Status CudaGpu::Open(int ordinal) {
  int count = 0;
  STITCH_RETURN_IF_ERROR(Check(api_.DeviceGetCount(&count), "cuDeviceGetCount"));
  if (count == 0) return Unavailable("the CUDA driver reports no GPU");
  if (ordinal < 0 || ordinal >= count) {
    return Unavailable("device " + std::to_string(ordinal) + " requested, the CUDA driver sees " +
                       std::to_string(count));
  }
  STITCH_RETURN_IF_ERROR(Check(api_.DeviceGet(&device_, ordinal), "cuDeviceGet"));
  info_.ordinal = ordinal;
  char name[256] = {};
  STITCH_RETURN_IF_ERROR(Check(api_.DeviceGetName(name, sizeof(name) - 1, device_), "name"));
  info_.name = name;
  auto attribute = [&](CUdevice_attribute a) {
    int v = 0;
    return api_.DeviceGetAttribute(&v, a, device_) == CUDA_SUCCESS ? v : 0;
  };
  info_.cc_major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  info_.cc_minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info_.sms = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  info_.l2_bytes = attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  size_t total = 0;
  if (api_.DeviceTotalMem(&total, device_) == CUDA_SUCCESS) {
    info_.memory_bytes = static_cast<int64_t>(total);
  }
  (void)api_.DriverGetVersion(&info_.driver_version);
  // DDR: two transfers per memory clock over the whole bus.
  const double clock_khz = attribute(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
  const double bus_bits = attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  if (clock_khz > 0 && bus_bits > 0) {
    info_.peak_bytes_per_second = 2.0 * clock_khz * 1e3 * bus_bits / 8.0;
    info_.peak_source = "memory clock x bus width";
  } else {
    for (const GpuDevice& d : KnownDevices()) {
      if ((" " + info_.name + " ").find(" " + d.name + " ") != std::string::npos) {
        info_.peak_bytes_per_second = d.hbm_bytes_per_second;
        info_.peak_source = "device table: " + d.name;
        break;
      }
    }
  }
  STITCH_RETURN_IF_ERROR(
      Check(api_.PrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain"));
  return Check(api_.CtxSetCurrent(context_), "cuCtxSetCurrent");
}

StatusOr<DeviceBuffer> CudaGpu::Allocate(size_t bytes) {
  CUdeviceptr ptr = 0;
  // A zero-size tensor still gets a valid, distinct address.
  STITCH_RETURN_IF_ERROR(Check(api_.MemAlloc(&ptr, std::max<size_t>(bytes, 1)),
                               "cuMemAlloc of " + std::to_string(bytes) + " bytes"));
  return DeviceBuffer(&api_, ptr, bytes);
}

Status CudaGpu::Load(const CompileResult& compiled, LoadedPlan& plan) {
  plan.api = &api_;
  bool any_cubin = false, any_ptx = false;
  for (size_t i = 0; i < compiled.kernels.size(); ++i) {
    const CompiledKernel& k = compiled.kernels[i];
    CUmodule module = nullptr;
    // A cubin built for another architecture fails to load (CUDA_ERROR_NO_BINARY_FOR_GPU);
    // the PTX then goes to the driver's JIT, which also covers newer GPUs than the
    // compiler's LLVM knows.
    bool loaded = !k.cubin.empty() && api_.ModuleLoadDataEx(&module, k.cubin.data(), 0, nullptr,
                                                            nullptr) == CUDA_SUCCESS;
    if (loaded) {
      any_cubin = true;
    } else {
      if (k.ptx.empty())
        return FailedPrecondition("kernel " + k.name + " has neither cubin nor PTX");
      char log[4096] = {};
      CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
      void* values[] = {log, reinterpret_cast<void*>(sizeof(log) - 1)};
      CUresult r = api_.ModuleLoadDataEx(&module, k.ptx.c_str(), 2, options, values);
      if (r != CUDA_SUCCESS) {
        std::string text = log;
        std::replace(text.begin(), text.end(), '\n', ' ');
        return Internal("loading the PTX of kernel " + k.name + ": " + ErrorText(api_, r) +
                        (text.empty() ? "" : ": " + text));
      }
      any_ptx = true;
    }
    plan.modules.push_back(module);
    LoadedPlan::Launch launch;
    launch.name = k.name;
    STITCH_RETURN_IF_ERROR(Check(api_.ModuleGetFunction(&launch.function, module, k.name.c_str()),
                                 "cuModuleGetFunction " + k.name));
    launch.dims = k.launch;
    launch.dynamic_shared_bytes = k.dynamic_shared_bytes;
    // Above 48 KiB of shared memory in all, a block's dynamic share needs the function's
    // limit raised first.
    if (k.dynamic_shared_bytes > 0 &&
        uint64_t{k.shared_bytes} + k.dynamic_shared_bytes > kDefaultSharedLimit) {
      STITCH_RETURN_IF_ERROR(Check(
          api_.FuncSetAttribute(launch.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                static_cast<int>(k.dynamic_shared_bytes)),
          "raising the dynamic shared memory limit of kernel " + k.name + " to " +
              std::to_string(k.dynamic_shared_bytes) + " bytes"));
    }
    if (k.cooperative) {
      if (api_.LaunchCooperativeKernel == nullptr) {
        return FailedPrecondition("kernel " + k.name +
                                  " has grid-wide barriers and needs a cooperative launch, but "
                                  "the CUDA driver lacks cuLaunchCooperativeKernel");
      }
      launch.cooperative = true;
    }
    if (k.cooperative ||
        (i < compiled.plan.kernels.size() && compiled.plan.kernels[i].mapping.grid_barriers > 0)) {
      STITCH_RETURN_IF_ERROR(CheckCoResident(k, launch.function));
    }
    plan.launches.push_back(std::move(launch));
  }
  plan.loaded_from = any_cubin && any_ptx ? "cubin+ptx" : any_ptx ? "ptx" : "cubin";
  return Status::Ok();
}

Status CudaGpu::CheckCoResident(const CompiledKernel& k, CUfunction f) {
  int per_sm = 0;
  STITCH_RETURN_IF_ERROR(
      Check(api_.OccupancyMaxActiveBlocks(&per_sm, f, static_cast<int>(k.launch.block_threads()),
                                          k.dynamic_shared_bytes),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor " + k.name));
  const uint64_t resident = static_cast<uint64_t>(per_sm) * static_cast<uint64_t>(info_.sms);
  if (k.launch.blocks() > resident) {
    return FailedPrecondition("kernel " + k.name + " has grid-wide barriers and " +
                              std::to_string(k.launch.blocks()) + " blocks, but only " +
                              std::to_string(resident) + " fit on this GPU at once (" +
                              std::to_string(per_sm) + " per SM x " + std::to_string(info_.sms) +
                              " SMs); not launched, it would hang");
  }
  return Status::Ok();
}

Status CudaGpu::AllocateBuffers(const Graph& g, const CompileResult& compiled, Buffers& buffers) {
  auto add = [&](int node) -> Status {
    if (buffers.count(node)) return Status::Ok();
    STITCH_ASSIGN_OR_RETURN(DeviceBuffer b,
                            Allocate(static_cast<size_t>(g.nodes[node].shape.bytes())));
    buffers.emplace(node, std::move(b));
    return Status::Ok();
  };
  for (int p : g.Parameters()) STITCH_RETURN_IF_ERROR(add(p));
  for (const CompiledKernel& k : compiled.kernels) {
    for (int node : k.param_nodes) STITCH_RETURN_IF_ERROR(add(node));
  }
  return Status::Ok();
}

Status CudaGpu::Bind(const CompileResult& compiled, Buffers& buffers, int64_t outer_extent,
                     LoadedPlan& plan) {
  for (size_t i = 0; i < compiled.kernels.size(); ++i) {
    const CompiledKernel& k = compiled.kernels[i];
    LoadedPlan::Launch& launch = plan.launches[i];
    for (int node : k.param_nodes) launch.pointers.push_back(buffers.at(node).ptr());
    if (k.workspace_bytes != 0) {
      // cuMemAlloc aligns to at least 256 bytes, as the workspace contract asks.
      STITCH_ASSIGN_OR_RETURN(launch.workspace, Allocate(static_cast<size_t>(k.workspace_bytes)));
      STITCH_RETURN_IF_ERROR(
          Check(api_.MemsetD8(launch.workspace.ptr(), 0, launch.workspace.bytes()),
                "cuMemsetD8 of the workspace of " + k.name));
      launch.pointers.push_back(launch.workspace.ptr());
    }
    for (CUdeviceptr& p : launch.pointers) launch.args.push_back(&p);
    if (k.takes_outer_extent) {
      launch.outer_extent = outer_extent;
      launch.args.push_back(&launch.outer_extent);
    }
  }
  return Status::Ok();
}

Status CudaGpu::FillRandom(const DeviceBuffer& buffer, const Shape& shape, std::mt19937_64& rng) {
  if (buffer.bytes() == 0) return Status::Ok();
  // Random values of the dtype (RandomTensor's ranges), in a block of at most 2^20 elements
  // repeated over the buffer: the contents do not change a memory-bound kernel's time, and
  // drawing billions of values on the host would.
  Shape block;
  block.dtype = shape.dtype;
  block.dims = {std::min<int64_t>(shape.elements(), int64_t{1} << 20)};
  const std::vector<uint8_t> bytes = RandomDeviceBytes(block, rng);
  for (size_t offset = 0; offset < buffer.bytes(); offset += bytes.size()) {
    const size_t n = std::min(bytes.size(), buffer.bytes() - offset);
    STITCH_RETURN_IF_ERROR(
        Check(api_.MemcpyHtoD(buffer.ptr() + offset, bytes.data(), n), "cuMemcpyHtoD"));
  }
  return Status::Ok();
}

Status CudaGpu::Launch(const LoadedPlan& plan) {
  for (const LoadedPlan::Launch& l : plan.launches) {
    const auto& grid = l.dims.grid;
    const auto& block = l.dims.block;
    void** args = const_cast<void**>(l.args.data());
    if (l.cooperative) {
      CUresult r =
          api_.LaunchCooperativeKernel(l.function, grid[0], grid[1], grid[2], block[0], block[1],
                                       block[2], l.dynamic_shared_bytes, nullptr, args);
      if (r != CUDA_SUCCESS) return Check(r, "cuLaunchCooperativeKernel " + l.name);
      continue;
    }
    CUresult r = api_.LaunchKernel(l.function, grid[0], grid[1], grid[2], block[0], block[1],
                                   block[2], l.dynamic_shared_bytes, nullptr, args, nullptr);
    if (r != CUDA_SUCCESS) return Check(r, "cuLaunchKernel " + l.name);
  }
  return Status::Ok();
}

Status CudaGpu::FlushL2(int round) {
  if (flush_.ptr() == 0) {
    // Twice the L2 is enough to evict it; the floor covers drivers that report no size.
    const size_t bytes = std::max<size_t>(2 * static_cast<size_t>(info_.l2_bytes), 64u << 20);
    STITCH_ASSIGN_OR_RETURN(flush_, Allocate(bytes));
  }
  return Check(api_.MemsetD8(flush_.ptr(), static_cast<unsigned char>(round), flush_.bytes()),
               "cuMemsetD8");
}

Status CudaGpu::QueueTimedRuns(const LoadedPlan& plan, const TimingOptions& options,
                               std::vector<CUevent>& events) {
  // Everything is queued on the legacy default stream without waiting on the host, so the
  // events measure the GPU's time for the plan, gaps between its kernels included.
  for (size_t i = 0; 2 * i + 1 < events.size(); ++i) {
    if (options.flush_l2) STITCH_RETURN_IF_ERROR(FlushL2(static_cast<int>(i)));
    STITCH_RETURN_IF_ERROR(Check(api_.EventRecord(events[2 * i], nullptr), "cuEventRecord"));
    STITCH_RETURN_IF_ERROR(Launch(plan));
    STITCH_RETURN_IF_ERROR(Check(api_.EventRecord(events[2 * i + 1], nullptr), "cuEventRecord"));
  }
  return Status::Ok();
}

void CudaGpu::AddKernelTime(const LoadedPlan& plan, int runs, PlanTiming& timing) {
  StatusOr<std::vector<KernelSpan>> spans = activity_->Stop();
  if (!spans.ok()) {
    timing.kernel_note = spans.status().message();
    return;
  }
  const int kernels = static_cast<int>(plan.launches.size());
  StatusOr<std::vector<std::vector<double>>> launches =
      KernelMicrosecondsPerLaunch(std::move(spans).value(), kernels, runs);
  if (!launches.ok()) {
    timing.kernel_note = launches.status().message();
    return;
  }
  const Spread spread = SpreadOf(KernelMicrosecondsPerRun(*launches));
  timing.kernel_median_us = spread.median;
  timing.kernel_min_us = spread.min;
  timing.kernel_max_us = spread.max;
  for (int k = 0; k < kernels; ++k) {
    std::vector<double> durations;
    for (const std::vector<double>& run : *launches) durations.push_back(run[k]);
    timing.kernel_each_median_us.push_back(SpreadOf(std::move(durations)).median);
  }
}

StatusOr<PlanTiming> CudaGpu::Time(const Graph& g, const CompileResult& compiled,
                                   const TimingOptions& options, int64_t outer_extent) {
  LoadedPlan plan;
  STITCH_RETURN_IF_ERROR(Load(compiled, plan));
  Buffers buffers;
  STITCH_RETURN_IF_ERROR(AllocateBuffers(g, compiled, buffers));
  std::mt19937_64 rng(options.seed);
  for (int p : g.Parameters()) {
    STITCH_RETURN_IF_ERROR(FillRandom(buffers.at(p), g.nodes[p].shape, rng));
  }
  STITCH_RETURN_IF_ERROR(Bind(compiled, buffers, outer_extent, plan));

  for (int i = 0; i < options.warmup; ++i) STITCH_RETURN_IF_ERROR(Launch(plan));
  STITCH_RETURN_IF_ERROR(Check(api_.CtxSynchronize(), "warm-up runs"));

  const int repeats = std::max(options.repeats, 1);
  std::vector<CUevent> events(2 * static_cast<size_t>(repeats), nullptr);
  struct EventsGuard {
    const DriverApi& api;
    std::vector<CUevent>& events;
    ~EventsGuard() {
      for (CUevent e : events) {
        if (e) (void)api.EventDestroy(e);
      }
    }
  } guard{api_, events};
  for (CUevent& e : events) {
    STITCH_RETURN_IF_ERROR(Check(api_.EventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate"));
  }
  PlanTiming t;
  Status recording = activity_ ? activity_->Start() : Unavailable(info_.kernel_timing);
  Status queued = QueueTimedRuns(plan, options, events);
  if (queued.ok()) queued = Check(api_.EventSynchronize(events.back()), "timed runs");
  if (recording.ok()) {
    // Stopped whatever happened, so that the next plan's recording starts clean.
    if (queued.ok()) {
      AddKernelTime(plan, repeats, t);
    } else {
      (void)activity_->Stop();
    }
  } else {
    t.kernel_note = recording.message();
  }
  STITCH_RETURN_IF_ERROR(queued);
  std::vector<double> us;
  for (int i = 0; i < repeats; ++i) {
    float ms = 0;
    STITCH_RETURN_IF_ERROR(
        Check(api_.EventElapsedTime(&ms, events[2 * i], events[2 * i + 1]), "cuEventElapsedTime"));
    us.push_back(1e3 * ms);
  }
  const Spread spread = SpreadOf(std::move(us));
  t.median_us = spread.median;
  t.min_us = spread.min;
  t.max_us = spread.max;
  t.loaded_from = plan.loaded_from;
  return t;
}

StatusOr<std::vector<std::vector<uint8_t>>> CudaGpu::Run(
    const Graph& g, const CompileResult& compiled, const std::vector<std::vector<uint8_t>>& params,
    int64_t outer_extent) {
  const std::vector<int> param_nodes = g.Parameters();
  if (params.size() != param_nodes.size()) {
    return InvalidArgument("graph takes " + std::to_string(param_nodes.size()) +
                           " parameters, got " + std::to_string(params.size()));
  }
  for (size_t k = 0; k < params.size(); ++k) {
    const Shape& want = g.nodes[param_nodes[k]].shape;
    if (static_cast<int64_t>(params[k].size()) != want.bytes()) {
      return InvalidArgument("parameter " + std::to_string(k) + " has " +
                             std::to_string(params[k].size()) + " bytes; " + want.ToString() +
                             " takes " + std::to_string(want.bytes()));
    }
  }
  LoadedPlan plan;
  STITCH_RETURN_IF_ERROR(Load(compiled, plan));
  Buffers buffers;
  STITCH_RETURN_IF_ERROR(AllocateBuffers(g, compiled, buffers));
  for (auto& [node, buffer] : buffers) {
    if (buffer.bytes() == 0) continue;
    STITCH_RETURN_IF_ERROR(Check(api_.MemsetD8(buffer.ptr(), 0xff, buffer.bytes()), "cuMemsetD8"));
  }
  for (size_t k = 0; k < params.size(); ++k) {
    if (params[k].empty()) continue;
    STITCH_RETURN_IF_ERROR(
        Check(api_.MemcpyHtoD(buffers.at(param_nodes[k]).ptr(), params[k].data(), params[k].size()),
              "cuMemcpyHtoD"));
  }
  STITCH_RETURN_IF_ERROR(Bind(compiled, buffers, outer_extent, plan));
  STITCH_RETURN_IF_ERROR(Launch(plan));
  STITCH_RETURN_IF_ERROR(Check(api_.CtxSynchronize(), "running the plan"));
  std::vector<std::vector<uint8_t>> outputs;
  for (int o : g.outputs) {
    // An output that is a parameter's bytes is the parameter's buffer, as a framework's view
    // of it is (aliasing.h).
    auto it = buffers.find(OutputBufferNode(g, o));
    if (it == buffers.end())
      return Internal("no kernel wrote graph output node " + std::to_string(o));
    std::vector<uint8_t> bytes(it->second.bytes());
    if (!bytes.empty()) {
      STITCH_RETURN_IF_ERROR(
          Check(api_.MemcpyDtoH(bytes.data(), it->second.ptr(), bytes.size()), "cuMemcpyDtoH"));
    }
    outputs.push_back(std::move(bytes));
  }
  return outputs;
}

void CudaGpu::Recover() {
  if (api_.CtxSynchronize() == CUDA_SUCCESS) return;
  // The context is broken (a kernel faulted): start a fresh primary context.
  flush_ = DeviceBuffer();
  (void)api_.PrimaryCtxRelease(device_);
  (void)api_.PrimaryCtxReset(device_);
  context_ = nullptr;
  if (api_.PrimaryCtxRetain(&context_, device_) == CUDA_SUCCESS) {
    (void)api_.CtxSetCurrent(context_);
  } else {
    context_ = nullptr;
  }
}

StatusOr<PlanTiming> CudaGpu::TimePlan(const Graph& g, const CompileResult& compiled,
                                       const TimingOptions& options, int64_t outer_extent) {
  if (context_ == nullptr) return Unavailable("the CUDA context could not be recreated");
  STITCH_RETURN_IF_ERROR(CheckOuterExtent(g, compiled, outer_extent));
  StatusOr<PlanTiming> t = Time(g, compiled, options, outer_extent);
  if (!t.ok()) Recover();
  return t;
}

StatusOr<std::vector<std::vector<uint8_t>>> CudaGpu::RunPlanOnBytes(
    const Graph& g, const CompileResult& compiled, const std::vector<std::vector<uint8_t>>& params,
    int64_t outer_extent) {
  if (context_ == nullptr) return Unavailable("the CUDA context could not be recreated");
  STITCH_RETURN_IF_ERROR(CheckOuterExtent(g, compiled, outer_extent));
  StatusOr<std::vector<std::vector<uint8_t>>> out = Run(g, compiled, params, outer_extent);
  if (!out.ok()) Recover();
  return out;
}

StatusOr<std::vector<Tensor>> CudaGpu::RunPlan(const Graph& g, const CompileResult& compiled,
                                               const std::vector<Tensor>& params,
                                               int64_t outer_extent) {
  const std::vector<int> param_nodes = g.Parameters();
  if (params.size() != param_nodes.size()) {
    return InvalidArgument("graph takes " + std::to_string(param_nodes.size()) +
                           " parameters, got " + std::to_string(params.size()));
  }
  std::vector<std::vector<uint8_t>> bytes;
  for (size_t k = 0; k < params.size(); ++k) {
    const Shape& want = g.nodes[param_nodes[k]].shape;
    if (params[k].shape != want) {
      return InvalidArgument("parameter " + std::to_string(k) + " is " +
                             params[k].shape.ToString() + ", expected " + want.ToString());
    }
    bytes.push_back(ToDeviceBytes(params[k]));
  }
  STITCH_ASSIGN_OR_RETURN(std::vector<std::vector<uint8_t>> out,
                          RunPlanOnBytes(g, compiled, bytes, outer_extent));
  std::vector<Tensor> outputs;
  for (size_t k = 0; k < out.size(); ++k) {
    STITCH_ASSIGN_OR_RETURN(Tensor t, FromDeviceBytes(g.nodes[g.outputs[k]].shape, out[k]));
    outputs.push_back(std::move(t));
  }
  return outputs;
}

}  // namespace

StatusOr<std::unique_ptr<Gpu>> OpenGpu(const std::string& driver_library, int ordinal,
                                       const std::string& profiler_library) {
  dlerror();
  void* library = dlopen(driver_library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    return Unavailable("cannot load the CUDA driver: " +
                       std::string(why ? why : driver_library + " not found"));
  }
  DriverApi api;
  if (std::string missing = ResolveAll(library, api); !missing.empty()) {
    dlclose(library);
    return Unavailable("the CUDA driver " + driver_library + " lacks " + missing +
                       " (driver too old?)");
  }
  if (CUresult r = api.Init(0); r != CUDA_SUCCESS) {
    std::string text = "cuInit failed: " + ErrorText(api, r);
    if (r == CUDA_ERROR_STUB_LIBRARY) text += " [" + driver_library + " is the toolkit's stub]";
    dlclose(library);
    return Unavailable(text);
  }
  auto gpu = std::make_unique<CudaGpu>(library, api);
  if (Status s = gpu->Open(ordinal); !s.ok()) return Unavailable(s.message());
  if (profiler_library == "none") {
    gpu->SetKernelActivity(nullptr, "not measured: no kernel profiler asked for");
  } else if (StatusOr<std::unique_ptr<KernelActivity>> activity =
                 OpenKernelActivity(profiler_library);
             activity.ok()) {
    std::string how = (*activity)->source();
    gpu->SetKernelActivity(std::move(activity).value(), std::move(how));
  } else {
    gpu->SetKernelActivity(nullptr, "not measured: " + activity.status().message());
  }
  return std::unique_ptr<Gpu>(std::move(gpu));
}

}  // namespace stitch::gpu
