#include "stitch/reference/tensor.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <string_view>

#include "numeric.h"

namespace stitch {
namespace internal {
namespace {

// An IEEE binary format: `precision` significand bits including the implicit one; normal
// exponents in [emin, emax]; the exponent field has `exp_bits` bits and bias emax.
struct FloatFormat {
  int precision;
  int emin;
  int emax;
  int exp_bits;
  int total_bits() const { return 1 + exp_bits + precision - 1; }
};

constexpr FloatFormat kF16 = {11, -14, 15, 5};
constexpr FloatFormat kBF16 = {8, -126, 127, 8};  // the upper half of an f32
constexpr FloatFormat kF32 = {24, -126, 127, 8};
constexpr FloatFormat kF64 = {53, -1022, 1023, 11};

const FloatFormat& FormatOf(DType t) {
  switch (t) {
    case DType::kF16:
      return kF16;
    case DType::kBF16:
      return kBF16;
    case DType::kF32:
      return kF32;
    default:
      return kF64;
  }
}

uint64_t Mask(int bits) { return bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1; }

// 2^e as a double, built from its bits: exact and cheap where std::ldexp is a library call.
// `e` must be a normal double's exponent, [-1022, 1023]; the formats below stay inside it.
double Pow2(int e) { return std::bit_cast<double>(static_cast<uint64_t>(e + 1023) << 52); }

double MaxFinite(const FloatFormat& fmt) {
  return (Pow2(fmt.precision) - 1.0) * Pow2(fmt.emax - (fmt.precision - 1));
}

// Rounds to nearest even in `fmt` (narrower than f64), with gradual underflow and overflow
// to inf. It rounds the double's own significand at the format's last place, so f16 and
// bf16 round once from double (double -> f32 -> f16 would round twice). The tensors of a
// full-size GPU run go through here element by element, hence integer steps only.
double RoundToFormat(double v, const FloatFormat& fmt) {
  if (!std::isfinite(v) || v == 0.0) return v;
  const uint64_t bits = std::bit_cast<uint64_t>(v);
  const double sign = std::signbit(v) ? -1.0 : 1.0;
  const int biased = static_cast<int>((bits >> 52) & 0x7ff);
  // A subnormal double lies far below half the narrowest format's smallest subnormal.
  if (biased == 0) return sign * 0.0;
  const int exponent = biased - 1023;  // v = significand * 2^(exponent - 52)
  const uint64_t significand = (bits & Mask(52)) | (uint64_t{1} << 52);
  const int ulp = std::max(exponent, fmt.emin) - (fmt.precision - 1);
  const int shift = ulp - (exponent - 52);  // at least 53 - precision, so at least 1
  uint64_t kept = 0;                        // at 54 and beyond v is under half an ulp
  if (shift < 54) {
    kept = significand >> shift;
    const uint64_t rest = significand & Mask(shift);
    const uint64_t half = uint64_t{1} << (shift - 1);
    // Without branches: the direction is as random as the data.
    kept += static_cast<uint64_t>(rest > half) | (static_cast<uint64_t>(rest == half) & kept & 1);
  }
  // Exact: `kept` has at most precision + 1 bits (converted as signed, one instruction).
  const double result = static_cast<double>(static_cast<int64_t>(kept)) * Pow2(ulp);
  if (result > MaxFinite(fmt)) return sign * std::numeric_limits<double>::infinity();
  return sign * result;
}

uint64_t EncodeFormat(double v, const FloatFormat& fmt) {
  const int mbits = fmt.precision - 1;
  const uint64_t sign = std::signbit(v) ? uint64_t{1} << (fmt.total_bits() - 1) : 0;
  const uint64_t exp_all_ones = Mask(fmt.exp_bits) << mbits;
  if (std::isnan(v)) {
    // Keep the top payload bits, as fptrunc does, so bitcast round trips are exact; a payload
    // that truncates to zero would read as inf, so it becomes the quiet bit.
    uint64_t payload = (std::bit_cast<uint64_t>(v) & Mask(52)) >> (52 - mbits);
    if (payload == 0) payload = uint64_t{1} << (mbits - 1);
    return sign | exp_all_ones | payload;
  }
  const double a = std::fabs(RoundToFormat(v, fmt));
  if (std::isinf(a)) return sign | exp_all_ones;
  if (a == 0.0) return sign;
  // `a` is exact in the format: its double significand ends in zeros past the format's last
  // place, which the shifts below drop.
  const uint64_t bits = std::bit_cast<uint64_t>(a);
  const int exponent = static_cast<int>(bits >> 52) - 1023;
  const uint64_t significand = (bits & Mask(52)) | (uint64_t{1} << 52);
  if (exponent < fmt.emin) {  // subnormal: exponent field 0, counted in the smallest ulps
    return sign | (significand >> ((fmt.emin - mbits) - (exponent - 52)));
  }
  const auto biased = static_cast<uint64_t>(exponent + fmt.emax);
  return sign | (biased << mbits) | ((significand >> (52 - mbits)) & Mask(mbits));
}

double DecodeFormat(uint64_t bits, const FloatFormat& fmt) {
  const int mbits = fmt.precision - 1;
  const bool negative = (bits >> (fmt.total_bits() - 1)) & 1;
  const uint64_t exp_field = (bits >> mbits) & Mask(fmt.exp_bits);
  const uint64_t mant = bits & Mask(mbits);
  double value;
  if (exp_field == Mask(fmt.exp_bits)) {
    if (mant == 0) {
      value = std::numeric_limits<double>::infinity();
    } else {
      value = std::bit_cast<double>((uint64_t{0x7ff} << 52) | (mant << (52 - mbits)));
    }
  } else if (exp_field == 0) {
    value = static_cast<double>(static_cast<int64_t>(mant)) * Pow2(fmt.emin - mbits);
  } else {
    value = static_cast<double>(static_cast<int64_t>(mant | (uint64_t{1} << mbits))) *
            Pow2(static_cast<int>(exp_field) - fmt.emax - mbits);
  }
  return negative ? -value : value;
}

}  // namespace

int64_t WrapInt(int64_t v, DType t) {
  switch (t) {
    case DType::kPred:
      return v & 1;
    case DType::kS8:
      return static_cast<int8_t>(v);
    case DType::kU8:
      return v & 0xff;
    case DType::kS32:
      return static_cast<int32_t>(v);
    case DType::kU32:
      return v & 0xffffffff;
    default:
      return v;
  }
}

uint64_t LowBits(int64_t v, DType t) {
  const int bits = IntegerBits(t);
  return static_cast<uint64_t>(v) & Mask(bits == 0 ? 64 : bits);
}

uint64_t FloatToBits(double v, DType t) {
  if (t == DType::kF64) return std::bit_cast<uint64_t>(v);
  // The host's double -> float conversion is IEEE's (nearest even, gradual underflow, overflow
  // to inf) and one instruction; NaNs keep the payload rule of EncodeFormat.
  if (t == DType::kF32 && !std::isnan(v)) {
    return std::bit_cast<uint32_t>(static_cast<float>(v));
  }
  return EncodeFormat(v, FormatOf(t));
}

double BitsToFloat(uint64_t bits, DType t) {
  if (t == DType::kF64) return std::bit_cast<double>(bits);
  if (t == DType::kF32) {
    const auto f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    // float -> double is exact, but the host quiets a signalling NaN: NaNs decode bit by bit.
    if (!std::isnan(f)) return static_cast<double>(f);
  }
  return DecodeFormat(bits & Mask(FormatOf(t).total_bits()), FormatOf(t));
}

double IntToFloat(int64_t v, DType src, DType dst) {
  const bool negative = IsSignedInt(src) && v < 0;
  uint64_t mag = negative ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  const int p = FormatOf(dst).precision;
  if (mag >> 53) {
    // Round the magnitude to p significant bits here, so that it is exact in a double and
    // RoundToDType below cannot round a second time.
    const int shift = std::bit_width(mag) - p;
    const uint64_t rem = mag & Mask(shift);
    const uint64_t half = uint64_t{1} << (shift - 1);
    uint64_t keep = mag >> shift;
    if (rem > half || (rem == half && (keep & 1))) ++keep;
    const double d = std::ldexp(static_cast<double>(keep), shift);
    return RoundToDType(negative ? -d : d, dst);
  }
  const double d = static_cast<double>(mag);
  return RoundToDType(negative ? -d : d, dst);
}

int64_t FloatToInt(double v, DType dst) {
  if (dst == DType::kPred) return v != 0.0 ? 1 : 0;
  if (std::isnan(v)) return 0;
  const double t = std::trunc(v);
  const int bits = IntegerBits(dst);
  if (IsSignedInt(dst)) {
    const double limit = std::ldexp(1.0, bits - 1);
    if (t <= -limit) return WrapInt(int64_t{-1} << (bits - 1), dst);
    if (t >= limit) return static_cast<int64_t>(Mask(bits - 1));
    return static_cast<int64_t>(t);
  }
  if (t <= 0.0) return 0;
  if (t >= std::ldexp(1.0, bits)) return static_cast<int64_t>(Mask(bits));
  return static_cast<int64_t>(static_cast<uint64_t>(t));
}

}  // namespace internal

using internal::BitsToFloat;
using internal::FloatToBits;
using internal::WrapInt;

Tensor Tensor::Zeros(const Shape& shape) {
  Tensor t;
  t.shape = shape;
  if (IsFloat(shape.dtype)) {
    t.f.assign(shape.elements(), 0.0);
  } else {
    t.i.assign(shape.elements(), 0);
  }
  return t;
}

double Tensor::AsDouble(int64_t k) const {
  if (IsFloat(shape.dtype)) return f[k];
  if (shape.dtype == DType::kU64) return static_cast<double>(static_cast<uint64_t>(i[k]));
  return static_cast<double>(i[k]);
}

double RoundToDType(double v, DType t) {
  switch (t) {
    case DType::kF32:  // as FloatToBits: the host's conversion; a NaN stays as it is
      return std::isnan(v) ? v : static_cast<double>(static_cast<float>(v));
    case DType::kF16:
    case DType::kBF16:
      return internal::RoundToFormat(v, internal::FormatOf(t));
    default:
      return v;  // f64 is exact; integer dtypes are not rounded here
  }
}

namespace {

// Device storage is little-endian, as is every host stitch builds for; the copies below
// move whole elements at once.
static_assert(std::endian::native == std::endian::little);

// Fixed-size copies, which compile to one move each, where a copy of `width` bytes would be a
// library call per element.
void StoreBits(uint8_t* out, uint64_t bits, int width) {
  switch (width) {
    case 1:
      *out = static_cast<uint8_t>(bits);
      return;
    case 2: {
      const auto v = static_cast<uint16_t>(bits);
      std::memcpy(out, &v, 2);
      return;
    }
    case 4: {
      const auto v = static_cast<uint32_t>(bits);
      std::memcpy(out, &v, 4);
      return;
    }
    default:
      std::memcpy(out, &bits, 8);
  }
}

uint64_t LoadBits(const uint8_t* in, int width) {
  switch (width) {
    case 1:
      return *in;
    case 2: {
      uint16_t v;
      std::memcpy(&v, in, 2);
      return v;
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, in, 4);
      return v;
    }
    default: {
      uint64_t v;
      std::memcpy(&v, in, 8);
      return v;
    }
  }
}

}  // namespace

