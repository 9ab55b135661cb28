#include "stitch/metrics/registry.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <variant>

#include "text_format.h"

namespace stitch::metrics {

namespace {

using internal::Fatal;

// Relaxed ordering throughout: a metric is a single independent value, and a scrape only
// needs each load to be atomic, not ordered against other metrics.
void AtomicAdd(std::atomic<double>& target, double amount) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + amount, std::memory_order_relaxed)) {
  }
}

void CheckBuckets(const std::string& name, const std::vector<double>& bounds) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) {
      Fatal("histogram " + name + ": bucket bound " + std::to_string(i) + " is not finite");
    }
    if (i > 0 && !(bounds[i] > bounds[i - 1])) {
      Fatal("histogram " + name + ": bucket bounds must be strictly increasing (bound " +
            std::to_string(i) + ")");
    }
  }
}

}  // namespace

void Counter::Increment(double amount) {
  // `!(amount >= 0)` also drops NaN, which would otherwise poison the counter for good.
  if (!(amount >= 0)) return;
  AtomicAdd(value_, amount);
}

double Counter::Value() const { return value_.load(std::memory_order_relaxed); }

void Gauge::Set(double value) { value_.store(value, std::memory_order_relaxed); }
void Gauge::Increment(double amount) { AtomicAdd(value_, amount); }
void Gauge::Decrement(double amount) { AtomicAdd(value_, -amount); }
double Gauge::Value() const { return value_.load(std::memory_order_relaxed); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  CheckBuckets("<unnamed>", bounds_);
}

void Histogram::Observe(double value) {
  // Buckets are `le`: the first bound >= value. NaN compares false with every bound, so it
  // is sent to +Inf explicitly, as other Prometheus clients do.
  const size_t index =
      std::isnan(value)
          ? bounds_.size()
          : static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) -
                                bounds_.begin());
  counts_[index].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, value);
}

Histogram::Snapshot Histogram::Collect() const {
  Snapshot snapshot;
  snapshot.bounds = bounds_;
  snapshot.cumulative.resize(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    snapshot.cumulative[i] = running;
  }
  // Derived from the buckets just read rather than a separate counter, so that a scrape
  // racing with Observe still satisfies +Inf == _count.
  snapshot.count = running;
  snapshot.sum = sum_.load(std::memory_order_relaxed);
  return snapshot;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  if (!(start > 0) || !std::isfinite(start)) Fatal("ExponentialBuckets: start must be > 0");
  if (!(factor > 1) || !std::isfinite(factor)) Fatal("ExponentialBuckets: factor must be > 1");
  if (count < 1) Fatal("ExponentialBuckets: count must be >= 1");
  std::vector<double> bounds;
  bounds.reserve(static_cast<size_t>(count));
  double bound = start;
  for (int i = 0; i < count; ++i) {
    bounds.push_back(bound);
    bound *= factor;
  }
  CheckBuckets("ExponentialBuckets", bounds);
  return bounds;
}

// ---------------------------------------------------------------------------------------
// Family

template <typename Metric>
Family<Metric>::Family(std::string name, std::string help, std::vector<double> buckets)
    : name_(std::move(name)), help_(std::move(help)), buckets_(std::move(buckets)) {
  if (!internal::IsValidMetricName(name_)) Fatal("invalid metric name \"" + name_ + "\"");
  if constexpr (std::is_same_v<Metric, Histogram>) {
    CheckBuckets(name_, buckets_);
  } else if (!buckets_.empty()) {
    Fatal("metric " + name_ + ": only histograms have buckets");
  }
}

template <typename Metric>
Metric& Family<Metric>::Add(const Labels& labels) {
  std::lock_guard lock(mu_);
  auto it = children_.find(labels);
  if (it != children_.end()) return *it->second;
  // Checked only when a child is created: a label set that was found was checked then.
  for (const auto& [label, value] : labels) {
    if (!internal::IsValidLabelName(label)) {
      Fatal("metric " + name_ + ": invalid label name \"" + label + "\"");
    }
    if (label.starts_with("__")) {
      Fatal("metric " + name_ + ": label name \"" + label + "\" is reserved (\"__\" prefix)");
    }
    if (std::is_same_v<Metric, Histogram> && label == "le") {
      Fatal("histogram " + name_ + ": label name \"le\" is reserved for bucket bounds");
    }
  }
  std::unique_ptr<Metric> metric;
  if constexpr (std::is_same_v<Metric, Histogram>) {
    metric = std::make_unique<Histogram>(buckets_);
  } else {
    metric = std::make_unique<Metric>();
  }
  Metric& ref = *metric;
  children_.emplace(labels, std::move(metric));
  return ref;
}

