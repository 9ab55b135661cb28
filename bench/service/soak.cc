// The soak: N concurrent clients against one real stitchd for a fixed time, with a seeded mix
// of lookups and compiles that hit, compiles of new subgraphs, malformed inputs, calls the
// client abandons at a short deadline (gRPC cancels them), usage reports and stats. The
// daemon's resident memory and open descriptors are sampled every second.
//
// Pass means: no answer outside what each request may get (a malformed input must be refused
// as such, a hit must hit, an abandoned call may end either way, ...), the daemon alive to the
// end, no descriptor growth after the warm-up, and resident memory flat after the warm-up
// (the median of the last tenth of the samples within --memory-slack of the median of the
// first tenth after the warm-up). Prints a summary table; --csv writes the samples, which
// plot_soak.py draws. Exit status 0 on pass, 1 on fail, 2 when the daemon does not start.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "stitch/client/client.h"
#include "support/daemon_requests.h"
#include "support/stitchd_process.h"

namespace {

using stitch::client::Client;
using stitch::client::ClientOptions;
using stitch::client::Outcome;
using stitch::client::Result;
using stitch::testing::HloRequest;
using stitch::testing::SoftmaxHlo;
using Clock = std::chrono::steady_clock;

struct Options {
  int clients = 64;
  double seconds = 60;
  double warmup_fraction = 0.25;
  uint64_t seed = 1;
  int warm_shapes = 16;    // subgraphs compiled before the clock starts: the hits
  int fresh_shapes = 400;  // new subgraphs the clients compile during the run
  double memory_slack = 0.10;
  int64_t memory_slack_floor_mib = 32;
  int fd_slack = 4;
  std::string csv;
};

// What one kind of request may get back; anything else is an unexpected error.
enum class Kind { kLookupHit, kCompileHit, kCompileFresh, kMalformed, kAbandoned, kStats, kUsage };
constexpr const char* kKindNames[] = {"lookup_hit", "compile_hit", "compile_fresh", "malformed",
                                      "abandoned",  "stats",       "usage_report"};

bool IsHit(Outcome o) {
  return o == Outcome::kMemory || o == Outcome::kDisk || o == Outcome::kLocal;
}

bool ReasonStarts(const Result& r, const char* code) { return r.reason.rfind(code, 0) == 0; }

// Whether `r` is an answer a request of `kind` may get. An overloaded daemon refuses new
// compiles with RESOURCE_EXHAUSTED, which the client library reports and jobs expect.
bool Expected(Kind kind, const Result& r) {
  switch (kind) {
    case Kind::kLookupHit:
    case Kind::kCompileHit:
      return IsHit(r.outcome);
    case Kind::kCompileFresh:
      return IsHit(r.outcome) || r.outcome == Outcome::kCompiled ||
             ReasonStarts(r, "RESOURCE_EXHAUSTED");
    case Kind::kMalformed:
      // The daemon reads a request on its compile pool, so when the pool's queue is full it
      // refuses any compile, malformed or not, before reading it.
      return r.outcome == Outcome::kFallback &&
             (ReasonStarts(r, "INVALID_ARGUMENT") || ReasonStarts(r, "UNIMPLEMENTED") ||
              ReasonStarts(r, "RESOURCE_EXHAUSTED"));
    case Kind::kAbandoned:
      return r.outcome != Outcome::kFallback || ReasonStarts(r, "DEADLINE_EXCEEDED") ||
             ReasonStarts(r, "RESOURCE_EXHAUSTED");
    case Kind::kStats:
    case Kind::kUsage:
      return true;  // checked through their Status, in RunClient
  }
  return false;
}

// Malformed inputs of several kinds: truncated text, an unknown op, a shape that does not
// match its operand, a graph that is not HLO at all.
stitch::v1::CompileRequest Malformed(std::mt19937_64& rng) {
  std::string good = SoftmaxHlo(8, 8);
  switch (rng() % 4) {
    case 0: {
      // Cut inside the entry computation: a cut between computations would leave a valid
      // module (its last computation becomes the entry).
      const size_t entry = good.find("ENTRY");
      return HloRequest(good.substr(0, entry + 8 + rng() % (good.size() - entry - 10)));
    }
    case 1:
      return HloRequest(
          "HloModule m\nENTRY e {\n p = f32[4] parameter(0)\n ROOT r = f32[4] frobnicate(p)\n}\n");
    case 2:
      return HloRequest(
          "HloModule m\nENTRY e {\n p = f32[4] parameter(0)\n ROOT r = f32[5] negate(p)\n}\n");
    default:
      return HloRequest(std::string(64 + rng() % 512, static_cast<char>('a' + rng() % 26)));
  }
}

struct Sample {
  double t = 0;
  int64_t rss_bytes = 0;
  int fds = 0;
  uint64_t requests = 0;
};

int64_t ResidentBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

int OpenDescriptors(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return ec ? -1 : n;
}

int64_t MedianRss(std::vector<Sample>::const_iterator begin,
                  std::vector<Sample>::const_iterator end) {
  std::vector<int64_t> v;
  for (auto it = begin; it != end; ++it) v.push_back(it->rss_bytes);
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

class Soak {
 public:
  Soak(const Options& options, std::string address)
      : options_(options), address_(std::move(address)) {}

  // Compiles the warm shapes, so hits have something to hit.
  bool Warm() {
    ClientOptions warm;
    warm.address = address_;
    warm.compile_deadline = std::chrono::minutes(5);
    Client c(warm);
    for (int i = 0; i < options_.warm_shapes; ++i) {
      Result r = c.Compile(HloRequest(SoftmaxHlo(16 + i, 128)));
      if (r.outcome == Outcome::kFallback) {
        std::fprintf(stderr, "soak: warm compile %d failed: %s\n", i, r.reason.c_str());
        return false;
      }
    }
    return true;
  }

  void RunClient(int index, Clock::time_point end) {
    std::mt19937_64 rng(options_.seed * 1000003 + static_cast<uint64_t>(index));
    ClientOptions o;
    o.address = address_;
    o.lookup_deadline = std::chrono::seconds(10);
    o.compile_deadline = std::chrono::minutes(2);
    o.local_cache_entries = 0;  // every request reaches the daemon
    Client client(o);
    while (Clock::now() < end) {
      const int roll = static_cast<int>(rng() % 100);
      const int warm = 16 + static_cast<int>(rng() % static_cast<uint64_t>(options_.warm_shapes));
      const int fresh =
          1000 + static_cast<int>(rng() % static_cast<uint64_t>(options_.fresh_shapes));
      Kind kind;
      Result r;
      if (roll < 35) {
        kind = Kind::kLookupHit;
        r = client.Lookup(HloRequest(SoftmaxHlo(warm, 128)));
      } else if (roll < 55) {
        kind = Kind::kCompileHit;
        r = client.Compile(HloRequest(SoftmaxHlo(warm, 128)));
      } else if (roll < 65) {
        kind = Kind::kCompileFresh;
        r = client.Compile(HloRequest(SoftmaxHlo(fresh, 96)));
      } else if (roll < 80) {
        kind = Kind::kMalformed;
        r = client.Compile(Malformed(rng));
      } else if (roll < 92) {
        kind = Kind::kAbandoned;
        // A subgraph of its own, so the compile is new and the 1-3 ms deadline usually
        // expires first: the client cancels the call and the daemon must cope.
        r = client.Compile(HloRequest(SoftmaxHlo(fresh, 80)),
                           std::chrono::milliseconds(1 + rng() % 3));
      } else if (roll < 97) {
        auto stats = client.Stats();
        Record(Kind::kStats, stats.ok(), stats.ok() ? "" : stats.status().ToString());
        continue;
      } else {
        // The invocations the hits recorded, sent now rather than by the background flush.
        auto usage = client.FlushUsage();
        Record(Kind::kUsage, usage.ok(), usage.ok() ? "" : usage.status().ToString());
        continue;
      }
      if (kind == Kind::kCompileHit || kind == Kind::kLookupHit) {
        // Usage for the key it just got, as a job would report.
        if (!r.key.empty()) client.RecordInvocations(r.key, 10);
      }
      Record(kind, Expected(kind, r), r.reason);
    }
    auto last = client.FlushUsage();
    Record(Kind::kUsage, last.ok(), last.ok() ? "" : last.status().ToString());
  }

  void Record(Kind kind, bool expected, const std::string& reason) {
    requests_.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu_);
    ++by_kind_[static_cast<int>(kind)];
    if (!expected) {
      ++unexpected_[static_cast<int>(kind)];
      if (examples_.size() < 10)
        examples_.push_back(std::string(kKindNames[static_cast<int>(kind)]) + ": " + reason);
    }
  }

  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }
  uint64_t unexpected() const {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t n = 0;
    for (const auto& [k, v] : unexpected_) n += v;
    return n;
  }

