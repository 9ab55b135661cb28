// KernelActivity on CUPTI's activity API (kernel_activity.h). cupti.h supplies the types and
// prototypes only: every entry point is looked up with dlsym, so nothing links against CUPTI.
#include "gpu/kernel_activity.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <utility>

#include "gpu/dynamic_symbols.h"

#if __has_include(<cupti.h>)
#include <cupti.h>
#define STITCH_HAVE_CUPTI 1
#endif

namespace stitch::gpu {

StatusOr<std::vector<std::vector<double>>> KernelMicrosecondsPerLaunch(
    std::vector<KernelSpan> spans, int kernels_per_run, int runs) {
  const size_t per_run = static_cast<size_t>(std::max(kernels_per_run, 0));
  const size_t expected = per_run * static_cast<size_t>(std::max(runs, 0));
  if (spans.size() != expected) {
    return DataLoss("the profiler recorded " + std::to_string(spans.size()) + " kernels, the " +
                    std::to_string(runs) + " runs launched " + std::to_string(expected));
  }
  std::sort(spans.begin(), spans.end(),
            [](const KernelSpan& a, const KernelSpan& b) { return a.start_ns < b.start_ns; });
  std::vector<std::vector<double>> us(static_cast<size_t>(std::max(runs, 0)));
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].end_ns < spans[i].start_ns) {
      return InvalidArgument("a kernel record ends (" + std::to_string(spans[i].end_ns) +
                             " ns) before it starts (" + std::to_string(spans[i].start_ns) +
                             " ns)");
    }
    us[i / per_run].push_back(static_cast<double>(spans[i].end_ns - spans[i].start_ns) / 1e3);
  }
  return us;
}

std::vector<double> KernelMicrosecondsPerRun(const std::vector<std::vector<double>>& launches) {
  std::vector<double> us;
  us.reserve(launches.size());
  for (const std::vector<double>& run : launches) {
    us.push_back(std::accumulate(run.begin(), run.end(), 0.0));
  }
  return us;
}

#ifndef STITCH_HAVE_CUPTI

StatusOr<std::unique_ptr<KernelActivity>> OpenKernelActivity(const std::string&) {
  return Unavailable("this build has no CUPTI support (cupti.h was not found beside cuda.h)");
}

#else

namespace {

struct CuptiApi {
  decltype(&::cuptiActivityRegisterCallbacks) RegisterCallbacks = nullptr;
  decltype(&::cuptiActivityEnable) Enable = nullptr;
  decltype(&::cuptiActivityDisable) Disable = nullptr;
  decltype(&::cuptiActivityFlushAll) FlushAll = nullptr;
  decltype(&::cuptiActivityGetNextRecord) GetNextRecord = nullptr;
  decltype(&::cuptiActivityGetNumDroppedRecords) GetNumDroppedRecords = nullptr;
  decltype(&::cuptiGetResultString) GetResultString = nullptr;
};

// CUPTI's buffers and callbacks belong to the process, and its callbacks carry no user
// pointer: one recorder serves every KernelActivity.
struct Recorder {
  std::mutex mu;
  CuptiApi api;
  std::string library;  // the one loaded, empty before
  std::vector<KernelSpan> spans;
};

Recorder& TheRecorder() {
  static Recorder* r = new Recorder;
  return *r;
}

constexpr size_t kBufferBytes = size_t{1} << 20;
// CUPTI asks activity buffers to be 8-byte aligned.
constexpr size_t kBufferAlignment = 8;

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlignment, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  Recorder& r = TheRecorder();
  std::lock_guard<std::mutex> lock(r.mu);
  CUpti_Activity* record = nullptr;
  while (r.api.GetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        record->kind != CUPTI_ACTIVITY_KIND_KERNEL) {
      continue;
    }
    // Every version of the kernel record keeps kind, the cache settings, the registers and
    // then start and end at the same offsets, so the header's version reads any CUPTI's.
    const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    r.spans.push_back({kernel->start, kernel->end});
  }
  std::free(buffer);
}

std::string ResultText(const CuptiApi& api, CUptiResult result) {
  const char* text = nullptr;
  if (api.GetResultString != nullptr && api.GetResultString(result, &text) == CUPTI_SUCCESS &&
      text != nullptr) {
    return text;
  }
  return "CUptiResult " + std::to_string(static_cast<int>(result));
}

