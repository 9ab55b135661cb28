// The C++ launch path of stitch.torch: PyTorch operators that launch a stitched region's
// bundle through the kernel loader's C ABI (stitch_loader.h) with no Python on the way.
//
//   stitch::launch(int region, Tensor[] inputs, SymInt[] sizes) -> Tensor[]
//
// launches region `region` (a number from stitch::launch_region) on `inputs`: it finds the
// variant registered for the inputs' devices, dtypes, sizes and storage orders and the size
// arguments, allocates the outputs with the variant's sizes, strides and dtypes, and calls
// stitch_loader_launch_at_extent with the tensors' data pointers and byte sizes on PyTorch's
// current stream of the inputs' device (the loader refuses a buffer smaller than the bundle
// declares, before anything is enqueued). An input's elements are one dense block, its
// dimensions laid out in some order (its storage order: row-major, or NHWC for a 4-d tensor
// stored channels-last): a bundle compiled over that storage (stitch.torch's `_stored`) takes
// such a tensor's data as it lies. Where no variant matches, an input's elements are not one
// dense block, or the launch fails (the variant is then retired), the call goes to
// the region's fallback operator, stitch::region(name, inputs, sizes) or
// stitch::region_stored, which the Python package defines and which runs the region as the
// Python executor does; a region without a fallback raises instead, with the loader's
// message.
//
//   stitch::launch_stored(int region, Tensor[] inputs, SymInt[] sizes) -> Tensor[]
//
// is the same launch, for regions whose outputs follow their inputs' layout: Inductor hands
// it tensors as it laid them out (the flexible_layout tag), where it hands stitch::launch the
// strides it traced. It is defined where this PyTorch has that tag.
//
// The Python package registers what the launch needs once per region and variant:
//
//   stitch::launch_region(str fallback, str fallback_op="region") -> int
//   stitch::launch_variant(int region, Tensor[] inputs, SymInt[] sizes, Tensor[] outputs,
//                          int[] loader) -> int
//
// launch_region names the region's fallback: the stitch::<fallback_op> ("region" or
// "region_stored") call that gets `fallback` as its region name. launch_variant records the
// call's inputs (devices, dtypes, sizes and storage orders) and sizes as the variant's key and the
// outputs' sizes, strides, dtypes and device as what each launch allocates; `loader` is
// [stitch_loader_launch_at_extent, stitch_free, the stitch_loader*, the stitch_program*, the
// outer extent (0 for an exact bundle)], addresses taken from the libstitch_client.so the
// package loaded, so that the handles and the functions come from the same library. The
// program and the loader must outlive the variant (the package's executor keeps both for the
// life of the process). It returns the variant's number (0, 1, ... per region), or -1 when
// the region holds kMaxVariants already (the call's sizes then stay on the fallback).
//
//   stitch::launch_counts(int region) -> int[]
//
// returns and resets the counts since the last call: [fallback calls, launches of variant 0,
// launches of variant 1, ...].
//
// The operators' kernels are registered for CPU and, in a build with the CUDA runtime
// headers (STITCH_TORCH_LAUNCH_CUDA), for CUDA. A CPU tensor launches on stream 0: nothing
// runs kernels on host memory, but tests drive the same code against a stand-in driver.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#ifdef STITCH_TORCH_LAUNCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "stitch_loader.h"

