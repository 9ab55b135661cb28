#include "stitch/emulator/emulated_run.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <numeric>
#include <random>
#include <set>

#include "stitch/ir/aliasing.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/schedule.h"

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

LaunchOptions CheckedLaunch(const Graph& g, const CompiledKernel& kernel) {
  LaunchOptions launch;
  for (int node : kernel.param_nodes) {
    const Node& n = g.nodes[static_cast<size_t>(node)];
    launch.arg_bytes.push_back(static_cast<uint64_t>(n.shape.bytes()));
    launch.arg_names.push_back("node " + std::to_string(node) + " '" + n.name + "' " +
                               n.shape.ToString());
  }
  if (kernel.workspace_bytes != 0) {
    launch.arg_bytes.push_back(kernel.workspace_bytes);
    launch.arg_names.push_back("workspace");
  }
  if (kernel.takes_outer_extent) {
    launch.arg_bytes.push_back(sizeof(int64_t));
    launch.arg_names.push_back("outer extent");
  }
  return launch;
}

namespace {

// Appends the outer extent to the arguments of a kernel that takes it (codegen.h).
Status AddOuterExtent(const CompiledKernel& kernel, int64_t& extent, std::vector<void*>& args) {
  if (!kernel.takes_outer_extent) return Status::Ok();
  if (extent <= 0) {
    return InvalidArgument("kernel " + kernel.name +
                           " is shape-generic: the run needs its outer extent");
  }
  args.push_back(&extent);
  return Status::Ok();
}

}  // namespace

