// The stand-in CUDA driver the GPU benchmark's tests run against (tests/bench/gpu_fake_cuda.cc):
// where it is built, and the record of its recent launches.
#pragma once

#include <dlfcn.h>

#include <string>

namespace stitch::gpu::test {

// The stand-in driver library, for OpenGpu; it exists only in builds with cuda.h.
inline std::string FakeDriver() {
  return std::string(STITCH_BINARY_DIR) + "/bench/gpu/libstitch_fake_cuda.so";
}

// The stand-in's record of its recent launches, one line each; a note instead when the
// library is not loaded in this process.
inline std::string FakeLaunchLog() {
  void* lib = dlopen(FakeDriver().c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return "(the stand-in driver is not loaded)";
  auto* log = reinterpret_cast<const char* (*)()>(dlsym(lib, "stitch_fake_cuda_log"));
  std::string out = log != nullptr ? log() : "(no stitch_fake_cuda_log)";
  dlclose(lib);
  return out;
}

}  // namespace stitch::gpu::test