namespace {

using LaunchFn = decltype(&stitch_loader_launch_at_extent);
using FreeFn = void (*)(void*);

// Inputs and size arguments above these counts take the fallback (no allocation per call).
constexpr size_t kInline = 16;
constexpr size_t kMaxVariants = 64;

using Key = c10::SmallVector<int64_t, 64>;

using Order = c10::SmallVector<int64_t, 8>;

// The order in which a tensor's dimensions of more than one element lie in memory, outermost
// first (where a dimension of one element lies takes no room): 0, 1, ... for row-major; 0, 2,
// 3, 1 for a 4-d tensor stored channels-last. False where its elements are not one dense
// block. Tensors of one order and sizes hold their elements at the same offsets, which is
// what a bundle compiled over that storage reads.
bool StorageOrder(const at::Tensor& t, Order& order) {
  order.clear();
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) != 1) order.push_back(d);
  }
  if (t.is_contiguous()) return true;
  std::stable_sort(order.begin(), order.end(),
                   [&t](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  int64_t step = 1;
  for (auto d = order.rbegin(); d != order.rend(); ++d) {
    if (t.stride(*d) != step) return false;
    step *= t.size(*d);
  }
  return true;
}

bool Dense(const at::Tensor& t) {
  Order order;
  return StorageOrder(t, order);
}

constexpr char kNotDense[] = "an input's elements are not one dense block";

// What identifies a variant: per input its device, dtype, storage order and sizes, then the
// size arguments. False, with `key` unfinished, where an input's elements are not one dense
// block: the one place a call's storage orders are read.
bool KeyOf(at::TensorList inputs, c10::SymIntArrayRef sizes, Key& key) {
  key.clear();
  key.push_back(static_cast<int64_t>(inputs.size()));
  Order order;
  for (const at::Tensor& t : inputs) {
    key.push_back(static_cast<int64_t>(t.device().type()));
    key.push_back(t.device().index());
    key.push_back(static_cast<int64_t>(t.scalar_type()));
    if (!StorageOrder(t, order)) return false;
    key.push_back(static_cast<int64_t>(order.size()));
    for (int64_t d : order) key.push_back(d);
    key.push_back(t.dim());
    for (int64_t d : t.sizes()) key.push_back(d);
  }
  key.push_back(static_cast<int64_t>(sizes.size()));
  for (const c10::SymInt& s : sizes) key.push_back(s.guard_int(__FILE__, __LINE__));
  return true;
}

struct Output {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  at::TensorOptions options;
};

struct Variant {
  Key key;
  std::vector<Output> outputs;
  LaunchFn launch = nullptr;
  FreeFn free = nullptr;
  stitch_loader* loader = nullptr;
  const stitch_program* program = nullptr;
  int64_t extent = 0;
  std::atomic<bool> retired{false};
  std::atomic<int64_t> launches{0};
};

struct Region {
  std::string fallback;     // the region's name for its fallback operator, "" for none
  std::string fallback_op;  // "region" or "region_stored"
  std::once_flag found_op;
  std::optional<c10::OperatorHandle> op;  // set once, at the first fallback
  std::shared_mutex mu;
  std::vector<std::unique_ptr<Variant>> variants;  // only appended to; guarded by mu
  std::atomic<int64_t> fallbacks{0};
};

std::shared_mutex g_mu;
std::vector<std::unique_ptr<Region>> g_regions;  // only appended to; guarded by g_mu

Region& RegionAt(int64_t id) {
  std::shared_lock<std::shared_mutex> lock(g_mu);
  TORCH_CHECK(id >= 0 && static_cast<size_t>(id) < g_regions.size(), "stitch::launch: region ", id,
              " is not registered");
  return *g_regions[static_cast<size_t>(id)];
}

Variant* Find(Region& region, const Key& key) {
  std::shared_lock<std::shared_mutex> lock(region.mu);
  for (const auto& v : region.variants) {
    if (!v->retired.load(std::memory_order_relaxed) && v->key == key) return v.get();
  }
  return nullptr;
}

std::vector<at::Tensor> Fallback(Region& region, at::TensorList inputs, c10::SymIntArrayRef sizes,
                                 const std::string& why) {
  TORCH_CHECK(!region.fallback.empty(), "stitch::launch: ", why);
  region.fallbacks.fetch_add(1, std::memory_order_relaxed);
  // Looked up at the first fallback: the Python package defines the operator when it first
  // replaces a region with it, which may be after the region was registered here.
  std::call_once(region.found_op, [&region] {
    region.op = c10::Dispatcher::singleton().findSchemaOrThrow(
        ("stitch::" + region.fallback_op).c_str(), "");
  });
  std::vector<c10::IValue> stack;
  stack.emplace_back(region.fallback);
  stack.emplace_back(inputs.vec());
  stack.emplace_back(sizes.vec());
  region.op->callBoxed(&stack);
  TORCH_CHECK(stack.size() == 1, "stitch::", region.fallback_op, " returned ", stack.size(),
              " values");
  return stack[0].toTensorVector();
}

// Why `inputs` cannot be launched as they are, or "" when they can, but for their storage,
// which KeyOf reads.
std::string Unlaunchable(at::TensorList inputs) {
  if (inputs.empty()) return "no inputs";
  if (inputs.size() > kInline) return "more than 16 inputs";
  for (const at::Tensor& t : inputs) {
    if (t.device() != inputs[0].device()) return "inputs on several devices";
  }
  return "";
}

uintptr_t CurrentStream(const at::Device& device) {
#ifdef STITCH_TORCH_LAUNCH_CUDA
  if (device.is_cuda()) {
    return reinterpret_cast<uintptr_t>(c10::cuda::getCurrentCUDAStream(device.index()).stream());
  }
#endif
  return 0;
}

std::vector<at::Tensor> Launch(int64_t region_id, at::TensorList inputs,
                               c10::SymIntArrayRef sizes) {
  Region& region = RegionAt(region_id);
  std::string why = Unlaunchable(inputs);
  if (!why.empty()) return Fallback(region, inputs, sizes, why);
  Key key;
  if (!KeyOf(inputs, sizes, key)) return Fallback(region, inputs, sizes, kNotDense);
  Variant* v = Find(region, key);
  if (v == nullptr) {
    return Fallback(region, inputs, sizes, "no variant for the inputs' sizes and dtypes");
  }
  const at::Device device = inputs[0].device();
  // The loader launches in the current context: the inputs' device's, as PyTorch's own
  // kernels would (a no-op on the CPU).
  const c10::OptionalDeviceGuard guard(device);
  std::vector<at::Tensor> outputs;
  outputs.reserve(v->outputs.size());
  c10::SmallVector<uint64_t, kInline> in_ptrs, in_bytes;
  c10::SmallVector<uint64_t, kInline> out_ptrs, out_bytes;
  for (const at::Tensor& t : inputs) {
    in_ptrs.push_back(reinterpret_cast<uint64_t>(t.const_data_ptr()));
    in_bytes.push_back(static_cast<uint64_t>(t.nbytes()));
  }
  for (const Output& o : v->outputs) {
    at::Tensor t = at::empty_strided(o.sizes, o.strides, o.options);
    out_ptrs.push_back(reinterpret_cast<uint64_t>(t.data_ptr()));
    out_bytes.push_back(static_cast<uint64_t>(t.nbytes()));
    outputs.push_back(std::move(t));
  }
  char* error = nullptr;
  int rc = v->launch(v->loader, v->program, in_ptrs.data(), in_bytes.data(), in_ptrs.size(),
                     out_ptrs.data(), out_bytes.data(), out_ptrs.size(), v->extent,
                     CurrentStream(device), &error);
  if (rc != 0) {
    std::string message = error != nullptr ? error : "UNKNOWN: no error text";
    if (error != nullptr) v->free(error);
    v->retired.store(true, std::memory_order_relaxed);
    return Fallback(region, inputs, sizes, message);
  }
  v->launches.fetch_add(1, std::memory_order_relaxed);
  return outputs;
}

int64_t AddRegion(c10::string_view fallback, c10::string_view fallback_op) {
  TORCH_CHECK(fallback_op == "region" || fallback_op == "region_stored",
              "stitch::launch_region: the fallback operator is \"region\" or \"region_stored\", "
              "not \"",
              std::string(fallback_op), "\"");
  auto region = std::make_unique<Region>();
  region->fallback = std::string(fallback);
  region->fallback_op = std::string(fallback_op);
  std::unique_lock<std::shared_mutex> lock(g_mu);
  g_regions.push_back(std::move(region));
  return static_cast<int64_t>(g_regions.size()) - 1;
}

int64_t AddVariant(int64_t region_id, at::TensorList inputs, c10::SymIntArrayRef sizes,
                   at::TensorList outputs, at::IntArrayRef loader) {
  Region& region = RegionAt(region_id);
  TORCH_CHECK(loader.size() == 5,
              "stitch::launch_variant: loader is [launch, free, loader, program, extent]");
  TORCH_CHECK(loader[0] != 0 && loader[1] != 0 && loader[2] != 0 && loader[3] != 0,
              "stitch::launch_variant: a null function or handle");
  TORCH_CHECK(Unlaunchable(inputs).empty(), "stitch::launch_variant: ", Unlaunchable(inputs));
  auto v = std::make_unique<Variant>();
  TORCH_CHECK(KeyOf(inputs, sizes, v->key), "stitch::launch_variant: ", kNotDense);
  for (const at::Tensor& t : outputs) {
    TORCH_CHECK(Dense(t) && t.device() == inputs[0].device(),
                "stitch::launch_variant: outputs are dense blocks on the inputs' device");
    v->outputs.push_back(Output{t.sizes().vec(), t.strides().vec(), t.options()});
  }
  v->launch = reinterpret_cast<LaunchFn>(static_cast<uintptr_t>(loader[0]));
  v->free = reinterpret_cast<FreeFn>(static_cast<uintptr_t>(loader[1]));
  v->loader = reinterpret_cast<stitch_loader*>(static_cast<uintptr_t>(loader[2]));
  v->program = reinterpret_cast<const stitch_program*>(static_cast<uintptr_t>(loader[3]));
  v->extent = loader[4];
  std::unique_lock<std::shared_mutex> lock(region.mu);
  if (region.variants.size() >= kMaxVariants) return -1;
  region.variants.push_back(std::move(v));
  return static_cast<int64_t>(region.variants.size()) - 1;
}

std::vector<int64_t> Counts(int64_t region_id) {
  Region& region = RegionAt(region_id);
  std::vector<int64_t> counts{region.fallbacks.exchange(0, std::memory_order_relaxed)};
  std::shared_lock<std::shared_mutex> lock(region.mu);
  for (const auto& v : region.variants) {
    counts.push_back(v->launches.exchange(0, std::memory_order_relaxed));
  }
  return counts;
}

}  // namespace

