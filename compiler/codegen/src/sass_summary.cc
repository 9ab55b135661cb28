#include "stitch/codegen/sass_summary.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <utility>
#include <vector>

#include "tool_process.h"

namespace stitch {
namespace {

// Opcodes after which a thread may wait or jump: a burst does not run past them.
constexpr std::string_view kBurstEnders[] = {"BRA",    "BRX",    "JMP",    "JMX",      "CALL",
                                             "RET",    "EXIT",   "BAR",    "BSYNC",    "WARPSYNC",
                                             "MEMBAR", "DEPBAR", "ERRBAR", "NANOSLEEP"};

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// Registers an opcode's destination spans: a 64-bit result (".64", ".WIDE") two, a 128-bit
// one four.
int DestinationWidth(std::string_view op) {
  if (Contains(op, ".128")) return 4;
  if (Contains(op, ".64") || Contains(op, ".WIDE")) return 2;
  return 1;
}

// A load from global memory into registers (not LDGSTS, which copies into shared memory).
bool IsGlobalLoad(std::string_view op) {
  return op.starts_with("LDG") && !op.starts_with("LDGSTS") && !op.starts_with("LDGDEPBAR");
}

bool IsGlobalStore(std::string_view op) { return op.starts_with("STG"); }

// Bytes an LDG loads, or an STG stores, per thread.
int LoadBytes(std::string_view op) {
  if (Contains(op, ".128")) return 16;
  if (Contains(op, ".64")) return 8;
  if (Contains(op, ".U16") || Contains(op, ".S16")) return 2;
  if (Contains(op, ".U8") || Contains(op, ".S8")) return 1;
  return 4;
}

// The general registers `text` names ("R12", "R12.64" for R12 and R13, "-R3", "|R2|",
// "R5.H0_H0", "[R4.64+0x10]"), not RZ, uniform (UR), special (SR_) or predicate ones.
std::vector<int> Registers(std::string_view text) {
  std::vector<int> out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != 'R' ||
        (i > 0 && (std::isalnum(static_cast<unsigned char>(text[i - 1])) || text[i - 1] == '_'))) {
      continue;
    }
    size_t j = i + 1;
    int n = 0;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) {
      n = n * 10 + (text[j] - '0');
      ++j;
    }
    if (j == i + 1) continue;
    const int width = text.substr(j, 4) == ".128" ? 4 : text.substr(j, 3) == ".64" ? 2 : 1;
    for (int k = 0; k < width; ++k) out.push_back(n + k);
    i = j - 1;
  }
  return out;
}

// One instruction: "/*0240*/ @P0 LDG.E.U16.CONSTANT R5, desc[UR4][R12.64] ;" gives the
// opcode and the operands; a label (".L_x_3:") gives is_label and its name (".L_x_3").
struct Instruction {
  bool is_label = false;
  std::string_view label;
  std::string_view op;
  std::string_view destination;  // the first operand
  std::string_view operands;     // all of them
};

bool ParseLine(std::string_view line, Instruction& in) {
  const size_t first = line.find_first_not_of(" \t");
  if (first == std::string_view::npos) return false;
  line.remove_prefix(first);
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) {
    line.remove_suffix(1);
  }
  if (!line.empty() && line.back() == ':' && line[0] == '.') {
    in = Instruction{true, line.substr(0, line.size() - 1), {}, {}, {}};
    return true;
  }
  if (!line.starts_with("/*")) return false;  // directives, comments
  const size_t code = line.find("*/");
  if (code == std::string_view::npos) return false;
  line.remove_prefix(code + 2);
  const size_t end = line.find(';');
  if (end == std::string_view::npos) return false;
  line = line.substr(0, end);
  auto next_word = [&line]() {
    const size_t b = line.find_first_not_of(" \t");
    if (b == std::string_view::npos) return std::string_view();
    line.remove_prefix(b);
    const size_t e = std::min(line.find_first_of(" \t"), line.size());
    std::string_view word = line.substr(0, e);
    line.remove_prefix(e);
    return word;
  };
  std::string_view op = next_word();
  if (op.starts_with("@")) op = next_word();  // a guard predicate
  if (op.empty()) return false;
  in.is_label = false;
  in.label = {};
  in.op = op;
  in.operands = line;
  in.destination = line.substr(0, line.find(','));
  return true;
}