std::vector<uint8_t> ToDeviceBytes(const Tensor& t) {
  const DType dtype = t.shape.dtype;
  const int width = DTypeBytes(dtype);
  const int64_t n = t.size();
  std::vector<uint8_t> out(static_cast<size_t>(n) * width, 0);
  uint8_t* at = out.data();
  // A malformed tensor (too few values) yields zeros rather than reading out of bounds.
  if (IsFloat(dtype)) {
    const int64_t have = std::min<int64_t>(n, static_cast<int64_t>(t.f.size()));
    for (int64_t k = 0; k < have; ++k) StoreBits(at + k * width, FloatToBits(t.f[k], dtype), width);
    return out;
  }
  const int64_t have = std::min<int64_t>(n, static_cast<int64_t>(t.i.size()));
  for (int64_t k = 0; k < have; ++k) {
    const int64_t v = t.i[k];
    StoreBits(at + k * width, dtype == DType::kPred ? uint64_t{v != 0} : static_cast<uint64_t>(v),
              width);
  }
  return out;
}

StatusOr<Tensor> FromDeviceBytes(const Shape& shape, const std::vector<uint8_t>& bytes) {
  const int width = DTypeBytes(shape.dtype);
  if (width == 0) return InvalidArgument("FromDeviceBytes: invalid dtype");
  const int64_t n = shape.elements();
  if (static_cast<int64_t>(bytes.size()) != n * width) {
    return InvalidArgument("FromDeviceBytes: " + shape.ToString() + " needs " +
                           std::to_string(n * width) + " bytes, got " +
                           std::to_string(bytes.size()));
  }
  Tensor t = Tensor::Zeros(shape);
  const uint8_t* at = bytes.data();
  if (IsFloat(shape.dtype)) {
    for (int64_t k = 0; k < n; ++k)
      t.f[k] = BitsToFloat(LoadBits(at + k * width, width), shape.dtype);
    return t;
  }
  for (int64_t k = 0; k < n; ++k) {
    const uint64_t bits = LoadBits(at + k * width, width);
    t.i[k] = shape.dtype == DType::kPred ? int64_t{bits != 0}
                                         : WrapInt(static_cast<int64_t>(bits), shape.dtype);
  }
  return t;
}

