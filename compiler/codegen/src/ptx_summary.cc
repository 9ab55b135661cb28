#include "stitch/codegen/ptx_summary.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

// The registers an operand list names ("%f1", "{%f1, %f2}", "[%rd5+16]"), in order.
std::vector<std::string> Registers(std::string_view operands) {
  std::vector<std::string> regs;
  for (size_t at = operands.find('%'); at != std::string_view::npos;
       at = operands.find('%', at + 1)) {
    size_t end = at + 1;
    while (end < operands.size() &&
           (std::isalnum(static_cast<unsigned char>(operands[end])) || operands[end] == '_')) {
      ++end;
    }
    regs.emplace_back(operands.substr(at, end - at));
    at = end - 1;
  }
  return regs;
}

// Splits "dest, a, b;" at its first top-level comma: the destination and the sources. A
// brace group ("{%f1, %f2}") is one operand.
std::pair<std::string_view, std::string_view> SplitDestination(std::string_view operands) {
  int depth = 0;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (operands[i] == '{' || operands[i] == '[') ++depth;
    if (operands[i] == '}' || operands[i] == ']') --depth;
    if (operands[i] == ',' && depth == 0) return {operands.substr(0, i), operands.substr(i + 1)};
  }
  return {operands, {}};
}

// Follows the global loads of one thread through the text: a burst is the loads issued one
// after another before any instruction reads what one of them loaded. Labels, branches and
// barriers end a burst, since what follows them may run in another order or wait.
class LoadBursts {
 public:
  void Load(int bytes, std::string_view operands) {
    auto [dest, sources] = SplitDestination(operands);
    if (ReadsPending(sources)) End();  // an address that depends on a load in flight
    for (std::string& r : Registers(dest)) pending_.insert(std::move(r));
    bytes_ += bytes;
    widest_ = std::max(widest_, bytes_);
  }
  // Any other instruction; `all_sources` for stores and reductions, whose operands are all
  // read.
  void Other(std::string_view operands, bool all_sources) {
    std::string_view sources = all_sources ? operands : SplitDestination(operands).second;
    if (ReadsPending(sources)) End();
  }
  void End() {
    pending_.clear();
    bytes_ = 0;
  }
  int widest() const { return widest_; }

 private:
  bool ReadsPending(std::string_view sources) const {
    if (pending_.empty()) return false;
    for (const std::string& r : Registers(sources)) {
      if (pending_.count(r)) return true;
    }
    return false;
  }
  std::set<std::string> pending_;
  int bytes_ = 0;
  int widest_ = 0;
};

}  // namespace

PtxMemorySummary SummarizePtx(const std::string& ptx) {
  PtxMemorySummary s;
  LoadBursts bursts;
  std::map<std::string, int, std::less<>> labels;  // label -> instructions before it
  std::vector<std::pair<int, int>> loops;          // [first, last] instruction of each body
  std::istringstream lines(ptx);
  std::string line;
  while (std::getline(lines, line)) {
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    std::string_view text(line);
    text.remove_prefix(first);
    if (text[0] == '/' || text[0] == '.') continue;  // a comment or a directive
    if (text.back() == ':') {                        // a label
      labels[std::string(text.substr(0, text.size() - 1))] = s.instructions;
      bursts.End();
      continue;
    }
    if (text[0] == '}' || text[0] == '{') {
      bursts.End();
      continue;
    }
    if (text[0] == '@') {  // a predicated instruction: "@%p1 ld.global..."
      const size_t space = text.find_first_of(" \t");
      if (space == std::string_view::npos) continue;
      text.remove_prefix(text.find_first_not_of(" \t", space));
    }
    const size_t op_end = text.find_first_of(" \t");
    const std::string_view op = text.substr(0, op_end);
    const std::string_view operands =
        op_end == std::string_view::npos ? std::string_view() : text.substr(op_end);
    const bool load = op.rfind("ld.", 0) == 0;
    const bool store = op.rfind("st.", 0) == 0;
    ++s.instructions;
    if (op.rfind("bra", 0) == 0) {  // a branch back to a label already seen closes a loop
      std::string_view target =
          operands.substr(std::min(operands.find_first_not_of(" \t"), operands.size()));
      target = target.substr(0, target.find_first_of(" \t;"));
      if (auto it = labels.find(target); it != labels.end()) {
        loops.emplace_back(it->second, s.instructions - 1);
      }
    }
    if (op.rfind("bra", 0) == 0 || op.rfind("bar.", 0) == 0 || op.rfind("ret", 0) == 0 ||
        op.rfind("call", 0) == 0) {
      bursts.End();
      continue;
    }
    if (!load || op.find(".global") == std::string_view::npos) {
      bursts.Other(operands, store || op.rfind("red.", 0) == 0);
    }
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
      bursts.Load(bytes, operands);
      ++s.global_loads_by_bytes[static_cast<size_t>(bytes)];
      if (bytes > s.widest_global_load) s.widest_global_load = bytes;
    } else {
      ++s.global_stores_by_bytes[static_cast<size_t>(bytes)];
      if (bytes > s.widest_global_store) s.widest_global_store = bytes;
    }
  }
  s.widest_load_burst = bursts.widest();
  // Innermost loops: bodies that hold no other loop.
  for (const auto& [first, last] : loops) {
    const bool holds_another = std::any_of(loops.begin(), loops.end(), [&](const auto& other) {
      return other != std::make_pair(first, last) && other.first >= first && other.second <= last;
    });
    if (!holds_another) s.innermost_loop_instructions += last - first + 1;
  }
  return s;
}

}  // namespace stitch
