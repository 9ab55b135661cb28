// stitch_loader_check: the kernel loader (loader/) end to end on a real GPU. For each suite
// graph, at the emulation scale (the graphs the reference interpreter checks in tests), it
// compiles a bundle for the device's architecture, serializes it, loads it with
// KernelLoader::Load, launches it with KernelLoader::Launch on device buffers holding random
// inputs, copies the outputs back and compares them with the reference interpreter under the
// suite's output tolerance (OutputTolerance). It prints one row per graph: kernels, the image
// the loader picked, the largest relative error, and whether it passed.
//
// The program owns the context the loader launches in (the device's primary context, made
// current), as a framework would; its own driver calls go through dlopen like the loader's.
//
// Usage: stitch_loader_check [--only ID,...] [--device N] [--driver LIB]
// Exit status: 0 every graph matched; 1 a graph failed to compile, load, run or match;
// 2 no usable GPU or a build without cuda.h (one line on stderr says why); 3 bad flags.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/dynamic_symbols.h"
#include "stitch/driver/bundle.h"
#include "stitch/driver/compile.h"
#include "stitch/loader/kernel_loader.h"
#include "stitch/plan/target.h"
#include "stitch/reference/interpreter.h"
#include "stitch/reference/shape_scaling.h"
#include "stitch/reference/tensor.h"
#include "stitch/reference/tensor_compare.h"
#include "suite/suite.h"

#ifdef STITCH_LOADER_CHECK_WITH_CUDA
#include <cuda.h>
#include <dlfcn.h>
#endif

namespace stitch {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitNoGpu = 2;
constexpr int kExitBadFlags = 3;

struct Flags {
  std::set<int> only;
  int device = 0;
  std::string driver = "libcuda.so.1";
};

bool ParseFlags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--only" && has_value) {
      std::stringstream in(argv[++i]);
      for (std::string item; std::getline(in, item, ',');) {
        const int id = std::atoi(item.c_str());
        if (id < 1 || id > suite::kSuiteSize) return false;
        f.only.insert(id);
      }
    } else if (a == "--device" && has_value) {
      f.device = std::atoi(argv[++i]);
    } else if (a == "--driver" && has_value) {
      f.driver = argv[++i];
    } else {
      return false;
    }
  }
  return true;
}

#ifdef STITCH_LOADER_CHECK_WITH_CUDA

// The driver calls the check makes itself: a context, buffers, copies.
struct Driver {
  decltype(&::cuGetErrorName) GetErrorName = nullptr;
  decltype(&::cuInit) Init = nullptr;
  decltype(&::cuDeviceGet) DeviceGet = nullptr;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute = nullptr;
  decltype(&::cuDeviceGetName) DeviceGetName = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) PrimaryCtxRetain = nullptr;
  decltype(&::cuCtxSetCurrent) CtxSetCurrent = nullptr;
  decltype(&::cuCtxSynchronize) CtxSynchronize = nullptr;
  decltype(&::cuMemAlloc) MemAlloc = nullptr;
  decltype(&::cuMemFree) MemFree = nullptr;
  decltype(&::cuMemcpyHtoD) MemcpyHtoD = nullptr;
  decltype(&::cuMemcpyDtoH) MemcpyDtoH = nullptr;

  Status Check(CUresult r, const std::string& what) const {
    if (r == CUDA_SUCCESS) return Status::Ok();
    const char* name = nullptr;
    if (GetErrorName == nullptr || GetErrorName(r, &name) != CUDA_SUCCESS || !name) {
      name = "unknown CUresult";
    }
    return Internal(what + ": " + name);
  }
};

StatusOr<Driver> OpenDriver(const std::string& library) {
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return Unavailable("cannot load " + library + ": " + (why ? why : "not found"));
  }
  Driver d;
  const bool all = gpu::ResolveSymbol(lib, "cuGetErrorName", d.GetErrorName) &&
                   gpu::ResolveSymbol(lib, "cuInit", d.Init) &&
                   gpu::ResolveSymbol(lib, "cuDeviceGet", d.DeviceGet) &&
                   gpu::ResolveSymbol(lib, "cuDeviceGetAttribute", d.DeviceGetAttribute) &&
                   gpu::ResolveSymbol(lib, "cuDeviceGetName", d.DeviceGetName) &&
                   gpu::ResolveSymbol(lib, "cuDevicePrimaryCtxRetain", d.PrimaryCtxRetain) &&
                   gpu::ResolveSymbol(lib, "cuCtxSetCurrent", d.CtxSetCurrent) &&
                   gpu::ResolveSymbol(lib, "cuCtxSynchronize", d.CtxSynchronize) &&
                   gpu::ResolveSymbol(lib, "cuMemAlloc_v2", d.MemAlloc) &&
                   gpu::ResolveSymbol(lib, "cuMemFree_v2", d.MemFree) &&
                   gpu::ResolveSymbol(lib, "cuMemcpyHtoD_v2", d.MemcpyHtoD) &&
                   gpu::ResolveSymbol(lib, "cuMemcpyDtoH_v2", d.MemcpyDtoH);
  if (!all) return Unavailable(library + " lacks a driver entry point the check uses");
  if (CUresult r = d.Init(0); r != CUDA_SUCCESS) {
    return Unavailable(d.Check(r, "cuInit").message());
  }
  return d;
}

