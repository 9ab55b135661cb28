// The device-independent half of the loader: target strings, the image choice, bundle
// validation, and the report-once wrapper around Open.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "stitch/loader/kernel_loader.h"

namespace stitch::loader {

const char* ImageKindName(ImageKind kind) { return kind == ImageKind::kCubin ? "cubin" : "ptx"; }

StatusOr<ComputeCapability> ParseTarget(std::string_view target) {
  constexpr std::string_view kPrefix = "sm_";
  const auto bad = [&] {
    return InvalidArgument("malformed target \"" + std::string(target) +
                           "\" (expected sm_ followed by digits, e.g. sm_90)");
  };
  if (target.substr(0, kPrefix.size()) != kPrefix) return bad();
  const std::string_view digits = target.substr(kPrefix.size());
  // Two digits at least: the last is the minor version, the rest the major.
  if (digits.size() < 2 || digits.size() > 4) return bad();
  int value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return bad();
    value = value * 10 + (c - '0');
  }
  return ComputeCapability{value / 10, value % 10};
}

namespace {

std::string SmName(ComputeCapability cc) {
  return "sm_" + std::to_string(cc.major) + std::to_string(cc.minor);
}

bool NotNewer(ComputeCapability a, ComputeCapability b) {
  return a.major < b.major || (a.major == b.major && a.minor <= b.minor);
}

}  // namespace

StatusOr<ImageKind> ChooseImage(std::string_view target, bool has_cubin, ComputeCapability device,
                                int device_ordinal) {
  STITCH_ASSIGN_OR_RETURN(ComputeCapability want, ParseTarget(target));
  // A cubin runs only on its own major architecture, on the same or a later minor revision.
  if (has_cubin && want.major == device.major && want.minor <= device.minor) {
    return ImageKind::kCubin;
  }
  // PTX is forward-compatible: the driver JIT compiles it for any newer device.
  if (NotNewer(want, device)) return ImageKind::kPtx;
  const std::string who =
      device_ordinal < 0 ? "the device" : "device " + std::to_string(device_ordinal);
  return FailedPrecondition("bundle targets " + std::string(target) + " but " + who + " is " +
                            SmName(device));
}

