#include "savings.h"

#include <algorithm>
#include <cmath>

namespace stitch::daemon {

const char* BaselineName(v1::Fallback fallback) {
  switch (fallback) {
    case v1::FALLBACK_XLA:
      return "xla";
    case v1::FALLBACK_INDUCTOR:
      return "inductor";
    case v1::FALLBACK_EAGER:
      return "eager";
    default:
      return "unreported";
  }
}

double MeasuredMean(const v1::TimingSummary& timing) {
  if (timing.samples() < kMinMeasuredSamples) return -1;
  return timing.seconds_sum() / static_cast<double>(timing.samples());
}

UsagePrice PriceUsage(const v1::CostEstimate& cost, v1::Fallback fallback,
                      const v1::KernelRuntimes* runtimes) {
  UsagePrice price;
  const std::string named = BaselineName(fallback);
  // A job that did not say is priced against the better model, which never overstates it.
  double baseline_seconds = cost.baseline_seconds();
  price.baseline = "unreported";
  if (fallback != v1::FALLBACK_UNSPECIFIED) {
    for (const v1::PlanEstimate& plan : cost.plans()) {
      if (plan.planner() != named) continue;
      baseline_seconds = plan.seconds();
      price.baseline = named;
    }
  }
  // A model that could not price its plan (an estimate of +inf) credits nothing rather than
  // an infinite saving: the better model stands in, and without one the saving is 0.
  if (!std::isfinite(baseline_seconds)) {
    baseline_seconds = cost.baseline_seconds();
    price.baseline = "unreported";
  }
  const double modeled = baseline_seconds - cost.stitched_seconds();
  price.modeled_per_call = std::isfinite(modeled) ? std::max(0.0, modeled) : 0.0;
  price.per_call = price.modeled_per_call;
  if (runtimes == nullptr) return price;

  const double stitched = MeasuredMean(runtimes->stitched());
  const auto fallback_timing = runtimes->fallback().find(named);
  const double own =
      fallback_timing == runtimes->fallback().end() ? -1 : MeasuredMean(fallback_timing->second);
  if (stitched < 0 || own < 0) return price;
  price.measured = true;
  price.baseline = named;
  price.per_call = own - stitched;
  return price;
}

}  // namespace stitch::daemon
