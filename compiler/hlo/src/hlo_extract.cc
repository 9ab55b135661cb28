// Partitioning of a whole model's entry computation into memory-intensive subgraphs.
//
// Out-of-scope ops (and entry parameters) are sources: their results enter subgraphs as
// parameters. Tuples and get-tuple-elements are resolved statically, so a tuple that gathers
// the results of many groups (the entry root, a while's state) joins nothing. Constants and
// iotas are copied into every group that uses them for the same reason. Each group is then
// rewritten as a small HLO computation and lowered with the importer's own lowering.
#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <unordered_map>

#include "hlo_ast.h"
#include "hlo_lower.h"
#include "stitch/hlo/hlo_import.h"

namespace stitch {
namespace {

using hlo::HloComputation;
using hlo::HloInstruction;
using hlo::HloModule;
using hlo::HloShape;

enum class Kind { kSource, kPlumbing, kLeaf, kCompute };

// A value of the entry computation: instruction `ins`, element `path` of its tuple result.
struct Ref {
  int ins = -1;
  std::vector<int64_t> path;
  bool operator<(const Ref& o) const { return std::tie(ins, path) < std::tie(o.ins, o.path); }
  bool operator==(const Ref& o) const { return ins == o.ins && path == o.path; }
};

struct UnionFind {
  std::vector<int> parent;
  explicit UnionFind(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int Find(int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  void Union(int a, int b) { parent[Find(a)] = Find(b); }
};

const HloShape* ShapeAt(const HloShape& s, const std::vector<int64_t>& path) {
  const HloShape* cur = &s;
  for (int64_t i : path) {
    if (!cur->is_tuple || i < 0 || i >= static_cast<int64_t>(cur->elements.size())) return nullptr;
    cur = &cur->elements[i];
  }
  return cur;
}

bool ShapeSupported(const HloShape& s, int depth = 0) {
  if (depth > hlo::kMaxNesting) return false;
  if (s.is_tuple) {
    for (const auto& e : s.elements) {
      if (!ShapeSupported(e, depth + 1)) return false;
    }
    return true;
  }
  return !s.dynamic && ParseDType(s.dtype).has_value();
}

bool IsTrivial(const HloModule& m, const HloInstruction& ins, int depth = 0) {
  if (depth > hlo::kMaxNesting) return false;
  if (ins.opcode == "fusion") {
    auto it = ins.attrs.find("calls");
    if (it == ins.attrs.end()) return false;
    std::string callee = hlo::StripPercent(it->second);
    for (const auto& c : m.computations) {
      if (c.name != callee) continue;
      for (const auto& inner : c.instructions) {
        if (!IsTrivial(m, inner, depth + 1)) return false;
      }
      return true;
    }
    return false;
  }
  return hlo::IsDataMovementOnly(ins.opcode);
}

class Extractor {
 public:
  Extractor(const HloModule& m, const HloImportOptions& opt)
      : m_(m), c_(m.computations[m.entry]), opt_(opt) {}

  Status Run(std::vector<Graph>* out) {
    const auto& ins = c_.instructions;
    const size_t n = ins.size();
    std::unordered_map<std::string, int> index;
    for (size_t k = 0; k < n; ++k) {
      if (!index.emplace(ins[k].name, static_cast<int>(k)).second) {
        return InvalidArgument(Where(ins[k]) + ": instruction name '" + ins[k].name +
                               "' is defined twice");
      }
    }
    opnds_.assign(n, {});
    for (size_t k = 0; k < n; ++k) {
      if (ins[k].opcode == "parameter") continue;
      for (const auto& o : ins[k].operands) {
        auto it = index.find(o.name);
        if (it == index.end()) {
          return InvalidArgument(Where(ins[k]) + ": operand '" + o.name + "' of '" + ins[k].name +
                                 "' is not defined");
        }
        opnds_[k].push_back(it->second);
      }
    }
    kind_.assign(n, Kind::kCompute);
    for (size_t k = 0; k < n; ++k) {
      const auto& op = ins[k].opcode;
      if (op == "parameter") {
        kind_[k] = Kind::kSource;
      } else if (op == "tuple" || op == "get-tuple-element") {
        kind_[k] = Kind::kPlumbing;
      } else if (!hlo::CheckInScope(m_, ins[k], opt_.source_name).ok()) {
        kind_[k] = Kind::kSource;
      } else if (opnds_[k].empty()) {
        kind_[k] = Kind::kLeaf;
      }
    }
    // A compute op that consumes a whole tuple, or a value of a type stitch lacks, cannot be
    // given that value as a parameter: it becomes a boundary itself. Turning an op into a
    // source never creates such a use elsewhere, so one pass in order suffices.
    for (size_t k = 0; k < n; ++k) {
      if (kind_[k] != Kind::kCompute) continue;
      for (int o : opnds_[k]) {
        STITCH_ASSIGN_OR_RETURN(Ref r, Resolve(o, {}));
        const HloShape* s = ShapeAt(ins[r.ins].shape, r.path);
        if (kind_[r.ins] == Kind::kPlumbing || !s || !ShapeSupported(*s) ||
            (s->is_tuple && kind_[r.ins] != Kind::kCompute)) {
          kind_[k] = Kind::kSource;
          break;
        }
      }
    }
    UnionFind uf(n);
    for (size_t k = 0; k < n; ++k) {
      if (kind_[k] != Kind::kCompute) continue;
      for (int o : opnds_[k]) {
        STITCH_ASSIGN_OR_RETURN(Ref r, Resolve(o, {}));
        if (kind_[r.ins] == Kind::kCompute) uf.Union(static_cast<int>(k), r.ins);
      }
    }
    // Values used outside their group: by sources (out-of-scope ops) and by the entry root.
    std::set<Ref> escaping;
    for (size_t k = 0; k < n; ++k) {
      if (kind_[k] != Kind::kSource || ins[k].opcode == "parameter") continue;
      for (int o : opnds_[k]) STITCH_RETURN_IF_ERROR(CollectLeaves(o, {}, &escaping, 0));
    }
    STITCH_RETURN_IF_ERROR(CollectLeaves(c_.root, {}, &escaping, 0));

    std::map<int, std::vector<int>> groups;  // root -> members in text order
    for (size_t k = 0; k < n; ++k) {
      if (kind_[k] == Kind::kCompute)
        groups[uf.Find(static_cast<int>(k))].push_back(static_cast<int>(k));
    }
    std::vector<std::vector<int>> ordered;
    for (auto& [root, members] : groups) {
      for (std::vector<int>& piece : Split(std::move(members))) ordered.push_back(std::move(piece));
    }
    std::sort(ordered.begin(), ordered.end(),
              [](const auto& a, const auto& b) { return a.front() < b.front(); });
    group_of_.assign(n, -1);
    for (size_t g = 0; g < ordered.size(); ++g) {
      for (int k : ordered[g]) group_of_[k] = static_cast<int>(g);
    }
    // Values that cross a cut between pieces of one region escape their piece too.
    for (size_t k = 0; k < n; ++k) {
      if (kind_[k] != Kind::kCompute) continue;
      for (int o : opnds_[k]) {
        STITCH_ASSIGN_OR_RETURN(Ref r, Resolve(o, {}));
        if (kind_[r.ins] == Kind::kCompute && group_of_[r.ins] != group_of_[k]) {
          escaping.insert(std::move(r));
        }
      }
    }
    for (const auto& members : ordered) {
      bool trivial = true;
      for (int k : members) trivial = trivial && IsTrivial(m_, ins[k]);
      if (trivial) continue;
      std::vector<Ref> outputs;
      for (const Ref& r : escaping) {
        if (kind_[r.ins] == Kind::kCompute && group_of_[r.ins] == group_of_[members.front()]) {
          outputs.push_back(r);
        }
      }
      if (outputs.empty()) continue;  // dead code
      std::string name = m_.name + ".sg" + std::to_string(out->size());
      STITCH_ASSIGN_OR_RETURN(Graph g, BuildGroup(members, outputs, name));
      out->push_back(std::move(g));
    }
    return Status::Ok();
  }

 private:
  std::string Where(const HloInstruction& i) const {
    return opt_.source_name + ":" + std::to_string(i.line);
  }

  // Cuts a region's members (in text order) into pieces of at most
  // max_subgraph_instructions.
  std::vector<std::vector<int>> Split(std::vector<int> members) const {
    const size_t limit = opt_.max_subgraph_instructions;
    if (limit == 0 || members.size() <= limit) return {std::move(members)};
    std::vector<std::vector<int>> pieces;
    for (size_t at = 0; at < members.size(); at += limit) {
      const size_t end = std::min(members.size(), at + limit);
      pieces.emplace_back(members.begin() + static_cast<std::ptrdiff_t>(at),
                          members.begin() + static_cast<std::ptrdiff_t>(end));
    }
    return pieces;
  }

  // Follows tuples and get-tuple-elements to the instruction that computes the value.
  StatusOr<Ref> Resolve(int k, std::vector<int64_t> path) const {
    const auto& ins = c_.instructions;
    for (size_t steps = 0; steps <= ins.size() + 1; ++steps) {
      const HloInstruction& i = ins[k];
      if (i.opcode == "get-tuple-element" && opnds_[k].size() == 1) {
        auto it = i.attrs.find("index");
        auto idx = it == i.attrs.end() ? std::nullopt : hlo::ParseInt(it->second);
        if (!idx || *idx < 0) return InvalidArgument(Where(i) + ": expected index=<n>");
        path.insert(path.begin(), *idx);
        k = opnds_[k][0];
        continue;
      }
      if (i.opcode == "tuple" && !path.empty()) {
        if (path[0] < 0 || path[0] >= static_cast<int64_t>(opnds_[k].size())) {
          return InvalidArgument(Where(i) + ": tuple index out of range");
        }
        k = opnds_[k][path[0]];
        path.erase(path.begin());
        continue;
      }
      return Ref{k, std::move(path)};
    }
    return InvalidArgument(opt_.source_name + ": cyclic get-tuple-element chain");
  }

  // Adds every array value that reaches `k` (whole tuples expanded) to `out`.
  Status CollectLeaves(int k, std::vector<int64_t> path, std::set<Ref>* out, int depth) const {
    if (depth > hlo::kMaxNesting)
      return InvalidArgument(opt_.source_name + ": tuples nested too deep");
    STITCH_ASSIGN_OR_RETURN(Ref r, Resolve(k, std::move(path)));
    const HloInstruction& i = c_.instructions[r.ins];
    if (i.opcode == "tuple" && r.path.empty()) {
      for (int o : opnds_[r.ins]) STITCH_RETURN_IF_ERROR(CollectLeaves(o, {}, out, depth + 1));
      return Status::Ok();
    }
    out->insert(std::move(r));
    return Status::Ok();
  }

  StatusOr<Graph> BuildGroup(const std::vector<int>& members, const std::vector<Ref>& outputs,
                             const std::string& name) {
    const auto& ins = c_.instructions;
    const int group = group_of_[members.front()];
    HloComputation sc;
    sc.name = name;
    sc.line = ins[members.front()].line;
    std::map<Ref, std::string> names;  // value -> instruction name in `sc`
    std::vector<HloInstruction> params, leaves, gtes;
    std::set<int> leaf_done;
    std::function<StatusOr<std::string>(const Ref&)> name_of =
        [&](const Ref& r) -> StatusOr<std::string> {
      if (auto it = names.find(r); it != names.end()) return it->second;
      const HloInstruction& p = ins[r.ins];
      std::string nm;
      // A value of another piece of the same region enters this one as a parameter.
      const bool elsewhere = kind_[r.ins] == Kind::kCompute && group_of_[r.ins] != group;
      if (kind_[r.ins] == Kind::kSource || elsewhere) {
        const HloShape* s = ShapeAt(p.shape, r.path);
        if (!s) return InvalidArgument(Where(p) + ": tuple index out of range of '" + p.name + "'");
        nm = p.name;
        for (int64_t i : r.path) nm += "." + std::to_string(i);
        HloInstruction param;
        param.name = nm;
        param.opcode = "parameter";
        param.shape = *s;
        param.line = p.line;
        param.args_text = std::to_string(params.size());
        params.push_back(std::move(param));
      } else if (kind_[r.ins] == Kind::kLeaf) {
        nm = p.name;
        if (leaf_done.insert(r.ins).second) leaves.push_back(p);
      } else if (r.path.empty()) {
        nm = p.name;
      } else {
        // An element of a multi-output op of this group.
        Ref parent{r.ins, std::vector<int64_t>(r.path.begin(), r.path.end() - 1)};
        STITCH_ASSIGN_OR_RETURN(std::string base, name_of(parent));
        const HloShape* s = ShapeAt(p.shape, r.path);
        if (!s) return InvalidArgument(Where(p) + ": tuple index out of range of '" + p.name + "'");
        nm = base + "#" + std::to_string(r.path.back());
        HloInstruction g;
        g.name = nm;
        g.opcode = "get-tuple-element";
        g.shape = *s;
        g.line = p.line;
        g.operands.push_back({base, std::nullopt});
        g.attrs["index"] = std::to_string(r.path.back());
        gtes.push_back(std::move(g));
      }
      names[r] = nm;
      return nm;
    };
    std::vector<HloInstruction> body;
    for (int k : members) {
      HloInstruction copy = ins[k];
      copy.is_root = false;
      for (size_t j = 0; j < opnds_[k].size(); ++j) {
        STITCH_ASSIGN_OR_RETURN(Ref r, Resolve(opnds_[k][j], {}));
        STITCH_ASSIGN_OR_RETURN(copy.operands[j].name, name_of(r));
      }
      body.push_back(std::move(copy));
    }
    HloInstruction root;
    root.name = name + ".outputs";
    root.opcode = "tuple";
    root.shape.is_tuple = true;
    root.is_root = true;
    root.line = ins[members.front()].line;
    for (const Ref& r : outputs) {
      STITCH_ASSIGN_OR_RETURN(std::string nm, name_of(r));
      const HloShape* s = ShapeAt(ins[r.ins].shape, r.path);
      if (!s) return InvalidArgument(Where(ins[r.ins]) + ": tuple index out of range");
      root.operands.push_back({nm, *s});
      root.shape.elements.push_back(*s);
    }
    for (auto* part : {&params, &leaves, &gtes, &body}) {
      for (auto& i : *part) sc.instructions.push_back(std::move(i));
    }
    sc.instructions.push_back(std::move(root));
    sc.root = static_cast<int>(sc.instructions.size()) - 1;
    sc.is_entry = true;
    return hlo::LowerComputation(m_, sc, name, opt_);
  }

  const HloModule& m_;
  const HloComputation& c_;
  const HloImportOptions& opt_;
  std::vector<std::vector<int>> opnds_;
  std::vector<Kind> kind_;
  std::vector<int> group_of_;  // the piece each compute instruction belongs to; -1 otherwise
};

}  // namespace

StatusOr<std::vector<Graph>> ExtractMemoryIntensiveSubgraphs(std::string_view text,
                                                             const HloImportOptions& options) {
  STITCH_RETURN_IF_ERROR(hlo::CheckTextSize(text, options));
  STITCH_ASSIGN_OR_RETURN(std::vector<hlo::HloModule> modules,
                          hlo::ParseHloModules(text, options.source_name));
  std::vector<Graph> graphs;
  for (const auto& m : modules) {
    Extractor e(m, options);
    STITCH_RETURN_IF_ERROR(e.Run(&graphs));
  }
  return graphs;
}

}  // namespace stitch
