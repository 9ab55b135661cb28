// Lexer and recursive-descent parser for HLO text. It accepts the dialects seen in XLA dumps
// and tests (with or without '%', typed or untyped operands, with or without the module
// header and computation signatures) and keeps attribute values as raw text.
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <limits>

#include "hlo_ast.h"

namespace stitch::hlo {
namespace {

enum class Tok { kWord, kString, kPunct, kArrow, kEnd };

struct Token {
  Tok kind = Tok::kEnd;
  std::string_view text;
  int line = 0;
  size_t begin = 0, end = 0;  // byte offsets into the chunk
};

bool IsWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '%' || c == '-' || c == '+' || c == '$' || c == '#';
}

// Splits the text into tokens. Comments vanish here, so "// CHECK" lines never reach the
// parser. Only an unterminated string or block comment is an error.
Status Lex(std::string_view s, int first_line, const std::string& source, std::vector<Token>* out) {
  int line = first_line;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (c == '\n') {
      ++line;
      ++i;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      ++i;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      while (i < s.size() && s[i] != '\n') ++i;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      int start_line = line;
      i += 2;
      while (i + 1 < s.size() && !(s[i] == '*' && s[i + 1] == '/')) {
        if (s[i] == '\n') ++line;
        ++i;
      }
      if (i + 1 >= s.size()) {
        return InvalidArgument(source + ":" + std::to_string(start_line) +
                               ": unterminated /* comment");
      }
      i += 2;
      continue;
    }
    Token t;
    t.line = line;
    t.begin = i;
    if (c == '"') {
      ++i;
      while (i < s.size() && s[i] != '"') {
        if (s[i] == '\\' && i + 1 < s.size()) ++i;
        if (s[i] == '\n') ++line;
        ++i;
      }
      if (i >= s.size()) {
        return InvalidArgument(source + ":" + std::to_string(t.line) + ": unterminated string");
      }
      ++i;
      t.kind = Tok::kString;
    } else if (c == '-' && i + 1 < s.size() && s[i + 1] == '>') {
      i += 2;
      t.kind = Tok::kArrow;
    } else if (IsWordChar(c)) {
      while (i < s.size() && IsWordChar(s[i])) {
        // "a->b" inside a word (dim_labels) is a word, an arrow and a word.
        if (s[i] == '-' && i + 1 < s.size() && s[i + 1] == '>') break;
        ++i;
      }
      t.kind = Tok::kWord;
    } else {
      ++i;
      t.kind = Tok::kPunct;
    }
    t.end = i;
    t.text = s.substr(t.begin, t.end - t.begin);
    out->push_back(t);
  }
  Token end;
  end.kind = Tok::kEnd;
  end.line = line;
  end.begin = end.end = s.size();
  out->push_back(end);
  return Status::Ok();
}

bool IsOpener(const Token& t) {
  return t.kind == Tok::kPunct && (t.text == "(" || t.text == "{" || t.text == "[");
}
bool IsCloser(const Token& t) {
  return t.kind == Tok::kPunct && (t.text == ")" || t.text == "}" || t.text == "]");
}

std::optional<int64_t> WordToInt(std::string_view w) {
  if (w.empty()) return std::nullopt;
  int64_t v = 0;
  const char* b = w.data();
  const char* e = w.data() + w.size();
  if (*b == '+') ++b;
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e) return std::nullopt;
  return v;
}

class Parser {
 public:
  Parser(std::string_view text, std::vector<Token> toks, const std::string& source)
      : text_(text), toks_(std::move(toks)), source_(source) {}

  StatusOr<std::vector<HloModule>> ParseAll() {
    std::vector<HloModule> modules;
    while (Peek().kind != Tok::kEnd) {
      HloModule m;
      STITCH_RETURN_IF_ERROR(ParseModule(&m));
      modules.push_back(std::move(m));
    }
    if (modules.empty()) return Error(Peek(), "expected an HLO module");
    return modules;
  }

