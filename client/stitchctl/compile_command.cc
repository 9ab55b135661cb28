#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "graph_input.h"
#include "stitch/driver/bundle.h"
#include "stitch/driver/compile.h"

namespace stitch::ctl {

int Fail(const std::string& message) {
  std::fprintf(stderr, "stitchctl: %s\n", message.c_str());
  return 1;
}

namespace {

// The parameter ABI a job binds buffers by: "input 0", "output 1", "temporary 0", then the
// workspace where the kernel has one.
nlohmann::json ParamsJson(const v1::Kernel& k) {
  nlohmann::json params = nlohmann::json::array();
  for (const v1::KernelParam& p : k.params()) {
    params.push_back(v1::KernelParam::Role_Name(p.role()) + " " + std::to_string(p.index()));
  }
  if (k.workspace_bytes() != 0) params.push_back("WORKSPACE");
  return params;
}

nlohmann::json KernelJson(const CompiledKernel& k, const v1::Kernel& bundled, bool with_ptx) {
  nlohmann::json j = {
      {"name", k.name},
      {"kind", std::string(KernelKindName(k.kind))},
      {"grid", {k.launch.grid[0], k.launch.grid[1], k.launch.grid[2]}},
      {"block", {k.launch.block[0], k.launch.block[1], k.launch.block[2]}},
      {"shared_bytes", k.shared_bytes},
      {"dynamic_shared_bytes", k.dynamic_shared_bytes},
      {"workspace_bytes", k.workspace_bytes},
      {"cooperative", k.cooperative},
      {"ptx_bytes", k.ptx.size()},
      {"cubin_bytes", k.cubin.size()},
      {"params", ParamsJson(bundled)},
  };
  if (with_ptx) j["ptx"] = k.ptx;
  return j;
}

// Every plan the compiler priced, the stitched plan first, as {planner, cost}.
std::vector<std::pair<std::string, PlanCost>> PricedPlans(const CompileResult& r) {
  std::vector<std::pair<std::string, PlanCost>> plans = {{"stitch", r.stitched_cost}};
  for (const BaselineEstimate& b : r.baselines) {
    plans.push_back({std::string(BaselineCompilerName(b.compiler)), b.cost});
  }
  if (r.eager_cost) plans.push_back({"eager", *r.eager_cost});
  return plans;
}

// The shipped plan's modelled speedup over the better baseline model (1 when it is that
// model's plan).
double SpeedupOverBaseline(const CompileResult& r) {
  return r.cost.seconds > 0 ? r.baseline_cost.seconds / r.cost.seconds : 1.0;
}

// "modeled  stitch 10.90 us, xla 32.74 us, inductor 21.02 us: ships stitch, 1.93x the better
// baseline".
void PrintChoice(const CompileResult& r) {
  std::cout << "modeled";
  const char* separator = "  ";
  for (const auto& [planner, cost] : PricedPlans(r)) {
    std::printf("%s%s %.2f us (%d kernel%s)", separator, planner.c_str(), cost.seconds * 1e6,
                cost.kernels, cost.kernels == 1 ? "" : "s");
    separator = ", ";
  }
  std::printf(": ships %s, %.2fx the better baseline\n",
              std::string(PlannerKindName(r.shipped)).c_str(), SpeedupOverBaseline(r));
}

void PrintText(const Graph& g, const CompileResult& r, bool with_ptx) {
  std::cout << "graph " << (g.name.empty() ? "(unnamed)" : g.name) << "\n";
  std::cout << "key   " << r.key.hex << "\n";
  std::cout << "plan  " << r.plan.planner << ", " << r.kernels.size() << " kernel(s)\n";
  PrintChoice(r);
  for (const CompiledKernel& k : r.kernels) {
    std::printf("  %-28s %-13s grid=(%u,%u,%u) block=(%u,%u,%u) shared=%uB", k.name.c_str(),
                std::string(KernelKindName(k.kind)).c_str(), k.launch.grid[0], k.launch.grid[1],
                k.launch.grid[2], k.launch.block[0], k.launch.block[1], k.launch.block[2],
                k.shared_bytes);
    // Only kernels with grid barriers or split reductions have a workspace, and only rows kept
    // in shared memory dynamic shared memory; the others keep the short line.
    if (k.dynamic_shared_bytes != 0) std::printf(" dynamic_shared=%uB", k.dynamic_shared_bytes);
    if (k.workspace_bytes != 0) {
      std::printf(" workspace=%lluB", static_cast<unsigned long long>(k.workspace_bytes));
    }
    if (k.cooperative) std::printf(" cooperative");
    std::printf("\n");
  }
  std::printf("compile %.2f ms to PTX, %.2f ms to cubin\n", r.timings.to_ptx_ms(),
              r.timings.total_ms());
  if (!r.cubin_note.empty()) std::cout << "note  " << r.cubin_note << "\n";
  if (with_ptx) {
    for (const CompiledKernel& k : r.kernels) std::cout << "\n// " << k.name << "\n" << k.ptx;
  }
}

// Writes each kernel's portable IR, PTX and cubin (where there is one) to `dir`.
Status DumpKernels(const std::string& dir, size_t graph_index, const CompileResult& r) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Internal("cannot create " + dir + ": " + ec.message());
  for (const CompiledKernel& k : r.kernels) {
    const std::string stem = dir + "/" + std::to_string(graph_index) + "_" + k.name;
    for (const auto& [ext, bytes] :
         {std::pair<const char*, const std::string*>{".bc", &k.portable_ir},
          {".ptx", &k.ptx},
          {".cubin", &k.cubin}}) {
      if (bytes->empty()) continue;
      std::ofstream out(stem + ext, std::ios::binary);
      out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
      if (!out) return Internal("cannot write " + stem + ext);
    }
  }
  return Status::Ok();
}

}  // namespace

