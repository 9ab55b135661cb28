// The kernel loader: runs the kernels of a stitch.v1.KernelBundle (the cache value) on the
// GPU of the caller's current CUDA context, on the caller's stream, through the CUDA driver
// API opened at run time with dlopen (nothing links against libcuda).
//
// Thread-safety: a Program is immutable once Load returns it and may be shared freely
// between threads. A KernelLoader may be called from several threads at once: one mutex
// guards its caches (modules per context, buffers per stream) and is held for the whole of a
// Launch, which only enqueues work and does not wait for the GPU. The free functions are
// pure, except OpenReportingOnce, which is safe to call from any thread.
//
// Errors: nothing throws. Malformed bundles and buffer lists are INVALID_ARGUMENT naming the
// kernel or the count; an image the device cannot run, or no current context, is
// FAILED_PRECONDITION; a driver that cannot be opened is UNAVAILABLE; a driver call that
// fails is INTERNAL with the driver's error name (and the JIT's log for PTX).
//
// Lifetime: modules, temporaries and workspaces are created lazily per context (and per
// stream) and released when the loader is destroyed, which must happen before the contexts
// it launched in are destroyed and after the work it enqueued has finished.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/v1/kernel_bundle.pb.h"

namespace stitch::loader {

// A CUDA compute capability, e.g. {9, 0} for sm_90.
struct ComputeCapability {
  int major = 0;
  int minor = 0;
};

// How a kernel's code reaches the device.
enum class ImageKind {
  kCubin,  // the bundle's cubin, loaded as it is
  kPtx,    // the bundle's PTX, compiled by the driver's JIT at load time
};

// Returns "cubin" or "ptx".
const char* ImageKindName(ImageKind kind);

// Returns the capability a target string names ("sm_90" -> 9.0, "sm_100" -> 10.0), or
// INVALID_ARGUMENT when it is not "sm_" followed by two or more digits.
StatusOr<ComputeCapability> ParseTarget(std::string_view target);

// Returns the image to load for a bundle compiled for `target` on a device of capability
// `device`: the cubin when `has_cubin` and it is binary-compatible (same major, minor no
// newer than the device's); else the PTX when the target is no newer than the device (the
// driver JIT compiles it forward). Returns FAILED_PRECONDITION naming both architectures when
// the device is older than the target ("bundle targets sm_90 but device 0 is sm_80";
// `device_ordinal` < 0 says "the device"), INVALID_ARGUMENT for a malformed target.
StatusOr<ImageKind> ChooseImage(std::string_view target, bool has_cubin, ComputeCapability device,
                                int device_ordinal = -1);

// An output no kernel writes because it is an input's bytes as they are (the graph returns
// a parameter, or a reshape of one; BufferSpec.aliases_input).
struct OutputAlias {
  int output = 0;
  int input = 0;
};

// A parsed and validated bundle, independent of any device or context; made by
// ParseProgram (or KernelLoader::Load) and immutable after.
class Program {
 public:
  // Returns the bundle as parsed.
  const v1::KernelBundle& bundle() const { return bundle_; }
  // Returns the bundle's cache key (hex SHA-256); may be empty for hand-made bundles.
  const std::string& key() const { return bundle_.key(); }
  // Returns the bundle's target, e.g. "sm_90".
  const std::string& target() const { return bundle_.target(); }
  // Returns how many input pointers Launch takes: the inputs the bundle declares, or, in a
  // bundle that declares none, the largest INPUT index plus one.
  int num_inputs() const { return num_inputs_; }
  // Returns how many output pointers Launch takes, as num_inputs() counts inputs.
  int num_outputs() const { return num_outputs_; }
  // Returns the outputs that alias an input, by output index. Launch copies the input into
  // such an output after the kernels unless the caller bound the input's own buffer for it.
  const std::vector<OutputAlias>& output_aliases() const { return output_aliases_; }
  // Returns the bytes output `i` (< num_outputs(), declared) holds at `outer_extent`
  // (0: the bundle's own shapes).
  uint64_t OutputBytes(int i, int64_t outer_extent) const;
  // Returns the temporaries the loader allocates for each stream the program runs on.
  const google::protobuf::RepeatedPtrField<v1::TempBuffer>& temporaries() const {
    return bundle_.temporaries();
  }
  // Returns true when every kernel carries a cubin.
  bool has_cubin() const { return has_cubin_; }
  // Returns the identity the loader caches modules under: the key, or a per-program serial
  // when the bundle has no key, so two keyless programs never share modules.
  const std::string& cache_key() const { return cache_key_; }
  // Returns true when the bundle is shape-generic (KernelBundle.outer_extent): it serves
  // every outer extent from min_outer_extent() to max_outer_extent(), and each launch names
  // the run's. An exact bundle serves the shapes it was compiled for, and both bounds are 0.
  bool shape_generic() const { return bundle_.has_outer_extent(); }
  int64_t min_outer_extent() const { return bundle_.outer_extent().lo(); }
  int64_t max_outer_extent() const { return bundle_.outer_extent().hi(); }

 private:
  friend StatusOr<std::shared_ptr<const Program>> ParseProgram(std::string_view bytes);
  Program() = default;