namespace {

// RandomTensor's value of engine output `r`: raw output is mapped by hand (not through std
// distributions, whose algorithms are unspecified) so that a seed gives the same tensor with
// every standard library.
double RandomFloat(uint64_t r, DType t) {
  const double u = static_cast<double>(r >> 11) * 0x1p-53;  // [0, 1)
  return RoundToDType(4.0 * u - 2.0, t);
}

int64_t RandomInteger(uint64_t r, DType t) {
  if (t == DType::kPred) return static_cast<int64_t>(r >> 63);
  const auto small = static_cast<int64_t>(r % 21);
  return IsSignedInt(t) ? small - 10 : small;
}

}  // namespace

Tensor RandomTensor(const Shape& shape, std::mt19937_64& rng) {
  Tensor t = Tensor::Zeros(shape);
  const int64_t n = shape.elements();
  if (IsFloat(shape.dtype)) {
    for (int64_t k = 0; k < n; ++k) t.f[k] = RandomFloat(rng(), shape.dtype);
  } else {
    for (int64_t k = 0; k < n; ++k) t.i[k] = RandomInteger(rng(), shape.dtype);
  }
  return t;
}

std::vector<uint8_t> RandomDeviceBytes(const Shape& shape, std::mt19937_64& rng) {
  const DType dtype = shape.dtype;
  const int width = DTypeBytes(dtype);
  const int64_t n = shape.elements();
  std::vector<uint8_t> out(static_cast<size_t>(n) * width);
  uint8_t* at = out.data();
  if (IsFloat(dtype)) {
    for (int64_t k = 0; k < n; ++k) {
      StoreBits(at + k * width, FloatToBits(RandomFloat(rng(), dtype), dtype), width);
    }
    return out;
  }
  // As ToDeviceBytes stores integers: pred as 0/1, the others' low bytes.
  for (int64_t k = 0; k < n; ++k) {
    StoreBits(at + k * width, static_cast<uint64_t>(RandomInteger(rng(), dtype)), width);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// .npy files: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html

namespace {

constexpr std::string_view kNpyMagic = "\x93NUMPY";

struct NpyHeader {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<int64_t>> shape;
};

// Parses the Python dict literal of a .npy header. It accepts exactly what NumPy writes
// (and equivalent spellings: either quote, any spacing, trailing commas), nothing more; any
// other input is an error, never undefined behaviour.
class NpyHeaderParser {
 public:
  explicit NpyHeaderParser(std::string_view s) : s_(s) {}

  // Returns the parsed header or a message saying what is malformed.
  std::optional<std::string> Parse(NpyHeader& h) {
    SkipSpace();
    if (!Consume('{')) return "header is not a dict literal";
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      std::optional<std::string> key = ParseString();
      if (!key) return "expected a quoted key in the header dict";
      SkipSpace();
      if (!Consume(':')) return "expected ':' after key '" + *key + "'";
      SkipSpace();
      if (*key == "descr") {
        if (h.descr) return "duplicate key 'descr'";
        h.descr = ParseString();
        if (!h.descr) return "unsupported descr (not a simple dtype string)";
      } else if (*key == "fortran_order") {
        if (h.fortran_order) return "duplicate key 'fortran_order'";
        if (ConsumeWord("True")) {
          h.fortran_order = true;
        } else if (ConsumeWord("False")) {
          h.fortran_order = false;
        } else {
          return "fortran_order is not True or False";
        }
      } else if (*key == "shape") {
        if (h.shape) return "duplicate key 'shape'";
        std::optional<std::string> err = ParseShape(h);
        if (err) return err;
      } else {
        return "unexpected key '" + *key + "' in the header dict";
      }
      SkipSpace();
      if (Consume(',')) continue;
      SkipSpace();
      if (Consume('}')) break;
      return "expected ',' or '}' in the header dict";
    }
    SkipSpace();
    if (pos_ != s_.size()) return "trailing characters after the header dict";
    if (!h.descr) return "header lacks 'descr'";
    if (!h.fortran_order) return "header lacks 'fortran_order'";
    if (!h.shape) return "header lacks 'shape'";
    return std::nullopt;
  }

 private:
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool ConsumeWord(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }
  // A quoted string without escapes (no dtype string or key needs one).
  std::optional<std::string> ParseString() {
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) return std::nullopt;
    const char quote = s_[pos_++];
    const size_t end = s_.find(quote, pos_);
    if (end == std::string_view::npos) return std::nullopt;
    std::string out(s_.substr(pos_, end - pos_));
    if (out.find('\\') != std::string::npos) return std::nullopt;
    pos_ = end + 1;
    return out;
  }
  std::optional<std::string> ParseShape(NpyHeader& h) {
    if (!Consume('(')) return "shape is not a tuple";
    std::vector<int64_t> dims;
    while (true) {
      SkipSpace();
      if (Consume(')')) break;
      if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') {
        return "shape holds something other than non-negative integers";
      }
      int64_t d = 0;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
        if (d > (std::numeric_limits<int64_t>::max() - 9) / 10) return "shape dimension too large";
        d = d * 10 + (s_[pos_++] - '0');
      }
      Consume('L');  // Python 2 long literals
      if (dims.size() >= 64) return "shape has more than 64 dimensions";
      dims.push_back(d);
      SkipSpace();
      if (Consume(',')) continue;
      SkipSpace();
      if (Consume(')')) break;
      return "malformed shape tuple";
    }
    h.shape = std::move(dims);
    return std::nullopt;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

// Maps a descr to a dtype: byte order '<' (or '=', native on the little-endian hosts stitchd
// runs on) for multi-byte types; any byte order for one-byte types.
StatusOr<DType> DTypeFromDescr(const std::string& path, const std::string& descr) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument(path + ": " + why + " (descr '" + descr + "')");
  };
  if (descr.size() != 3) return bad("unsupported descr");
  const char order = descr[0];
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    return bad("unsupported descr");
  }
  const std::string_view code = std::string_view(descr).substr(1);
  struct Entry {
    std::string_view code;
    DType type;
  };
  static constexpr Entry kTable[] = {{"f2", DType::kF16}, {"f4", DType::kF32}, {"f8", DType::kF64},
                                     {"i1", DType::kS8},  {"i4", DType::kS32}, {"i8", DType::kS64},
                                     {"u1", DType::kU8},  {"u4", DType::kU32}, {"u8", DType::kU64},
                                     {"b1", DType::kPred}};
  for (const Entry& e : kTable) {
    if (e.code != code) continue;
    if (DTypeBytes(e.type) > 1 && order == '>') return bad("big-endian data is not supported");
    if (DTypeBytes(e.type) > 1 && order == '|') return bad("unsupported descr");
    return e.type;
  }
  return bad("unsupported descr");
}

