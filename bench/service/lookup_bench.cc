// The service benchmark: a real stitchd on a Unix socket, and a load generator of N
// concurrent clients (threads, each with its own Client and channel) on the same machine.
// It measures latency percentiles and throughput for three paths:
//   memory  Lookups of bundles in the daemon's memory tier
//   disk    Lookups served by RocksDB (a daemon whose memory tier is too small to hold one)
//   cluster Lookups served by the cluster tier: a real 3-master, 3-replica Redis Cluster on
//           loopback, read by a daemon whose memory and disk tiers hold nothing
//   compile Compiles of subgraphs never seen before
// and prints a markdown table (and a CSV with --csv).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <latch>
#include <thread>
#include <vector>

#include "stitch/client/client.h"
#include "support/daemon_requests.h"
#include "support/redis_cluster.h"
#include "support/stitchd_process.h"

namespace {

using stitch::client::Client;
using stitch::client::ClientOptions;
using stitch::client::Outcome;
using Clock = std::chrono::steady_clock;
using stitch::testing::SoftmaxHlo;

stitch::v1::CompileRequest Request(int rows, int cols) {
  stitch::v1::CompileRequest r;
  r.set_hlo_text(SoftmaxHlo(rows, cols));
  return r;
}

struct PathResult {
  std::string path;
  size_t requests = 0;
  size_t failures = 0;
  double seconds = 0;
  double p50_us = 0, p99_us = 0, max_us = 0;
};

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

// Runs `clients` threads for `seconds`; each calls `call(thread, iteration)` in a loop,
// which returns whether the request got the outcome the path expects.
template <typename Call>
PathResult Drive(const std::string& name, int clients, double seconds, Call call) {
  std::vector<std::vector<double>> latencies(static_cast<size_t>(clients));
  std::atomic<size_t> failures{0};
  std::latch start(clients + 1);
  Clock::time_point end;
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int i = 0; Clock::now() < end; ++i) {
        auto begin = Clock::now();
        bool ok = call(t, i);
        double us = std::chrono::duration<double, std::micro>(Clock::now() - begin).count();
        latencies[static_cast<size_t>(t)].push_back(us);
        if (!ok) failures.fetch_add(1);
      }
    });
  }
  auto begin = Clock::now();
  end = begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  start.arrive_and_wait();
  for (std::thread& th : threads) th.join();
  PathResult r;
  r.path = name;
  r.seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  r.requests = all.size();
  r.failures = failures.load();
  r.max_us = all.empty() ? 0 : *std::max_element(all.begin(), all.end());
  r.p50_us = Percentile(all, 0.50);
  r.p99_us = Percentile(all, 0.99);
  return r;
}

ClientOptions Options(const stitch::testing::StitchdProcess& d) {
  ClientOptions o;
  o.address = d.address();
  o.local_cache_entries = 0;  // every request must reach the daemon
  o.lookup_deadline = std::chrono::milliseconds(5000);
  o.compile_deadline = std::chrono::milliseconds(120000);
  return o;
}

// The requests of `keys` distinct subgraphs, which the lookup paths cycle through.
std::vector<stitch::v1::CompileRequest> Requests(int keys) {
  std::vector<stitch::v1::CompileRequest> requests;
  for (int k = 0; k < keys; ++k) requests.push_back(Request(64, 128 + k));
  return requests;
}

// Has `d` compile the lookup paths' subgraphs.
void WarmKeys(const stitch::testing::StitchdProcess& d, int keys) {
  Client warm(Options(d));
  for (const auto& r : Requests(keys)) warm.Compile(r);
}

// Lookups of `keys` distinct cached subgraphs (compiled first), spread over the clients.
PathResult LookupPath(const std::string& name, const stitch::testing::StitchdProcess& d,
                      int clients, double seconds, int keys, Outcome expected) {
  const std::vector<stitch::v1::CompileRequest> requests = Requests(keys);
  WarmKeys(d, keys);
  std::vector<std::unique_ptr<Client>> cs;
  for (int t = 0; t < clients; ++t) cs.push_back(std::make_unique<Client>(Options(d)));
  for (auto& c : cs) c->Lookup(requests[0]);  // connect before the clock starts
  return Drive(name, clients, seconds, [&](int t, int i) {
    const auto& req = requests[static_cast<size_t>((t + i) % keys)];
    return cs[static_cast<size_t>(t)]->Lookup(req).outcome == expected;
  });
}

