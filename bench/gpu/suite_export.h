// Exports the benchmark suite for bench/gpu/frameworks.py, which rebuilds each graph from its
// JSON with PyTorch, JAX or NumPy operations.
//
// graphs.json: {"graphs": [{"id", "model", "pattern", "shape_text", "lower_bound_bytes",
// "graph"}]}, where "graph" is the stitch.v1.Graph JSON form (graph_proto.h's ToJson).
// A reference directory adds, per entry, the graph at its emulation scale
// (shape_scaling.h), random inputs and the reference interpreter's outputs as .npy files
// (<id>/input<k>.npy, <id>/output<k>.npy; bf16 is stored as float32), so the op mapping can
// be checked without a GPU.
//
// Thread-safety: functions touch only the paths they are given.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "stitch/base/status.h"
#include "suite/suite.h"

namespace stitch::gpu {

// Writes `j` to `path`, indented, with a final newline. Returns InvalidArgument when the file
// cannot be opened and Internal when writing fails.
Status WriteJsonFile(const std::string& path, const nlohmann::json& j);

// Writes graphs.json for `entries` at their listed (full) shapes.
Status WriteGraphsJson(const std::string& path, const std::vector<suite::SuiteEntry>& entries);

// Writes `dir`/graphs.json with the scaled graphs (each with "halvings" and "inputs" and
// "outputs" file lists) and the .npy files. Inputs are drawn from seed 1000 + id, as the
// suite's tests do. Entries without an emulation shape are left out and named in the
// returned error (after everything else is written).
Status WriteReference(const std::string& dir, const std::vector<suite::SuiteEntry>& entries);

}  // namespace stitch::gpu
