// Tests of stitch/reference/tensor.h: dtype rounding, device bytes, random tensors and .npy.
#include "stitch/reference/tensor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

namespace stitch {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

Shape S(DType t, std::vector<int64_t> dims = {}) {
  Shape s;
  s.dtype = t;
  s.dims = std::move(dims);
  return s;
}

Tensor FloatTensor(Shape s, std::vector<double> v) {
  Tensor t;
  t.shape = std::move(s);
  t.f = std::move(v);
  return t;
}

Tensor IntTensor(Shape s, std::vector<int64_t> v) {
  Tensor t;
  t.shape = std::move(s);
  t.i = std::move(v);
  return t;
}

// Storage bits of a one-element tensor of `t` holding v, as one little-endian number.
uint64_t Bits(DType t, double v) {
  const std::vector<uint8_t> b = ToDeviceBytes(FloatTensor(S(t, {1}), {v}));
  uint64_t bits = 0;
  for (size_t k = 0; k < b.size(); ++k) bits |= uint64_t{b[k]} << (8 * k);
  return bits;
}

double FromBits(DType t, uint64_t bits) {
  std::vector<uint8_t> b(DTypeBytes(t));
  for (size_t k = 0; k < b.size(); ++k) b[k] = static_cast<uint8_t>(bits >> (8 * k));
  StatusOr<Tensor> r = FromDeviceBytes(S(t, {1}), b);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->f[0] : kNaN;
}

// An independent decoder: value of 16-bit pattern `bits` of a format with `mbits` mantissa
// bits and exponent bias `bias` (f16: 10, 15; bf16: 7, 127).
double DecodeBy16BitFormula(uint32_t bits, int mbits, int bias) {
  const int exp_bits = 15 - mbits;
  const uint32_t e = (bits >> mbits) & ((1u << exp_bits) - 1);
  const uint32_t m = bits & ((1u << mbits) - 1);
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (e == (1u << exp_bits) - 1) return m ? kNaN : sign * kInf;
  if (e == 0) return sign * m * std::pow(2.0, 1 - bias - mbits);
  return sign * (m + std::pow(2.0, mbits)) * std::pow(2.0, static_cast<int>(e) - bias - mbits);
}

TEST(TensorBasics, ZerosAndAsDouble) {
  Tensor z = Tensor::Zeros(S(DType::kF32, {2, 3}));
  EXPECT_EQ(z.f.size(), 6u);
  EXPECT_TRUE(z.i.empty());
  Tensor zi = Tensor::Zeros(S(DType::kS32, {4}));
  EXPECT_EQ(zi.i.size(), 4u);
  EXPECT_TRUE(zi.f.empty());
  EXPECT_EQ(Tensor::Zeros(S(DType::kPred)).i.size(), 1u);  // scalar

  Tensor u = IntTensor(S(DType::kU64, {2}), {-1, 7});
  EXPECT_EQ(u.AsDouble(0), 18446744073709551615.0);
  EXPECT_EQ(u.AsDouble(1), 7.0);
  EXPECT_EQ(IntTensor(S(DType::kS64, {1}), {-5}).AsDouble(0), -5.0);
  EXPECT_EQ(FloatTensor(S(DType::kF16, {1}), {0.5}).AsDouble(0), 0.5);
}

TEST(TensorRounding, F16HandPicked) {
  const DType h = DType::kF16;
  EXPECT_EQ(RoundToDType(1.0 + std::ldexp(1, -11), h), 1.0);  // tie -> even (1.0)
  EXPECT_EQ(RoundToDType(1.0 + 3 * std::ldexp(1, -11), h), 1.0 + std::ldexp(1, -9));
  EXPECT_EQ(RoundToDType(1.0 + std::ldexp(1, -11) + std::ldexp(1, -40), h),
            1.0 + std::ldexp(1, -10));  // above the tie: up (no double rounding via f32)
  EXPECT_EQ(RoundToDType(65504.0, h), 65504.0);
  EXPECT_EQ(RoundToDType(65519.99, h), 65504.0);
  EXPECT_EQ(RoundToDType(65520.0, h), kInf);  // tie with max: goes to the even, 2^16 = inf
  EXPECT_EQ(RoundToDType(-1e6, h), -kInf);
  EXPECT_EQ(RoundToDType(std::ldexp(1, -24), h), std::ldexp(1, -24));    // min subnormal
  EXPECT_EQ(RoundToDType(std::ldexp(1, -25), h), 0.0);                   // tie -> 0 (even)
  EXPECT_TRUE(std::signbit(RoundToDType(-std::ldexp(1, -26), h)));       // -0 underflow
  EXPECT_EQ(RoundToDType(std::ldexp(1.5, -24), h), std::ldexp(1, -23));  // tie -> even (2)
  EXPECT_EQ(RoundToDType(std::ldexp(1, -25) * 1.0001, h), std::ldexp(1, -24));
  EXPECT_EQ(RoundToDType(std::ldexp(1023.4, -24), h), std::ldexp(1023, -24));  // subnormal
  EXPECT_EQ(RoundToDType(std::ldexp(1023.6, -24), h), std::ldexp(1, -14));     // to normal
  EXPECT_EQ(RoundToDType(0.1, h), 0.0999755859375);
  EXPECT_EQ(RoundToDType(kInf, h), kInf);
  EXPECT_TRUE(std::isnan(RoundToDType(kNaN, h)));
  EXPECT_EQ(RoundToDType(0.1, DType::kF64), 0.1);
}

TEST(TensorRounding, BF16HandPicked) {
  const DType b = DType::kBF16;
  EXPECT_EQ(RoundToDType(1.0 + std::ldexp(1, -8), b), 1.0);
  EXPECT_EQ(RoundToDType(1.0 + 3 * std::ldexp(1, -8), b), 1.0 + std::ldexp(1, -6));
  EXPECT_EQ(RoundToDType(std::numbers::pi, b), 3.140625);
  const double max_bf16 = std::ldexp(255, 120);  // (2 - 2^-7) * 2^127
  EXPECT_EQ(RoundToDType(max_bf16, b), max_bf16);
  EXPECT_EQ(RoundToDType(std::numeric_limits<float>::max(), b), kInf);
  EXPECT_EQ(RoundToDType(std::ldexp(1, -133), b), std::ldexp(1, -133));  // min subnormal
  EXPECT_EQ(RoundToDType(std::ldexp(1, -134), b), 0.0);
  EXPECT_EQ(Bits(b, 1.0), 0x3f80u);
  EXPECT_EQ(Bits(b, std::numbers::pi), 0x4049u);
  EXPECT_EQ(Bits(b, -kInf), 0xff80u);
}

TEST(TensorRounding, F32MatchesHardwareCast) {
  std::mt19937_64 rng(12345);
  SCOPED_TRACE("seed 12345");
  for (int k = 0; k < 200000; ++k) {
    // Random bit patterns over the whole double range, biased towards f32's range.
    uint64_t bits = rng();
    if (k % 2) bits = (bits & 0x800fffffffffffffull) | (uint64_t{(rng() % 320) + 1023 - 160} << 52);
    const double v = std::bit_cast<double>(bits);
    if (std::isnan(v)) continue;
    const double want = static_cast<double>(static_cast<float>(v));
    ASSERT_EQ(RoundToDType(v, DType::kF32), want) << std::hexfloat << v;
    ASSERT_EQ(Bits(DType::kF32, v), std::bit_cast<uint32_t>(static_cast<float>(v))) << v;
  }
}

// Every 16-bit pattern decodes to the value the independent formula gives, and encodes back
// to itself (NaN payloads included).
void CheckAll16BitPatterns(DType t, int mbits, int bias) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const double v = FromBits(t, bits);
    const double want = DecodeBy16BitFormula(bits, mbits, bias);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(v)) << bits;
    } else {
      ASSERT_EQ(v, want) << bits;
      ASSERT_EQ(std::signbit(v), std::signbit(want)) << bits;
      ASSERT_EQ(RoundToDType(v, t), v) << bits;
    }
    ASSERT_EQ(Bits(t, v), bits) << bits;
  }
}