PathResult CompilePath(const stitch::testing::StitchdProcess& d, int clients, double seconds) {
  std::vector<std::unique_ptr<Client>> cs;
  for (int t = 0; t < clients; ++t) cs.push_back(std::make_unique<Client>(Options(d)));
  return Drive("compile (new key)", clients, seconds, [&](int t, int i) {
    // A distinct shape per request: every one is a new key.
    return cs[static_cast<size_t>(t)]->Compile(Request(32 + t, 1000 + i)).outcome ==
           Outcome::kCompiled;
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stitchd lookup and compile latency under concurrent clients"};
  int clients = 8;
  double seconds = 5;
  double compile_seconds = 10;
  int keys = 64;
  std::string csv;
  app.add_option("--clients", clients, "concurrent clients");
  app.add_option("--seconds", seconds, "duration of each lookup path");
  app.add_option("--compile-seconds", compile_seconds, "duration of the compile path");
  app.add_option("--keys", keys, "distinct cached subgraphs the lookups cycle through");
  app.add_option("--csv", csv, "also write the table as CSV here");
  CLI11_PARSE(app, argc, argv);

  stitch::testing::TempDir dir;
  std::vector<PathResult> rows;
  {
    stitch::testing::StitchdProcess d(
        {dir.path() + "/mem", dir.path() + "/mem.sock", dir.path() + "/mem.log"},
        {"--log-level", "warn"});
    if (!d.started()) {
      std::fprintf(stderr, "stitchd did not start:\n%s\n", d.log().c_str());
      return 1;
    }
    rows.push_back(LookupPath("memory hit", d, clients, seconds, keys, Outcome::kMemory));
    rows.push_back(CompilePath(d, clients, compile_seconds));
  }
  {
    // A memory tier of one byte holds nothing, so every hit is read from RocksDB.
    stitch::testing::StitchdProcess d(
        {dir.path() + "/disk", dir.path() + "/disk.sock", dir.path() + "/disk.log"},
        {"--log-level", "warn", "--memory-cache-bytes", "1"});
    if (!d.started()) {
      std::fprintf(stderr, "stitchd did not start:\n%s\n", d.log().c_str());
      return 1;
    }
    rows.insert(rows.begin() + 1,
                LookupPath("RocksDB hit", d, clients, seconds, keys, Outcome::kDisk));
  }

  {
    stitch::testing::RedisCluster cluster;
    if (!cluster.ready()) {
      std::fprintf(stderr, "the Redis cluster did not form (is redis-server installed?)\n");
      return 1;
    }
    std::ofstream(dir.path() + "/secret") << "service-benchmark-cluster-secret";
    std::ofstream(dir.path() + "/password") << stitch::testing::kRedisUserPassword;
    const std::vector<std::string> cluster_flags = {"--log-level",
                                                    "warn",
                                                    "--cluster-nodes",
                                                    cluster.Seeds(),
                                                    "--cluster-user",
                                                    stitch::testing::kRedisUser,
                                                    "--cluster-password-file",
                                                    dir.path() + "/password",
                                                    "--cluster-secret-file",
                                                    dir.path() + "/secret"};
    // One node compiles and publishes; the reader's memory and disk tiers hold nothing, so
    // every hit crosses to the cluster (a GET and a TTL refresh in one round trip).
    stitch::testing::StitchdProcess writer(
        {dir.path() + "/writer", dir.path() + "/writer.sock", dir.path() + "/writer.log"},
        cluster_flags);
    std::vector<std::string> reader_flags = cluster_flags;
    for (const char* f : {"--memory-cache-bytes", "1", "--disk-cache-bytes", "1"}) {
      reader_flags.push_back(f);
    }
    stitch::testing::StitchdProcess reader(
        {dir.path() + "/reader", dir.path() + "/reader.sock", dir.path() + "/reader.log"},
        reader_flags);
    if (!writer.started() || !reader.started()) {
      std::fprintf(stderr, "stitchd did not start:\n%s\n%s\n", writer.log().c_str(),
                   reader.log().c_str());
      return 1;
    }
    WarmKeys(writer, keys);
    rows.insert(rows.begin() + 2,
                LookupPath("cluster hit", reader, clients, seconds, keys, Outcome::kCluster));
  }

  unsigned cores = std::thread::hardware_concurrency();
  std::printf(
      "stitchd service benchmark: %d concurrent clients over a Unix socket, load "
      "generator on the same %u-core machine\n\n",
      clients, cores);
  std::printf("| path | requests | failed | p50 (us) | p99 (us) | max (us) | requests/s |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  std::ofstream out;
  if (!csv.empty()) {
    out.open(csv);
    out << "path,clients,requests,failed,p50_us,p99_us,max_us,requests_per_second\n";
  }
  for (const PathResult& r : rows) {
    double rate = static_cast<double>(r.requests) / r.seconds;
    std::printf("| %s | %zu | %zu | %.0f | %.0f | %.0f | %.0f |\n", r.path.c_str(), r.requests,
                r.failures, r.p50_us, r.p99_us, r.max_us, rate);
    if (out) {
      out << r.path << "," << clients << "," << r.requests << "," << r.failures << "," << r.p50_us
          << "," << r.p99_us << "," << r.max_us << "," << rate << "\n";
    }
  }
  bool ok = std::all_of(rows.begin(), rows.end(),
                        [](const PathResult& r) { return r.requests > 0 && r.failures == 0; });
  return ok ? 0 : 1;
}
