// Where a row kept in shared memory holds its values (SharedRowRegionsOf, row_stitch.h):
// regions of the row's length in each value's compute-type bytes, 16-byte aligned, and a
// value taking over the region of one of the same element size that its first pass last reads.
#include <gtest/gtest.h>

#include <vector>

#include "stitch/plan/row_stitch.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

using testing::Param;

struct Kept {
  DType dtype;
  int first_pass, last_pass;
};

// A layout keeping one parameter of each of `kept`'s dtypes, rows of `row_len`.
SharedRowRegions RegionsOf(const std::vector<Kept>& kept, int64_t row_len) {
  Graph g;
  RowStitchLayout layout;
  layout.geometry = RowGeometry{4, row_len};
  for (const Kept& k : kept) {
    layout.kept.push_back(Param(g, {k.dtype, {4, row_len}}, static_cast<int>(layout.kept.size())));
    layout.kept_first_pass.push_back(k.first_pass);
    layout.kept_last_pass.push_back(k.last_pass);
  }
  return SharedRowRegionsOf(g, layout);
}

TEST(SharedRowRegions, RegionsStartAlignedAndHoldTheComputeType) {
  // 33,333 predicates take a byte each; the f32 region after them starts at the next 16 bytes.
  // f16 and bf16 values compute in f32, so they take 4 bytes; f64 8.
  const SharedRowRegions r = RegionsOf(
      {{DType::kPred, 0, 2}, {DType::kF32, 0, 2}, {DType::kF16, 0, 2}, {DType::kF64, 0, 2}}, 33333);
  EXPECT_EQ(r.offsets, (std::vector<int64_t>{0, 33344, 166688, 300032}));
  EXPECT_EQ(r.bytes, 300032 + 33333 * 8);
}

TEST(SharedRowRegions, AValueTakesOverARegionOnlyOnceItsHolderIsLastRead) {
  // b is last read in pass 1, where c is first computed: c takes b's region. d, first
  // computed in pass 1 too, finds it taken again and gets its own. e, an f64 first computed in
  // pass 2, where a and c are last read, takes neither: their values are 4 bytes.
  const SharedRowRegions r = RegionsOf({{DType::kF32, 0, 2},
                                        {DType::kF32, 0, 1},
                                        {DType::kF32, 1, 2},
                                        {DType::kBF16, 1, 3},
                                        {DType::kF64, 2, 3}},
                                       1000);
  EXPECT_EQ(r.offsets, (std::vector<int64_t>{0, 4000, 4000, 8000, 12000}));
  EXPECT_EQ(r.bytes, 12000 + 8000);
  // Values first computed after the regions' holders are last read reuse them in order.
  const SharedRowRegions later = RegionsOf(
      {{DType::kF32, 0, 1}, {DType::kF32, 0, 1}, {DType::kF32, 2, 3}, {DType::kF32, 2, 3}}, 1000);
  EXPECT_EQ(later.offsets, (std::vector<int64_t>{0, 4000, 0, 4000}));
  EXPECT_EQ(later.bytes, 8000);
}

}  // namespace
}  // namespace stitch