int RunCompile(const CompileArgs& args) {
  StatusOr<std::vector<Graph>> graphs = LoadGraphs(args.file);
  if (!graphs.ok()) return Fail(graphs.status().ToString());
  CompileOptions options;
  options.codegen.target = args.target.value_or(Target());
  options.codegen.emit_cubin = args.cubin;
  nlohmann::json all = nlohmann::json::array();
  for (const Graph& g : *graphs) {
    StatusOr<CompileResult> r = CompileGraph(g, options);
    if (!r.ok()) return Fail(args.file + ": " + r.status().ToString());
    if (!args.dump_dir.empty()) {
      Status dumped = DumpKernels(args.dump_dir, static_cast<size_t>(&g - graphs->data()), *r);
      if (!dumped.ok()) return Fail(dumped.ToString());
    }
    if (!args.json) {
      PrintText(g, *r, args.print_ptx);
      continue;
    }
    nlohmann::json j = {{"graph", g.name},
                        {"key", r->key.hex},
                        {"planner", r->plan.planner},
                        {"shipped", std::string(PlannerKindName(r->shipped))},
                        {"speedup_over_baseline", SpeedupOverBaseline(*r)},
                        {"estimates", nlohmann::json::array()},
                        {"compile_ms_to_ptx", r->timings.to_ptx_ms()},
                        {"compile_ms_to_cubin", r->timings.total_ms()},
                        {"compile_ms_by_stage",
                         {{"verify", r->timings.verify_ms},
                          {"plan", r->timings.plan_ms},
                          {"emit", r->timings.emit_ms},
                          {"ptx", r->timings.ptx_ms},
                          {"cubin", r->timings.cubin_ms}}},
                        {"kernels", nlohmann::json::array()}};
    for (const auto& [planner, cost] : PricedPlans(*r)) {
      j["estimates"].push_back({{"planner", planner},
                                {"modeled_us", cost.seconds * 1e6},
                                {"global_bytes", cost.global_bytes},
                                {"kernels", cost.kernels}});
    }
    if (!r->cubin_note.empty()) j["note"] = r->cubin_note;
    const v1::KernelBundle bundle = ToBundle(*r, options);
    for (size_t k = 0; k < r->kernels.size(); ++k) {
      j["kernels"].push_back(
          KernelJson(r->kernels[k], bundle.kernels(static_cast<int>(k)), args.print_ptx));
    }
    j["plan"] = Describe(r->graph, r->plan);
    all.push_back(j);
  }
  if (args.json) std::cout << (all.size() == 1 ? all[0] : all).dump(2) << "\n";
  return 0;
}

}  // namespace stitch::ctl