 private:
  const Token& Peek(size_t k = 0) const {
    size_t i = pos_ + k;
    return i < toks_.size() ? toks_[i] : toks_.back();
  }
  const Token& Next() {
    const Token& t = Peek();
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool IsPunct(const Token& t, std::string_view p) const {
    return t.kind == Tok::kPunct && t.text == p;
  }
  bool IsWord(const Token& t, std::string_view w) const {
    return t.kind == Tok::kWord && t.text == w;
  }
  Status Error(const Token& t, const std::string& what) const {
    std::string got = t.kind == Tok::kEnd ? "end of text" : "'" + std::string(t.text) + "'";
    if (got.size() > 60) got = got.substr(0, 57) + "...'";
    return InvalidArgument(source_ + ":" + std::to_string(t.line) + ": " + what + ", got " + got);
  }
  Status Expect(std::string_view p, const std::string& what) {
    if (!IsPunct(Peek(), p)) return Error(Peek(), "expected '" + std::string(p) + "' " + what);
    Next();
    return Status::Ok();
  }

  // Skips one balanced group starting at an opener; returns the index after it.
  Status SkipBalanced() {
    int depth = 0;
    do {
      const Token& t = Peek();
      if (t.kind == Tok::kEnd) return Error(t, "expected a closing bracket");
      if (IsOpener(t)) {
        if (++depth > kMaxNesting * 4) return Error(t, "nesting too deep");
      } else if (IsCloser(t)) {
        --depth;
      }
      Next();
    } while (depth > 0);
    return Status::Ok();
  }

  // Reads an attribute value: one token or balanced group, followed by any further tokens on
  // the same line up to a ',' or an unbalanced closer (values like "b01f_o01i->bf01" or
  // "[2,1]<=[2]" span several tokens).
  StatusOr<std::string> ParseAttrValue() {
    const Token& first = Peek();
    if (first.kind == Tok::kEnd || IsPunct(first, ",") || IsCloser(first)) {
      return Error(first, "expected an attribute value");
    }
    size_t begin = first.begin;
    size_t end = first.end;
    int last_line = first.line;
    bool first_tok = true;
    while (true) {
      const Token& t = Peek();
      if (t.kind == Tok::kEnd) break;
      if (!first_tok && (IsPunct(t, ",") || IsCloser(t) || t.line != last_line)) break;
      first_tok = false;
      if (IsOpener(t)) {
        STITCH_RETURN_IF_ERROR(SkipBalanced());
        end = toks_[pos_ - 1].end;
        last_line = toks_[pos_ - 1].line;
      } else {
        end = t.end;
        last_line = t.line;
        Next();
      }
    }
    return std::string(text_.substr(begin, end - begin));
  }

  Status ParseAttrs(std::map<std::string, std::string>* attrs) {
    while (IsPunct(Peek(), ",")) {
      Next();
      const Token& key = Peek();
      if (key.kind != Tok::kWord) return Error(key, "expected an attribute name");
      Next();
      STITCH_RETURN_IF_ERROR(Expect("=", "after attribute name"));
      STITCH_ASSIGN_OR_RETURN(std::string v, ParseAttrValue());
      if (attrs) (*attrs)[std::string(key.text)] = std::move(v);
    }
    return Status::Ok();
  }

  bool AtLayout(bool in_signature) const {
    if (!IsPunct(Peek(), "{")) return false;
    const Token& n = Peek(1);
    if (n.kind == Tok::kWord && WordToInt(n.text).has_value()) return true;
    if (IsPunct(n, ":")) return true;
    if (IsPunct(n, "}")) return !in_signature;
    return false;
  }

  Status ParseShape(HloShape* s, bool in_signature, int depth = 0) {
    if (depth > kMaxNesting) return Error(Peek(), "shape nesting too deep");
    if (IsPunct(Peek(), "(")) {
      Next();
      s->is_tuple = true;
      if (IsPunct(Peek(), ")")) {
        Next();
        return Status::Ok();
      }
      while (true) {
        HloShape e;
        STITCH_RETURN_IF_ERROR(ParseShape(&e, in_signature, depth + 1));
        s->elements.push_back(std::move(e));
        if (IsPunct(Peek(), ",")) {
          Next();
          continue;
        }
        return Expect(")", "closing a tuple shape");
      }
    }
    const Token& dt = Peek();
    if (dt.kind != Tok::kWord) return Error(dt, "expected a shape");
    s->dtype = std::string(dt.text);
    Next();
    STITCH_RETURN_IF_ERROR(Expect("[", "after element type '" + s->dtype + "'"));
    if (!IsPunct(Peek(), "]")) {
      while (true) {
        if (IsPunct(Peek(), "<")) {
          Next();
          STITCH_RETURN_IF_ERROR(Expect("=", "in a dynamic dimension '<='"));
          s->dynamic = true;
        }
        if (IsPunct(Peek(), "?")) {
          Next();
          s->dynamic = true;
          s->dims.push_back(0);
        } else {
          const Token& d = Peek();
          auto v = d.kind == Tok::kWord ? WordToInt(d.text) : std::nullopt;
          if (!v || *v < 0) return Error(d, "expected a non-negative dimension size");
          s->dims.push_back(*v);
          Next();
        }
        if (s->dims.size() > 64) return Error(Peek(), "too many dimensions");
        if (IsPunct(Peek(), ",")) {
          Next();
          continue;
        }
        break;
      }
    }
    STITCH_RETURN_IF_ERROR(Expect("]", "closing the dimensions"));
    if (AtLayout(in_signature)) {
      Next();
      std::vector<int64_t> m2m;
      while (Peek().kind == Tok::kWord) {
        auto v = WordToInt(Peek().text);
        if (!v) return Error(Peek(), "expected a layout dimension");
        m2m.push_back(*v);
        Next();
        if (IsPunct(Peek(), ",")) Next();
      }
      if (IsPunct(Peek(), ":")) {
        // Tiling, memory space and element size suffixes: physical details we do not need.
        int depth2 = 1;
        while (depth2 > 0) {
          const Token& t = Peek();
          if (t.kind == Tok::kEnd) return Error(t, "expected '}' closing a layout");
          if (IsOpener(t)) ++depth2;
          if (IsCloser(t)) --depth2;
          if (depth2 > kMaxNesting) return Error(t, "layout nesting too deep");
          if (depth2 > 0) Next();
        }
      }
      STITCH_RETURN_IF_ERROR(Expect("}", "closing a layout"));
      s->minor_to_major = std::move(m2m);
    }
    return Status::Ok();
  }

  bool StartsShape() const {
    const Token& t = Peek();
    if (IsPunct(t, "(")) return true;
    return t.kind == Tok::kWord && IsPunct(Peek(1), "[");
  }

  Status ParseOperands(HloInstruction* ins) {
    const Token& open = Peek();
    STITCH_RETURN_IF_ERROR(Expect("(", "opening the operand list of '" + ins->opcode + "'"));
    size_t args_begin = open.end;
    if (ins->opcode == "constant") {
      // The literal is interpreted by the lowering; here only its extent matters.
      int depth = 1;
      while (true) {
        const Token& t = Peek();
        if (t.kind == Tok::kEnd) return Error(t, "expected ')' closing a constant");
        if (IsOpener(t) && ++depth > kMaxNesting) return Error(t, "literal nesting too deep");
        if (IsCloser(t) && --depth == 0) break;
        Next();
      }
      ins->args_text = std::string(text_.substr(args_begin, Peek().begin - args_begin));
      Next();
      return Status::Ok();
    }
    if (IsPunct(Peek(), ")")) {
      Next();
      return Status::Ok();
    }
    while (true) {
      HloOperand op;
      if (StartsShape()) {
        HloShape s;
        STITCH_RETURN_IF_ERROR(ParseShape(&s, false));
        op.shape = std::move(s);
      }
      const Token& n = Peek();
      if (n.kind != Tok::kWord) return Error(n, "expected an operand name");
      op.name = StripPercent(n.text);
      Next();
      ins->operands.push_back(std::move(op));
      if (ins->operands.size() > 100000) return Error(Peek(), "too many operands");
      if (IsPunct(Peek(), ",")) {
        Next();
        continue;
      }
      break;
    }
    ins->args_text = std::string(text_.substr(args_begin, Peek().begin - args_begin));
    return Expect(")", "closing the operand list");
  }

  Status ParseInstruction(HloInstruction* ins) {
    if (IsWord(Peek(), "ROOT")) {
      ins->is_root = true;
      Next();
    }
    const Token& name = Peek();
    if (name.kind != Tok::kWord) return Error(name, "expected an instruction name");
    ins->name = StripPercent(name.text);
    ins->line = name.line;
    Next();
    STITCH_RETURN_IF_ERROR(Expect("=", "after instruction name '" + ins->name + "'"));
    if (Peek().kind == Tok::kWord && IsPunct(Peek(1), "(")) {
      ins->shape.omitted = true;  // newer XLA text leaves inferable shapes out
    } else {
      STITCH_RETURN_IF_ERROR(ParseShape(&ins->shape, false));
    }
    const Token& op = Peek();
    if (op.kind != Tok::kWord) return Error(op, "expected an opcode");
    ins->opcode = std::string(op.text);
    Next();
    STITCH_RETURN_IF_ERROR(ParseOperands(ins));
    return ParseAttrs(&ins->attrs);
  }

  Status ParseComputation(HloComputation* c) {
    if (IsWord(Peek(), "ENTRY")) {
      c->is_entry = true;
      Next();
    }
    const Token& name = Peek();
    if (name.kind != Tok::kWord) return Error(name, "expected a computation name");
    c->name = StripPercent(name.text);
    c->line = name.line;
    Next();
    if (IsPunct(Peek(), "(")) {
      STITCH_RETURN_IF_ERROR(SkipBalanced());
      if (Peek().kind != Tok::kArrow) return Error(Peek(), "expected '->' after the signature");
      Next();
      HloShape result;
      STITCH_RETURN_IF_ERROR(ParseShape(&result, true));
    }
    STITCH_RETURN_IF_ERROR(Expect("{", "opening computation '" + c->name + "'"));
    while (!IsPunct(Peek(), "}")) {
      if (Peek().kind == Tok::kEnd) return Error(Peek(), "expected '}' closing '" + c->name + "'");
      HloInstruction ins;
      STITCH_RETURN_IF_ERROR(ParseInstruction(&ins));
      if (ins.is_root) {
        if (c->root >= 0) {
          return InvalidArgument(source_ + ":" + std::to_string(ins.line) +
                                 ": second ROOT in computation '" + c->name + "'");
        }
        c->root = static_cast<int>(c->instructions.size());
      }
      c->instructions.push_back(std::move(ins));
    }
    Next();
    if (c->instructions.empty()) {
      return InvalidArgument(source_ + ":" + std::to_string(c->line) + ": computation '" + c->name +
                             "' has no instructions");
    }
    // Without ROOT, the last instruction is the root (as in XLA).
    if (c->root < 0) c->root = static_cast<int>(c->instructions.size()) - 1;
    return ParseAttrs(nullptr);  // e.g. ", execution_thread=\"main\""
  }

  Status ParseModule(HloModule* m) {
    m->line = Peek().line;
    if (IsWord(Peek(), "HloModule")) {
      Next();
      const Token& name = Peek();
      if (name.kind != Tok::kWord) return Error(name, "expected a module name");
      m->name = StripPercent(name.text);
      Next();
      STITCH_RETURN_IF_ERROR(ParseAttrs(nullptr));
    } else {
      m->name = "module";
    }
    while (Peek().kind != Tok::kEnd && !IsWord(Peek(), "HloModule")) {
      HloComputation c;
      STITCH_RETURN_IF_ERROR(ParseComputation(&c));
      if (c.is_entry) {
        if (m->entry >= 0) {
          return InvalidArgument(source_ + ":" + std::to_string(c.line) +
                                 ": second ENTRY computation '" + c.name + "'");
        }
        m->entry = static_cast<int>(m->computations.size());
      }
      m->computations.push_back(std::move(c));
    }
    if (m->computations.empty()) return Error(Peek(), "expected a computation");
    if (m->entry < 0) m->entry = static_cast<int>(m->computations.size()) - 1;
    return Status::Ok();
  }

  std::string_view text_;
  std::vector<Token> toks_;
  const std::string& source_;
  size_t pos_ = 0;
};

// A cursor over attribute text for the small value grammars below.
struct Cursor {
  std::string_view s;
  size_t i = 0;
  void Skip() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  }
  bool Eat(char c) {
    Skip();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  std::optional<int64_t> Int() {
    Skip();
    size_t b = i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return WordToInt(s.substr(b, i - b));
  }
  bool Done() {
    Skip();
    return i == s.size();
  }
};

}  // namespace

