#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "commands.h"
#include "graph_input.h"
#include "stitch/driver/compile.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/ir/shape_class.h"
#include "stitch/reference/interpreter.h"
#include "stitch/reference/tensor_compare.h"

namespace stitch::ctl {
namespace {

StatusOr<std::vector<Tensor>> MakeInputs(const Graph& g, const RunArgs& args) {
  std::vector<int> params = g.Parameters();
  std::vector<Tensor> inputs;
  if (args.inputs.empty()) {
    std::mt19937_64 rng(args.seed);
    for (int p : params) inputs.push_back(RandomTensor(g.nodes[p].shape, rng));
    return inputs;
  }
  if (args.inputs.size() != params.size()) {
    return InvalidArgument("graph takes " + std::to_string(params.size()) +
                           " inputs, --inputs has " + std::to_string(args.inputs.size()));
  }
  for (size_t k = 0; k < params.size(); ++k) {
    STITCH_ASSIGN_OR_RETURN(Tensor t, ReadNpy(args.inputs[k]));
    const Shape& want = g.nodes[params[k]].shape;
    if (t.shape != want) {
      return InvalidArgument(args.inputs[k] + " holds " + t.shape.ToString() + ", parameter " +
                             std::to_string(k) + " is " + want.ToString());
    }
    inputs.push_back(std::move(t));
  }
  return inputs;
}

struct GraphOutcome {
  bool pass = true;
  nlohmann::json json;
};

nlohmann::json KernelsJson(const std::vector<CompiledKernel>& kernels) {
  nlohmann::json out = nlohmann::json::array();
  for (const CompiledKernel& k : kernels) {
    out.push_back({{"name", k.name},
                   {"kind", std::string(KernelKindName(k.kind))},
                   {"grid", k.launch.blocks()},
                   {"block", k.launch.block_threads()}});
  }
  return out;
}

// Kernels compiled for a graph, and what a run of them at the graph's own shapes passes.
struct RunnableCompile {
  CompileResult compiled;
  Graph graph;         // sizes the run's buffers: the compiled graph at the run's extent
  int64_t extent = 0;  // passed to kernels that take it; 0 for an exact compile
  Bucket served{0, 0};
  std::string not_generic;  // why a graph with outer parameters compiled exact
};

// Returns the extent of a graph with outer parameters: dimension 0 of the first.
int64_t OuterExtentOf(const Graph& g) {
  return g.nodes[g.Parameters()[g.outer_parameters[0]]].shape.dims[0];
}

// Compiles `g` and readies its kernels to run at `g`'s own shapes. A graph with outer
// parameters compiles for its shape class, whose kernels then run at `g`'s extent; one that
// compiles exact but at its bucket's top (a plan that cannot follow the extent) is compiled
// again at its own shapes, which is what a daemon's bundle for its extent would be.
StatusOr<RunnableCompile> CompileForRun(const Graph& g, const CompileOptions& options) {
  RunnableCompile out;
  STITCH_ASSIGN_OR_RETURN(out.compiled, CompileGraph(g, options));
  out.served = out.compiled.served;
  if (g.outer_parameters.empty()) {
    out.graph = out.compiled.graph;
    return out;
  }
  const int64_t extent = OuterExtentOf(g);
  if (out.compiled.shape_generic()) {
    out.extent = extent;
    out.graph = AtExtent(out.compiled.graph, out.compiled.shape_class, extent);
    return out;
  }
  out.not_generic = out.compiled.not_generic;
  if (out.not_generic.empty()) out.not_generic = ClassifyShapes(g).status().message();
  out.served = {extent, extent};
  if (out.compiled.served.hi > 0 && out.compiled.served.hi != extent) {
    Graph exact = g;
    exact.outer_parameters.clear();
    STITCH_ASSIGN_OR_RETURN(out.compiled, CompileGraph(exact, options));
  }
  out.graph = out.compiled.graph;
  return out;
}

nlohmann::json ServedJson(const Bucket& served) { return {served.lo, served.hi}; }

// The kernels the target really ships for `g` (its own grid, the full shapes), run at full
// geometry on sampled blocks with every access bounds-checked: the emulated run above may
// have executed another plan, scheduled for the emulator's grid cap.
StatusOr<nlohmann::json> RunShipped(const Graph& g, const RunArgs& args, Emulator& emulator,
                                    bool& in_bounds) {
  CompileOptions options;
  options.codegen.target = args.target;
  options.emit_ptx = false;
  STITCH_ASSIGN_OR_RETURN(RunnableCompile runnable, CompileForRun(g, options));
  const CompileResult& shipped = runnable.compiled;
  BlockSampling sampling;
  sampling.seed = args.seed;
  StatusOr<SampledRun> run = RunSampledOnEmulator(runnable.graph, shipped.plan, shipped.kernels,
                                                  sampling, emulator, runnable.extent);
  in_bounds = run.ok();
  nlohmann::json j = {{"target", args.target.name()},
                      {"kernels", KernelsJson(shipped.kernels)},
                      {"served", ServedJson(runnable.served)},
                      {"in_bounds", in_bounds}};
  if (run.ok()) {
    j["blocks_sampled"] = run->blocks_run();
    j["grid_blocks"] = run->blocks_total();
  } else {
    j["error"] = run.status().ToString();
  }
  if (!args.json) {
    std::cout << "  shipped for " << args.target.name() << ": " << shipped.kernels.size()
              << " kernel(s) at full geometry";
    for (const CompiledKernel& k : shipped.kernels) {
      std::cout << " [" << k.name << " " << KernelKindName(k.kind) << " " << k.launch.blocks()
                << "x" << k.launch.block_threads() << "]";
    }
    if (run.ok()) {
      std::cout << ", " << run->blocks_run() << " of " << run->blocks_total()
                << " blocks sampled, in bounds PASS\n";
    } else {
      std::cout << ": FAIL: " << run.status().ToString() << "\n";
    }
  }
  return j;
}

// Says which extents the run's kernels serve, when the graph names outer parameters.
void PrintServed(const RunnableCompile& runnable) {
  if (runnable.extent > 0) {
    std::cout << "  shape-generic: extents " << runnable.served.lo << ".." << runnable.served.hi
              << ", run at " << runnable.extent << "\n";
  } else if (!runnable.not_generic.empty()) {
    std::cout << "  exact shapes: " << runnable.not_generic << "\n";
  }
}

StatusOr<GraphOutcome> RunOne(const Graph& g, size_t index, const RunArgs& args,
                              Emulator& emulator) {
  CompileOptions options;
  options.codegen.target = args.target;
  options.codegen.emit_cubin = false;  // the emulator runs the portable IR
  // The plan stays the target's; only a persistent grid larger than the emulator runs at
  // once is rescheduled onto fewer blocks, so every graph the compiler accepts can run here.
  options.max_persistent_grid_blocks = kEmulatorMaxPersistentGridBlocks;
  STITCH_ASSIGN_OR_RETURN(RunnableCompile runnable, CompileForRun(g, options));
  const CompileResult& compiled = runnable.compiled;
  STITCH_ASSIGN_OR_RETURN(std::vector<Tensor> inputs, MakeInputs(g, args));
  STITCH_ASSIGN_OR_RETURN(EmulatedRun run, RunOnEmulator(runnable.graph, compiled.kernels, inputs,
                                                         emulator, runnable.extent));
  STITCH_ASSIGN_OR_RETURN(std::vector<Tensor> expected, Evaluate(g, inputs));

  GraphOutcome outcome;
  outcome.json = {{"graph", g.name},
                  {"key", compiled.key.hex},
                  {"kernels", compiled.kernels.size()},
                  {"served", ServedJson(runnable.served)},
                  {"emulated_kernels", KernelsJson(compiled.kernels)},
                  {"global_bytes", run.global_bytes()},
                  {"outputs", nlohmann::json::array()}};
  if (!runnable.not_generic.empty()) outcome.json["not_generic"] = runnable.not_generic;
  if (!args.json) {
    std::cout << "graph " << g.name << ": " << compiled.kernels.size()
              << " kernel(s) on the emulator, " << run.global_bytes() << " global bytes\n";
    PrintServed(runnable);
  }
  for (size_t k = 0; k < expected.size(); ++k) {
    double tol = DefaultTolerance(expected[k].shape.dtype);
    Comparison c = Compare(expected[k], run.outputs[k], tol);
    outcome.pass = outcome.pass && c.pass;
    outcome.json["outputs"].push_back({{"shape", expected[k].shape.ToString()},
                                       {"max_abs_error", c.max_abs_error},
                                       {"max_rel_error", c.max_rel_error},
                                       {"tolerance", tol},
                                       {"pass", c.pass}});
    if (!args.json) {
      std::printf("  output %zu %-20s max_abs %.3g max_rel %.3g (tol %.0e) %s%s%s\n", k,
                  expected[k].shape.ToString().c_str(), c.max_abs_error, c.max_rel_error, tol,
                  c.pass ? "PASS" : "FAIL", c.pass ? "" : ": ", c.message.c_str());
    }
    if (!args.outputs_dir.empty()) {
      std::string path = (std::filesystem::path(args.outputs_dir) /
                          ("graph" + std::to_string(index) + "_out" + std::to_string(k) + ".npy"))
                             .string();
      STITCH_RETURN_IF_ERROR(WriteNpy(path, run.outputs[k]));
    }
  }
  bool in_bounds = false;
  STITCH_ASSIGN_OR_RETURN(outcome.json["shipped"], RunShipped(g, args, emulator, in_bounds));
  outcome.pass = outcome.pass && in_bounds;
  outcome.json["pass"] = outcome.pass;
  return outcome;
}

// Names the flag's outer parameters on every graph, or says which graph lacks one.
Status NameOuterParameters(const std::vector<int64_t>& outer, std::vector<Graph>& graphs) {
  for (Graph& g : graphs) {
    const int64_t params = static_cast<int64_t>(g.Parameters().size());
    for (int64_t p : outer) {
      if (p >= params) {
        return InvalidArgument("--outer-parameters names parameter " + std::to_string(p) +
                               ", but graph '" + g.name + "' has " + std::to_string(params) +
                               " parameter(s)");
      }
    }
    g.outer_parameters = outer;
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<int64_t>> ParseOuterParameters(const std::string& flag) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (true) {
    const size_t end = std::min(flag.find(',', start), flag.size());
    const std::string item = flag.substr(start, end - start);
    int64_t value = 0;
    const auto [rest, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || rest != item.data() + item.size()) {
      return InvalidArgument("--outer-parameters: '" + item +
                             "' is not a parameter number (a comma-separated list such as 0,2)");
    }
    if (value < 0) {
      return InvalidArgument("--outer-parameters: " + item + " is negative");
    }
    out.push_back(value);
    if (end == flag.size()) return out;
    start = end + 1;
  }
}

int RunRun(const RunArgs& args) {
  if (!args.emulate) return Fail("run needs --emulate (no GPU backend in stitchctl yet)");
  StatusOr<std::vector<Graph>> graphs = LoadGraphs(args.file);
  if (!graphs.ok()) return Fail(graphs.status().ToString());
  if (args.outer_parameters) {
    Status named = NameOuterParameters(*args.outer_parameters, *graphs);
    if (!named.ok()) return Fail(args.file + ": " + named.message());
  }
  if (!args.outputs_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(args.outputs_dir, ec);
    if (ec) return Fail("cannot create " + args.outputs_dir + ": " + ec.message());
  }
  EmulatorOptions eo;
  eo.random_order = args.random_order;
  eo.seed = args.seed;
  StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create(eo);
  if (!emulator.ok()) return Fail(emulator.status().ToString());
  bool pass = true;
  nlohmann::json all = nlohmann::json::array();
  for (size_t i = 0; i < graphs->size(); ++i) {
    StatusOr<GraphOutcome> o = RunOne((*graphs)[i], i, args, **emulator);
    if (!o.ok()) return Fail(args.file + ": " + o.status().ToString());
    pass = pass && o->pass;
    all.push_back(o->json);
  }
  if (args.json) {
    std::cout << (all.size() == 1 ? all[0] : all).dump(2) << "\n";
  } else {
    std::cout << (pass ? "PASS" : "FAIL") << "\n";
  }
  if (!pass) std::fprintf(stderr, "stitchctl: outputs differ from the reference interpreter\n");
  return pass ? 0 : 1;
}

}  // namespace stitch::ctl