// The instructions and labels of the SASS text `sass`, in its order.
std::vector<Instruction> ParseSass(std::string_view sass) {
  std::vector<Instruction> parsed;
  while (!sass.empty()) {
    const size_t eol = std::min(sass.find('\n'), sass.size());
    Instruction in;
    if (ParseLine(sass.substr(0, eol), in)) parsed.push_back(in);
    sass.remove_prefix(std::min(eol + 1, sass.size()));
  }
  return parsed;
}

}  // namespace

std::string DefaultNvdisasmPath() { return STITCH_DEFAULT_NVDISASM; }

StatusOr<std::string> DisassembleCubin(const std::string& cubin, const std::string& nvdisasm) {
  if (!codegen::IsExecutable(nvdisasm)) {
    return Unavailable("no nvdisasm at '" + nvdisasm + "'");
  }
  codegen::ToolDir dir;
  STITCH_ASSIGN_OR_RETURN(const std::string in, dir.Write("kernel.cubin", cubin));
  STITCH_ASSIGN_OR_RETURN(const codegen::ToolRun run, codegen::RunTool({nvdisasm, "-c", in}, dir));
  if (!run.ok) return Internal("nvdisasm failed: " + run.output);
  return run.output;
}

int WidestSassLoadBurst(std::string_view sass) {
  std::set<int> pending;  // registers the burst's loads write
  int bytes = 0;
  int widest = 0;
  auto end_burst = [&]() {
    pending.clear();
    bytes = 0;
  };
  auto touches_pending = [&](std::string_view text) {
    for (int r : Registers(text)) {
      if (pending.count(r)) return true;
    }
    return false;
  };
  for (const Instruction& in : ParseSass(sass)) {
    if (in.is_label || std::any_of(std::begin(kBurstEnders), std::end(kBurstEnders),
                                   [&](std::string_view e) { return in.op.starts_with(e); })) {
      end_burst();
      continue;
    }
    // The destination's whole span: an instruction overwriting a register a load in flight
    // will write waits for it too.
    std::vector<int> written;
    const std::vector<int> first = Registers(in.destination);
    // Stores and reductions write memory, not registers: their first operand is an address.
    const bool writes_register = !in.op.starts_with("ST") && !in.op.starts_with("RED");
    if (writes_register && !first.empty()) {
      for (int k = 0; k < DestinationWidth(in.op); ++k) written.push_back(first[0] + k);
    }
    const bool waits =
        touches_pending(in.operands) ||
        std::any_of(written.begin(), written.end(), [&](int r) { return pending.count(r) > 0; });
    if (!IsGlobalLoad(in.op)) {
      if (waits) end_burst();
      continue;
    }
    if (waits) end_burst();  // an address, or the destination, of a load still in flight
    pending.insert(written.begin(), written.end());
    bytes += LoadBytes(in.op);
    widest = std::max(widest, bytes);
  }
  return widest;
}

std::vector<SassLoop> InnermostSassLoops(std::string_view sass) {
  std::vector<Instruction> code;
  std::vector<std::pair<std::string_view, size_t>> labels;  // name, index of what follows
  for (const Instruction& in : ParseSass(sass)) {
    if (in.is_label) {
      labels.emplace_back(in.label, code.size());
    } else {
      code.push_back(in);
    }
  }
  // Bodies [first, last] of the branches back: "BRA `(.L_x_3)" to a label at or above them.
  std::vector<std::pair<size_t, size_t>> bodies;
  for (size_t i = 0; i < code.size(); ++i) {
    if (!code[i].op.starts_with("BRA")) continue;
    const std::string_view ops = code[i].operands;
    const size_t open = ops.find("`(");
    const size_t close = ops.find(')', open);
    if (open == std::string_view::npos || close == std::string_view::npos) continue;
    const std::string_view target = ops.substr(open + 2, close - open - 2);
    for (const auto& [name, at] : labels) {
      if (name == target && at <= i) bodies.emplace_back(at, i);
    }
  }
  std::vector<SassLoop> loops;
  for (const auto& [first, last] : bodies) {
    const bool holds_another = std::any_of(bodies.begin(), bodies.end(), [&](const auto& other) {
      return other != std::make_pair(first, last) && first <= other.first && other.second <= last;
    });
    if (holds_another) continue;
    SassLoop loop;
    for (size_t i = first; i <= last; ++i) {
      ++loop.instructions;
      if (IsGlobalLoad(code[i].op) || IsGlobalStore(code[i].op)) {
        loop.global_bytes += LoadBytes(code[i].op);
      }
    }
    loops.push_back(loop);
  }
  return loops;
}

}  // namespace stitch
