#include "runtime_ledger.h"

#include <algorithm>

namespace stitch::daemon {
namespace {

void AddTiming(const v1::MeasuredTime& measured, v1::TimingSummary& summary) {
  const double mean = measured.seconds() / static_cast<double>(measured.samples());
  if (summary.reports() == 0 || mean < summary.min_seconds()) summary.set_min_seconds(mean);
  if (summary.reports() == 0 || mean > summary.max_seconds()) summary.set_max_seconds(mean);
  summary.set_samples(summary.samples() + measured.samples());
  summary.set_seconds_sum(summary.seconds_sum() + measured.seconds());
  summary.set_reports(summary.reports() + 1);
}

void SetModel(const v1::CostEstimate& cost, const std::string& target,
              v1::KernelRuntimes& runtimes) {
  runtimes.set_target(target);
  runtimes.set_modeled_stitched_seconds(cost.stitched_seconds());
  auto& modeled = *runtimes.mutable_modeled_fallback_seconds();
  modeled["unreported"] = cost.baseline_seconds();
  for (const v1::PlanEstimate& plan : cost.plans()) {
    if (plan.planner() != "stitch") modeled[plan.planner()] = plan.seconds();
  }
}

uint64_t Samples(const v1::KernelRuntimes& r) {
  uint64_t n = r.stitched().samples();
  for (const auto& [baseline, timing] : r.fallback()) n += timing.samples();
  return n;
}

}  // namespace

RuntimeLedger::RuntimeLedger(size_t max_keys) : max_keys_(max_keys) {}

void RuntimeLedger::Restore(std::vector<v1::KernelRuntimes> records) {
  std::lock_guard lock(mu_);
  for (v1::KernelRuntimes& r : records) {
    if (records_.size() >= max_keys_ && !records_.contains(r.key())) {
      ++dropped_;
      continue;
    }
    std::string key = r.key();
    records_[std::move(key)] = std::move(r);
  }
}

std::optional<v1::KernelRuntimes> RuntimeLedger::Merge(const v1::UsageRecord& record,
                                                       const std::string& baseline,
                                                       const v1::CostEstimate& cost,
                                                       const std::string& target,
                                                       double now_unix_seconds) {
  const bool timed = record.stitched().samples() > 0 || record.fallback().samples() > 0;
  std::lock_guard lock(mu_);
  auto it = records_.find(record.key());
  if (it == records_.end()) {
    if (!timed) return std::nullopt;
    if (records_.size() >= max_keys_) {
      ++dropped_;
      return std::nullopt;
    }
    it = records_.emplace(record.key(), v1::KernelRuntimes()).first;
    it->second.set_key(record.key());
  }
  v1::KernelRuntimes& runtimes = it->second;
  if (record.stitched().samples() > 0) AddTiming(record.stitched(), *runtimes.mutable_stitched());
  if (record.fallback().samples() > 0) {
    AddTiming(record.fallback(), (*runtimes.mutable_fallback())[baseline]);
  }
  runtimes.set_invocations(runtimes.invocations() + record.invocations());
  runtimes.set_last_report_unix_seconds(now_unix_seconds);
  SetModel(cost, target, runtimes);
  changed_.insert(record.key());
  return runtimes;
}

std::vector<v1::KernelRuntimes> RuntimeLedger::TakeChanged() {
  std::lock_guard lock(mu_);
  std::vector<v1::KernelRuntimes> out;
  out.reserve(changed_.size());
  for (const std::string& key : changed_) out.push_back(records_.at(key));
  changed_.clear();
  return out;
}

void RuntimeLedger::MarkChanged(const std::vector<v1::KernelRuntimes>& records) {
  std::lock_guard lock(mu_);
  for (const v1::KernelRuntimes& r : records) {
    if (records_.contains(r.key())) changed_.insert(r.key());
  }
}

std::vector<v1::KernelRuntimes> RuntimeLedger::Top(size_t limit) const {
  std::vector<const v1::KernelRuntimes*> all;
  std::lock_guard lock(mu_);
  all.reserve(records_.size());
  for (const auto& [key, r] : records_) all.push_back(&r);
  const auto order = [](const v1::KernelRuntimes* a, const v1::KernelRuntimes* b) {
    const uint64_t na = Samples(*a), nb = Samples(*b);
    return na != nb ? na > nb : a->key() < b->key();
  };
  const size_t n = std::min(limit, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(), order);
  std::vector<v1::KernelRuntimes> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(*all[i]);
  return out;
}

std::optional<v1::KernelRuntimes> RuntimeLedger::Find(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = records_.find(key);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

size_t RuntimeLedger::size() const {
  std::lock_guard lock(mu_);
  return records_.size();
}

uint64_t RuntimeLedger::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

}  // namespace stitch::daemon