// Device buffers freed at scope exit.
class Buffers {
 public:
  explicit Buffers(const Driver& d) : d_(d) {}
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  ~Buffers() {
    for (CUdeviceptr p : owned_) (void)d_.MemFree(p);
  }
  StatusOr<CUdeviceptr> Allocate(size_t bytes) {
    CUdeviceptr p = 0;
    STITCH_RETURN_IF_ERROR(d_.Check(d_.MemAlloc(&p, std::max<size_t>(bytes, 1)), "cuMemAlloc"));
    owned_.push_back(p);
    return p;
  }

 private:
  const Driver& d_;
  std::vector<CUdeviceptr> owned_;
};

struct Row {
  int id = 0;
  std::string graph;
  int kernels = 0;
  std::string image = "-";
  double max_rel_error = 0;
  bool pass = false;
  std::string error;
};

// Compiles, loads, launches and compares one suite graph.
void CheckOne(const suite::SuiteEntry& e, const Target& target, loader::ComputeCapability cc,
              int ordinal, const Driver& d, loader::KernelLoader& kl, Row& row) {
  std::optional<ScaledGraph> scaled = ScaleForEmulation(e.graph);
  const Graph& g = scaled ? scaled->graph : e.graph;
  CompileOptions options;
  options.codegen.target = target;
  StatusOr<CompileResult> compiled = CompileGraph(g, options);
  if (!compiled.ok()) {
    // The toolkit may not assemble for this GPU; the PTX can still go to the driver's JIT.
    options.codegen.emit_cubin = false;
    compiled = CompileGraph(g, options);
  }
  if (!compiled.ok()) {
    row.error = "compile: " + compiled.status().ToString();
    return;
  }
  const std::string bytes = ToBundle(*compiled, options).SerializeAsString();
  auto program = kl.Load(bytes);
  if (!program.ok()) {
    row.error = "load: " + program.status().ToString();
    return;
  }
  row.kernels = (*program)->bundle().kernels_size();
  auto image = loader::ChooseImage((*program)->target(), (*program)->has_cubin(), cc, ordinal);
  row.image = image.ok() ? loader::ImageKindName(*image) : "none";

  std::mt19937_64 rng(1000 + e.id);
  std::vector<Tensor> inputs;
  for (int node : g.Parameters()) inputs.push_back(RandomTensor(g.nodes[node].shape, rng));
  StatusOr<std::vector<Tensor>> want = Evaluate(g, inputs);
  if (!want.ok()) {
    row.error = "interpreter: " + want.status().ToString();
    return;
  }
  Buffers buffers(d);
  std::vector<uint64_t> in_ptrs, out_ptrs;
  auto fail = [&](const Status& s) { row.error = s.ToString(); };
  for (const Tensor& t : inputs) {
    const std::vector<uint8_t> host = ToDeviceBytes(t);
    StatusOr<CUdeviceptr> p = buffers.Allocate(host.size());
    if (!p.ok()) return fail(p.status());
    if (!host.empty()) {
      if (Status s = d.Check(d.MemcpyHtoD(*p, host.data(), host.size()), "cuMemcpyHtoD"); !s.ok()) {
        return fail(s);
      }
    }
    in_ptrs.push_back(*p);
  }
  for (int node : g.outputs) {
    StatusOr<CUdeviceptr> p = buffers.Allocate(static_cast<size_t>(g.nodes[node].shape.bytes()));
    if (!p.ok()) return fail(p.status());
    out_ptrs.push_back(*p);
  }
  // A bundle takes a pointer per parameter and output it declares; one from before bundles
  // declared their buffers may take fewer (an unused parameter), never more. An output that
  // aliases an input gets its own buffer here, so the loader's copy into it is checked too.
  in_ptrs.resize(static_cast<size_t>((*program)->num_inputs()));
  out_ptrs.resize(static_cast<size_t>((*program)->num_outputs()));
  if (Status s = kl.Launch(**program, in_ptrs, out_ptrs, 0); !s.ok()) {
    row.error = "launch: " + s.ToString();
    return;
  }
  if (Status s = d.Check(d.CtxSynchronize(), "running the kernels"); !s.ok()) return fail(s);
  row.pass = true;
  for (size_t k = 0; k < want->size() && k < out_ptrs.size(); ++k) {
    const Tensor& expected = (*want)[k];
    std::vector<uint8_t> host(static_cast<size_t>(expected.shape.bytes()));
    if (!host.empty()) {
      if (Status s = d.Check(d.MemcpyDtoH(host.data(), out_ptrs[k], host.size()), "cuMemcpyDtoH");
          !s.ok()) {
        return fail(s);
      }
    }
    StatusOr<Tensor> got = FromDeviceBytes(expected.shape, host);
    if (!got.ok()) return fail(got.status());
    Comparison c = Compare(expected, *got, OutputTolerance(g, expected.shape.dtype));
    row.max_rel_error = std::max(row.max_rel_error, c.max_rel_error);
    if (!c.pass) {
      row.pass = false;
      if (row.error.empty()) row.error = "output " + std::to_string(k) + ": " + c.message;
    }
  }
  if (out_ptrs.size() < want->size()) {
    row.pass = false;
    row.error = "bundle writes " + std::to_string(out_ptrs.size()) + " outputs, graph has " +
                std::to_string(want->size());
  }
}

