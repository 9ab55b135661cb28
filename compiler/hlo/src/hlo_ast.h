// The HLO text as parsed, before any meaning is given to it. The parser checks syntax only:
// op names, attribute values and literals are kept as text and interpreted by the lowering,
// so that a module with ops stitch does not know still parses and can be partitioned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stitch/base/status.h"

namespace stitch::hlo {

// A shape as written: an array shape ("f32[2,3]{1,0}") or a tuple of shapes.
struct HloShape {
  bool is_tuple = false;
  std::vector<HloShape> elements;  // tuple elements
  std::string dtype;               // array: element type spelling ("f32", "token", ...)
  std::vector<int64_t> dims;
  bool dynamic = false;  // some dimension was written "<=N" or "?"
  bool omitted = false;  // no shape was written ("ROOT add = add(x, y)"); to be inferred
  // Minor-to-major order as written in "{...}"; nullopt when no layout was written.
  std::optional<std::vector<int64_t>> minor_to_major;

  std::string ToString() const;
};

struct HloOperand {
  std::string name;  // without '%'
  std::optional<HloShape> shape;
};

struct HloInstruction {
  std::string name;  // without '%'
  HloShape shape;
  std::string opcode;
  std::vector<HloOperand> operands;
  std::string args_text;  // the raw text between the parentheses (constant literal, parameter #)
  // Attribute values as raw text, e.g. "dimensions" -> "{0,1}", "to_apply" -> "%add".
  std::map<std::string, std::string> attrs;
  bool is_root = false;
  int line = 0;
};

struct HloComputation {
  std::string name;
  std::vector<HloInstruction> instructions;
  int root = -1;  // index into instructions
  bool is_entry = false;
  int line = 0;
};

struct HloModule {
  std::string name;
  std::vector<HloComputation> computations;
  int entry = -1;  // index into computations
  int line = 0;
};

// Limits that keep a hostile text from exhausting the stack or memory.
inline constexpr int kMaxNesting = 64;

// Parses one module chunk of text. `first_line` is the line number of the chunk's first line
// in the whole file, so messages point at the original file. Returns INVALID_ARGUMENT with
// "<source>:<line>: expected ..." on malformed text.
StatusOr<std::vector<HloModule>> ParseHloText(std::string_view text, int first_line,
                                              const std::string& source);

// Splits `text` at lines "// -----" and parses every part. Returns the modules in order.
StatusOr<std::vector<HloModule>> ParseHloModules(std::string_view text, const std::string& source);

// Helpers for attribute values (raw text as stored in HloInstruction::attrs). Each returns
// nullopt when the text does not have the expected form.
std::optional<std::vector<int64_t>> ParseIntList(std::string_view text);  // "{1,0}"
std::optional<int64_t> ParseInt(std::string_view text);
std::optional<double> ParseFloat(std::string_view text);
// "{[0:4:1], [2:3]}" -> (start, limit, stride) per dimension.
struct SliceDim {
  int64_t start = 0, limit = 0, stride = 1;
};
std::optional<std::vector<SliceDim>> ParseSliceAttr(std::string_view text);
// "0_0x1_2_1" -> (low, high, interior) per dimension.
struct PadDim {
  int64_t low = 0, high = 0, interior = 0;
};
std::optional<std::vector<PadDim>> ParsePaddingAttr(std::string_view text);
// "%name" or "name" -> "name".
std::string StripPercent(std::string_view text);

}  // namespace stitch::hlo