// Loads CUPTI into the recorder and registers its buffer callbacks, once per process.
Status LoadOnce(const std::string& library) {
  Recorder& r = TheRecorder();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.library.empty()) {
    if (library.empty() || library == r.library) return Status::Ok();
    return FailedPrecondition("CUPTI is loaded from " + r.library + " already; " + library +
                              " cannot join it in this process");
  }
  const std::vector<std::string> candidates =
      library.empty() ? std::vector<std::string>{"libcupti.so", "libcupti.so.13", "libcupti.so.12",
                                                 "/usr/local/cuda/lib64/libcupti.so",
                                                 "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"}
                      : std::vector<std::string>{library};
  void* handle = nullptr;
  std::string loaded, why;
  for (const std::string& name : candidates) {
    dlerror();
    handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      loaded = name;
      break;
    }
    const char* error = dlerror();
    if (why.empty()) why = error != nullptr ? error : name + " not found";
  }
  if (handle == nullptr) return Unavailable("cannot load CUPTI: " + why);
  CuptiApi api;
  const std::pair<const char*, bool> entries[] = {
      {"cuptiActivityRegisterCallbacks",
       ResolveSymbol(handle, "cuptiActivityRegisterCallbacks", api.RegisterCallbacks)},
      {"cuptiActivityEnable", ResolveSymbol(handle, "cuptiActivityEnable", api.Enable)},
      {"cuptiActivityDisable", ResolveSymbol(handle, "cuptiActivityDisable", api.Disable)},
      {"cuptiActivityFlushAll", ResolveSymbol(handle, "cuptiActivityFlushAll", api.FlushAll)},
      {"cuptiActivityGetNextRecord",
       ResolveSymbol(handle, "cuptiActivityGetNextRecord", api.GetNextRecord)},
      {"cuptiActivityGetNumDroppedRecords",
       ResolveSymbol(handle, "cuptiActivityGetNumDroppedRecords", api.GetNumDroppedRecords)},
      {"cuptiGetResultString", ResolveSymbol(handle, "cuptiGetResultString", api.GetResultString)},
  };
  for (const auto& [symbol, found] : entries) {
    if (!found) {
      dlclose(handle);
      return Unavailable("CUPTI " + loaded + " lacks " + symbol);
    }
  }
  r.api = api;
  if (CUptiResult result = api.RegisterCallbacks(BufferRequested, BufferCompleted);
      result != CUPTI_SUCCESS) {
    r.api = CuptiApi();
    dlclose(handle);
    return Unavailable("cuptiActivityRegisterCallbacks failed: " + ResultText(api, result));
  }
  // CUPTI stays loaded: its buffers and threads live as long as the process.
  r.library = loaded;
  return Status::Ok();
}

class CuptiKernelActivity final : public KernelActivity {
 public:
  explicit CuptiKernelActivity(std::string source) : source_(std::move(source)) {}

  const std::string& source() const override { return source_; }

  Status Start() override {
    Recorder& r = TheRecorder();
    {
      std::lock_guard<std::mutex> lock(r.mu);
      r.spans.clear();
    }
    CUptiResult result = r.api.Enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (result != CUPTI_SUCCESS) {
      return Unavailable("cuptiActivityEnable failed: " + ResultText(r.api, result));
    }
    return Status::Ok();
  }

  StatusOr<std::vector<KernelSpan>> Stop() override {
    Recorder& r = TheRecorder();
    // Forced: deliver every buffer now, in this thread, whether full or not.
    const CUptiResult flushed = r.api.FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    const CUptiResult disabled = r.api.Disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    size_t dropped = 0;
    (void)r.api.GetNumDroppedRecords(nullptr, 0, &dropped);
    if (flushed != CUPTI_SUCCESS) {
      return Unavailable("cuptiActivityFlushAll failed: " + ResultText(r.api, flushed));
    }
    if (disabled != CUPTI_SUCCESS) {
      return Unavailable("cuptiActivityDisable failed: " + ResultText(r.api, disabled));
    }
    if (dropped != 0) {
      return DataLoss("CUPTI dropped " + std::to_string(dropped) + " activity records");
    }
    std::lock_guard<std::mutex> lock(r.mu);
    std::vector<KernelSpan> spans = std::move(r.spans);
    r.spans.clear();
    return spans;
  }

 private:
  std::string source_;
};

}  // namespace

StatusOr<std::unique_ptr<KernelActivity>> OpenKernelActivity(const std::string& library) {
  STITCH_RETURN_IF_ERROR(LoadOnce(library));
  return std::unique_ptr<KernelActivity>(std::make_unique<CuptiKernelActivity>(
      "CUPTI activity records (" + TheRecorder().library + ")"));
}

#endif  // STITCH_HAVE_CUPTI

}  // namespace stitch::gpu
