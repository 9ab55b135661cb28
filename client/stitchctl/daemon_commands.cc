// stitchctl's commands that talk to a running stitchd through the client library.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "commands.h"
#include "graph_input.h"
#include "stitch/client/client.h"
#include "stitch/ir/graph_proto.h"

namespace stitch::ctl {
namespace {

client::Client MakeClient(const std::string& daemon) {
  client::ClientOptions o = DaemonClientOptions(daemon);
  o.local_cache_entries = 0;  // a one-shot tool asks the daemon every time
  return client::Client(o);
}

nlohmann::json BundleJson(const v1::KernelBundle& b) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const v1::Kernel& k : b.kernels()) {
    const v1::LaunchDims& l = k.launch();
    kernels.push_back({{"name", k.name()},
                       {"kind", k.kind()},
                       {"grid", {l.grid_x(), l.grid_y(), l.grid_z()}},
                       {"block", {l.block_x(), l.block_y(), l.block_z()}},
                       {"ptx_bytes", k.ptx().size()},
                       {"cubin_bytes", k.cubin().size()},
                       {"workspace_bytes", k.workspace_bytes()},
                       {"cooperative", k.cooperative()}});
  }
  return {{"key", b.key()},
          {"target", b.target()},
          {"compiler_version", b.compiler_version()},
          {"compile_seconds", b.compile_seconds()},
          {"bytes", b.ByteSizeLong()},
          {"plan", b.plan()},
          {"kernels", kernels},
          {"cost",
           {{"stitched_seconds", b.cost().stitched_seconds()},
            {"baseline_seconds", b.cost().baseline_seconds()},
            {"stitched_kernels", b.cost().stitched_kernels()},
            {"baseline_kernels", b.cost().baseline_kernels()}}}};
}

}  // namespace

std::string DaemonAddress(const std::string& flag) {
  // A bare path is a Unix socket; anything else is a gRPC target as given.
  if (!flag.empty() && flag[0] == '/') return "unix://" + flag;
  return flag;
}

DaemonTls& DaemonTlsFlags() {
  static DaemonTls flags;
  return flags;
}

client::ClientOptions DaemonClientOptions(const std::string& daemon) {
  client::ClientOptions o;
  o.address = DaemonAddress(daemon);
  const DaemonTls& tls = DaemonTlsFlags();
  o.tls_ca_file = tls.ca;
  o.tls_cert_file = tls.cert;
  o.tls_key_file = tls.key;
  o.tls_server_name = tls.server_name;
  return o;
}

int RunCompileOnDaemon(const CompileArgs& args) {
  StatusOr<std::vector<Graph>> graphs = LoadGraphs(args.file);
  if (!graphs.ok()) return Fail(graphs.status().ToString());
  client::Client c = MakeClient(args.daemon);
  nlohmann::json all = nlohmann::json::array();
  for (const Graph& g : *graphs) {
    v1::CompileRequest request;
    *request.mutable_graph() = ToProto(g);
    if (args.target) request.set_target(args.target->name());
    request.set_ptx_only(!args.cubin);
    auto start = std::chrono::steady_clock::now();
    client::Result r = c.Compile(request);
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!r.ok()) return Fail(args.file + ": " + (g.name.empty() ? "" : g.name + ": ") + r.reason);
    if (args.json) {
      nlohmann::json j = BundleJson(*r.bundle);
      j["graph"] = g.name;
      j["source"] = client::OutcomeName(r.outcome);
      j["ms"] = ms;
      all.push_back(j);
      continue;
    }
    std::printf("%-10s %s %s  %d kernel(s)  %.1f ms\n", client::OutcomeName(r.outcome),
                r.key.c_str(), g.name.c_str(), r.bundle->kernels_size(), ms);
  }
  if (args.json) std::cout << (all.size() == 1 ? all[0] : all).dump(2) << "\n";
  return 0;
}