int Run(const Flags& flags) {
  StatusOr<Driver> driver = OpenDriver(flags.driver);
  if (!driver.ok()) {
    std::cerr << "stitch_loader_check: no usable CUDA GPU: " << driver.status().message() << "\n";
    return kExitNoGpu;
  }
  const Driver& d = *driver;
  CUdevice device = 0;
  CUcontext context = nullptr;
  loader::ComputeCapability cc;
  Status s = d.Check(d.DeviceGet(&device, flags.device), "cuDeviceGet");
  if (s.ok()) {
    s = d.Check(
        d.DeviceGetAttribute(&cc.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
        "compute capability");
  }
  if (s.ok()) {
    s = d.Check(
        d.DeviceGetAttribute(&cc.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
        "compute capability");
  }
  if (s.ok()) s = d.Check(d.PrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  if (s.ok()) s = d.Check(d.CtxSetCurrent(context), "cuCtxSetCurrent");
  if (!s.ok()) {
    std::cerr << "stitch_loader_check: no usable CUDA GPU: " << s.message() << "\n";
    return kExitNoGpu;
  }
  char name[256] = {};
  if (s.ok()) s = d.Check(d.DeviceGetName(name, sizeof(name) - 1, device), "cuDeviceGetName");
  if (!s.ok()) {
    std::cerr << "stitch_loader_check: no usable CUDA GPU: " << s.message() << "\n";
    return kExitNoGpu;
  }
  // The bundles stitchd --target auto would serve this GPU (sm_90/h200 on an H200).
  const std::string arch = "sm_" + std::to_string(cc.major) + std::to_string(cc.minor);
  StatusOr<Target> target = Target::ForGpu(arch, name);
  if (!target.ok()) {
    std::cerr << "stitch_loader_check: " << target.status().message() << "\n";
    return kExitNoGpu;
  }
  loader::LoaderOptions options;
  options.driver_library = flags.driver;
  auto kl = loader::KernelLoader::Open(options);
  if (!kl.ok()) {
    std::cerr << "stitch_loader_check: " << kl.status().ToString() << "\n";
    return kExitNoGpu;
  }
  std::cerr << "stitch_loader_check: device " << flags.device << " is " << name << " (" << arch
            << "), compiling for " << target->name() << "\n";

  std::vector<Row> rows;
  for (const suite::SuiteEntry& e : suite::BuildSuite()) {
    if (!flags.only.empty() && !flags.only.count(e.id)) continue;
    Row row;
    row.id = e.id;
    row.graph = e.model + " / " + e.pattern;
    CheckOne(e, *target, cc, flags.device, d, **kl, row);
    rows.push_back(row);
  }
  std::printf("%-4s %-48s %7s %-6s %12s %s\n", "id", "graph", "kernels", "image", "max rel err",
              "pass");
  int failed = 0;
  for (const Row& r : rows) {
    std::printf("%-4d %-48.48s %7d %-6s %12.3g %s%s\n", r.id, r.graph.c_str(), r.kernels,
                r.image.c_str(), r.max_rel_error, r.pass ? "yes" : "NO",
                r.error.empty() ? "" : ("  " + r.error).c_str());
    if (!r.pass) ++failed;
  }
  std::printf("%zu graphs, %d failed\n", rows.size(), failed);
  return failed ? kExitFailed : 0;
}

#else

int Run(const Flags&) {
  std::cerr << "stitch_loader_check: built without the CUDA driver header (cuda.h); rebuild "
               "with the CUDA toolkit installed\n";
  return kExitNoGpu;
}

#endif  // STITCH_LOADER_CHECK_WITH_CUDA

}  // namespace
}  // namespace stitch

int main(int argc, char** argv) {
  stitch::Flags flags;
  if (!stitch::ParseFlags(argc, argv, flags)) {
    std::cerr << "usage: stitch_loader_check [--only ID,...] [--device N] [--driver LIB]\n";
    return stitch::kExitBadFlags;
  }
  return stitch::Run(flags);
}
