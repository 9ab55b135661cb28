// What stitching saved on the invocations a job reports: the job's own fallback names the
// baseline, and measured times for the key, once both sides have enough samples, take the
// place of the cost model's figures. The model's figure is computed either way, so the
// daemon can export how far it is from what jobs measured.
//
// Pure functions of their arguments; safe from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "stitch/v1/kernel_bundle.pb.h"
#include "stitch/v1/kernel_service.pb.h"
#include "stitch/v1/runtimes.pb.h"

namespace stitch::daemon {

// Samples each side needs before its measured mean replaces the model: one timed launch is
// at the mercy of clock ramp-up and of whatever else shares the GPU.
inline constexpr uint64_t kMinMeasuredSamples = 3;

// The label a job's fallback goes under: "xla", "inductor", "eager", or "unreported" when the
// job did not say.
const char* BaselineName(v1::Fallback fallback);

struct UsagePrice {
  // The baseline label the savings are credited under: the job's fallback, or "unreported"
  // when the job did not say, or (modeled only) when the bundle lacks that compiler's model.
  std::string baseline;
  // The cost model's saving per invocation against that baseline; never negative, because
  // the shipped plan is the fastest modelled.
  double modeled_per_call = 0;
  // Whether `per_call` comes from measured times rather than the model.
  bool measured = false;
  // The accounted saving per invocation. Measured savings may be negative: the job timed the
  // stitched kernels slower than its own.
  double per_call = 0;
};

// Prices one invocation of a bundle with estimate `cost` for a job whose fallback is
// `fallback`, preferring `runtimes` (null when the key has none on record).
UsagePrice PriceUsage(const v1::CostEstimate& cost, v1::Fallback fallback,
                      const v1::KernelRuntimes* runtimes);

// The mean seconds per invocation of `timing`, or a negative number when it has fewer than
// kMinMeasuredSamples samples.
double MeasuredMean(const v1::TimingSummary& timing);

}  // namespace stitch::daemon
