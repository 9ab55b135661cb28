// Lowering of HLO's constants and iota: constants' literals are parsed here, checked
// against the declared shape.
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>

#include "hlo/hlo_lowerer.h"

namespace stitch::hlo {
namespace {

// Parses the constant's literal text into `lit`: one value (a splat), or nested lists whose
// lengths match the declared shape level by level.
Status ParseLiteral(const Instr& in, Literal* lit) {
  std::string_view s = in.ins.args_text;
  const Shape& shape = in.shape;
  auto fail = [&in](const std::string& what) { return in.Fail(what); };
  size_t i = 0;
  auto skip = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  };
  const bool is_float = IsFloat(shape.dtype);
  const int64_t expected = [&] {
    int64_t e = 1;
    for (int64_t d : shape.dims) e *= d;
    return e;
  }();
  auto scalar = [&]() -> Status {
    skip();
    size_t b = i;
    while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != '{' && s[i] != ' ' &&
           s[i] != '\n' && s[i] != '\t' && s[i] != '\r') {
      ++i;
    }
    std::string_view w = s.substr(b, i - b);
    if (w.empty()) return fail("expected a literal value");
    if (static_cast<int64_t>(lit->size()) >= expected) {
      return fail("literal has more than the " + std::to_string(expected) + " elements of " +
                  shape.ToString());
    }
    double fv = 0;
    int64_t iv = 0;
    bool have_int = false;
    if (w == "true") {
      fv = 1, iv = 1, have_int = true;
    } else if (w == "false") {
      fv = 0, iv = 0, have_int = true;
    } else if (w == "inf" || w == "+inf") {
      fv = std::numeric_limits<double>::infinity();
    } else if (w == "-inf") {
      fv = -std::numeric_limits<double>::infinity();
    } else if (w == "nan" || w == "-nan" || w == "+nan") {
      fv = std::numeric_limits<double>::quiet_NaN();
    } else {
      std::string_view digits = w;
      bool neg = false;
      if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) {
        neg = digits[0] == '-';
        digits.remove_prefix(1);
      }
      uint64_t u = 0;
      auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), u);
      if (ec == std::errc() && p == digits.data() + digits.size() && !digits.empty()) {
        if (neg && u > (uint64_t{1} << 63))
          return fail("integer literal '" + std::string(w) + "' is out of range");
        iv = neg ? static_cast<int64_t>(0 - u) : static_cast<int64_t>(u);
        fv = neg ? -static_cast<double>(u) : static_cast<double>(u);
        have_int = true;
      } else {
        auto f = ParseFloat(w);
        if (!f) return fail("bad literal value '" + std::string(w) + "'");
        fv = *f;
      }
    }
    if (is_float) {
      lit->f.push_back(fv);
    } else {
      if (!have_int) {
        if (!std::isfinite(fv) || fv != std::floor(fv) || std::fabs(fv) > 9.2e18) {
          return fail("literal '" + std::string(w) + "' is not a " +
                      std::string(DTypeName(shape.dtype)) + " value");
        }
        iv = static_cast<int64_t>(fv);
      }
      lit->i.push_back(iv);
    }
    return Status::Ok();
  };
  // Parses a nested list at `depth`, checking each level's length against the shape.
  std::function<Status(int)> list = [&](int depth) -> Status {
    skip();
    if (depth > shape.rank() || depth > kMaxNesting) {
      return fail("literal is nested deeper than the rank of " + shape.ToString());
    }
    if (i >= s.size() || s[i] != '{') {
      if (depth == shape.rank()) return scalar();
      if (depth == 0) return scalar();  // one value for the whole shape: a splat
      return fail("expected '{' at nesting level " + std::to_string(depth) + " of the literal");
    }
    if (depth == shape.rank()) return fail("literal is nested deeper than the rank");
    ++i;
    int64_t count = 0;
    skip();
    if (i < s.size() && s[i] == '}') {
      ++i;
    } else {
      while (true) {
        STITCH_RETURN_IF_ERROR(list(depth + 1));
        ++count;
        skip();
        if (i < s.size() && s[i] == ',') {
          ++i;
          continue;
        }
        if (i < s.size() && s[i] == '}') {
          ++i;
          break;
        }
        return fail("expected ',' or '}' in the literal");
      }
    }
    if (count != shape.dims[depth]) {
      return fail("literal has " + std::to_string(count) + " entries at level " +
                  std::to_string(depth) + ", the shape " + shape.ToString() + " wants " +
                  std::to_string(shape.dims[depth]));
    }
    return Status::Ok();
  };
  skip();
  if (s.substr(i).starts_with("{...}")) {
    return fail("the literal was elided ('{...}') when the text was printed");
  }
  STITCH_RETURN_IF_ERROR(list(0));
  skip();
  if (i != s.size()) return fail("unexpected text after the literal");
  if (static_cast<int64_t>(lit->size()) != expected && lit->size() != 1) {
    return fail("literal has " + std::to_string(lit->size()) + " elements, " + shape.ToString() +
                " has " + std::to_string(expected));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<Value> LowerConstant(Lowerer& l, const Instr& in) {
  Node n;
  STITCH_RETURN_IF_ERROR(ParseLiteral(in, &n.literal));
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
