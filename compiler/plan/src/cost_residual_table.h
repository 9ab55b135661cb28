// The layout of the learned residual's table (cost_residual_table.cc, written by
// tools/train_cost_residual.py). Each tree is a run of nodes starting at its root; a node is
// a split when feature[node] >= 0 (go to left[node] when the feature, rounded to float as
// the trainer's trees compare it, is <= threshold[node], else to right[node]) and a leaf when
// feature[node] == -1 (value[node] is its output).
#pragma once

namespace stitch {

struct CostResidualTable {
  const char* base_version;  // the analytical version the trees correct
  const char* device;        // the GpuDevice::name the measurements came from
  bool ships;                // whether the held-out comparison let it ship
  double initial;            // the ensemble's initial prediction
  double learning_rate;      // each tree's leaf is scaled by it
  int trees;
  const int* roots;  // [trees]: each tree's root node
  int nodes;
  const int* feature;       // [nodes]
  const double* threshold;  // [nodes]
  const int* left;          // [nodes]
  const int* right;         // [nodes]
  const double* value;      // [nodes]
  int feature_count;
  const char* const* feature_names;  // [feature_count]
};

extern const CostResidualTable kCostResidualTable;

}  // namespace stitch
