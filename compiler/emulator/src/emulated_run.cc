#include "stitch/emulator/emulated_run.h"

#include <map>
#include <new>

namespace stitch {

uint64_t EmulatedRun::global_bytes() const {
  uint64_t total = 0;
  for (const LaunchStats& s : per_kernel) total += s.global_bytes_loaded + s.global_bytes_stored;
  return total;
}

namespace {

// Buffers start on 256-byte boundaries, as cudaMalloc's do, so footprints in 32-byte
// sectors match the GPU's.
template <typename T>
struct DeviceAlignedAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{256};
  DeviceAlignedAllocator() = default;
  template <typename U>
  DeviceAlignedAllocator(const DeviceAlignedAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlignment)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlignment); }
  bool operator==(const DeviceAlignedAllocator&) const { return true; }
};

using DeviceBuffer = std::vector<uint8_t, DeviceAlignedAllocator<uint8_t>>;

}  // namespace

StatusOr<EmulatedRun> RunOnEmulator(const Graph& g, const std::vector<CompiledKernel>& kernels,
                                    const std::vector<Tensor>& params, Emulator& emulator) {
  std::vector<int> param_nodes = g.Parameters();
  if (params.size() != param_nodes.size()) {
    return InvalidArgument("graph takes " + std::to_string(param_nodes.size()) +
                           " parameters, got " + std::to_string(params.size()));
  }
  std::map<int, DeviceBuffer> buffers;
  for (size_t k = 0; k < params.size(); ++k) {
    const Shape& want = g.nodes[param_nodes[k]].shape;
    if (params[k].shape != want) {
      return InvalidArgument("parameter " + std::to_string(k) + " is " +
                             params[k].shape.ToString() + ", expected " + want.ToString());
    }
    std::vector<uint8_t> bytes = ToDeviceBytes(params[k]);
    buffers[param_nodes[k]].assign(bytes.begin(), bytes.end());
  }
  EmulatedRun run;
  // One workspace per kernel, zero-filled before its launch, as codegen.h asks of a host.
  std::vector<DeviceBuffer> workspaces;
  workspaces.reserve(kernels.size());
  for (const CompiledKernel& kernel : kernels) {
    std::vector<void*> args;
    for (int node : kernel.param_nodes) {
      auto [it, fresh] = buffers.try_emplace(node);
      if (fresh) it->second.assign(static_cast<size_t>(g.nodes[node].shape.bytes()), 0xff);
      // A zero-size tensor still needs a valid, distinct address.
      if (it->second.empty()) it->second.reserve(1);
      args.push_back(it->second.data());
    }
    if (kernel.workspace_bytes != 0) {
      workspaces.emplace_back(static_cast<size_t>(kernel.workspace_bytes), uint8_t{0});
      args.push_back(workspaces.back().data());
    }
    StatusOr<LaunchStats> stats = emulator.Launch(kernel, args);
    if (!stats.ok()) return stats.status().WithContext("kernel " + kernel.name);
    run.per_kernel.push_back(*stats);
  }
  for (int o : g.outputs) {
    auto it = buffers.find(o);
    if (it == buffers.end()) {
      return Internal("no kernel wrote graph output node " + std::to_string(o));
    }
    STITCH_ASSIGN_OR_RETURN(
        Tensor t, FromDeviceBytes(g.nodes[o].shape,
                                  std::vector<uint8_t>(it->second.begin(), it->second.end())));
    run.outputs.push_back(std::move(t));
  }
  return run;
}

}  // namespace stitch
