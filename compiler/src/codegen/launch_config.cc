#include "launch_config.h"

#include <algorithm>

namespace stitch::codegen {
namespace {

uint32_t CeilDivCapped(int64_t n, int64_t d, int64_t cap) {
  int64_t q = d > 0 ? (n + d - 1) / d : 0;
  return static_cast<uint32_t>(std::clamp<int64_t>(q, 1, cap));
}

}  // namespace

int SmCount(const std::string& target) {
  if (target == "sm_90" || target == "sm_90a") return 132;
  if (target == "sm_80") return 108;
  if (target == "sm_86") return 84;
  if (target == "sm_89") return 128;
  return 108;
}

LaunchDims LoopLaunch(int64_t n, int sm_count) {
  LaunchDims d;
  // Round tiny sizes up to whole warps; 256 threads keep 8 blocks resident per SM.
  int64_t block = std::min<int64_t>(256, std::max<int64_t>(32, (n + 31) / 32 * 32));
  d.block = {static_cast<uint32_t>(block), 1, 1};
  // Beyond ~4 waves the grid-stride loop is as fast and the launch is cheaper.
  d.grid = {CeilDivCapped(n, block, int64_t{sm_count} * 8 * 4), 1, 1};
  return d;
}

RowReduceConfig ChooseRowReduce(int64_t rows, int64_t row_len, int sm_count) {
  RowReduceConfig c;
  if (row_len <= 512) {
    // A warp (or part of one) per row: no shared memory and no barriers.
    int lanes = 1;
    while (lanes < 32 && lanes < row_len) lanes *= 2;
    c.lanes_per_row = lanes;
    c.warps_per_block = 8;
    int64_t rows_per_block = int64_t{c.warps_per_block} * (32 / lanes);
    c.launch.block = {32, static_cast<uint32_t>(c.warps_per_block), 1};
    c.launch.grid = {CeilDivCapped(rows, rows_per_block, int64_t{sm_count} * 32), 1, 1};
    return c;
  }
  c.block_per_row = true;
  int threads = row_len <= 4096 ? 256 : row_len <= 16384 ? 512 : 1024;
  c.warps_per_block = threads / 32;
  c.launch.block = {static_cast<uint32_t>(threads), 1, 1};
  c.launch.grid = {CeilDivCapped(rows, 1, int64_t{sm_count} * 32), 1, 1};
  return c;
}

ColumnReduceConfig ChooseColumnReduce(int64_t kept, int64_t reduced, int sm_count) {
  ColumnReduceConfig c;
  int64_t tiles = (kept + 31) / 32;
  // Few tiles: use taller blocks so each SM still gets enough threads to hide latency.
  c.tile_y = (tiles < int64_t{sm_count} * 4 && reduced >= 256) ? 32 : 8;
  c.launch.block = {32, static_cast<uint32_t>(c.tile_y), 1};
  c.launch.grid = {CeilDivCapped(tiles, 1, int64_t{sm_count} * 32), 1, 1};
  return c;
}

}  // namespace stitch::codegen