TEST(TensorRounding, F16AllPatternsRoundTrip) { CheckAll16BitPatterns(DType::kF16, 10, 15); }
TEST(TensorRounding, BF16AllPatternsRoundTrip) { CheckAll16BitPatterns(DType::kBF16, 7, 127); }

// For every pair of adjacent finite 16-bit values, the midpoint goes to the one with an even
// mantissa, and points just off the midpoint go to the nearer one.
void CheckAllTies(DType t, uint32_t max_finite_bits) {
  for (uint32_t bits = 0; bits < max_finite_bits; ++bits) {
    const double lo = FromBits(t, bits), hi = FromBits(t, bits + 1);
    const double mid = (lo + hi) / 2;  // exact in double
    const double even = (bits % 2 == 0) ? lo : hi;
    ASSERT_EQ(RoundToDType(mid, t), even) << bits;
    ASSERT_EQ(RoundToDType(-mid, t), -even) << bits;
    ASSERT_EQ(RoundToDType(std::nextafter(mid, 0.0), t), lo) << bits;
    ASSERT_EQ(RoundToDType(std::nextafter(mid, kInf), t), hi) << bits;
  }
  // Half an ulp above the largest finite value rounds (to even) to inf.
  const double max = FromBits(t, max_finite_bits);
  const double ulp = max - FromBits(t, max_finite_bits - 1);
  EXPECT_EQ(RoundToDType(max + ulp / 2, t), kInf);
  EXPECT_EQ(RoundToDType(std::nextafter(max + ulp / 2, 0.0), t), max);
}

