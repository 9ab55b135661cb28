// Entry points of a library opened with dlopen (the CUDA driver, CUPTI), looked up by name, so
// the GPU benchmark's programs start on machines that lack the library and say so.
#pragma once

#include <dlfcn.h>

namespace stitch::gpu {

// Sets `fn` to `symbol` in `library` (a dlopen handle); returns whether the library has it.
template <typename Fn>
bool ResolveSymbol(void* library, const char* symbol, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(library, symbol));
  return fn != nullptr;
}

}  // namespace stitch::gpu
