#include "stitch/metrics/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stitch::metrics {

namespace {

// Reads a whole /proc file. /proc files report a size of 0, so read until EOF.
std::optional<std::string> ReadProcFile(const char* path) {
  std::FILE* file = std::fopen(path, "re");
  if (file == nullptr) return std::nullopt;
  std::string contents;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), file)) > 0) contents.append(buf, n);
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) return std::nullopt;
  return contents;
}

std::optional<unsigned long long> ParseUnsigned(std::string_view text) {
  unsigned long long value = 0;
  const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
  if (result.ec != std::errc() || result.ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

struct StatFields {
  unsigned long long utime_ticks;
  unsigned long long stime_ticks;
  unsigned long long start_ticks;  // since boot
  unsigned long long vsize_bytes;
  unsigned long long rss_pages;
};

// /proc/self/stat: "pid (comm) state ppid ...". comm may hold spaces and parentheses,
// so fields are counted from the last ')'.
std::optional<StatFields> ReadSelfStat() {
  const std::optional<std::string> stat = ReadProcFile("/proc/self/stat");
  if (!stat) return std::nullopt;
  const size_t close = stat->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::vector<std::string_view> fields;  // fields[0] is field 3 (state) of proc(5)
  std::string_view rest(*stat);
  rest.remove_prefix(close + 1);
  while (!rest.empty()) {
    const size_t start = rest.find_first_not_of(" \n");
    if (start == std::string_view::npos) break;
    rest.remove_prefix(start);
    const size_t end = std::min(rest.find_first_of(" \n"), rest.size());
    fields.push_back(rest.substr(0, end));
    rest.remove_prefix(end);
  }
  // proc(5) numbers fields from 1: utime 14, stime 15, starttime 22, vsize 23, rss 24.
  auto field = [&](size_t number) -> std::optional<unsigned long long> {
    if (number - 3 >= fields.size()) return std::nullopt;
    return ParseUnsigned(fields[number - 3]);
  };
  const auto utime = field(14), stime = field(15), start = field(22), vsize = field(23),
             rss = field(24);
  if (!utime || !stime || !start || !vsize || !rss) return std::nullopt;
  return StatFields{*utime, *stime, *start, *vsize, *rss};
}

std::optional<unsigned long long> ReadBootTime() {
  const std::optional<std::string> stat = ReadProcFile("/proc/stat");
  if (!stat) return std::nullopt;
  constexpr std::string_view kKey = "btime ";
  size_t pos = 0;
  while (pos < stat->size()) {
    size_t end = stat->find('\n', pos);
    if (end == std::string::npos) end = stat->size();
    std::string_view line(stat->data() + pos, end - pos);
    if (line.starts_with(kKey)) return ParseUnsigned(line.substr(kKey.size()));
    pos = end + 1;
  }
  return std::nullopt;
}

std::optional<double> CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  // Includes the descriptor of `dir` itself, as other clients' counts do.
  double count = 0;
  errno = 0;
  while (const dirent* entry = readdir(dir)) {
    const std::string_view name(entry->d_name);
    if (name != "." && name != "..") ++count;
  }
  const bool failed = errno != 0;
  closedir(dir);
  if (failed) return std::nullopt;
  return count;
}

struct ProcessMetrics {
  Counter* cpu_seconds;
  Gauge* resident_bytes;
  Gauge* virtual_bytes;
  Gauge* start_time;
  Gauge* open_fds;
  Gauge* max_fds;

  void Refresh() const {
    const long ticks_per_second = sysconf(_SC_CLK_TCK);
    const long page_size = sysconf(_SC_PAGESIZE);
    if (const std::optional<StatFields> stat = ReadSelfStat()) {
      if (ticks_per_second > 0) {
        const double tps = static_cast<double>(ticks_per_second);
        const double cpu = static_cast<double>(stat->utime_ticks + stat->stime_ticks) / tps;
        // A counter only moves up: it is advanced to the reading, which only this hook
        // writes and which the kernel keeps monotonic.
        const double delta = cpu - cpu_seconds->Value();
        if (delta > 0) cpu_seconds->Increment(delta);
        if (const std::optional<unsigned long long> boot = ReadBootTime()) {
          start_time->Set(static_cast<double>(*boot) +
                          static_cast<double>(stat->start_ticks) / tps);
        }
      }
      virtual_bytes->Set(static_cast<double>(stat->vsize_bytes));
      if (page_size > 0) {
        resident_bytes->Set(static_cast<double>(stat->rss_pages) * static_cast<double>(page_size));
      }
    }
    if (const std::optional<double> fds = CountOpenFds()) open_fds->Set(*fds);
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
      max_fds->Set(limit.rlim_cur == RLIM_INFINITY ? std::numeric_limits<double>::infinity()
                                                   : static_cast<double>(limit.rlim_cur));
    }
  }
};

}  // namespace

void AddProcessMetrics(Registry& registry) {
  ProcessMetrics metrics{
      &registry
           .AddCounter("process_cpu_seconds_total",
                       "Total user and system CPU time spent in seconds.")
           .Add(),
      &registry.AddGauge("process_resident_memory_bytes", "Resident memory size in bytes.").Add(),
      &registry.AddGauge("process_virtual_memory_bytes", "Virtual memory size in bytes.").Add(),
      &registry
           .AddGauge("process_start_time_seconds",
                     "Start time of the process since unix epoch in seconds.")
           .Add(),
      &registry.AddGauge("process_open_fds", "Number of open file descriptors.").Add(),
      &registry.AddGauge("process_max_fds", "Maximum number of open file descriptors.").Add(),
  };
  // A first reading now, so the values are right even before the first scrape.
  metrics.Refresh();
  registry.AddCollectHook([metrics] { metrics.Refresh(); });
}

}  // namespace stitch::metrics
