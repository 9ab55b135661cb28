#include "stitch/codegen/ptx_summary.h"

#include <cstdlib>
#include <sstream>
#include <string_view>

namespace stitch {
namespace {

// Bytes of one element of a PTX type suffix ("f32", "b16", "u8", "f16x2"...); 0 if unknown.
int TypeBytes(std::string_view t) {
  if (t.empty()) return 0;
  const char kind = t[0];
  if (kind != 'f' && kind != 'b' && kind != 'u' && kind != 's') return 0;
  int bits = std::atoi(std::string(t.substr(1)).c_str());
  if (t.find("x2") != std::string_view::npos) bits *= 2;
  return bits / 8;
}

// The bytes one `ld`/`st` instruction moves, from its dotted suffixes: ".v4.f32" is 16.
int AccessBytes(std::string_view op) {
  int lanes = 1;
  int bytes = 0;
  size_t at = 0;
  while ((at = op.find('.', at)) != std::string_view::npos) {
    const size_t end = op.find('.', at + 1);
    std::string_view part =
        op.substr(at + 1, end == std::string_view::npos ? op.npos : end - at - 1);
    if (part.size() == 2 && part[0] == 'v') lanes = part[1] - '0';
    if (int b = TypeBytes(part); b > 0) bytes = b;
    at = end;
  }
  return lanes * bytes;
}

}  // namespace

PtxMemorySummary SummarizePtx(const std::string& ptx) {
  PtxMemorySummary s;
  std::istringstream lines(ptx);
  std::string line;
  while (std::getline(lines, line)) {
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    std::string_view text(line);
    text.remove_prefix(first);
    if (text[0] == '@') {  // a predicated instruction: "@%p1 ld.global..."
      const size_t space = text.find_first_of(" \t");
      if (space == std::string_view::npos) continue;
      text.remove_prefix(text.find_first_not_of(" \t", space));
    }
    const std::string_view op = text.substr(0, text.find_first_of(" \t"));
    const bool load = op.rfind("ld.", 0) == 0;
    const bool store = op.rfind("st.", 0) == 0;
    if (!load && !store) continue;
    if (op.rfind("ld.param", 0) == 0 || op.rfind("ld.shared", 0) == 0 ||
        op.rfind("st.shared", 0) == 0 || op.rfind("ld.const", 0) == 0) {
      continue;
    }
    if (op.find(".local") != std::string_view::npos) {
      ++s.local_accesses;
      continue;
    }
    const int bytes = AccessBytes(op);
    if (op.find(".global") == std::string_view::npos) {
      ++s.generic_accesses;
      continue;
    }
    if (bytes <= 0 || bytes > 16) continue;
    if (load) {
      ++s.global_loads_by_bytes[static_cast<size_t>(bytes)];
      if (bytes > s.widest_global_load) s.widest_global_load = bytes;
    } else {
      ++s.global_stores_by_bytes[static_cast<size_t>(bytes)];
      if (bytes > s.widest_global_store) s.widest_global_store = bytes;
    }
  }
  return s;
}

}  // namespace stitch