int RunStats(const DaemonArgs& args) {
  client::Client c = MakeClient(args.daemon);
  StatusOr<v1::StatsResponse> s = c.Stats();
  if (!s.ok()) return Fail(args.daemon + ": " + s.status().ToString());
  nlohmann::json j = {{"version", s->version()},
                      {"target", s->target()},
                      {"uptime_seconds", s->uptime_seconds()},
                      {"hits_memory", s->hits_memory()},
                      {"hits_disk", s->hits_disk()},
                      {"hits_cluster", s->hits_cluster()},
                      {"compiles", s->compiles()},
                      {"misses", s->misses()},
                      {"errors", s->errors()},
                      {"rejected", s->rejected()},
                      {"entries", s->entries()},
                      {"bytes", s->bytes()},
                      {"capacity_bytes", s->capacity_bytes()},
                      {"evictions", s->evictions()},
                      {"queue_depth", s->queue_depth()},
                      {"compiles_in_flight", s->compiles_in_flight()},
                      {"compile_seconds_saved", s->compile_seconds_saved()},
                      {"gpu_seconds_saved", s->gpu_seconds_saved()},
                      {"gpu_seconds_saved_measured", s->gpu_seconds_saved_measured()},
                      {"gpu_seconds_lost", s->gpu_seconds_lost()},
                      {"invocations_reported", s->invocations_reported()},
                      {"runtime_keys", s->runtime_keys()}};
  if (args.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  for (const auto& [name, value] : j.items()) std::cout << name << ": " << value.dump() << "\n";
  return 0;
}

int RunCacheList(const DaemonArgs& args) {
  client::Client c = MakeClient(args.daemon);
  StatusOr<v1::ListEntriesResponse> list = c.ListEntries(args.limit);
  if (!list.ok()) return Fail(args.daemon + ": " + list.status().ToString());
  if (args.json) {
    nlohmann::json all = nlohmann::json::array();
    for (const v1::EntrySummary& e : list->entries()) {
      all.push_back({{"key", e.key()},
                     {"target", e.target()},
                     {"kernels", e.kernels()},
                     {"bytes", e.bytes()},
                     {"compile_seconds", e.compile_seconds()},
                     {"plan", e.plan()}});
    }
    std::cout << all.dump(2) << "\n";
    return 0;
  }
  std::printf("%-64s  %-6s  %7s  %9s  %10s  %s\n", "KEY", "TARGET", "KERNELS", "BYTES",
              "COMPILE_MS", "PLAN");
  for (const v1::EntrySummary& e : list->entries()) {
    std::printf("%-64s  %-6s  %7u  %9llu  %10.1f  %s\n", e.key().c_str(), e.target().c_str(),
                e.kernels(), static_cast<unsigned long long>(e.bytes()), e.compile_seconds() * 1e3,
                e.plan().c_str());
  }
  return 0;
}

namespace {

double Mean(const v1::TimingSummary& t) {
  return t.samples() == 0 ? 0 : t.seconds_sum() / static_cast<double>(t.samples());
}

// One row per key and timed kernels: "stitched", then each timed fallback baseline.
struct RuntimeRow {
  const v1::KernelRuntimes* runtimes;
  std::string kernels;
  const v1::TimingSummary* timing;
  double modeled;
};

std::vector<RuntimeRow> RuntimeRows(const v1::ListRuntimesResponse& list) {
  std::vector<RuntimeRow> rows;
  for (const v1::KernelRuntimes& r : list.runtimes()) {
    if (r.stitched().samples() > 0) {
      rows.push_back({&r, "stitched", &r.stitched(), r.modeled_stitched_seconds()});
    }
    std::map<std::string, const v1::TimingSummary*> fallbacks;  // in name order
    for (const auto& [baseline, timing] : r.fallback()) fallbacks[baseline] = &timing;
    for (const auto& [baseline, timing] : fallbacks) {
      const auto modeled = r.modeled_fallback_seconds().find(baseline);
      rows.push_back({&r, baseline, timing,
                      modeled == r.modeled_fallback_seconds().end() ? 0 : modeled->second});
    }
  }
  return rows;
}

}  // namespace

int RunRuntimes(const DaemonArgs& args) {
  client::Client c = MakeClient(args.daemon);
  StatusOr<v1::ListRuntimesResponse> list = c.ListRuntimes(args.limit);
  if (!list.ok()) return Fail(args.daemon + ": " + list.status().ToString());
  const std::vector<RuntimeRow> rows = RuntimeRows(*list);
  if (args.json) {
    nlohmann::json all = nlohmann::json::array();
    for (const RuntimeRow& row : rows) {
      all.push_back({{"key", row.runtimes->key()},
                     {"target", row.runtimes->target()},
                     {"kernels", row.kernels},
                     {"samples", row.timing->samples()},
                     {"measured_seconds", Mean(*row.timing)},
                     {"min_seconds", row.timing->min_seconds()},
                     {"max_seconds", row.timing->max_seconds()},
                     {"reports", row.timing->reports()},
                     {"modeled_seconds", row.modeled},
                     {"invocations", row.runtimes->invocations()}});
    }
    std::cout << all.dump(2) << "\n";
    return 0;
  }
  if (args.csv) {
    std::printf(
        "key,target,kernels,samples,measured_seconds,min_seconds,max_seconds,reports,"
        "modeled_seconds,invocations\n");
    for (const RuntimeRow& row : rows) {
      std::printf("%s,%s,%s,%llu,%.9g,%.9g,%.9g,%llu,%.9g,%llu\n", row.runtimes->key().c_str(),
                  row.runtimes->target().c_str(), row.kernels.c_str(),
                  static_cast<unsigned long long>(row.timing->samples()), Mean(*row.timing),
                  row.timing->min_seconds(), row.timing->max_seconds(),
                  static_cast<unsigned long long>(row.timing->reports()), row.modeled,
                  static_cast<unsigned long long>(row.runtimes->invocations()));
    }
    return 0;
  }
  std::printf("%-64s  %-10s  %8s  %12s  %12s  %8s\n", "KEY", "KERNELS", "SAMPLES", "MEASURED_US",
              "MODELED_US", "MEAS/MOD");
  for (const RuntimeRow& row : rows) {
    const double measured = Mean(*row.timing);
    std::printf("%-64s  %-10s  %8llu  %12.2f  %12.2f  %8.2f\n", row.runtimes->key().c_str(),
                row.kernels.c_str(), static_cast<unsigned long long>(row.timing->samples()),
                measured * 1e6, row.modeled * 1e6, row.modeled > 0 ? measured / row.modeled : 0.0);
  }
  return 0;
}

int RunCacheGet(const DaemonArgs& args) {
  client::Client c = MakeClient(args.daemon);
  StatusOr<v1::CompileResponse> entry = c.GetEntry(args.key);
  if (!entry.ok()) return Fail(args.daemon + ": " + entry.status().ToString());
  if (!args.out.empty()) {
    std::ofstream out(args.out, std::ios::binary);
    if (!out || !entry->bundle().SerializeToOstream(&out)) {
      return Fail("cannot write " + args.out);
    }
    std::printf("wrote %zu bytes to %s\n", entry->bundle().ByteSizeLong(), args.out.c_str());
    return 0;
  }
  nlohmann::json j = BundleJson(entry->bundle());
  if (args.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("key      %s\ntarget   %s\ncompiler %s\ncompile  %.1f ms\n",
              j["key"].get<std::string>().c_str(), j["target"].get<std::string>().c_str(),
              j["compiler_version"].get<std::string>().c_str(),
              entry->bundle().compile_seconds() * 1e3);
  for (const v1::Kernel& k : entry->bundle().kernels()) {
    const v1::LaunchDims& l = k.launch();
    std::printf("  %-28s %-13s grid=(%u,%u,%u) block=(%u,%u,%u) ptx=%zuB cubin=%zuB",
                k.name().c_str(), k.kind().c_str(), l.grid_x(), l.grid_y(), l.grid_z(), l.block_x(),
                l.block_y(), l.block_z(), k.ptx().size(), k.cubin().size());
    // Kernels with grid barriers or split reductions need a zeroed workspace from whoever
    // launches them; those with grid barriers, a cooperative launch.
    if (k.workspace_bytes() != 0) {
      std::printf(" workspace=%lluB", static_cast<unsigned long long>(k.workspace_bytes()));
    }
    if (k.cooperative()) std::printf(" cooperative");
    std::printf("\n");
  }
  return 0;
}

}  // namespace stitch::ctl
