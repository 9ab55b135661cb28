// KernelLoader on the CUDA driver API. cuda.h supplies types and prototypes only: each entry
// point is looked up with dlsym under its versioned ABI name (cuMemAlloc_v2, ...), so the
// library works on machines without a driver and tests can substitute a stand-in.
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "stitch/loader/kernel_loader.h"

namespace stitch::loader {
namespace {

struct DriverApi {
  decltype(&::cuGetErrorName) GetErrorName = nullptr;
  decltype(&::cuInit) Init = nullptr;
  decltype(&::cuCtxGetCurrent) CtxGetCurrent = nullptr;
  decltype(&::cuCtxGetDevice) CtxGetDevice = nullptr;
  decltype(&::cuCtxPushCurrent) CtxPushCurrent = nullptr;
  decltype(&::cuCtxPopCurrent) CtxPopCurrent = nullptr;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute = nullptr;
  decltype(&::cuModuleLoadDataEx) ModuleLoadDataEx = nullptr;
  decltype(&::cuModuleGetFunction) ModuleGetFunction = nullptr;
  decltype(&::cuModuleUnload) ModuleUnload = nullptr;
  decltype(&::cuFuncSetAttribute) FuncSetAttribute = nullptr;
  decltype(&::cuMemAlloc) MemAlloc = nullptr;
  decltype(&::cuMemFree) MemFree = nullptr;
  decltype(&::cuMemsetD8Async) MemsetD8Async = nullptr;
  decltype(&::cuMemcpyDtoDAsync) MemcpyDtoDAsync = nullptr;
  decltype(&::cuLaunchKernel) LaunchKernel = nullptr;
  // Optional: only kernels with a workspace need it, and they fail one by one without it.
  decltype(&::cuLaunchCooperativeKernel) LaunchCooperativeKernel = nullptr;
};

template <typename Fn>
bool Resolve(void* library, const char* symbol, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(library, symbol));
  return fn != nullptr;
}

// Resolves every entry point; returns the first missing symbol's name, or empty.
std::string ResolveAll(void* lib, DriverApi& api) {
  (void)Resolve(lib, "cuLaunchCooperativeKernel", api.LaunchCooperativeKernel);
  const std::pair<const char*, bool> entries[] = {
      {"cuGetErrorName", Resolve(lib, "cuGetErrorName", api.GetErrorName)},
      {"cuInit", Resolve(lib, "cuInit", api.Init)},
      {"cuCtxGetCurrent", Resolve(lib, "cuCtxGetCurrent", api.CtxGetCurrent)},
      {"cuCtxGetDevice", Resolve(lib, "cuCtxGetDevice", api.CtxGetDevice)},
      {"cuCtxPushCurrent_v2", Resolve(lib, "cuCtxPushCurrent_v2", api.CtxPushCurrent)},
      {"cuCtxPopCurrent_v2", Resolve(lib, "cuCtxPopCurrent_v2", api.CtxPopCurrent)},
      {"cuDeviceGetAttribute", Resolve(lib, "cuDeviceGetAttribute", api.DeviceGetAttribute)},
      {"cuModuleLoadDataEx", Resolve(lib, "cuModuleLoadDataEx", api.ModuleLoadDataEx)},
      {"cuModuleGetFunction", Resolve(lib, "cuModuleGetFunction", api.ModuleGetFunction)},
      {"cuModuleUnload", Resolve(lib, "cuModuleUnload", api.ModuleUnload)},
      {"cuFuncSetAttribute", Resolve(lib, "cuFuncSetAttribute", api.FuncSetAttribute)},
      {"cuMemAlloc_v2", Resolve(lib, "cuMemAlloc_v2", api.MemAlloc)},
      {"cuMemFree_v2", Resolve(lib, "cuMemFree_v2", api.MemFree)},
      {"cuMemsetD8Async", Resolve(lib, "cuMemsetD8Async", api.MemsetD8Async)},
      {"cuMemcpyDtoDAsync_v2", Resolve(lib, "cuMemcpyDtoDAsync_v2", api.MemcpyDtoDAsync)},
      {"cuLaunchKernel", Resolve(lib, "cuLaunchKernel", api.LaunchKernel)},
  };
  for (const auto& [symbol, found] : entries) {
    if (!found) return symbol;
  }
  return "";
}

// The driver's name for `r` ("CUDA_ERROR_INVALID_PTX"), or its number when the library
// cannot name it (a stub library names nothing).
std::string ErrorName(const DriverApi& api, CUresult r) {
  const char* name = nullptr;
  if (api.GetErrorName != nullptr && api.GetErrorName(r, &name) == CUDA_SUCCESS && name) {
    return name;
  }
  return "CUresult " + std::to_string(static_cast<int>(r));
}

// Above this much shared memory, static and dynamic together, a kernel must opt in per
// function to its dynamic share.
constexpr uint64_t kDefaultDynamicSharedLimit = 48 * 1024;

// The modules of one program in one context, one per kernel in bundle order.
struct LoadedProgram {
  CUcontext context = nullptr;
  std::vector<CUmodule> modules;
  std::vector<CUfunction> functions;
};

// A device allocation the loader owns: `base` to free, `ptr` aligned as asked.
struct Allocation {
  CUdeviceptr base = 0;
  CUdeviceptr ptr = 0;
};

// The buffers of one program on one stream of one context: launches on one stream run one
// after another, so they can share temporaries and workspaces; another stream gets its own.
struct StreamBuffers {
  CUcontext context = nullptr;
  std::vector<Allocation> temporaries;
  std::vector<Allocation> workspaces;  // per kernel; ptr 0 for kernels without one
};

class CudaKernelLoader final : public KernelLoader {
 public:
  CudaKernelLoader(void* library, const DriverApi& api, std::string library_name)
      : library_(library), api_(api), library_name_(std::move(library_name)) {}
  ~CudaKernelLoader() override;

