#include "gpu_detect.h"

#include <dlfcn.h>

#include <string>

namespace stitch::daemon {
namespace {

// The few driver API declarations needed, so that no CUDA header is required to build.
using CUresult = int;
using CUdevice = int;
constexpr CUresult kCudaSuccess = 0;
constexpr int kAttrComputeCapabilityMajor = 75;
constexpr int kAttrComputeCapabilityMinor = 76;

using CuInitFn = CUresult (*)(unsigned int flags);
using CuDeviceGetCountFn = CUresult (*)(int* count);
using CuDeviceGetFn = CUresult (*)(CUdevice* device, int ordinal);
using CuDeviceGetAttributeFn = CUresult (*)(int* value, int attribute, CUdevice device);
using CuDeviceGetNameFn = CUresult (*)(char* name, int length, CUdevice device);
using CuGetErrorNameFn = CUresult (*)(CUresult error, const char** name);

std::string DescribeError(CuGetErrorNameFn get_name, CUresult r) {
  const char* name = nullptr;
  if (get_name != nullptr && get_name(r, &name) == kCudaSuccess && name != nullptr) {
    return std::string(name) + " (" + std::to_string(r) + ")";
  }
  return "error " + std::to_string(r);
}

std::optional<DetectedGpu> Fail(std::string* why_not, std::string reason) {
  if (why_not != nullptr) *why_not = std::move(reason);
  return std::nullopt;
}

}  // namespace

std::optional<DetectedGpu> DetectGpu(std::string* why_not) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return Fail(why_not, "no CUDA driver (libcuda.so.1 not found)");

  auto cu_init = reinterpret_cast<CuInitFn>(dlsym(lib, "cuInit"));
  auto cu_count = reinterpret_cast<CuDeviceGetCountFn>(dlsym(lib, "cuDeviceGetCount"));
  auto cu_get = reinterpret_cast<CuDeviceGetFn>(dlsym(lib, "cuDeviceGet"));
  auto cu_attr = reinterpret_cast<CuDeviceGetAttributeFn>(dlsym(lib, "cuDeviceGetAttribute"));
  auto cu_error_name = reinterpret_cast<CuGetErrorNameFn>(dlsym(lib, "cuGetErrorName"));
  auto cu_name = reinterpret_cast<CuDeviceGetNameFn>(dlsym(lib, "cuDeviceGetName"));
  if (cu_init == nullptr || cu_count == nullptr || cu_get == nullptr || cu_attr == nullptr) {
    dlclose(lib);
    return Fail(why_not, "libcuda.so.1 lacks the driver API entry points");
  }

  // From here on the library stays loaded: after cuInit the driver may own threads and
  // handlers that dlclose would pull out from under it.
  if (CUresult r = cu_init(0); r != kCudaSuccess) {
    return Fail(why_not, "cuInit failed: " + DescribeError(cu_error_name, r));
  }
  int count = 0;
  if (CUresult r = cu_count(&count); r != kCudaSuccess) {
    return Fail(why_not, "cuDeviceGetCount failed: " + DescribeError(cu_error_name, r));
  }
  if (count < 1) return Fail(why_not, "the CUDA driver reports no devices");
  CUdevice device = 0;
  if (CUresult r = cu_get(&device, 0); r != kCudaSuccess) {
    return Fail(why_not, "cuDeviceGet(0) failed: " + DescribeError(cu_error_name, r));
  }
  int major = 0;
  int minor = 0;
  if (CUresult r = cu_attr(&major, kAttrComputeCapabilityMajor, device); r != kCudaSuccess) {
    return Fail(why_not, "cuDeviceGetAttribute failed: " + DescribeError(cu_error_name, r));
  }
  if (CUresult r = cu_attr(&minor, kAttrComputeCapabilityMinor, device); r != kCudaSuccess) {
    return Fail(why_not, "cuDeviceGetAttribute failed: " + DescribeError(cu_error_name, r));
  }
  if (major < 1 || minor < 0 || minor > 9) {
    return Fail(why_not, "device 0 reports compute capability " + std::to_string(major) + "." +
                             std::to_string(minor));
  }
  DetectedGpu gpu;
  gpu.arch = "sm_" + std::to_string(major) + std::to_string(minor);
  // The name only picks the device among those of one architecture; without it the
  // architecture's default device is planned for.
  char name[256] = {};
  if (cu_name != nullptr && cu_name(name, sizeof(name) - 1, device) == kCudaSuccess) {
    gpu.name = name;
  }
  return gpu;
}

}  // namespace stitch::daemon
