// Lowering of HLO's constants and iota: constants' literals are parsed here, checked
// against the declared shape.
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <string_view>

#include "hlo_lowerer.h"

namespace stitch::hlo {
namespace {

// One value of a literal as written: a float, and the exact integer when it was written as
// one (or as true/false).
struct LiteralValue {
  double f = 0;
  std::optional<int64_t> i;
};

// Parses a constant's literal text against its declared shape: one value (a splat), or
// nested lists whose lengths match the shape level by level.
class LiteralParser {
 public:
  explicit LiteralParser(const Instr& in)
      : in_(in), text_(in.ins.args_text), shape_(in.shape), expected_(shape_.elements()) {}

  // Returns the values, or INVALID_ARGUMENT naming what is wrong with the text.
  StatusOr<Literal> Parse() {
    SkipSpace();
    if (text_.substr(pos_).starts_with("{...}")) {
      return in_.Fail("the literal was elided ('{...}') when the text was printed");
    }
    STITCH_RETURN_IF_ERROR(ParseList(0));
    SkipSpace();
    if (pos_ != text_.size()) return in_.Fail("unexpected text after the literal");
    if (static_cast<int64_t>(lit_.size()) != expected_ && lit_.size() != 1) {
      return in_.Fail("literal has " + std::to_string(lit_.size()) + " elements, " +
                      shape_.ToString() + " has " + std::to_string(expected_));
    }
    return std::move(lit_);
  }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() && IsSpace(text_[pos_])) ++pos_;
  }

  static bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

  bool At(char c) const { return pos_ < text_.size() && text_[pos_] == c; }

  // Parses the value or nested list at nesting level `depth`, checking each level's length
  // against the shape.
  Status ParseList(int depth) {
    SkipSpace();
    if (depth > shape_.rank() || depth > kMaxNesting) {
      return in_.Fail("literal is nested deeper than the rank of " + shape_.ToString());
    }
    if (!At('{')) {
      // At level 0, one value stands for the whole shape: a splat.
      if (depth == shape_.rank() || depth == 0) return ParseScalar();
      return in_.Fail("expected '{' at nesting level " + std::to_string(depth) + " of the literal");
    }
    if (depth == shape_.rank()) return in_.Fail("literal is nested deeper than the rank");
    ++pos_;
    STITCH_ASSIGN_OR_RETURN(int64_t count, ParseItems(depth));
    if (count != shape_.dims[depth]) {
      return in_.Fail("literal has " + std::to_string(count) + " entries at level " +
                      std::to_string(depth) + ", the shape " + shape_.ToString() + " wants " +
                      std::to_string(shape_.dims[depth]));
    }
    return Status::Ok();
  }

  // Parses the items of a list opened at level `depth` up to its '}'; returns their count.
  StatusOr<int64_t> ParseItems(int depth) {
    SkipSpace();
    if (At('}')) {
      ++pos_;
      return 0;
    }
    for (int64_t count = 1;; ++count) {
      STITCH_RETURN_IF_ERROR(ParseList(depth + 1));
      SkipSpace();
      if (At(',')) {
        ++pos_;
        continue;
      }
      if (At('}')) {
        ++pos_;
        return count;
      }
      return in_.Fail("expected ',' or '}' in the literal");
    }
  }

  Status ParseScalar() {
    SkipSpace();
    const size_t begin = pos_;
    while (pos_ < text_.size() && !IsSpace(text_[pos_]) && !At(',') && !At('}') && !At('{')) {
      ++pos_;
    }
    const std::string_view word = text_.substr(begin, pos_ - begin);
    if (word.empty()) return in_.Fail("expected a literal value");
    if (static_cast<int64_t>(lit_.size()) >= expected_) {
      return in_.Fail("literal has more than the " + std::to_string(expected_) + " elements of " +
                      shape_.ToString());
    }
    STITCH_ASSIGN_OR_RETURN(LiteralValue v, ReadValue(word));
    if (IsFloat(shape_.dtype)) {
      lit_.f.push_back(v.f);
      return Status::Ok();
    }
    STITCH_ASSIGN_OR_RETURN(int64_t i, AsInteger(v, word));
    lit_.i.push_back(i);
    return Status::Ok();
  }

  StatusOr<LiteralValue> ReadValue(std::string_view word) const {
    if (word == "true") return LiteralValue{1, 1};
    if (word == "false") return LiteralValue{0, 0};
    if (word == "inf" || word == "+inf") return LiteralValue{kInf, std::nullopt};
    if (word == "-inf") return LiteralValue{-kInf, std::nullopt};
    if (word == "nan" || word == "-nan" || word == "+nan") {
      return LiteralValue{std::numeric_limits<double>::quiet_NaN(), std::nullopt};
    }
    std::string_view digits = word;
    const bool negative = !digits.empty() && digits[0] == '-';
    if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) digits.remove_prefix(1);
    uint64_t u = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), u);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty()) {
      if (negative && u > (uint64_t{1} << 63)) {
        return in_.Fail("integer literal '" + std::string(word) + "' is out of range");
      }
      return LiteralValue{negative ? -static_cast<double>(u) : static_cast<double>(u),
                          negative ? static_cast<int64_t>(0 - u) : static_cast<int64_t>(u)};
    }
    auto f = ParseFloat(word);
    if (!f) return in_.Fail("bad literal value '" + std::string(word) + "'");
    return LiteralValue{*f, std::nullopt};
  }

  // Returns `v` for an integer dtype: its exact integer, or its float when that is a whole
  // number within range.
  StatusOr<int64_t> AsInteger(const LiteralValue& v, std::string_view word) const {
    if (v.i) return *v.i;
    if (!std::isfinite(v.f) || v.f != std::floor(v.f) || std::fabs(v.f) > 9.2e18) {
      return in_.Fail("literal '" + std::string(word) + "' is not a " +
                      std::string(DTypeName(shape_.dtype)) + " value");
    }
    return static_cast<int64_t>(v.f);
  }

  static constexpr double kInf = std::numeric_limits<double>::infinity();

  const Instr& in_;
  const std::string_view text_;
  const Shape& shape_;
  const int64_t expected_;
  size_t pos_ = 0;
  Literal lit_;
};

}  // namespace

StatusOr<Value> LowerConstant(Lowerer& l, const Instr& in) {
  Node n;
  STITCH_ASSIGN_OR_RETURN(n.literal, LiteralParser(in).Parse());
  n.op = OpCode::kConstant;
  return l.AddResult(in, std::move(n));
}

StatusOr<Value> LowerIota(Lowerer& l, const Instr& in) {
  STITCH_RETURN_IF_ERROR(in.NeedOperands(0));
  const std::string* dimension = in.Attr("iota_dimension");
  std::optional<int64_t> d = dimension ? ParseInt(*dimension) : std::nullopt;
  if (!d) return in.Fail("expected iota_dimension=<n>");
  Node n;
  n.op = OpCode::kIota;
  n.dimensions = {*d};
  return l.AddResult(in, std::move(n));
}

}  // namespace stitch::hlo
