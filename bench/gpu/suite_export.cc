#include "gpu/suite_export.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "stitch/ir/graph_proto.h"
#include "stitch/ir/verifier.h"
#include "stitch/plan/baseline_planner.h"
#include "stitch/reference/interpreter.h"
#include "stitch/reference/shape_scaling.h"
#include "stitch/reference/tensor.h"

namespace stitch::gpu {
namespace {

nlohmann::json EntryJson(const suite::SuiteEntry& e, const Graph& g) {
  nlohmann::json j;
  j["id"] = e.id;
  j["model"] = e.model;
  j["pattern"] = e.pattern;
  j["shape_text"] = e.shape_text;
  j["lower_bound_bytes"] = TrafficLowerBound(g).total();
  j["graph"] = nlohmann::json::parse(ToJson(g));
  return j;
}

}  // namespace

Status WriteJsonFile(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  if (!out) return InvalidArgument("cannot write " + path);
  out << j.dump(1) << "\n";
  out.close();
  if (!out) return Internal("error writing " + path);
  return Status::Ok();
}

Status WriteGraphsJson(const std::string& path, const std::vector<suite::SuiteEntry>& entries) {
  nlohmann::json graphs = nlohmann::json::array();
  for (const suite::SuiteEntry& e : entries) graphs.push_back(EntryJson(e, e.graph));
  return WriteJsonFile(path, {{"graphs", graphs}});
}

Status WriteReference(const std::string& dir, const std::vector<suite::SuiteEntry>& entries) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InvalidArgument("cannot create " + dir + ": " + ec.message());
  nlohmann::json graphs = nlohmann::json::array();
  std::string skipped;
  for (const suite::SuiteEntry& e : entries) {
    STITCH_RETURN_IF_ERROR(Verify(e.graph).WithContext("suite entry " + std::to_string(e.id)));
    std::optional<ScaledGraph> scaled = ScaleForEmulation(e.graph);
    if (!scaled) {
      skipped += (skipped.empty() ? "" : ", ") + std::to_string(e.id);
      continue;
    }
    const Graph& g = scaled->graph;
    std::mt19937_64 rng(1000 + e.id);
    std::vector<Tensor> inputs;
    for (int p : g.Parameters()) inputs.push_back(RandomTensor(g.nodes[p].shape, rng));
    STITCH_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, Evaluate(g, inputs));
    const std::string sub = std::to_string(e.id);
    std::filesystem::create_directories(dir + "/" + sub, ec);
    if (ec) return InvalidArgument("cannot create " + dir + "/" + sub + ": " + ec.message());
    nlohmann::json j = EntryJson(e, g);
    j["halvings"] = scaled->halvings;
    j["inputs"] = nlohmann::json::array();
    j["outputs"] = nlohmann::json::array();
    for (size_t k = 0; k < inputs.size(); ++k) {
      const std::string name = sub + "/input" + std::to_string(k) + ".npy";
      STITCH_RETURN_IF_ERROR(WriteNpy(dir + "/" + name, inputs[k]));
      j["inputs"].push_back(name);
    }
    for (size_t k = 0; k < outputs.size(); ++k) {
      const std::string name = sub + "/output" + std::to_string(k) + ".npy";
      STITCH_RETURN_IF_ERROR(WriteNpy(dir + "/" + name, outputs[k]));
      j["outputs"].push_back(name);
    }
    graphs.push_back(std::move(j));
  }
  STITCH_RETURN_IF_ERROR(WriteJsonFile(dir + "/graphs.json", {{"graphs", graphs}}));
  if (!skipped.empty()) return NotFound("no emulation shape for suite entries " + skipped);
  return Status::Ok();
}

}  // namespace stitch::gpu