std::string HloShape::ToString() const {
  if (omitted) return "<omitted>";
  if (is_tuple) {
    std::string r = "(";
    for (size_t k = 0; k < elements.size(); ++k) {
      if (k) r += ", ";
      r += elements[k].ToString();
    }
    return r + ")";
  }
  std::string r = dtype + "[";
  for (size_t k = 0; k < dims.size(); ++k) {
    if (k) r += ",";
    r += std::to_string(dims[k]);
  }
  return r + "]";
}

std::string StripPercent(std::string_view text) {
  if (!text.empty() && text[0] == '%') text.remove_prefix(1);
  return std::string(text);
}

std::optional<int64_t> ParseInt(std::string_view text) {
  Cursor c{text};
  auto v = c.Int();
  if (!v || !c.Done()) return std::nullopt;
  return v;
}

std::optional<double> ParseFloat(std::string_view text) {
  std::string s(text);
  if (s.empty() || s.size() > 400) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::vector<int64_t>> ParseIntList(std::string_view text) {
  Cursor c{text};
  if (!c.Eat('{')) return std::nullopt;
  std::vector<int64_t> r;
  if (c.Eat('}')) return c.Done() ? std::optional(r) : std::nullopt;
  while (true) {
    auto v = c.Int();
    if (!v) return std::nullopt;
    r.push_back(*v);
    if (c.Eat(',')) continue;
    if (c.Eat('}')) break;
    return std::nullopt;
  }
  if (!c.Done()) return std::nullopt;
  return r;
}

std::optional<std::vector<SliceDim>> ParseSliceAttr(std::string_view text) {
  Cursor c{text};
  if (!c.Eat('{')) return std::nullopt;
  std::vector<SliceDim> r;
  if (c.Eat('}')) return c.Done() ? std::optional(r) : std::nullopt;
  while (true) {
    if (!c.Eat('[')) return std::nullopt;
    SliceDim d;
    auto a = c.Int();
    if (!a || !c.Eat(':')) return std::nullopt;
    auto b = c.Int();
    if (!b) return std::nullopt;
    d.start = *a;
    d.limit = *b;
    if (c.Eat(':')) {
      auto st = c.Int();
      if (!st) return std::nullopt;
      d.stride = *st;
    }
    if (!c.Eat(']')) return std::nullopt;
    r.push_back(d);
    if (c.Eat(',')) continue;
    if (c.Eat('}')) break;
    return std::nullopt;
  }
  if (!c.Done()) return std::nullopt;
  return r;
}

std::optional<std::vector<PadDim>> ParsePaddingAttr(std::string_view text) {
  std::vector<PadDim> r;
  size_t i = 0;
  while (i <= text.size()) {
    size_t x = text.find('x', i);
    std::string_view part = text.substr(i, x == std::string_view::npos ? x : x - i);
    std::vector<int64_t> nums;
    size_t j = 0;
    while (j <= part.size()) {
      size_t u = part.find('_', j);
      auto v = ParseInt(part.substr(j, u == std::string_view::npos ? u : u - j));
      if (!v) return std::nullopt;
      nums.push_back(*v);
      if (u == std::string_view::npos) break;
      j = u + 1;
    }
    if (nums.size() != 2 && nums.size() != 3) return std::nullopt;
    r.push_back({nums[0], nums[1], nums.size() == 3 ? nums[2] : 0});
    if (x == std::string_view::npos) break;
    i = x + 1;
  }
  return r;
}

StatusOr<std::vector<HloModule>> ParseHloText(std::string_view text, int first_line,
                                              const std::string& source) {
  std::vector<Token> toks;
  STITCH_RETURN_IF_ERROR(Lex(text, first_line, source, &toks));
  Parser p(text, std::move(toks), source);
  return p.ParseAll();
}

StatusOr<std::vector<HloModule>> ParseHloModules(std::string_view text, const std::string& source) {
  std::vector<HloModule> all;
  size_t chunk_begin = 0;
  int chunk_line = 1;
  int line = 1;
  size_t i = 0;
  auto flush = [&](size_t end) -> Status {
    std::string_view chunk = text.substr(chunk_begin, end - chunk_begin);
    // A part with nothing but comments and blanks (e.g. a trailing separator) is skipped.
    std::vector<Token> probe;
    STITCH_RETURN_IF_ERROR(Lex(chunk, chunk_line, source, &probe));
    if (probe.size() <= 1) return Status::Ok();
    STITCH_ASSIGN_OR_RETURN(auto mods, ParseHloText(chunk, chunk_line, source));
    for (auto& m : mods) all.push_back(std::move(m));
    return Status::Ok();
  };
  while (i < text.size()) {
    size_t eol = text.find('\n', i);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view ln = text.substr(i, eol - i);
    size_t k = ln.find_first_not_of(" \t");
    if (k != std::string_view::npos && ln.substr(k).starts_with("// -----")) {
      STITCH_RETURN_IF_ERROR(flush(i));
      chunk_begin = eol < text.size() ? eol + 1 : eol;
      chunk_line = line + 1;
    }
    i = eol + 1;
    ++line;
  }
  STITCH_RETURN_IF_ERROR(flush(text.size()));
  if (all.empty()) return InvalidArgument(source + ":1: expected an HLO module, got no text");
  return all;
}

}  // namespace stitch::hlo