StatusOr<EmulatedRun> RunOnEmulator(const Graph& g, const std::vector<CompiledKernel>& kernels,
                                    const std::vector<Tensor>& params, Emulator& emulator,
                                    int64_t outer_extent) {
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
    LaunchOptions launch = CheckedLaunch(g, kernel);
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
    STITCH_RETURN_IF_ERROR(AddOuterExtent(kernel, outer_extent, args));
    StatusOr<LaunchStats> stats = emulator.Launch(kernel, args, launch);
    if (!stats.ok()) return stats.status().WithContext("kernel " + kernel.name);
    run.per_kernel.push_back(*stats);
  }
  for (int o : g.outputs) {
    // An output that is a parameter's bytes is bound to the parameter's buffer (aliasing.h).
    auto it = buffers.find(OutputBufferNode(g, o));
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

uint64_t SampledRun::blocks_run() const {
  uint64_t n = 0;
  for (const SampledLaunch& l : launches) n += l.blocks.size();
  return n;
}

uint64_t SampledRun::blocks_total() const {
  uint64_t n = 0;
  for (const SampledLaunch& l : launches) n += l.launch.blocks();
  return n;
}

std::vector<uint64_t> SampleBlocks(const Graph& g, const KernelSpec& spec,
                                   const BlockSampling& sampling) {
  const uint64_t total = spec.mapping.launch.blocks();
  const std::vector<uint64_t> boundary = BoundaryBlocks(g, spec);
  std::set<uint64_t> blocks(boundary.begin(), boundary.end());
  blocks.insert(0);
  blocks.insert(total - 1);
  // `wanted` never exceeds the grid, so the draws end.
  const uint64_t wanted =
      std::min<uint64_t>(total, blocks.size() + static_cast<uint64_t>(sampling.random_blocks));
  std::mt19937_64 rng(sampling.seed);
  std::uniform_int_distribution<uint64_t> pick(0, total - 1);
  while (blocks.size() < wanted) blocks.insert(pick(rng));
  return {blocks.begin(), blocks.end()};
}

namespace {

// Zero-filled memory mapped on first touch: a full-size tensor that a sample of blocks reads
// in a few places costs only the pages they touch. Page-aligned, so 256-byte aligned.
class LazyBuffer {
 public:
  static StatusOr<LazyBuffer> Map(uint64_t bytes, const std::string& what) {
    LazyBuffer b;
    b.bytes_ = std::max<uint64_t>(bytes, 1);
    void* p = mmap(nullptr, b.bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return ResourceExhausted("cannot map " + std::to_string(bytes) + " bytes for " + what);
    }
    b.data_ = p;
    return b;
  }
  LazyBuffer() = default;
  LazyBuffer(LazyBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_) { o.data_ = nullptr; }
  LazyBuffer& operator=(LazyBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~LazyBuffer() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  uint64_t bytes_ = 0;
};

// Runs `kernels` at full geometry on lazily mapped buffers, the k-th over the blocks
// `blocks(k)`, each access bounds-checked.
StatusOr<SampledRun> RunBlocksOnEmulator(const Graph& g, const FusionPlan& plan,
                                         const std::vector<CompiledKernel>& kernels,
                                         const std::function<std::vector<uint64_t>(size_t)>& blocks,
                                         Emulator& emulator, int64_t outer_extent) {
  if (plan.kernels.size() != kernels.size()) {
    return InvalidArgument("the plan has " + std::to_string(plan.kernels.size()) +
                           " kernels, but " + std::to_string(kernels.size()) + " were compiled");
  }
  std::map<int, LazyBuffer> buffers;
  SampledRun run;
  for (size_t k = 0; k < kernels.size(); ++k) {
    const CompiledKernel& kernel = kernels[k];
    std::vector<void*> args;
    for (int node : kernel.param_nodes) {
      auto it = buffers.find(node);
      if (it == buffers.end()) {
        STITCH_ASSIGN_OR_RETURN(LazyBuffer b,
                                LazyBuffer::Map(static_cast<uint64_t>(g.nodes[node].shape.bytes()),
                                                "node " + std::to_string(node)));
        it = buffers.emplace(node, std::move(b)).first;
      }
      args.push_back(it->second.data());
    }
    LazyBuffer workspace;
    if (kernel.workspace_bytes != 0) {
      STITCH_ASSIGN_OR_RETURN(workspace, LazyBuffer::Map(kernel.workspace_bytes, "the workspace"));
      args.push_back(workspace.data());
    }
    STITCH_RETURN_IF_ERROR(AddOuterExtent(kernel, outer_extent, args));
    LaunchOptions launch = CheckedLaunch(g, kernel);
    launch.blocks = blocks(k);
    StatusOr<LaunchStats> stats = emulator.Launch(kernel, args, launch);
    if (!stats.ok()) return stats.status().WithContext("kernel " + kernel.name);
    run.launches.push_back({kernel.name, kernel.kind, kernel.launch, launch.blocks, *stats});
  }
  return run;
}

}  // namespace

StatusOr<SampledRun> RunSampledOnEmulator(const Graph& g, const FusionPlan& plan,
                                          const std::vector<CompiledKernel>& kernels,
                                          const BlockSampling& sampling, Emulator& emulator,
                                          int64_t outer_extent) {
  return RunBlocksOnEmulator(
      g, plan, kernels, [&](size_t k) { return SampleBlocks(g, plan.kernels[k], sampling); },
      emulator, outer_extent);
}

std::vector<uint64_t> PrefixBlocks(const KernelSpec& spec, const PrefixSampling& prefix) {
  const uint64_t total = spec.mapping.launch.blocks();
  const uint64_t model = static_cast<uint64_t>(
      std::max<int64_t>(spec.mapping.bytes_loaded + spec.mapping.bytes_stored, 0));
  // ceil(prefix.model_bytes / (model / total)) blocks, at least one.
  uint64_t n = total;
  if (model > 0) {
    const double per_block = static_cast<double>(model) / static_cast<double>(total);
    n = static_cast<uint64_t>(std::ceil(static_cast<double>(prefix.model_bytes) / per_block));
  }
  n = std::clamp<uint64_t>(n, 1, total);
  if (spec.mapping.grid_barriers > 0) {
    const uint64_t threads = spec.mapping.launch.threads() / std::max<uint64_t>(total, 1);
    n = std::min(
        n, std::max<uint64_t>(1, prefix.max_grid_barrier_threads / std::max<uint64_t>(threads, 1)));
  }
  std::vector<uint64_t> blocks(n);
  std::iota(blocks.begin(), blocks.end(), uint64_t{0});
  return blocks;
}

StatusOr<SampledRun> RunPrefixOnEmulator(const Graph& g, const FusionPlan& plan,
                                         const std::vector<CompiledKernel>& kernels,
                                         const PrefixSampling& prefix, Emulator& emulator,
                                         int64_t outer_extent) {
  return RunBlocksOnEmulator(
      g, plan, kernels, [&](size_t k) { return PrefixBlocks(plan.kernels[k], prefix); }, emulator,
      outer_extent);
}

SectorTrafficOptions SectorTrafficOptionsFor(const GpuDevice& device) {
  SectorTrafficOptions o;
  o.reuse_window_bytes =
      static_cast<uint64_t>(CostModelParametersFor(device, kCurrentCostModel).reuse_window_bytes);
  o.prefix.model_bytes = o.reuse_window_bytes * 3 / 2;
  return o;
}

StatusOr<SampledRun> MeasureSectorTraffic(const Graph& g, const FusionPlan& plan,
                                          const std::vector<CompiledKernel>& kernels,
                                          const SectorTrafficOptions& options,
                                          int64_t outer_extent) {
  if (plan.kernels.size() != kernels.size()) {
    return InvalidArgument("the plan has " + std::to_string(plan.kernels.size()) +
                           " kernels, but " + std::to_string(kernels.size()) + " were compiled");
  }
  SampledRun run;
  // One emulator per window: a grid-barrier kernel run in part gets a window of its own.
  std::map<uint64_t, std::unique_ptr<Emulator>> emulators;
  for (size_t k = 0; k < kernels.size(); ++k) {
    const KernelSpec& spec = plan.kernels[k];
    const std::vector<uint64_t> blocks = PrefixBlocks(spec, options.prefix);
    uint64_t window = options.reuse_window_bytes;
    if (spec.mapping.grid_barriers > 0) {
      window =
          static_cast<uint64_t>(static_cast<double>(window) * static_cast<double>(blocks.size()) /
                                static_cast<double>(spec.mapping.launch.blocks()));
    }
    std::unique_ptr<Emulator>& emulator = emulators[window];
    if (emulator == nullptr) {
      EmulatorOptions eo;
      eo.count_sectors = true;
      eo.reuse_window_bytes = window;
      STITCH_ASSIGN_OR_RETURN(emulator, Emulator::Create(eo));
    }
    // The kernels before this one ran on their own buffers: a prefix run only checks where
    // each launch's accesses go, not what they compute, so each runs on fresh zero buffers.
    FusionPlan one;
    one.kernels = {spec};
    STITCH_ASSIGN_OR_RETURN(
        SampledRun part,
        RunBlocksOnEmulator(
            g, one, {kernels[k]}, [&](size_t) { return blocks; }, *emulator, outer_extent));
    run.launches.push_back(std::move(part.launches.front()));
  }
  return run;
}

double FetchedPerUsed(const LaunchStats& s) {
  const uint64_t used = s.sector_loads.used_bytes + s.sector_stores.used_bytes;
  const uint64_t fetched = s.sector_loads.fetched_bytes + s.sector_stores.fetched_bytes;
  return used == 0 ? 0.0 : static_cast<double>(fetched) / static_cast<double>(used);
}

double DramPerDistinct(const LaunchStats& s) {
  const uint64_t distinct = s.sector_loads.distinct_bytes + s.sector_stores.distinct_bytes;
  const uint64_t dram = s.sector_loads.dram_bytes + s.sector_stores.dram_bytes;
  return distinct == 0 ? 0.0 : static_cast<double>(dram) / static_cast<double>(distinct);
}

}  // namespace stitch