std::string DescrOf(DType t) {
  switch (t) {
    case DType::kPred:
      return "|b1";
    case DType::kS8:
      return "|i1";
    case DType::kU8:
      return "|u1";
    case DType::kS32:
      return "<i4";
    case DType::kU32:
      return "<u4";
    case DType::kS64:
      return "<i8";
    case DType::kU64:
      return "<u8";
    case DType::kF16:
      return "<f2";
    case DType::kF64:
      return "<f8";
    default:
      return "<f4";  // f32, and bf16, which NumPy has no type for
  }
}

}  // namespace

StatusOr<Tensor> ReadNpy(const std::string& path) {
  auto bad = [&](const std::string& why) { return InvalidArgument(path + ": " + why); };
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open: " + std::strerror(errno));
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return bad("read error");

  if (data.size() < 8 || std::string_view(data).substr(0, 6) != kNpyMagic) {
    return bad("not a .npy file (bad magic)");
  }
  const auto major = static_cast<uint8_t>(data[6]);
  const auto minor = static_cast<uint8_t>(data[7]);
  if (major < 1 || major > 3 || minor != 0) {
    return bad("unsupported .npy format version " + std::to_string(major) + "." +
               std::to_string(minor));
  }
  const size_t len_bytes = major == 1 ? 2 : 4;
  if (data.size() < 8 + len_bytes) return bad("truncated header length");
  uint64_t header_len = 0;
  for (size_t b = 0; b < len_bytes; ++b) {
    header_len |= uint64_t{static_cast<uint8_t>(data[8 + b])} << (8 * b);
  }
  const uint64_t header_start = 8 + len_bytes;
  if (header_len > data.size() - header_start) {
    return bad("truncated header: it claims " + std::to_string(header_len) +
               " bytes, the file has " + std::to_string(data.size() - header_start) +
               " after the prefix");
  }
  // Version 3.0 allows UTF-8 headers; a valid header is ASCII either way, and any non-ASCII
  // byte simply fails to parse.
  NpyHeader header;
  NpyHeaderParser parser(std::string_view(data).substr(header_start, header_len));
  if (std::optional<std::string> err = parser.Parse(header)) return bad(*err);
  if (*header.fortran_order) return bad("fortran_order is True; only C order is supported");
  STITCH_ASSIGN_OR_RETURN(DType dtype, DTypeFromDescr(path, *header.descr));

  Shape shape;
  shape.dtype = dtype;
  shape.dims = *header.shape;
  const int64_t width = DTypeBytes(dtype);
  int64_t elements = 1;
  for (int64_t d : shape.dims) {
    if (d != 0 && elements > std::numeric_limits<int64_t>::max() / width / d) {
      return bad("shape " + shape.ToString() + " has too many elements");
    }
    elements *= d;
  }
  const uint64_t payload = data.size() - header_start - header_len;
  const uint64_t needed = static_cast<uint64_t>(elements * width);
  if (payload != needed) {
    return bad("shape " + shape.ToString() + " needs " + std::to_string(needed) +
               " data bytes, the file has " + std::to_string(payload) +
               (payload < needed ? " (truncated)" : " (trailing bytes)"));
  }
  const auto* p = reinterpret_cast<const uint8_t*>(data.data() + header_start + header_len);
  const std::vector<uint8_t> bytes(p, p + needed);
  StatusOr<Tensor> t = FromDeviceBytes(shape, bytes);
  if (!t.ok()) return t.status().WithContext(path);
  return t;
}