TEST(TensorRounding, F16AllTiesToEven) { CheckAllTies(DType::kF16, 0x7bff); }
TEST(TensorRounding, BF16AllTiesToEven) { CheckAllTies(DType::kBF16, 0x7f7f); }

// Random doubles (from a logged seed) over a range wider than the format's, each rounded by
// an oracle that knows nothing of the rounding code: the nearest of the format's decoded
// values, the one with an even mantissa on a tie, inf from half an ulp past the largest.
void CheckNearestOnRandomDoubles(DType t, uint32_t max_finite_bits, int min_exp, int max_exp,
                                 uint64_t seed) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::vector<double> values;  // every finite non-negative value, ascending with its bits
  for (uint32_t bits = 0; bits <= max_finite_bits; ++bits) values.push_back(FromBits(t, bits));
  const double max = values.back();
  const double overflow = max + (max - values[values.size() - 2]) / 2;
  std::mt19937_64 rng(seed);
  for (int k = 0; k < 200000; ++k) {
    const uint64_t r = rng();
    // A significand from the bits, an exponent a little past the format's range either way.
    const double v = std::ldexp(1.0 + static_cast<double>(r >> 12) * 0x1p-52,
                                min_exp + static_cast<int>(r % (max_exp - min_exp + 1))) *
                     ((r >> 11) & 1 ? -1.0 : 1.0);
    const double a = std::fabs(v);
    double want;
    uint32_t want_bits;
    if (a >= overflow) {
      want = kInf;
      want_bits = max_finite_bits + 1;  // the exponent all ones, mantissa zero
    } else {
      const auto hi = std::lower_bound(values.begin(), values.end(), a);
      size_t pick = static_cast<size_t>(hi - values.begin());
      if (hi == values.end()) {
        pick = values.size() - 1;
      } else if (*hi != a && pick > 0) {
        const double below = a - values[pick - 1], above = *hi - a;
        if (below < above || (below == above && (pick - 1) % 2 == 0)) --pick;
      }
      want = values[pick];
      want_bits = static_cast<uint32_t>(pick);
    }
    if (v < 0) {
      want = -want;
      want_bits |= 0x8000;
    }
    ASSERT_EQ(RoundToDType(v, t), want) << std::hexfloat << v;
    ASSERT_EQ(std::signbit(RoundToDType(v, t)), std::signbit(v)) << std::hexfloat << v;
    ASSERT_EQ(Bits(t, v), want_bits) << std::hexfloat << v;
  }
}

TEST(TensorRounding, F16NearestOnRandomDoubles) {
  CheckNearestOnRandomDoubles(DType::kF16, 0x7bff, -28, 17, 20261129);
}
TEST(TensorRounding, BF16NearestOnRandomDoubles) {
  CheckNearestOnRandomDoubles(DType::kBF16, 0x7f7f, -137, 129, 20261130);
}

