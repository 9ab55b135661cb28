// The cluster benchmark: a cold start of three real stitchd processes, four jobs each, every
// job asking for all memory-intensive subgraphs of the MobileNetV2 training step at once,
// with the nodes sharing a real Redis Cluster (3 masters, 3 replicas on loopback) and without
// it. Prints compiles and the time until every node holds every kernel, median of --runs,
// as a markdown table (and a CSV with --csv).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <vector>

#include "support/cold_start.h"
#include "support/redis_cluster.h"

namespace {

using stitch::testing::ColdStartResult;
using stitch::testing::RedisCluster;
using stitch::testing::StitchdProcess;
using stitch::testing::TempDir;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One cold start on fresh data dirs; with `cluster` the nodes share its tier.
ColdStartResult RunOnce(const std::vector<stitch::v1::CompileRequest>& requests,
                        RedisCluster* cluster, const std::string& files) {
  TempDir dir;
  std::vector<std::unique_ptr<StitchdProcess>> nodes;
  for (const char* n : {"a", "b", "c"}) {
    std::vector<std::string> flags = {"--log-level", "warn"};
    if (cluster != nullptr) {
      for (std::string f :
           {"--cluster-nodes=" + cluster->Seeds(),
            std::string("--cluster-user=") + stitch::testing::kRedisUser,
            "--cluster-password-file=" + files + "/password",
            "--cluster-secret-file=" + files + "/secret", std::string("--node-name=") + n}) {
        flags.push_back(f);
      }
    }
    const std::string base = dir.path() + "/" + n;
    nodes.push_back(std::make_unique<StitchdProcess>(
        stitch::testing::DaemonPaths{base + "-data", base + ".sock", base + ".log"}, flags));
    if (!nodes.back()->started()) {
      std::fprintf(stderr, "stitchd did not start:\n%s\n", nodes.back()->log().c_str());
      std::exit(1);
    }
  }
  return stitch::testing::ColdStart({nodes[0].get(), nodes[1].get(), nodes[2].get()}, requests, 4);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cold start of three stitchd nodes with and without the cluster tier"};
  int runs = 3;
  std::string csv;
  app.add_option("--runs", runs, "cold starts of each kind; the table shows medians");
  app.add_option("--csv", csv, "also write the table as CSV here");
  CLI11_PARSE(app, argc, argv);

  const std::vector<stitch::v1::CompileRequest> requests = stitch::testing::MobileNetRequests();
  if (requests.empty()) {
    std::fprintf(stderr, "cannot extract the MobileNetV2 subgraphs from the corpus\n");
    return 1;
  }
  RedisCluster cluster;
  if (!cluster.ready()) {
    std::fprintf(stderr, "the Redis cluster did not form (is redis-server installed?)\n");
    return 1;
  }
  TempDir files;
  std::ofstream(files.path() + "/secret") << "cluster-benchmark-secret-0123456789";
  std::ofstream(files.path() + "/password") << stitch::testing::kRedisUserPassword;

  struct Row {
    const char* name;
    std::vector<double> seconds, compiles;
    size_t keys = 0, failed = 0;
  } rows[2] = {{"with the cluster tier", {}, {}}, {"each node alone", {}, {}}};
  for (int r = 0; r < runs; ++r) {
    for (int m : cluster.Masters()) cluster.Cli(m, "FLUSHALL");
    for (int kind = 0; kind < 2; ++kind) {
      ColdStartResult result = RunOnce(requests, kind == 0 ? &cluster : nullptr, files.path());
      rows[kind].seconds.push_back(result.seconds);
      rows[kind].compiles.push_back(static_cast<double>(result.compiles));
      rows[kind].keys = result.keys.size();
      rows[kind].failed += result.failures.size();
    }
  }
  std::printf(
      "cold start: 3 stitchd nodes x 4 jobs, %zu MobileNetV2 subgraphs (%zu keys), "
      "median of %d runs on this %u-core machine\n\n",
      requests.size(), rows[0].keys, runs, std::thread::hardware_concurrency());
  std::printf(
      "| nodes | compiles | failed requests | seconds until every node holds every "
      "kernel |\n|---|---:|---:|---:|\n");
  std::ofstream out;
  if (!csv.empty()) {
    out.open(csv);
    out << "nodes,subgraphs,keys,runs,compiles,failed,seconds\n";
  }
  for (const Row& row : rows) {
    std::printf("| %s | %.0f | %zu | %.1f |\n", row.name, Median(row.compiles), row.failed,
                Median(row.seconds));
    if (out) {
      out << row.name << "," << requests.size() << "," << row.keys << "," << runs << ","
          << Median(row.compiles) << "," << row.failed << "," << Median(row.seconds) << "\n";
    }
  }
  const bool ok = rows[0].failed == 0 && rows[1].failed == 0 &&
                  Median(rows[0].compiles) == static_cast<double>(rows[0].keys);
  return ok ? 0 : 1;
}