  v1::KernelBundle bundle_;
  int num_inputs_ = 0;
  int num_outputs_ = 0;
  std::vector<OutputAlias> output_aliases_;
  bool has_cubin_ = false;
  std::string cache_key_;
};

// Returns the program in `bytes`, a serialized KernelBundle, or INVALID_ARGUMENT when the
// bytes do not parse, the target is malformed, or a kernel (named in the message) has
// neither PTX nor cubin, an empty name, a zero launch dimension, more than 1024 threads per
// block, or a parameter with an unspecified role or a negative index; when the bundle
// declares its buffers, also a kernel parameter past them, or an output that aliases an
// input it does not declare, of another size, or that a kernel writes. A shape-generic
// bundle is also refused when its extent range is empty or not positive, or a buffer's
// bytes per extent times the top extent exceed its bytes; and any bundle whose kernel takes
// an outer extent without the bundle saying which extents it serves.
StatusOr<std::shared_ptr<const Program>> ParseProgram(std::string_view bytes);

// Returns INVALID_ARGUMENT ("bundle K takes 2 inputs and 1 outputs, got 1 and 1") unless a
// launch passes `inputs` and `outputs` buffers, the counts `program` takes.
Status CheckBufferCounts(const Program& program, size_t inputs, size_t outputs);

// Returns INVALID_ARGUMENT unless `outer_extent` is one `program` serves: within its range
// for a shape-generic program ("bundle K serves outer extents 33 to 64, got 65"), 0 for an
// exact one. A kernel that bounds its loops by an extent its buffers were not sized for
// would read and write past them, so no launch goes without this check.
Status CheckOuterExtent(const Program& program, int64_t outer_extent);

// Checks the byte sizes of the buffers a job is about to bind against those the bundle
// declares (KernelBundle.inputs and .outputs): `input_bytes[i]` is the size of the buffer
// passed as input i, `output_bytes[i]` that of output i, and 0 means unknown (not checked).
// A shape-generic program's buffers that vary are held to their size at `outer_extent`.
// Returns INVALID_ARGUMENT naming the first buffer smaller than the bundle's, e.g. "output 0
// is a 1024-byte buffer, but the bundle's output 0 is f16[64,56,56,256] (102760448 bytes)",
// since the kernels would write past its end; or when the counts differ from the program's,
// or the extent is not one it serves (CheckOuterExtent). A bundle without declared sizes
// passes every buffer.
Status CheckBufferSizes(const Program& program, std::span<const uint64_t> input_bytes,
                        std::span<const uint64_t> output_bytes, int64_t outer_extent = 0);

// How KernelLoader::Open finds the driver.
struct LoaderOptions {
  // The driver library handed to dlopen; tests point it at a stand-in.
  std::string driver_library = "libcuda.so.1";
};

// Launches programs in the caller's CUDA contexts; made by Open. Destroying it unloads the
// modules and frees the buffers it made (see Lifetime above).
class KernelLoader {
 public:
  virtual ~KernelLoader() = default;

  // Returns a loader on the driver `options` names, after cuInit. Returns UNAVAILABLE when
  // the library cannot be opened, lacks an entry point, cuInit fails (no GPU, a stub
  // library), or stitchd was built without the CUDA driver header (cuda.h).
  static StatusOr<std::unique_ptr<KernelLoader>> Open(const LoaderOptions& options = {});

  // Returns the program in `bundle_bytes` (ParseProgram); touches no device.
  StatusOr<std::shared_ptr<const Program>> Load(std::string_view bundle_bytes) const {
    return ParseProgram(bundle_bytes);
  }

  // Enqueues the program's kernels, in bundle order, on `stream` (a CUstream as an integer;
  // 0 for the default stream) in the calling thread's current context, then a copy of the
  // input into each aliased output whose pointer is not the input's (output_aliases()). `inputs`
  // and `outputs` are device pointers, num_inputs() and num_outputs() of them. A shape-generic
  // program runs at `outer_extent`, which each kernel that takes it gets as its last
  // argument; an exact program takes 0. Returns OK once enqueued; the caller synchronizes.
  // Returns INVALID_ARGUMENT for wrong pointer counts or an extent the program does not
  // serve (CheckOuterExtent), FAILED_PRECONDITION without a current context or when the
  // device cannot run the bundle's image, INTERNAL when a driver call fails.
  Status Launch(const Program& program, std::span<const uint64_t> inputs,
                std::span<const uint64_t> outputs, uintptr_t stream, int64_t outer_extent = 0) {
    Status counts = CheckBufferCounts(program, inputs.size(), outputs.size());
    if (!counts.ok()) return counts;
    Status extent = CheckOuterExtent(program, outer_extent);
    if (!extent.ok()) return extent;
    return Enqueue(program, inputs, outputs, stream, outer_extent);
  }

  // As Launch, after CheckBufferSizes(program, input_bytes, output_bytes, outer_extent): a
  // buffer too small for what the kernels write at that extent is refused before any work is
  // enqueued.
  Status LaunchChecked(const Program& program, std::span<const uint64_t> inputs,
                       std::span<const uint64_t> input_bytes, std::span<const uint64_t> outputs,
                       std::span<const uint64_t> output_bytes, uintptr_t stream,
                       int64_t outer_extent = 0) {
    Status sizes = CheckBufferSizes(program, input_bytes, output_bytes, outer_extent);
    if (!sizes.ok()) return sizes;
    // Through Launch: the pointer spans are counted apart from the size spans.
    return Launch(program, inputs, outputs, stream, outer_extent);
  }

 protected:
  // Launch's driver half, called with counts and extent already checked.
  virtual Status Enqueue(const Program& program, std::span<const uint64_t> inputs,
                         std::span<const uint64_t> outputs, uintptr_t stream,
                         int64_t outer_extent) = 0;
};

// Opens a loader like KernelLoader::Open, but remembers the first failure per driver
// library for the life of the process: that failure is passed to `report` (by default one
// line on stderr) and returned; later calls for the same library return the same status
// without trying again or reporting. Returns the loader on success.
StatusOr<std::unique_ptr<KernelLoader>> OpenReportingOnce(
    const LoaderOptions& options = {}, const std::function<void(const Status&)>& report = nullptr);

}  // namespace stitch::loader