// f32 through device bytes: every value of the random f32 patterns comes back bit for bit,
// NaN payloads included, which the host's own float -> double conversion would quiet.
TEST(TensorDeviceBytes, F32PatternsRoundTrip) {
  std::mt19937_64 rng(4242);
  SCOPED_TRACE("seed 4242");
  for (int k = 0; k < 100000; ++k) {
    auto bits = static_cast<uint32_t>(rng());
    if (k % 8 == 0) bits |= 0x7f800000u;  // inf and NaNs, signalling ones among them
    const double v = FromBits(DType::kF32, bits);
    ASSERT_EQ(Bits(DType::kF32, v), bits) << std::hex << bits;
    if (!std::isnan(v)) {
      ASSERT_EQ(v, static_cast<double>(std::bit_cast<float>(bits))) << bits;
    }
  }
}

TEST(TensorDeviceBytes, KnownEncodings) {
  EXPECT_EQ(Bits(DType::kF16, 1.0), 0x3c00u);
  EXPECT_EQ(Bits(DType::kF16, -2.0), 0xc000u);
  EXPECT_EQ(Bits(DType::kF16, 65504.0), 0x7bffu);
  EXPECT_EQ(Bits(DType::kF16, 1e9), 0x7c00u);
  EXPECT_EQ(Bits(DType::kF16, std::ldexp(1, -24)), 0x0001u);
  EXPECT_EQ(Bits(DType::kF16, -0.0), 0x8000u);
  const uint64_t nan16 = Bits(DType::kF16, kNaN);
  EXPECT_EQ(nan16 & 0x7c00u, 0x7c00u);
  EXPECT_NE(nan16 & 0x03ffu, 0u);
  EXPECT_EQ(Bits(DType::kF64, 0.1), std::bit_cast<uint64_t>(0.1));

  Tensor ints = IntTensor(S(DType::kS32, {2}), {-2, 0x12345678});
  EXPECT_EQ(ToDeviceBytes(ints),
            (std::vector<uint8_t>{0xfe, 0xff, 0xff, 0xff, 0x78, 0x56, 0x34, 0x12}));
  EXPECT_EQ(ToDeviceBytes(IntTensor(S(DType::kPred, {3}), {0, 1, 5})),
            (std::vector<uint8_t>{0, 1, 1}));
  EXPECT_EQ(ToDeviceBytes(IntTensor(S(DType::kU8, {2}), {255, 256})),
            (std::vector<uint8_t>{255, 0}));
  EXPECT_EQ(ToDeviceBytes(IntTensor(S(DType::kU64, {1}), {-1})), std::vector<uint8_t>(8, 0xff));
}