namespace {

// The largest buffer index a kernel parameter may name: far past any graph's parameters,
// outputs or temporaries (GraphLimits bounds a graph to 20,000 nodes), and small enough that
// the counts derived from it cannot overflow.
constexpr int kMaxBufferIndex = (1 << 24) - 1;

// The largest extent a bundle may declare: far past any batch or token count, and small
// enough that bytes per extent times it cannot overflow for any buffer that fits a GPU.
constexpr int64_t kMaxOuterExtent = int64_t{1} << 32;

// Refuses a buffer whose size at the top extent is more than its declared bytes.
Status CheckBytesPerExtent(const std::string& who, uint64_t bytes, uint64_t per_extent,
                           int64_t top) {
  if (per_extent == 0) return Status::Ok();
  if (per_extent > bytes / static_cast<uint64_t>(top)) {
    return InvalidArgument(who + " takes " + std::to_string(per_extent) +
                           " bytes per extent, over its " + std::to_string(bytes) +
                           " bytes at the top extent " + std::to_string(top));
  }
  return Status::Ok();
}

// The outer-extent half of ParseProgram's checks (kernel_loader.h).
Status CheckOuterExtentSpec(const v1::KernelBundle& b) {
  if (!b.has_outer_extent()) {
    for (const v1::Kernel& k : b.kernels()) {
      if (k.takes_outer_extent()) {
        return InvalidArgument("kernel " + k.name() +
                               " takes an outer extent, but the bundle names no extents it serves");
      }
    }
    return Status::Ok();
  }
  const int64_t lo = b.outer_extent().lo(), hi = b.outer_extent().hi();
  if (lo < 1 || hi < lo || hi > kMaxOuterExtent) {
    return InvalidArgument("bundle serves outer extents " + std::to_string(lo) + " to " +
                           std::to_string(hi) +
                           " (needs 1 <= lo <= hi <= " + std::to_string(kMaxOuterExtent) + ")");
  }
  for (int i = 0; i < b.inputs_size(); ++i) {
    STITCH_RETURN_IF_ERROR(CheckBytesPerExtent("input " + std::to_string(i), b.inputs(i).bytes(),
                                               b.inputs(i).bytes_per_extent(), hi));
  }
  for (int i = 0; i < b.outputs_size(); ++i) {
    STITCH_RETURN_IF_ERROR(CheckBytesPerExtent("output " + std::to_string(i), b.outputs(i).bytes(),
                                               b.outputs(i).bytes_per_extent(), hi));
  }
  for (int i = 0; i < b.temporaries_size(); ++i) {
    STITCH_RETURN_IF_ERROR(CheckBytesPerExtent("temporary " + std::to_string(i),
                                               b.temporaries(i).bytes(),
                                               b.temporaries(i).bytes_per_extent(), hi));
  }
  return Status::Ok();
}

// The largest of `indices`, or -1 for none.
int MaxIndex(const std::set<int>& indices) { return indices.empty() ? -1 : *indices.rbegin(); }

// Checks the declared buffer lists against the kernels' parameters, and each output that
// aliases an input (BufferSpec.aliases_input): a declared input of the same size, written
// by no kernel. `written` holds the output indices some kernel takes.
Status CheckDeclaredBuffers(const v1::KernelBundle& b, int max_input,
                            const std::set<int>& written) {
  const int max_output = MaxIndex(written);
  if (b.inputs_size() > 0 && max_input >= b.inputs_size()) {
    return InvalidArgument("a kernel takes input " + std::to_string(max_input) +
                           ", but the bundle declares " + std::to_string(b.inputs_size()));
  }
  if (b.outputs_size() > 0 && max_output >= b.outputs_size()) {
    return InvalidArgument("a kernel takes output " + std::to_string(max_output) +
                           ", but the bundle declares " + std::to_string(b.outputs_size()));
  }
  for (int i = 0; i < b.outputs_size(); ++i) {
    const v1::BufferSpec& out = b.outputs(i);
    if (!out.has_aliases_input()) continue;
    const std::string who = "output " + std::to_string(i);
    const int input = out.aliases_input();
    if (input < 0 || input >= b.inputs_size()) {
      return InvalidArgument(who + " aliases input " + std::to_string(input) +
                             ", but the bundle declares " + std::to_string(b.inputs_size()) +
                             " inputs");
    }
    const v1::BufferSpec& in = b.inputs(input);
    if (in.bytes() != out.bytes() || in.bytes_per_extent() != out.bytes_per_extent()) {
      return InvalidArgument(who + " (" + out.shape() + ") aliases input " + std::to_string(input) +
                             " (" + in.shape() + ") of another size");
    }
    if (written.count(i)) {
      return InvalidArgument(who + " aliases input " + std::to_string(input) +
                             ", but a kernel writes it");
    }
  }
  return Status::Ok();
}

// The buffers the kernels' parameters name: the highest input index, and the outputs some
// kernel writes.
struct NamedBuffers {
  int max_input = -1;
  std::set<int> written;
};

// A kernel's name, code and launch: a block of at most 1,024 threads, no zero dimension, and
// a workspace where it synchronises its grid.
Status CheckKernelLaunch(const v1::Kernel& kernel, const std::string& who) {
  if (kernel.name().empty()) return InvalidArgument(who + " has no name");
  if (kernel.ptx().empty() && kernel.cubin().empty()) {
    return InvalidArgument(who + " has neither PTX nor cubin");
  }
  const v1::LaunchDims& d = kernel.launch();
  if (d.grid_x() == 0 || d.grid_y() == 0 || d.grid_z() == 0 || d.block_x() == 0 ||
      d.block_y() == 0 || d.block_z() == 0) {
    return InvalidArgument(who + " has a zero launch dimension");
  }
  const uint64_t threads = uint64_t{d.block_x()} * uint64_t{d.block_y()} * uint64_t{d.block_z()};
  if (threads > 1024) {
    return InvalidArgument(who + " has " + std::to_string(threads) +
                           " threads per block (at most 1024)");
  }
  if (kernel.cooperative() && kernel.workspace_bytes() == 0) {
    return InvalidArgument(who +
                           " is cooperative (grid-wide barriers) but has no workspace for them");
  }
  return Status::Ok();
}

// A kernel's parameters: each names a buffer within the bundle's limits in a valid role, and
// a temporary the bundle declares. The inputs and outputs they name are added to `named`.
Status CheckKernelParams(const v1::Kernel& kernel, const std::string& who, int temporaries,
                         NamedBuffers& named) {
  for (int i = 0; i < kernel.params_size(); ++i) {
    const v1::KernelParam& param = kernel.params(i);
    const std::string which = who + " parameter " + std::to_string(i);
    if (param.index() < 0) {
      return InvalidArgument(which + " has negative index " + std::to_string(param.index()));
    }
    if (param.index() > kMaxBufferIndex) {
      return InvalidArgument(which + " has index " + std::to_string(param.index()) + ", past the " +
                             std::to_string(kMaxBufferIndex + 1) + " buffers a bundle may name");
    }
    switch (param.role()) {
      case v1::KernelParam::INPUT:
        named.max_input = std::max(named.max_input, param.index());
        break;
      case v1::KernelParam::OUTPUT:
        named.written.insert(param.index());
        break;
      case v1::KernelParam::TEMPORARY:
        if (param.index() >= temporaries) {
          return InvalidArgument(which + " names temporary " + std::to_string(param.index()) +
                                 " but the bundle has " + std::to_string(temporaries));
        }
        break;
      default:
        return InvalidArgument(which + " has no valid role (" +
                               std::to_string(static_cast<int>(param.role())) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::shared_ptr<const Program>> ParseProgram(std::string_view bytes) {
  std::shared_ptr<Program> p(new Program());
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return InvalidArgument("bundle of " + std::to_string(bytes.size()) +
                           " bytes is over protobuf's 2 GiB limit");
  }
  if (!p->bundle_.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return InvalidArgument("bundle bytes do not parse as a stitch.v1.KernelBundle (" +
                           std::to_string(bytes.size()) + " bytes)");
  }
  const v1::KernelBundle& b = p->bundle_;
  STITCH_RETURN_IF_ERROR(ParseTarget(b.target()).status());
  if (b.kernels_size() == 0) return InvalidArgument("bundle has no kernels");
  NamedBuffers named;
  bool all_cubin = true;
  for (int k = 0; k < b.kernels_size(); ++k) {
    const v1::Kernel& kernel = b.kernels(k);
    const std::string who = "kernel " + std::to_string(k) + " (" + kernel.name() + ")";
    STITCH_RETURN_IF_ERROR(CheckKernelLaunch(kernel, who));
    STITCH_RETURN_IF_ERROR(CheckKernelParams(kernel, who, b.temporaries_size(), named));
    all_cubin = all_cubin && !kernel.cubin().empty();
  }
  STITCH_RETURN_IF_ERROR(CheckOuterExtentSpec(b));
  STITCH_RETURN_IF_ERROR(CheckDeclaredBuffers(b, named.max_input, named.written));
  // The declared lists are the graph's signature: a parameter no kernel reads, or an output
  // that aliases an input, is still passed.
  p->num_inputs_ = std::max(named.max_input + 1, b.inputs_size());
  p->num_outputs_ = std::max(MaxIndex(named.written) + 1, b.outputs_size());
  for (int i = 0; i < b.outputs_size(); ++i) {
    if (b.outputs(i).has_aliases_input()) {
      p->output_aliases_.push_back({i, b.outputs(i).aliases_input()});
    }
  }
  p->has_cubin_ = all_cubin;
  static std::atomic<uint64_t> serial{0};
  p->cache_key_ = b.key().empty() ? "#" + std::to_string(++serial) : b.key();
  return std::shared_ptr<const Program>(std::move(p));
}

StatusOr<std::unique_ptr<KernelLoader>> OpenReportingOnce(
    const LoaderOptions& options, const std::function<void(const Status&)>& report) {
  static std::mutex mu;
  static std::map<std::string, Status>* failures = new std::map<std::string, Status>;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = failures->find(options.driver_library); it != failures->end()) return it->second;
  StatusOr<std::unique_ptr<KernelLoader>> loader = KernelLoader::Open(options);
  if (loader.ok()) return loader;
  failures->emplace(options.driver_library, loader.status());
  if (report) {
    report(loader.status());
  } else {
    std::fprintf(stderr, "stitch: the CUDA kernel loader is unavailable: %s\n",
                 loader.status().ToString().c_str());
  }
  return loader.status();
}

namespace {

// The bytes a buffer of `spec` holds at `outer_extent` (0: the bundle's own shapes).
uint64_t BytesAt(const v1::BufferSpec& spec, int64_t outer_extent) {
  if (outer_extent <= 0 || spec.bytes_per_extent() == 0) return spec.bytes();
  return spec.bytes_per_extent() * static_cast<uint64_t>(outer_extent);
}

Status CheckSizes(const char* what, const google::protobuf::RepeatedPtrField<v1::BufferSpec>& specs,
                  std::span<const uint64_t> given, int64_t outer_extent) {
  for (size_t i = 0; i < given.size() && i < static_cast<size_t>(specs.size()); ++i) {
    const v1::BufferSpec& want = specs[static_cast<int>(i)];
    const uint64_t need = BytesAt(want, outer_extent);
    if (given[i] != 0 && given[i] < need) {
      const std::string shape =
          need == want.bytes() ? want.shape()
                               : want.shape() + " at outer extent " + std::to_string(outer_extent);
      return InvalidArgument(std::string(what) + " " + std::to_string(i) + " is a " +
                             std::to_string(given[i]) + "-byte buffer, but the bundle's " + what +
                             " " + std::to_string(i) + " is " + shape + " (" +
                             std::to_string(need) + " bytes)");
    }
  }
  return Status::Ok();
}

}  // namespace

uint64_t Program::OutputBytes(int i, int64_t outer_extent) const {
  return BytesAt(bundle_.outputs(i), outer_extent);
}

Status CheckBufferCounts(const Program& program, size_t inputs, size_t outputs) {
  if (inputs != static_cast<size_t>(program.num_inputs()) ||
      outputs != static_cast<size_t>(program.num_outputs())) {
    return InvalidArgument("bundle " + program.key() + " takes " +
                           std::to_string(program.num_inputs()) + " inputs and " +
                           std::to_string(program.num_outputs()) + " outputs, got " +
                           std::to_string(inputs) + " and " + std::to_string(outputs));
  }
  return Status::Ok();
}

Status CheckOuterExtent(const Program& program, int64_t outer_extent) {
  if (!program.shape_generic()) {
    if (outer_extent == 0) return Status::Ok();
    return InvalidArgument("bundle " + program.key() + " serves exact shapes, got outer extent " +
                           std::to_string(outer_extent));
  }
  if (outer_extent >= program.min_outer_extent() && outer_extent <= program.max_outer_extent()) {
    return Status::Ok();
  }
  return InvalidArgument("bundle " + program.key() + " serves outer extents " +
                         std::to_string(program.min_outer_extent()) + " to " +
                         std::to_string(program.max_outer_extent()) + ", got " +
                         std::to_string(outer_extent));
}

Status CheckBufferSizes(const Program& program, std::span<const uint64_t> input_bytes,
                        std::span<const uint64_t> output_bytes, int64_t outer_extent) {
  STITCH_RETURN_IF_ERROR(CheckBufferCounts(program, input_bytes.size(), output_bytes.size()));
  STITCH_RETURN_IF_ERROR(CheckOuterExtent(program, outer_extent));
  STITCH_RETURN_IF_ERROR(CheckSizes("input", program.bundle().inputs(), input_bytes, outer_extent));
  return CheckSizes("output", program.bundle().outputs(), output_bytes, outer_extent);
}

}  // namespace stitch::loader