Status WriteNpy(const std::string& path, const Tensor& t) {
  if (DTypeBytes(t.shape.dtype) == 0) return InvalidArgument(path + ": tensor has no valid dtype");
  const size_t n = static_cast<size_t>(t.size());
  if ((IsFloat(t.shape.dtype) ? t.f.size() : t.i.size()) != n) {
    return InvalidArgument(path + ": tensor of " + t.shape.ToString() +
                           " holds the wrong number of values");
  }
  std::string dict =
      "{'descr': '" + DescrOf(t.shape.dtype) + "', 'fortran_order': False, 'shape': (";
  for (size_t d = 0; d < t.shape.dims.size(); ++d) {
    dict += std::to_string(t.shape.dims[d]);
    dict += t.shape.dims.size() == 1 ? "," : (d + 1 < t.shape.dims.size() ? ", " : "");
  }
  dict += "), }";
  // NumPy pads the header with spaces and a newline so the data starts 64-byte aligned.
  auto padded_total = [&](size_t prefix) { return (prefix + dict.size() + 1 + 63) / 64 * 64; };
  const bool v1 = padded_total(10) - 10 <= 65535;  // else format 2.0, with a 4-byte length
  const size_t prefix = v1 ? 10 : 12;
  const size_t total = padded_total(prefix);
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';

  std::string out(kNpyMagic);
  out += static_cast<char>(v1 ? 1 : 2);
  out += '\0';
  for (size_t b = 0; b < prefix - 8; ++b) out += static_cast<char>((dict.size() >> (8 * b)) & 0xff);
  out += dict;
  if (t.shape.dtype == DType::kBF16) {
    Tensor f32 = t;
    f32.shape.dtype = DType::kF32;
    for (double& v : f32.f) v = RoundToDType(v, DType::kBF16);
    const std::vector<uint8_t> bytes = ToDeviceBytes(f32);
    out.append(bytes.begin(), bytes.end());
  } else {
    const std::vector<uint8_t> bytes = ToDeviceBytes(t);
    out.append(bytes.begin(), bytes.end());
  }

  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return InvalidArgument(path + ": cannot open for writing: " + std::strerror(errno));
  file.write(out.data(), static_cast<std::streamsize>(out.size()));
  file.close();
  if (!file) return InvalidArgument(path + ": write failed");
  return Status::Ok();
}

}  // namespace stitch