TEST(TensorDeviceBytes, FromBytesExtendsBySignedness) {
  const std::vector<uint8_t> bytes = {0xff, 0x80};
  StatusOr<Tensor> s8 = FromDeviceBytes(S(DType::kS8, {2}), bytes);
  ASSERT_TRUE(s8.ok());
  EXPECT_EQ(s8->i, (std::vector<int64_t>{-1, -128}));
  StatusOr<Tensor> u8 = FromDeviceBytes(S(DType::kU8, {2}), bytes);
  ASSERT_TRUE(u8.ok());
  EXPECT_EQ(u8->i, (std::vector<int64_t>{255, 128}));
  StatusOr<Tensor> u32 = FromDeviceBytes(S(DType::kU32), {0xff, 0xff, 0xff, 0xff});
  ASSERT_TRUE(u32.ok());
  EXPECT_EQ(u32->i[0], 0xffffffffll);
  StatusOr<Tensor> s32 = FromDeviceBytes(S(DType::kS32), {0xff, 0xff, 0xff, 0xff});
  ASSERT_TRUE(s32.ok());
  EXPECT_EQ(s32->i[0], -1);
  StatusOr<Tensor> pred = FromDeviceBytes(S(DType::kPred, {2}), {0, 7});
  ASSERT_TRUE(pred.ok());
  EXPECT_EQ(pred->i, (std::vector<int64_t>{0, 1}));

  StatusOr<Tensor> bad = FromDeviceBytes(S(DType::kF32, {2}), {0, 0, 0});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(TensorRandom, RangesAndDeterminism) {
  for (DType t : {DType::kF16, DType::kBF16, DType::kF32, DType::kF64, DType::kS8, DType::kU32,
                  DType::kPred}) {
    std::mt19937_64 a(7), b(7);
    const Tensor x = RandomTensor(S(t, {1000}), a);
    const Tensor y = RandomTensor(S(t, {1000}), b);
    EXPECT_EQ(x.f, y.f);
    EXPECT_EQ(x.i, y.i);
    ASSERT_EQ(x.size(), 1000);
    for (int64_t k = 0; k < 1000; ++k) {
      const double v = x.AsDouble(k);
      if (IsFloat(t)) {
        EXPECT_GE(v, -2.0);
        EXPECT_LE(v, 2.0);  // rounding may reach 2 from below
        EXPECT_EQ(RoundToDType(v, t), v);
      } else if (t == DType::kPred) {
        EXPECT_TRUE(v == 0 || v == 1);
      } else if (IsUnsignedInt(t)) {
        EXPECT_GE(v, 0);
      }
    }
  }
}

// The bytes drawn directly are those of the tensor drawn from the same seed, and the engine
// is left where RandomTensor leaves it.
TEST(TensorRandom, DeviceBytesAreTheTensorsBytes) {
  for (DType t : {DType::kF16, DType::kBF16, DType::kF32, DType::kF64, DType::kS8, DType::kU8,
                  DType::kS32, DType::kU32, DType::kS64, DType::kU64, DType::kPred}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    std::mt19937_64 a(99), b(99);
    const Shape s = S(t, {17, 31});
    EXPECT_EQ(RandomDeviceBytes(s, a), ToDeviceBytes(RandomTensor(s, b)));
    EXPECT_EQ(a(), b());
  }
}

// ---------------------------------------------------------------------------------------
// .npy

class TensorNpy : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("stitch_tensor_test_") + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  void WriteRaw(const std::string& name, const std::string& bytes) const {
    std::ofstream f(Path(name), std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::string ReadRaw(const std::string& name) const {
    std::ifstream f(Path(name), std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }

  // A .npy file of format `major`.0 with `dict` as the header and `data` after it.
  static std::string MakeNpy(int major, std::string dict, const std::string& data) {
    const size_t prefix = major == 1 ? 10 : 12;
    while ((prefix + dict.size() + 1) % 64) dict += ' ';
    dict += '\n';
    std::string out("\x93NUMPY", 6);
    out += static_cast<char>(major);
    out += '\0';
    for (size_t b = 0; b < prefix - 8; ++b)
      out += static_cast<char>((dict.size() >> (8 * b)) & 0xff);
    return out + dict + data;
  }

  // Expects ReadNpy(name) to fail with INVALID_ARGUMENT naming the path and `what`.
  void ExpectRejected(const std::string& name, const std::string& what) const {
    StatusOr<Tensor> r = ReadNpy(Path(name));
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find(Path(name)), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().ToString();
  }

  std::filesystem::path dir_;
};

TEST_F(TensorNpy, RoundTripEveryDType) {
  const std::vector<double> fv = {0.0, -0.0, 1.5, -2.25, 65504.0, 1e-7, kInf, -kInf};
  struct Case {
    DType t;
    std::vector<int64_t> iv;
  };
  for (DType t : {DType::kF16, DType::kF32, DType::kF64}) {
    Tensor x = FloatTensor(S(t, {2, 4}), fv);
    for (double& v : x.f) v = RoundToDType(v, t);
    const std::string path = Path(std::string(DTypeName(t)) + ".npy");
    ASSERT_TRUE(WriteNpy(path, x).ok());
    StatusOr<Tensor> y = ReadNpy(path);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    EXPECT_EQ(y->shape, x.shape);
    EXPECT_EQ(y->f, x.f);
    EXPECT_EQ(ReadRaw(std::string(DTypeName(t)) + ".npy").size() % 64,
              static_cast<size_t>(x.size() * DTypeBytes(t)) % 64);  // header is 64-aligned
  }
  const std::vector<Case> int_cases = {
      {DType::kS8, {-128, -1, 0, 127}},
      {DType::kU8, {0, 1, 200, 255}},
      {DType::kS32, {INT32_MIN, -1, 0, INT32_MAX}},
      {DType::kU32, {0, 1, 0x80000000ll, 0xffffffffll}},
      {DType::kS64, {INT64_MIN, -1, 0, INT64_MAX}},
      {DType::kU64, {0, 1, INT64_MIN, -1}},
      {DType::kPred, {0, 1, 1, 0}},
  };
  for (const Case& c : int_cases) {
    Tensor x = IntTensor(S(c.t, {4}), c.iv);
    const std::string path = Path(std::string(DTypeName(c.t)) + ".npy");
    ASSERT_TRUE(WriteNpy(path, x).ok());
    StatusOr<Tensor> y = ReadNpy(path);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    EXPECT_EQ(y->shape, x.shape) << DTypeName(c.t);
    EXPECT_EQ(y->i, x.i) << DTypeName(c.t);
  }
  // Scalars and empty tensors.
  ASSERT_TRUE(WriteNpy(Path("scalar.npy"), FloatTensor(S(DType::kF32), {3.5})).ok());
  StatusOr<Tensor> scalar = ReadNpy(Path("scalar.npy"));
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ(scalar->shape.rank(), 0);
  EXPECT_EQ(scalar->f, std::vector<double>{3.5});
  ASSERT_TRUE(WriteNpy(Path("empty.npy"), IntTensor(S(DType::kS32, {0, 3}), {})).ok());
  StatusOr<Tensor> empty = ReadNpy(Path("empty.npy"));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->shape.dims, (std::vector<int64_t>{0, 3}));
}

TEST_F(TensorNpy, BF16IsWrittenAsFloat32) {
  Tensor x = FloatTensor(S(DType::kBF16, {3}), {1.0, std::numbers::pi, -0.5});
  ASSERT_TRUE(WriteNpy(Path("b.npy"), x).ok());
  EXPECT_NE(ReadRaw("b.npy").find("'<f4'"), std::string::npos);
  StatusOr<Tensor> y = ReadNpy(Path("b.npy"));
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(y->shape.dtype, DType::kF32);
  EXPECT_EQ(y->f, (std::vector<double>{1.0, 3.140625, -0.5}));  // rounded to bf16 first
}

TEST_F(TensorNpy, ReadsFormats2And3AndOtherSpellings) {
  std::string data(8, '\0');
  data[0] = 1;
  data[4] = 2;
  WriteRaw("v2.npy", MakeNpy(2, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", data));
  WriteRaw("v3.npy",
           MakeNpy(3, "{\"shape\": (1, 2), \"descr\": \"<u4\", \"fortran_order\": False}", data));
  StatusOr<Tensor> v2 = ReadNpy(Path("v2.npy"));
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_EQ(v2->i, (std::vector<int64_t>{1, 2}));
  StatusOr<Tensor> v3 = ReadNpy(Path("v3.npy"));
  ASSERT_TRUE(v3.ok()) << v3.status().ToString();
  EXPECT_EQ(v3->shape, S(DType::kU32, {1, 2}));
}

TEST_F(TensorNpy, RejectsHostileFiles) {
  const std::string good_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const std::string data(8, '\0');
  WriteRaw("magic.npy", "\x93NUMPX\x01\x00\x10\x00{}");
  ExpectRejected("magic.npy", "bad magic");
  WriteRaw("short.npy", "\x93NU");
  ExpectRejected("short.npy", "bad magic");
  WriteRaw("version.npy", MakeNpy(1, good_dict, data).replace(6, 1, "\x04"));
  ExpectRejected("version.npy", "version 4.0");
  WriteRaw("hlen.npy", MakeNpy(1, good_dict, data).substr(0, 40));
  ExpectRejected("hlen.npy", "truncated header");
  WriteRaw("hlen2.npy", std::string("\x93NUMPY\x02\x00\xff\xff\xff\xff{", 13));
  ExpectRejected("hlen2.npy", "truncated header");
  WriteRaw("data.npy", MakeNpy(1, good_dict, data.substr(0, 5)));
  ExpectRejected("data.npy", "truncated");
  WriteRaw("extra.npy", MakeNpy(1, good_dict, data + "xx"));
  ExpectRejected("extra.npy", "trailing");
  WriteRaw("huge.npy", MakeNpy(1,
                               "{'descr': '<f8', 'fortran_order': False, 'shape': "
                               "(4294967296, 4294967296, 4294967296), }",
                               data));
  ExpectRejected("huge.npy", "too many elements");
  WriteRaw(
      "lies.npy",
      MakeNpy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000), }", data));
  ExpectRejected("lies.npy", "needs 8000000000 data bytes");
  WriteRaw(
      "bigdim.npy",
      MakeNpy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999999,), }",
              data));
  ExpectRejected("bigdim.npy", "too large");
  WriteRaw("fortran.npy",
           MakeNpy(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", data));
  ExpectRejected("fortran.npy", "fortran_order");
  WriteRaw("big.npy",
           MakeNpy(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", data));
  ExpectRejected("big.npy", "big-endian");
  WriteRaw("complex.npy",
           MakeNpy(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", data));
  ExpectRejected("complex.npy", "unsupported descr");
  WriteRaw("struct.npy",
           MakeNpy(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", data));
  ExpectRejected("struct.npy", "unsupported descr");
  WriteRaw("negdim.npy",
           MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", data));
  ExpectRejected("negdim.npy", "shape");
  WriteRaw("nokey.npy", MakeNpy(1, "{'descr': '<f4', 'shape': (2,), }", data));
  ExpectRejected("nokey.npy", "lacks 'fortran_order'");
  WriteRaw(
      "dup.npy",
      MakeNpy(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", data));
  ExpectRejected("dup.npy", "duplicate");
  WriteRaw("garbage.npy",
           MakeNpy(1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,)}", data));
  ExpectRejected("garbage.npy", "fortran_order");
  WriteRaw("unterminated.npy", MakeNpy(1, "{'descr': '<f4", data));
  ExpectRejected("unterminated.npy", "unsupported descr");
  WriteRaw("notdict.npy", MakeNpy(1, "[1, 2]", data));
  ExpectRejected("notdict.npy", "not a dict");

  StatusOr<Tensor> missing = ReadNpy(Path("does_not_exist.npy"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("does_not_exist.npy"), std::string::npos);
}

TEST_F(TensorNpy, MutatedFilesNeverCrash) {
  Tensor x = FloatTensor(S(DType::kF32, {3, 2}), {1, 2, 3, 4, 5, 6});
  ASSERT_TRUE(WriteNpy(Path("base.npy"), x).ok());
  const std::string base = ReadRaw("base.npy");
  // Every truncation fails cleanly.
  for (size_t len = 0; len < base.size(); ++len) {
    WriteRaw("t.npy", base.substr(0, len));
    EXPECT_FALSE(ReadNpy(Path("t.npy")).ok()) << len;
  }
  // Random byte mutations either parse to a consistent tensor or fail; never crash.
  const uint64_t seed = 20240601;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int iter = 0; iter < 400; ++iter) {
    std::string m = base;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) m[rng() % m.size()] = static_cast<char>(rng());
    WriteRaw("m.npy", m);
    StatusOr<Tensor> r = ReadNpy(Path("m.npy"));
    if (r.ok()) {
      EXPECT_EQ(static_cast<int64_t>(IsFloat(r->shape.dtype) ? r->f.size() : r->i.size()),
                r->size());
    }
  }
}

TEST_F(TensorNpy, WriteFailsOnBadPathOrTensor) {
  Status s = WriteNpy((dir_ / "no_such_dir" / "x.npy").string(), FloatTensor(S(DType::kF32), {1}));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no_such_dir"), std::string::npos);
  Status bad = WriteNpy(Path("bad.npy"), FloatTensor(S(DType::kF32, {3}), {1}));
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
}

TEST_F(TensorNpy, ReadsFilesWrittenByNumPy) {
  // The first python3 on PATH may be a separate installation without NumPy.
  std::string python;
  for (const char* candidate : {"python3", "/usr/bin/python3"}) {
    const std::string probe = std::string(candidate) + " -c 'import numpy' > /dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) {
      python = candidate;
      break;
    }
  }
  if (python.empty()) GTEST_SKIP() << "python3 with numpy is not available";
  const std::string script =
      "import numpy as np, sys\n"
      "d = sys.argv[1]\n"
      "np.save(d + '/f16.npy', np.array([[1.0, -0.5], [65504, 6e-8]], dtype=np.float16))\n"
      "np.save(d + '/f32.npy', np.arange(6, dtype=np.float32).reshape(2, 3) / 4)\n"
      "np.save(d + '/f64.npy', np.array([0.1, -1e300, np.inf]))\n"
      "np.save(d + '/i8.npy', np.array([-128, 127], dtype=np.int8))\n"
      "np.save(d + '/u8.npy', np.array([0, 255], dtype=np.uint8))\n"
      "np.save(d + '/i32.npy', np.array([[-7]], dtype=np.int32))\n"
      "np.save(d + '/u32.npy', np.array([4294967295], dtype=np.uint32))\n"
      "np.save(d + '/i64.npy', np.array([-2**63, 2**63 - 1], dtype=np.int64))\n"
      "np.save(d + '/u64.npy', np.array([2**64 - 1], dtype=np.uint64))\n"
      "np.save(d + '/b.npy', np.array([True, False, True]))\n"
      "np.save(d + '/scalar.npy', np.float64(2.5))\n"
      "np.save(d + '/fortran.npy', np.asfortranarray(np.ones((2, 3), dtype=np.float32)))\n"
      "np.save(d + '/big.npy', np.array([1, 2], dtype='>i4'))\n"
      "np.save(d + '/c64.npy', np.array([1j], dtype=np.complex64))\n";
  {
    std::ofstream f(Path("gen.py"));
    f << script;
  }
  ASSERT_EQ(std::system((python + " " + Path("gen.py") + " " + dir_.string()).c_str()), 0);

  auto read = [&](const std::string& name) {
    StatusOr<Tensor> r = ReadNpy(Path(name));
    EXPECT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    return r.ok() ? *r : Tensor{};
  };
  Tensor f16 = read("f16.npy");
  EXPECT_EQ(f16.shape, S(DType::kF16, {2, 2}));
  EXPECT_EQ(f16.f, (std::vector<double>{1.0, -0.5, 65504.0, RoundToDType(6e-8, DType::kF16)}));
  Tensor f32 = read("f32.npy");
  EXPECT_EQ(f32.shape, S(DType::kF32, {2, 3}));
  EXPECT_EQ(f32.f, (std::vector<double>{0, 0.25, 0.5, 0.75, 1.0, 1.25}));
  EXPECT_EQ(read("f64.npy").f, (std::vector<double>{0.1, -1e300, kInf}));
  EXPECT_EQ(read("i8.npy").i, (std::vector<int64_t>{-128, 127}));
  EXPECT_EQ(read("u8.npy").i, (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(read("i32.npy").shape, S(DType::kS32, {1, 1}));
  EXPECT_EQ(read("u32.npy").i, (std::vector<int64_t>{0xffffffffll}));
  EXPECT_EQ(read("i64.npy").i, (std::vector<int64_t>{INT64_MIN, INT64_MAX}));
  EXPECT_EQ(read("u64.npy").i, (std::vector<int64_t>{-1}));
  EXPECT_EQ(read("b.npy").i, (std::vector<int64_t>{1, 0, 1}));
  Tensor scalar = read("scalar.npy");
  EXPECT_EQ(scalar.shape, S(DType::kF64));
  EXPECT_EQ(scalar.f, std::vector<double>{2.5});
  ExpectRejected("fortran.npy", "fortran_order");
  ExpectRejected("big.npy", "big-endian");
  ExpectRejected("c64.npy", "unsupported descr");

  // And NumPy reads what WriteNpy writes.
  ASSERT_TRUE(WriteNpy(Path("ours.npy"), FloatTensor(S(DType::kF16, {2}), {1.5, -3})).ok());
  const std::string check = python + " -c \"import numpy as np; a = np.load('" + Path("ours.npy") +
                            "'); assert a.dtype == np.float16 and a.shape == (2,) and "
                            "a[0] == 1.5 and a[1] == -3\"";
  EXPECT_EQ(std::system(check.c_str()), 0);
}

}  // namespace
}  // namespace stitch