// Inductor keeps stitch::launch's inputs' strides as traced (stitch::launch_stored's as it
// laid them out), and captures no launch in a CUDA graph where this PyTorch has the tag: a
// bundle's first launch on a stream allocates its temporaries, which stream capture forbids,
// and a call the C++ path cannot serve runs Python. Inductor's CUDA graphs then partition
// around the launches (python/stitch/torch/_inductor.py, region_op_tags, tags stitch::region
// and stitch::region_stored alike).
TORCH_LIBRARY_FRAGMENT(stitch, m) {
  m.def("launch(int region, Tensor[] inputs, SymInt[] sizes) -> Tensor[]",
        {at::Tag::needs_fixed_stride_order,
#ifdef STITCH_TORCH_HAS_CUDAGRAPH_UNSAFE_TAG
         at::Tag::cudagraph_unsafe
#endif
        });
#ifdef STITCH_TORCH_HAS_FLEXIBLE_LAYOUT_TAG
  m.def("launch_stored(int region, Tensor[] inputs, SymInt[] sizes) -> Tensor[]",
        {at::Tag::flexible_layout,
#ifdef STITCH_TORCH_HAS_CUDAGRAPH_UNSAFE_TAG
         at::Tag::cudagraph_unsafe
#endif
        });
#endif
  m.def("launch_region(str fallback, str fallback_op=\"region\") -> int", &AddRegion);
  m.def(
      "launch_variant(int region, Tensor[] inputs, SymInt[] sizes, Tensor[] outputs, "
      "int[] loader) -> int",
      &AddVariant);
  m.def("launch_counts(int region) -> int[]", &Counts);
}

TORCH_LIBRARY_IMPL(stitch, CPU, m) {
  m.impl("launch", &Launch);
#ifdef STITCH_TORCH_HAS_FLEXIBLE_LAYOUT_TAG
  m.impl("launch_stored", &Launch);
#endif
}

#ifdef STITCH_TORCH_LAUNCH_CUDA
TORCH_LIBRARY_IMPL(stitch, CUDA, m) {
  m.impl("launch", &Launch);
#ifdef STITCH_TORCH_HAS_FLEXIBLE_LAYOUT_TAG
  m.impl("launch_stored", &Launch);
#endif
}
#endif
