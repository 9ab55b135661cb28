// A cold start of several nodes at once, as the cluster test and benchmark run it: every job
// asks its node for every request, each job starting from a different place in the list as
// jobs at different steps of a model do.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "stitch/client/client.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/graph_proto.h"
#include "support/stitchd_process.h"

namespace stitch::testing {

// The memory-intensive subgraphs of the MobileNetV2 training step in the corpus, as a job
// sends them; empty when the module cannot be read or extracted.
inline std::vector<v1::CompileRequest> MobileNetRequests() {
  const std::string text = ReadFile(std::string(STITCH_CORPUS_DIR) +
                                    "/hlo/real_models/mobilenet_v2_pytorchxla_train_bs96.hlo");
  HloImportOptions options;
  options.source_name = "mobilenet_v2";
  StatusOr<std::vector<Graph>> graphs = ExtractMemoryIntensiveSubgraphs(text, options);
  std::vector<v1::CompileRequest> out;
  if (!graphs.ok()) return out;
  for (const Graph& g : *graphs) {
    v1::CompileRequest r;
    *r.mutable_graph() = ToProto(g);
    out.push_back(std::move(r));
  }
  return out;
}

struct ColdStartResult {
  uint64_t compiles = 0;  // summed over the nodes (their Stats)
  double seconds = 0;     // until every job had every answer
  std::set<std::string> keys;
  std::vector<std::string> failures;  // the reason of each request without kernels
};

// Runs `jobs_per_node` jobs against each of `nodes` (fresh daemons: their compile counts are
// this run's) and returns what it took.
inline ColdStartResult ColdStart(const std::vector<const StitchdProcess*>& nodes,
                                 const std::vector<v1::CompileRequest>& requests,
                                 size_t jobs_per_node) {
  auto options = [](const StitchdProcess& d) {
    client::ClientOptions o;
    o.address = d.address();
    o.local_cache_entries = 0;
    o.compile_deadline = std::chrono::minutes(5);
    o.admin_deadline = std::chrono::seconds(10);
    return o;
  };
  ColdStartResult result;
  std::mutex mu;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> jobs;
  for (const StitchdProcess* node : nodes) {
    for (size_t j = 0; j < jobs_per_node; ++j) {
      jobs.emplace_back([&, j, o = options(*node)] {
        client::Client c(o);
        for (size_t i = 0; i < requests.size(); ++i) {
          client::Result got = c.Compile(requests[(i + j * 7) % requests.size()]);
          std::lock_guard lock(mu);
          if (got.ok()) {
            result.keys.insert(got.key);
          } else {
            result.failures.push_back(got.reason);
          }
        }
      });
    }
  }
  for (auto& t : jobs) t.join();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const StitchdProcess* node : nodes) {
    StatusOr<v1::StatsResponse> s = client::Client(options(*node)).Stats();
    if (s.ok()) result.compiles += s->compiles();
  }
  return result;
}

}  // namespace stitch::testing
