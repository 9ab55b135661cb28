// Tests of stitch/reference/tensor_compare.h: Compare, and CompareDeviceBytes, which must give
// Compare's verdict and figures on the same values read in place from device bytes.
#include "stitch/reference/tensor_compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace stitch {
namespace {

Shape S(DType t, std::vector<int64_t> dims) {
  Shape s;
  s.dtype = t;
  s.dims = std::move(dims);
  return s;
}

Tensor Decoded(const Shape& s, const std::vector<uint8_t>& bytes) {
  StatusOr<Tensor> t = FromDeviceBytes(s, bytes);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : Tensor();
}

void ExpectSameVerdict(const Comparison& want, const Comparison& got) {
  EXPECT_EQ(got.pass, want.pass);
  EXPECT_EQ(got.mismatches, want.mismatches);
  EXPECT_EQ(got.first_mismatch, want.first_mismatch);
  EXPECT_EQ(got.max_abs_error, want.max_abs_error);
  EXPECT_EQ(got.max_rel_error, want.max_rel_error);
  EXPECT_EQ(got.message, want.message);
}

TEST(CompareTest, NaNsInfinitiesAndTheRmsFloor) {
  const Shape s = S(DType::kF32, {4});
  Tensor want = Tensor::Zeros(s), got = Tensor::Zeros(s);
  want.f = {std::nan(""), INFINITY, 0.0, 100.0};
  got.f = {std::nan(""), INFINITY, 1e-4, 100.0};
  // |1e-4 - 0| is measured against the rms of the finite expected values (0 and 100: 70.7).
  Comparison c = Compare(want, got, 1e-5);
  EXPECT_TRUE(c.pass) << c.message;
  EXPECT_NEAR(c.max_rel_error, 1e-4 / std::sqrt(10000.0 / 2), 1e-12);
  got.f[1] = -INFINITY;
  c = Compare(want, got, 1e-5);
  EXPECT_FALSE(c.pass);
  EXPECT_EQ(c.first_mismatch, 1);
  EXPECT_EQ(c.mismatches, 1);
  EXPECT_NE(c.message.find("element 1"), std::string::npos) << c.message;
  EXPECT_FALSE(Compare(want, Tensor::Zeros(S(DType::kF32, {2, 2})), 1).pass);
}

// On random tensors of every dtype, some elements nudged past the tolerance, some within it
// and some made NaN, comparing the device bytes gives what comparing the decoded tensors does.
TEST(CompareDeviceBytesTest, AgreesWithCompareOnTheDecodedValues) {
  constexpr uint64_t kSeed = 20261129;
  SCOPED_TRACE("seed " + std::to_string(kSeed));
  std::mt19937_64 rng(kSeed);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kS32, DType::kU64,
                  DType::kPred}) {
    SCOPED_TRACE(DTypeName(t));
    const Shape s = S(t, {37, 29});
    const Tensor base = RandomTensor(s, rng);
    for (int round = 0; round < 4; ++round) {
      Tensor other = base;
      for (int64_t k = 0; k < base.size(); ++k) {
        const uint64_t r = rng();
        if (r % 7 != 0) continue;
        if (IsFloat(t)) {
          const double scale = (round % 2 == 0) ? 1e-6 : 0.05;
          other.f[k] = RoundToDType(base.f[k] * (1 + scale) + (r % 3 == 0 ? 1e-3 : 0.0), t);
          if (r % 31 == 0) other.f[k] = std::numeric_limits<double>::quiet_NaN();
        } else if (round > 1) {
          other.i[k] = base.i[k] + 1;
        }
      }
      const std::vector<uint8_t> want = ToDeviceBytes(base), got = ToDeviceBytes(other);
      const double tolerance = DefaultTolerance(t);
      ExpectSameVerdict(Compare(Decoded(s, want), Decoded(s, got), tolerance),
                        CompareDeviceBytes(s, want, got, tolerance));
    }
  }
}

TEST(CompareDeviceBytesTest, IdenticalBytesPassAndWrongSizesFail) {
  const Shape s = S(DType::kF16, {3, 5});
  std::mt19937_64 rng(7);
  const std::vector<uint8_t> bytes = ToDeviceBytes(RandomTensor(s, rng));
  const Comparison same = CompareDeviceBytes(s, bytes, bytes, 0);
  EXPECT_TRUE(same.pass);
  EXPECT_EQ(same.max_abs_error, 0);

  std::vector<uint8_t> short_by_one(bytes.begin(), bytes.end() - 1);
  const Comparison c = CompareDeviceBytes(s, bytes, short_by_one, 1);
  EXPECT_FALSE(c.pass);
  EXPECT_NE(c.message.find("needs 30 bytes; got 29, expected 30"), std::string::npos) << c.message;
  EXPECT_FALSE(CompareDeviceBytes(s, short_by_one, bytes, 1).pass);
}

}  // namespace
}  // namespace stitch
