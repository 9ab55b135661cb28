// Launch geometry for each emitter, chosen from the kernel's shape and the target GPU.
#pragma once

#include <cstdint>
#include <string>

#include "stitch/compiler/codegen.h"

namespace stitch::codegen {

// Returns the number of SMs of the named target ("sm_80": A100, 108; "sm_90": H100, 132);
// unknown targets get a conservative 108.
int SmCount(const std::string& target);

// Returns a 1-D launch for a grid-stride loop over `n` elements: 256-thread blocks (fewer
// for tiny n), at most a few waves of blocks.
LaunchDims LoopLaunch(int64_t n, int sm_count);

// Thread mapping of a row reduction.
struct RowReduceConfig {
  // true: one block per row (threads stride over it, partials meet in shared memory);
  // false: `lanes_per_row` lanes of a warp per row (32 / lanes_per_row rows per warp).
  bool block_per_row = false;
  int lanes_per_row = 32;   // power of two, 1..32 (warp mode)
  int warps_per_block = 8;  // blockDim.y in warp mode; blockDim.x / 32 in block mode
  LaunchDims launch;
};

// Returns the mapping for `rows` rows of `row_len` reduced elements each.
RowReduceConfig ChooseRowReduce(int64_t rows, int64_t row_len, int sm_count);

// Thread mapping of a column reduction: blockDim = (32, tile_y); threadIdx.x walks 32
// consecutive kept elements, threadIdx.y strides over the reduced elements.
struct ColumnReduceConfig {
  int tile_y = 8;
  LaunchDims launch;
};

// Returns the mapping for `kept` outputs each reducing `reduced` elements.
ColumnReduceConfig ChooseColumnReduce(int64_t kept, int64_t reduced, int sm_count);

}  // namespace stitch::codegen