  Status Enqueue(const Program& program, std::span<const uint64_t> inputs,
                 std::span<const uint64_t> outputs, uintptr_t stream,
                 int64_t outer_extent) override;

 private:
  Status Check(CUresult r, const std::string& what) const {
    if (r == CUDA_SUCCESS) return Status::Ok();
    return Internal(what + ": " + ErrorName(api_, r));
  }
  StatusOr<ComputeCapability> Capability(CUdevice device);
  StatusOr<const LoadedProgram*> Modules(const Program& program, CUcontext context,
                                         ComputeCapability cc, int ordinal);
  Status LoadKernel(const v1::Kernel& kernel, ImageKind image, LoadedProgram& loaded);
  StatusOr<const StreamBuffers*> Buffers(const Program& program, CUcontext context,
                                         CUstream stream);
  StatusOr<Allocation> Allocate(uint64_t bytes, uint32_t alignment, const std::string& what);
  void Release(CUcontext context, const std::function<void()>& body);

  void* library_;
  DriverApi api_;
  std::string library_name_;
  std::mutex mu_;
  std::map<CUdevice, ComputeCapability> capabilities_;
  std::map<std::pair<CUcontext, std::string>, LoadedProgram> programs_;
  std::map<std::tuple<CUcontext, std::string, uintptr_t>, StreamBuffers> buffers_;
};

CudaKernelLoader::~CudaKernelLoader() {
  // Modules and allocations belong to their context; make it current around their release.
  // Failures (a context already torn down) are ignored: nothing else can be done here.
  for (auto& [key, buffers] : buffers_) {
    Release(buffers.context, [&] {
      for (const Allocation& a : buffers.temporaries) (void)api_.MemFree(a.base);
      for (const Allocation& a : buffers.workspaces) {
        if (a.base != 0) (void)api_.MemFree(a.base);
      }
    });
  }
  for (auto& [key, loaded] : programs_) {
    Release(loaded.context, [&] {
      for (CUmodule m : loaded.modules) (void)api_.ModuleUnload(m);
    });
  }
  // The library stays loaded: unloading a driver that has run kernels is not worth the risk,
  // and another loader may share the handle.
  (void)library_;
}

void CudaKernelLoader::Release(CUcontext context, const std::function<void()>& body) {
  const bool pushed = api_.CtxPushCurrent(context) == CUDA_SUCCESS;
  body();
  if (pushed) {
    CUcontext popped = nullptr;
    (void)api_.CtxPopCurrent(&popped);
  }
}

StatusOr<ComputeCapability> CudaKernelLoader::Capability(CUdevice device) {
  if (auto it = capabilities_.find(device); it != capabilities_.end()) return it->second;
  ComputeCapability cc;
  STITCH_RETURN_IF_ERROR(Check(
      api_.DeviceGetAttribute(&cc.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
      "cuDeviceGetAttribute(compute capability major)"));
  STITCH_RETURN_IF_ERROR(Check(
      api_.DeviceGetAttribute(&cc.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
      "cuDeviceGetAttribute(compute capability minor)"));
  capabilities_.emplace(device, cc);
  return cc;
}

Status CudaKernelLoader::LoadKernel(const v1::Kernel& kernel, ImageKind image,
                                    LoadedProgram& loaded) {
  CUmodule module = nullptr;
  if (image == ImageKind::kCubin) {
    STITCH_RETURN_IF_ERROR(
        Check(api_.ModuleLoadDataEx(&module, kernel.cubin().data(), 0, nullptr, nullptr),
              "loading the cubin of kernel " + kernel.name()));
  } else {
    if (kernel.ptx().empty()) {
      return FailedPrecondition("kernel " + kernel.name() +
                                " has only a cubin, which this device cannot run, and no PTX");
    }
    // The JIT's log is what explains a PTX failure; the error code alone says little.
    char log[8192] = {};
    CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void* values[] = {log, reinterpret_cast<void*>(uintptr_t{sizeof(log) - 1})};
    CUresult r = api_.ModuleLoadDataEx(&module, kernel.ptx().c_str(), 2, options, values);
    if (r != CUDA_SUCCESS) {
      std::string text = log;
      std::replace(text.begin(), text.end(), '\n', ' ');
      return Internal("JIT-compiling the PTX of kernel " + kernel.name() + ": " +
                      ErrorName(api_, r) + (text.empty() ? "" : ": " + text));
    }
  }
  loaded.modules.push_back(module);
  CUfunction function = nullptr;
  STITCH_RETURN_IF_ERROR(Check(api_.ModuleGetFunction(&function, module, kernel.name().c_str()),
                               "cuModuleGetFunction " + kernel.name()));
  if (kernel.dynamic_shared_bytes() > 0 &&
      uint64_t{kernel.static_shared_bytes()} + kernel.dynamic_shared_bytes() >
          kDefaultDynamicSharedLimit) {
    STITCH_RETURN_IF_ERROR(
        Check(api_.FuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    static_cast<int>(kernel.dynamic_shared_bytes())),
              "raising the dynamic shared memory limit of kernel " + kernel.name() + " to " +
                  std::to_string(kernel.dynamic_shared_bytes()) + " bytes"));
  }
  loaded.functions.push_back(function);
  return Status::Ok();
}

StatusOr<const LoadedProgram*> CudaKernelLoader::Modules(const Program& program, CUcontext context,
                                                         ComputeCapability cc, int ordinal) {
  const auto key = std::make_pair(context, program.cache_key());
  if (auto it = programs_.find(key); it != programs_.end()) return &it->second;
  const v1::KernelBundle& b = program.bundle();
  std::vector<ImageKind> images;
  for (const v1::Kernel& k : b.kernels()) {
    STITCH_ASSIGN_OR_RETURN(ImageKind image,
                            ChooseImage(b.target(), !k.cubin().empty(), cc, ordinal));
    if (k.cooperative() && api_.LaunchCooperativeKernel == nullptr) {
      return FailedPrecondition("kernel " + k.name() +
                                " has grid-wide barriers and needs a cooperative launch, but " +
                                library_name_ + " lacks cuLaunchCooperativeKernel");
    }
    images.push_back(image);
  }
  LoadedProgram loaded;
  loaded.context = context;
  for (int i = 0; i < b.kernels_size(); ++i) {
    if (Status s = LoadKernel(b.kernels(i), images[i], loaded); !s.ok()) {
      for (CUmodule m : loaded.modules) (void)api_.ModuleUnload(m);
      return s;
    }
  }
  return &programs_.emplace(key, std::move(loaded)).first->second;
}

StatusOr<Allocation> CudaKernelLoader::Allocate(uint64_t bytes, uint32_t alignment,
                                                const std::string& what) {
  // cuMemAlloc returns 256-byte aligned memory; a larger alignment is met by over-allocating.
  const uint64_t extra = alignment > 256 ? alignment - 1 : 0;
  Allocation a;
  STITCH_RETURN_IF_ERROR(
      Check(api_.MemAlloc(&a.base, static_cast<size_t>(std::max<uint64_t>(bytes, 1) + extra)),
            "cuMemAlloc of " + std::to_string(bytes) + " bytes for " + what));
  a.ptr = extra == 0 ? a.base : (a.base + extra) / alignment * alignment;
  return a;
}

StatusOr<const StreamBuffers*> CudaKernelLoader::Buffers(const Program& program, CUcontext context,
                                                         CUstream stream) {
  const auto key =
      std::make_tuple(context, program.cache_key(), reinterpret_cast<uintptr_t>(stream));
  if (auto it = buffers_.find(key); it != buffers_.end()) return &it->second;
  StreamBuffers buffers;
  buffers.context = context;
  auto cleanup = [&] {
    for (const Allocation& a : buffers.temporaries) (void)api_.MemFree(a.base);
    for (const Allocation& a : buffers.workspaces) {
      if (a.base != 0) (void)api_.MemFree(a.base);
    }
  };
  const v1::KernelBundle& b = program.bundle();
  for (int t = 0; t < b.temporaries_size(); ++t) {
    StatusOr<Allocation> a = Allocate(b.temporaries(t).bytes(), b.temporaries(t).alignment(),
                                      "temporary " + std::to_string(t));
    if (!a.ok()) {
      cleanup();
      return a.status();
    }
    buffers.temporaries.push_back(*a);
  }
  for (const v1::Kernel& k : b.kernels()) {
    if (k.workspace_bytes() == 0) {
      buffers.workspaces.push_back({});
      continue;
    }
    StatusOr<Allocation> a = Allocate(k.workspace_bytes(), 256, "the workspace of " + k.name());
    if (!a.ok()) {
      cleanup();
      return a.status();
    }
    buffers.workspaces.push_back(*a);
    // Enqueued on the launch stream, so it lands before the kernel's first launch there.
    if (Status s = Check(api_.MemsetD8Async(a->ptr, 0, k.workspace_bytes(), stream),
                         "zero-filling the workspace of " + k.name());
        !s.ok()) {
      cleanup();
      return s;
    }
  }
  return &buffers_.emplace(key, std::move(buffers)).first->second;
}

Status CudaKernelLoader::Enqueue(const Program& program, std::span<const uint64_t> inputs,
                                 std::span<const uint64_t> outputs, uintptr_t stream_handle,
                                 int64_t outer_extent) {
  std::lock_guard<std::mutex> lock(mu_);
  CUcontext context = nullptr;
  STITCH_RETURN_IF_ERROR(Check(api_.CtxGetCurrent(&context), "cuCtxGetCurrent"));
  if (context == nullptr) {
    return FailedPrecondition(
        "no current CUDA context on this thread; make one current (the framework's, e.g. by "
        "touching its device) before launching");
  }
  CUdevice device = 0;
  STITCH_RETURN_IF_ERROR(Check(api_.CtxGetDevice(&device), "cuCtxGetDevice"));
  STITCH_ASSIGN_OR_RETURN(ComputeCapability cc, Capability(device));
  STITCH_ASSIGN_OR_RETURN(const LoadedProgram* loaded,
                          Modules(program, context, cc, static_cast<int>(device)));
  CUstream stream = reinterpret_cast<CUstream>(stream_handle);
  STITCH_ASSIGN_OR_RETURN(const StreamBuffers* buffers, Buffers(program, context, stream));

  const v1::KernelBundle& b = program.bundle();
  std::vector<CUdeviceptr> pointers;
  std::vector<void*> args;
  for (int i = 0; i < b.kernels_size(); ++i) {
    const v1::Kernel& k = b.kernels(i);
    pointers.clear();
    for (const v1::KernelParam& p : k.params()) {
      const size_t index = static_cast<size_t>(p.index());
      switch (p.role()) {
        case v1::KernelParam::INPUT:
          pointers.push_back(inputs[index]);
          break;
        case v1::KernelParam::OUTPUT:
          pointers.push_back(outputs[index]);
          break;
        default:  // TEMPORARY; ParseProgram refused every other role
          pointers.push_back(buffers->temporaries[index].ptr);
          break;
      }
    }
    if (k.workspace_bytes() != 0) {
      pointers.push_back(buffers->workspaces[static_cast<size_t>(i)].ptr);
    }
    const bool cooperative = k.cooperative();
    // Built after `pointers` stops growing, since each entry points into it. A shape-generic
    // kernel takes the run's extent last (codegen.h), after any workspace.
    args.clear();
    for (CUdeviceptr& p : pointers) args.push_back(&p);
    if (k.takes_outer_extent()) args.push_back(&outer_extent);
    const v1::LaunchDims& d = k.launch();
    CUfunction f = loaded->functions[static_cast<size_t>(i)];
    CUresult r = cooperative ? api_.LaunchCooperativeKernel(
                                   f, d.grid_x(), d.grid_y(), d.grid_z(), d.block_x(), d.block_y(),
                                   d.block_z(), k.dynamic_shared_bytes(), stream, args.data())
                             : api_.LaunchKernel(f, d.grid_x(), d.grid_y(), d.grid_z(), d.block_x(),
                                                 d.block_y(), d.block_z(), k.dynamic_shared_bytes(),
                                                 stream, args.data(), nullptr);
    STITCH_RETURN_IF_ERROR(Check(
        r, std::string(cooperative ? "cuLaunchCooperativeKernel " : "cuLaunchKernel ") + k.name()));
  }
  // After the kernels, which read the inputs and never write them, so a copy into a buffer
  // the caller also passed as another input cannot change what they read.
  for (const OutputAlias& a : program.output_aliases()) {
    const CUdeviceptr to = outputs[static_cast<size_t>(a.output)];
    const CUdeviceptr from = inputs[static_cast<size_t>(a.input)];
    if (to == from) continue;
    const uint64_t bytes = program.OutputBytes(a.output, outer_extent);
    STITCH_RETURN_IF_ERROR(Check(api_.MemcpyDtoDAsync(to, from, bytes, stream),
                                 "copying input " + std::to_string(a.input) + " into output " +
                                     std::to_string(a.output) + ", its alias"));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<KernelLoader>> KernelLoader::Open(const LoaderOptions& options) {
  dlerror();
  void* library = dlopen(options.driver_library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    return Unavailable("cannot load the CUDA driver: " +
                       std::string(why ? why : options.driver_library + " not found"));
  }
  DriverApi api;
  if (std::string missing = ResolveAll(library, api); !missing.empty()) {
    dlclose(library);
    return Unavailable("the CUDA driver " + options.driver_library + " lacks " + missing +
                       " (driver too old?)");
  }
  if (CUresult r = api.Init(0); r != CUDA_SUCCESS) {
    std::string text = "cuInit failed: " + ErrorName(api, r);
    if (r == CUDA_ERROR_STUB_LIBRARY) {
      text += " [" + options.driver_library + " is the toolkit's stub]";
    }
    dlclose(library);
    return Unavailable(text);
  }
  return std::unique_ptr<KernelLoader>(
      std::make_unique<CudaKernelLoader>(library, api, options.driver_library));
}

}  // namespace stitch::loader
