// A small metric registry in the shape of prometheus-cpp: families of counters, gauges and
// histograms, each family one metric name with one child per label set.
//
//   Registry registry;
//   auto& requests =
//       registry.AddCounter("stitch_requests_total", "Requests by method and result.");
//   requests.Add({{"method", "Lookup"}, {"result", "hit_memory"}}).Increment();
//
// Names and label names are fixed by the program, so an invalid one (not matching
// [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*, a reserved "__" label, "le"
// on a histogram, a name registered twice with another type or other buckets, a name that
// clashes with a histogram's _bucket/_sum/_count) is a programming error: the process
// prints a message and aborts. Registering a name again with the same type (and buckets)
// returns the existing family.
//
// Thread-safety: every method of every class here may be called from any thread. Updates
// to a metric are lock-free; Add takes the family's mutex; Serialize takes each family's
// mutex in turn, so a scrape sees each metric atomically but not all of them at one instant.
// References returned by Add* stay valid for the registry's lifetime.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace stitch::metrics {

using Labels = std::map<std::string, std::string>;

// A monotonically increasing value. Increment ignores negative and NaN amounts.
class Counter {
 public:
  void Increment(double amount = 1.0);
  double Value() const;

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double value);
  void Increment(double amount = 1.0);
  void Decrement(double amount = 1.0);
  double Value() const;

 private:
  std::atomic<double> value_{0.0};
};

// Observations counted into buckets with fixed upper bounds (an implicit +Inf last). A value
// equal to a bound counts in that bound's bucket (Prometheus's `le`); NaN counts in +Inf.
class Histogram {
 public:
  // `bounds` strictly increasing and finite; otherwise a programming error.
  explicit Histogram(std::vector<double> bounds);

  void Observe(double value);

  struct Snapshot {
    std::vector<double> bounds;        // as given, without +Inf
    std::vector<uint64_t> cumulative;  // bounds.size() + 1 counts; the last is +Inf
    double sum = 0;
    uint64_t count = 0;  // equals cumulative.back()
  };
  Snapshot Collect() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, not cumulative
  std::atomic<double> sum_{0.0};
};

// Returns `count` bucket bounds start, start*factor, ...
std::vector<double> ExponentialBuckets(double start, double factor, int count);

enum class MetricType { kCounter, kGauge, kHistogram };

// One metric name with its children. Add returns the child for `labels`, creating it.
template <typename Metric>
class Family {
 public:
  Metric& Add(const Labels& labels = {});
  // Implementation detail, used by the registry's serializer.
  struct Child {
    Labels labels;
    std::unique_ptr<Metric> metric;
  };
  Family(std::string name, std::string help, std::vector<double> buckets = {});
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  // Removes every child, for families whose label sets are rebuilt in a collect hook (the
  // top-N of something). References returned by Add before are invalidated: only the code
  // that rebuilds the family may hold them.
  void Clear();
  // Calls `visit(labels, metric)` for each child, in label order, under the family's lock.
  void ForEach(const std::function<void(const Labels&, const Metric&)>& visit) const;

 private:
  std::string name_;
  std::string help_;
  std::vector<double> buckets_;  // histograms only
  mutable std::mutex mu_;
  std::map<Labels, std::unique_ptr<Metric>> children_;
};

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  Family<Counter>& AddCounter(const std::string& name, const std::string& help);
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help);
  Family<Histogram>& AddHistogram(const std::string& name, const std::string& help,
                                  std::vector<double> buckets);

  // Registers a function run at the start of every Serialize, to refresh gauges that
  // mirror state held elsewhere (cache occupancy, /proc/self). Hooks run in the order added,
  // one Serialize's hooks at a time; a hook may add metrics but must not call Serialize.
  void AddCollectHook(std::function<void()> hook);

  // Returns every family in the Prometheus text exposition format 0.0.4, families in the
  // order registered, children in label order. Numbers are the shortest text that reads
  // back to the same double, independent of the process's locale. A family without
  // children is written as its HELP and TYPE lines only.
  std::string Serialize() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The Content-Type of Serialize's output.
inline constexpr const char* kTextContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace stitch::metrics