template <typename Metric>
void Family<Metric>::ForEach(const std::function<void(const Labels&, const Metric&)>& visit) const {
  std::lock_guard lock(mu_);
  for (const auto& [labels, metric] : children_) visit(labels, *metric);
}

template <typename Metric>
void Family<Metric>::Clear() {
  std::lock_guard lock(mu_);
  children_.clear();
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// ---------------------------------------------------------------------------------------
// Registry

namespace {

using AnyFamily = std::variant<std::unique_ptr<Family<Counter>>, std::unique_ptr<Family<Gauge>>,
                               std::unique_ptr<Family<Histogram>>>;

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

template <typename Metric>
constexpr MetricType TypeOf() {
  if constexpr (std::is_same_v<Metric, Counter>) {
    return MetricType::kCounter;
  } else if constexpr (std::is_same_v<Metric, Gauge>) {
    return MetricType::kGauge;
  } else {
    return MetricType::kHistogram;
  }
}

// The names a histogram's samples use besides its own.
bool IsHistogramSeriesName(const std::string& histogram, const std::string& name) {
  return name == histogram + "_bucket" || name == histogram + "_sum" ||
         name == histogram + "_count";
}

void AppendHeader(std::string& out, const std::string& name, const std::string& help,
                  MetricType type) {
  out += "# HELP ";
  out += name;
  out += ' ';
  internal::AppendEscapedHelp(out, help);
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += TypeName(type);
  out += '\n';
}

// Appends `name{a="x",b="y"`: the caller closes the brace, possibly after `le`.
void AppendOpenSeries(std::string& out, const std::string& name, std::string_view suffix,
                      const Labels& labels) {
  out += name;
  out += suffix;
  out += '{';
  bool first = true;
  for (const auto& [label, value] : labels) {
    if (!first) out += ',';
    first = false;
    out += label;
    out += "=\"";
    internal::AppendEscapedLabelValue(out, value);
    out += '"';
  }
}

// Writes `name` `suffix`, with its label set when there is one.
void AppendSeriesName(std::string& out, const std::string& name, std::string_view suffix,
                      const Labels& labels) {
  if (labels.empty()) {
    out += name;
    out += suffix;
    return;
  }
  AppendOpenSeries(out, name, suffix, labels);
  out += '}';
}

void AppendSample(std::string& out, const std::string& name, std::string_view suffix,
                  const Labels& labels, double value) {
  AppendSeriesName(out, name, suffix, labels);
  out += ' ';
  internal::AppendDouble(out, value);
  out += '\n';
}

void AppendCount(std::string& out, const std::string& name, std::string_view suffix,
                 const Labels& labels, uint64_t count) {
  AppendSeriesName(out, name, suffix, labels);
  out += ' ';
  internal::AppendUint(out, count);
  out += '\n';
}

void AppendFamily(std::string& out, const Family<Counter>& family) {
  AppendHeader(out, family.name(), family.help(), MetricType::kCounter);
  family.ForEach([&](const Labels& labels, const Counter& counter) {
    AppendSample(out, family.name(), "", labels, counter.Value());
  });
}

void AppendFamily(std::string& out, const Family<Gauge>& family) {
  AppendHeader(out, family.name(), family.help(), MetricType::kGauge);
  family.ForEach([&](const Labels& labels, const Gauge& gauge) {
    AppendSample(out, family.name(), "", labels, gauge.Value());
  });
}

void AppendFamily(std::string& out, const Family<Histogram>& family) {
  AppendHeader(out, family.name(), family.help(), MetricType::kHistogram);
  family.ForEach([&](const Labels& labels, const Histogram& histogram) {
    const Histogram::Snapshot snapshot = histogram.Collect();
    for (size_t i = 0; i < snapshot.cumulative.size(); ++i) {
      AppendOpenSeries(out, family.name(), "_bucket", labels);
      out += labels.empty() ? "le=\"" : ",le=\"";
      if (i < snapshot.bounds.size()) {
        internal::AppendDouble(out, snapshot.bounds[i]);
      } else {
        out += "+Inf";
      }
      out += "\"} ";
      internal::AppendUint(out, snapshot.cumulative[i]);
      out += '\n';
    }
    AppendSample(out, family.name(), "_sum", labels, snapshot.sum);
    AppendCount(out, family.name(), "_count", labels, snapshot.count);
  });
}

}  // namespace

struct Registry::Impl {
  struct Entry {
    std::string name;
    MetricType type;
    std::vector<double> buckets;  // histograms only
    AnyFamily family;
  };

  template <typename Metric>
  Family<Metric>& Add(const std::string& name, const std::string& help,
                      std::vector<double> buckets) {
    constexpr MetricType type = TypeOf<Metric>();
    std::lock_guard lock(mu);
    for (Entry& entry : entries) {
      if (entry.name == name) {
        if (entry.type != type) {
          Fatal("metric " + name + " registered as " + TypeName(type) + ", already a " +
                TypeName(entry.type));
        }
        // The existing children were built with the first layout; a silent mismatch would
        // put observations into bounds the caller did not ask for.
        if (entry.buckets != buckets) {
          Fatal("histogram " + name + " registered again with different buckets");
        }
        return *std::get<std::unique_ptr<Family<Metric>>>(entry.family);
      }
      if (entry.type == MetricType::kHistogram && IsHistogramSeriesName(entry.name, name)) {
        Fatal("metric " + name + " collides with the samples of histogram " + entry.name);
      }
      if (type == MetricType::kHistogram && IsHistogramSeriesName(name, entry.name)) {
        Fatal("histogram " + name + " collides with metric " + entry.name);
      }
    }
    auto family = std::make_unique<Family<Metric>>(name, help, buckets);
    Family<Metric>& ref = *family;
    entries.push_back(Entry{name, type, std::move(buckets), std::move(family)});
    return ref;
  }

  mutable std::mutex mu;  // guards entries and hooks, not the families' contents
  std::vector<Entry> entries;
  std::vector<std::function<void()>> hooks;
  // Serializes the hooks themselves, so a hook never races with another run of itself
  // when two scrapes overlap.
  mutable std::mutex collect_mu;
};

Registry::Registry() : impl_(std::make_unique<Impl>()) {}
Registry::~Registry() = default;

Family<Counter>& Registry::AddCounter(const std::string& name, const std::string& help) {
  return impl_->Add<Counter>(name, help, {});
}

Family<Gauge>& Registry::AddGauge(const std::string& name, const std::string& help) {
  return impl_->Add<Gauge>(name, help, {});
}

Family<Histogram>& Registry::AddHistogram(const std::string& name, const std::string& help,
                                          std::vector<double> buckets) {
  return impl_->Add<Histogram>(name, help, std::move(buckets));
}

void Registry::AddCollectHook(std::function<void()> hook) {
  std::lock_guard lock(impl_->mu);
  impl_->hooks.push_back(std::move(hook));
}

std::string Registry::Serialize() const {
  // Hooks run without `mu` so that one may register metrics or hooks of its own.
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard lock(impl_->mu);
    hooks = impl_->hooks;
  }
  {
    std::lock_guard lock(impl_->collect_mu);
    for (const auto& hook : hooks) hook();
  }

  // Families are never removed, so pointers taken under the lock stay valid after it.
  std::vector<const AnyFamily*> families;
  {
    std::lock_guard lock(impl_->mu);
    families.reserve(impl_->entries.size());
    for (const auto& entry : impl_->entries) families.push_back(&entry.family);
  }
  std::string out;
  for (const AnyFamily* family : families) {
    std::visit([&](const auto& f) { AppendFamily(out, *f); }, *family);
  }
  return out;
}

}  // namespace stitch::metrics