  void Print() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::printf("| request | count | unexpected |\n|---|---:|---:|\n");
    for (const auto& [k, v] : by_kind_) {
      auto u = unexpected_.find(k);
      std::printf("| %s | %llu | %llu |\n", kKindNames[k], static_cast<unsigned long long>(v),
                  static_cast<unsigned long long>(u == unexpected_.end() ? 0 : u->second));
    }
    for (const std::string& e : examples_) std::printf("unexpected: %s\n", e.c_str());
  }

 private:
  const Options options_;
  const std::string address_;
  std::atomic<uint64_t> requests_{0};
  mutable std::mutex mu_;
  std::map<int, uint64_t> by_kind_;
  std::map<int, uint64_t> unexpected_;
  std::vector<std::string> examples_;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Soak one stitchd with concurrent clients"};
  app.add_option("--clients", o.clients, "Concurrent clients (threads, a channel each)");
  app.add_option("--seconds", o.seconds, "Length of the run");
  app.add_option("--seed", o.seed, "Seed of the request mix");
  app.add_option("--warmup-fraction", o.warmup_fraction, "Part of the run that is warm-up");
  app.add_option("--fresh-shapes", o.fresh_shapes,
                 "New subgraphs per compiling request kind; the caches fill as they are compiled");
  app.add_option("--memory-slack", o.memory_slack, "Allowed RSS growth after warm-up (fraction)");
  app.add_option("--csv", o.csv, "Write the samples here");
  CLI11_PARSE(app, argc, argv);
  std::printf("soak: %d clients, %.0f s, seed %llu\n", o.clients, o.seconds,
              static_cast<unsigned long long>(o.seed));

  stitch::testing::TempDir dir;
  stitch::testing::StitchdProcess daemon(
      {dir.path() + "/data", dir.path() + "/s.sock", dir.path() + "/stitchd.log"},
      {"--workers", "2", "--max-queue", "64", "--memory-cache-bytes", "16MiB", "--log-level",
       "warn"});
  if (!daemon.started()) {
    std::fprintf(stderr, "soak: stitchd did not start:\n%s\n",
                 stitch::testing::ReadFile(dir.path() + "/stitchd.log").c_str());
    return 2;
  }
  Soak soak(o, daemon.address());
  if (!soak.Warm()) return 1;

  const Clock::time_point start = Clock::now();
  const Clock::time_point end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  std::vector<std::thread> threads;
  for (int i = 0; i < o.clients; ++i)
    threads.emplace_back([&soak, i, end] { soak.RunClient(i, end); });
  std::vector<Sample> samples;
  while (Clock::now() < end && daemon.alive()) {
    Sample s;
    s.t = std::chrono::duration<double>(Clock::now() - start).count();
    s.rss_bytes = ResidentBytes(daemon.pid());
    s.fds = OpenDescriptors(daemon.pid());
    s.requests = soak.requests();
    samples.push_back(s);
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  for (std::thread& t : threads) t.join();
  const bool alive = daemon.alive();

  if (!o.csv.empty()) {
    std::ofstream csv(o.csv);
    csv << "seconds,rss_bytes,open_fds,requests\n";
    for (const Sample& s : samples)
      csv << s.t << "," << s.rss_bytes << "," << s.fds << "," << s.requests << "\n";
  }
  const auto warm_end = std::find_if(samples.begin(), samples.end(), [&](const Sample& s) {
    return s.t >= o.seconds * o.warmup_fraction;
  });
  const size_t after = static_cast<size_t>(samples.end() - warm_end);
  const size_t tenth = std::max<size_t>(1, after / 10);
  int warm_fds = 0, max_fds_after = 0;
  for (auto it = samples.begin(); it != warm_end; ++it) warm_fds = std::max(warm_fds, it->fds);
  for (auto it = warm_end; it != samples.end(); ++it)
    max_fds_after = std::max(max_fds_after, it->fds);
  const int64_t rss_first =
      after ? MedianRss(warm_end, warm_end + static_cast<std::ptrdiff_t>(tenth)) : 0;
  const int64_t rss_last =
      after ? MedianRss(samples.end() - static_cast<std::ptrdiff_t>(tenth), samples.end()) : 0;
  const int64_t allowed =
      std::max<int64_t>(static_cast<int64_t>(o.memory_slack * static_cast<double>(rss_first)),
                        o.memory_slack_floor_mib << 20);
  const bool memory_flat = after >= 2 && rss_last - rss_first <= allowed;
  const bool fds_flat = max_fds_after <= warm_fds + o.fd_slack;
  const uint64_t unexpected = soak.unexpected();

  soak.Print();
  std::printf("\n| check | value | pass |\n|---|---|---|\n");
  std::printf("| daemon alive at the end | %s | %s |\n", alive ? "yes" : "no",
              alive ? "yes" : "NO");
  std::printf("| requests (per second) | %llu (%.0f) | |\n",
              static_cast<unsigned long long>(soak.requests()),
              static_cast<double>(soak.requests()) / o.seconds);
  std::printf("| unexpected answers | %llu | %s |\n", static_cast<unsigned long long>(unexpected),
              unexpected == 0 ? "yes" : "NO");
  std::printf(
      "| RSS after warm-up: first tenth, last tenth (median) | %.1f MiB, %.1f MiB (allowed +%.1f) "
      "| %s |\n",
      static_cast<double>(rss_first) / (1 << 20), static_cast<double>(rss_last) / (1 << 20),
      static_cast<double>(allowed) / (1 << 20), memory_flat ? "yes" : "NO");
  std::printf("| open descriptors: warm-up max, later max | %d, %d | %s |\n", warm_fds,
              max_fds_after, fds_flat ? "yes" : "NO");
  const bool pass = alive && unexpected == 0 && memory_flat && fds_flat;
  std::printf("soak: %s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
