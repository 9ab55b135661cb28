#include "elemental_emitter.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/Intrinsics.h>

#include <algorithm>
#include <map>
#include <set>

#include "approximate_erf.h"
#include "dtype_lowering.h"
#include "index_alignment.h"
#include "machine_functions.h"
#include "philox.h"
#include "stitch/ir/philox.h"

namespace stitch::codegen {

ElementalEmitter::ElementalEmitter(KernelContext& kc) : kc_(kc), b_(kc.b) {
  in_kernel_.insert(kc.spec.nodes.begin(), kc.spec.nodes.end());
  size_t operands = 0;
  for (const Node& n : kc.graph.nodes) operands += n.operands.size();
  // A frame pushes its operands once, so an acyclic graph never needs more than this.
  max_stack_ = operands + kc.graph.nodes.size() + 16;
}

void ElementalEmitter::ResetScope() {
  memo_.clear();
  stored_.clear();
  delin_.clear();
  lin_.clear();
}

void ElementalEmitter::PinAnyIndex(int node, llvm::AllocaInst* slot) { pinned_any_[node] = slot; }

void ElementalEmitter::Pin(int node, llvm::Value* linear, llvm::AllocaInst* slot) {
  Pin(node, linear, Slot{slot, slot->getAllocatedType(), slot->getAlign()});
}

void ElementalEmitter::Pin(int node, llvm::Value* linear, const Slot& slot) {
  pinned_[{node, linear}] = slot;
}

void ElementalEmitter::ClearPins() {
  pinned_any_.clear();
  pinned_.clear();
}

llvm::Value* ElementalEmitter::Lookup(int node, llvm::Value* linear) const {
  auto it = memo_.find(Key{node, linear, {}});
  return it == memo_.end() ? nullptr : it->second;
}

llvm::Value* ElementalEmitter::PinnedValue(int node, const IrIndex& index) {
  if (auto it = pinned_any_.find(node); it != pinned_any_.end()) {
    return b_.CreateLoad(it->second->getAllocatedType(), it->second);
  }
  if (!index.linear) return nullptr;
  auto p = pinned_.find({node, index.linear});
  if (p == pinned_.end()) return nullptr;
  llvm::Value* value = b_.CreateAlignedLoad(p->second.type, p->second.address, p->second.align);
  return p->second.stored ? WidenStored(b_, *p->second.stored, value) : value;
}

void ElementalEmitter::Seed(int node, llvm::Value* linear, llvm::Value* value) {
  memo_[Key{node, linear, {}}] = value;
}

std::vector<llvm::Value*> ElementalEmitter::VectorLanes(llvm::Value* first, int64_t width) {
  // Frozen once here, so that every lane and every index derived from it use one value:
  // LLVM freezes the operand of a division it rewrites, and lanes built from the unfrozen
  // value would no longer be visibly adjacent to those built from the frozen one.
  std::vector<llvm::Value*> lanes = {b_.CreateFreeze(first)};
  vector_starts_[lanes[0]] = width;
  for (int64_t e = 1; e < width; ++e) {
    lanes.push_back(b_.CreateAdd(lanes[0], kc_.Index(e), "", true, true));
    lanes_[lanes.back()] = Lane{lanes[0], e, width};
  }
  return lanes;
}

std::vector<llvm::Value*> ElementalEmitter::Delinearize(llvm::Value* linear,
                                                        const std::vector<int64_t>& dims) {
  auto key = std::make_pair(linear, dims);
  auto it = delin_.find(key);
  if (it != delin_.end()) return it->second;
  if (auto lane = lanes_.find(linear);
      lane != lanes_.end() && !dims.empty() && dims.back() % lane->second.width == 0) {
    // The vector starts at a multiple of the width and the width divides the innermost
    // dimension, so every lane shares the first lane's outer indices.
    std::vector<llvm::Value*> out = Delinearize(lane->second.first, dims);
    llvm::Value* first = out.back();
    out.back() = b_.CreateAdd(first, kc_.Index(lane->second.offset), "", true, true);
    lane_coordinates_[out.back()] = Lane{first, lane->second.offset, lane->second.width};
    delin_[key] = out;
    return out;
  }
  std::vector<llvm::Value*> out(dims.size());
  // quotients[d]: the linear index of out[0..d) in a space of dims[0..d), which is `linear`
  // divided by the sizes from d on; null where the loop stopped before it.
  std::vector<llvm::Value*> quotients(dims.size(), nullptr);
  llvm::Value* rest = linear;
  for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
    if (dims[d] == 1) {
      out[d] = kc_.Index(0);
      quotients[d] = rest;
      continue;
    }
    bool outermost = true;
    for (int e = 0; e < d; ++e) outermost &= dims[e] == 1;
    if (outermost) {
      out[d] = rest;  // the remaining quotient is already below dims[d]
      break;
    }
    out[d] = b_.CreateURem(rest, kc_.Index(dims[d]));
    rest = b_.CreateUDiv(rest, kc_.Index(dims[d]));
    quotients[d] = rest;
  }
  for (auto& v : out) {
    if (v == nullptr) v = kc_.Index(0);
  }
  delin_[key] = out;
  // Linearize of a leading part of these indices (an operand broadcast along the trailing
  // dimensions: a row's scale over its columns) is then that quotient, not a product and sum
  // of the parts the optimiser cannot fold back into it.
  for (size_t d = 1; d < dims.size(); ++d) {
    if (quotients[d] == nullptr) continue;
    lin_.emplace(std::make_pair(std::vector<llvm::Value*>(out.begin(), out.begin() + d),
                                std::vector<int64_t>(dims.begin(), dims.begin() + d)),
                 quotients[d]);
  }
  return out;
}

llvm::Value* ElementalEmitter::Linearize(const std::vector<llvm::Value*>& idx,
                                         const std::vector<int64_t>& dims) {
  // One value per index in a scope: a reshape's operand is then memoised under the same
  // linear index by EmitLoads and by Emit. So is every leading part of the index (the
  // linear index of its first dimensions in a space of theirs), so that indices differing
  // only in their last coordinate, the lanes of a vector, share their arithmetic up to it and
  // their distance is visible (index_alignment.h).
  // Whether this index's linear index is made now, not found: only then is the lane's first
  // index below made right after it, where it dominates everything the index does.
  const bool made = !lin_.count({idx, dims});
  std::pair<std::vector<llvm::Value*>, std::vector<int64_t>> key;
  llvm::Value* lin = nullptr;
  for (size_t d = 0; d < dims.size(); ++d) {
    key.first.push_back(idx[d]);
    key.second.push_back(dims[d]);
    if (dims[d] == 1) continue;  // its index is 0 and it adds nothing to the stride
    if (auto it = lin_.find(key); it != lin_.end()) {
      lin = it->second;
      continue;
    }
    lin = lin ? AddLast(key, lin) : idx[d];
    lin_[key] = lin;
  }
  if (lin == nullptr) lin = kc_.Index(0);
  lin_[key] = lin;
  // The first lane's coordinate is a multiple of the width, so where the width divides this
  // space's innermost size, the first lane's linear index is a multiple of it too: this index
  // is a lane of that one, whose delinearisation (an operand broadcast along its trailing
  // dimensions) the later lanes then share.
  if (auto coordinate = lane_coordinates_.find(idx.empty() ? nullptr : idx.back());
      made && coordinate != lane_coordinates_.end() &&
      dims.back() % coordinate->second.width == 0 && !lanes_.count(lin)) {
    std::vector<llvm::Value*> first = idx;
    first.back() = coordinate->second.first;
    lanes_[lin] = Lane{Linearize(first, dims), coordinate->second.offset, coordinate->second.width};
  }
  return lin;
}

llvm::Value* ElementalEmitter::AddLast(
    const std::pair<std::vector<llvm::Value*>, std::vector<int64_t>>& key, llvm::Value* leading) {
  llvm::Value* scaled = Scaled(key, leading);
  llvm::Value* last = key.first.back();
  // A last coordinate that is another plus a constant (a vector's later lane) adds the
  // constant last, to the other's linear index: the optimiser then has nothing to
  // reassociate, keeps the add's no-wrap flags, and so still sees the lanes' addresses as
  // one base plus constant offsets, which its load/store vectorizer merges.
  const auto* add = llvm::dyn_cast<llvm::BinaryOperator>(last);
  if (lane_offsets_last_ && key.first.size() == key.second.size() && add != nullptr &&
      add->getOpcode() == llvm::Instruction::Add && add->hasNoSignedWrap() &&
      add->hasNoUnsignedWrap() && llvm::isa<llvm::ConstantInt>(add->getOperand(1))) {
    auto base_key = key;
    base_key.first.back() = add->getOperand(0);
    llvm::Value* base = nullptr;
    if (auto it = lin_.find(base_key); it != lin_.end()) {
      base = it->second;
    } else {
      base = b_.CreateAdd(scaled, add->getOperand(0), "", true, true);
      lin_[base_key] = base;
    }
    return b_.CreateAdd(base, add->getOperand(1), "", true, true);
  }
  return b_.CreateAdd(scaled, last, "", true, true);
}

llvm::Value* ElementalEmitter::Scaled(
    const std::pair<std::vector<llvm::Value*>, std::vector<int64_t>>& key, llvm::Value* leading) {
  // Keyed by the leading coordinates and every size through the last: one key longer in
  // sizes than in coordinates, which no linear index's key is.
  auto scaled_key = key;
  scaled_key.first.pop_back();
  if (auto it = lin_.find(scaled_key); it != lin_.end()) return it->second;
  llvm::Value* scaled = b_.CreateMul(leading, kc_.Index(key.second.back()), "", true, true);
  lin_[scaled_key] = scaled;
  return scaled;
}

const std::vector<llvm::Value*>& ElementalEmitter::DimsOf(IrIndex& index,
                                                          const std::vector<int64_t>& shape) {
  if (index.dims.size() != shape.size()) index.dims = Delinearize(index.linear, shape);
  return index.dims;
}

llvm::Value* ElementalEmitter::LinearOf(const IrIndex& index, const std::vector<int64_t>& shape) {
  return index.linear ? index.linear : Linearize(index.dims, shape);
}

ElementalEmitter::Key ElementalEmitter::KeyOf(int node, const IrIndex& index) const {
  if (index.linear) return Key{node, index.linear, {}};
  return Key{node, nullptr, index.dims};
}

IrIndex ElementalEmitter::Normalize(int node, const IrIndex& index) {
  if (kc_.graph.nodes[node].shape.rank() == 0) return IrIndex{{}, kc_.Index(0)};
  return index;
}

Status ElementalEmitter::CheckNode(int id) const {
  const Graph& g = kc_.graph;
  if (id < 0 || id >= static_cast<int>(g.nodes.size())) {
    return InvalidArgument("operand index " + std::to_string(id) + " is out of range");
  }
  const Node& n = g.nodes[id];
  int arity = Arity(n.op);
  if ((arity >= 0 && static_cast<int>(n.operands.size()) != arity) ||
      (arity < 0 && n.operands.empty())) {
    return InvalidArgument(DescribeNode(g, id) + " has " + std::to_string(n.operands.size()) +
                           " operands");
  }
  for (int o : n.operands) {
    if (o < 0 || o >= static_cast<int>(g.nodes.size())) {
      return InvalidArgument(DescribeNode(g, id) + " has an out-of-range operand " +
                             std::to_string(o));
    }
  }
  if (!in_kernel_.count(id) && n.op != OpCode::kConstant && n.op != OpCode::kIota) {
    return InvalidArgument(DescribeNode(g, id) + " is used by kernel " + kc_.spec.name +
                           " but is neither one of its nodes nor one of its inputs");
  }
  return Status::Ok();
}

llvm::Value* ElementalEmitter::Clamp(llvm::Value* v, int64_t hi) {
  llvm::Value* lo_ok = b_.CreateICmpSGT(v, kc_.Index(0));
  v = b_.CreateSelect(lo_ok, v, kc_.Index(0));
  llvm::Value* hi_ok = b_.CreateICmpSLT(v, kc_.Index(hi));
  return b_.CreateSelect(hi_ok, v, kc_.Index(hi));
}

Status ElementalEmitter::PrepareOperands(Frame& f) {
  const Node& n = kc_.graph.nodes[f.node];
  f.operand_index.clear();
  switch (ClassOf(n.op)) {
    case OpClass::kLeaf:
      return Status::Ok();
    case OpClass::kReduce:
      return Unimplemented(DescribeNode(kc_.graph, f.node) +
                           " is a reduce that is not the hero of kernel " + kc_.spec.name +
                           "; it must be materialised by an earlier kernel");
    case OpClass::kRng:
      f.operand_index.push_back(IrIndex{{}, kc_.Index(0)});
      return Status::Ok();
    case OpClass::kElementwise:
      return ElementwiseOperands(f);
    case OpClass::kDataMovement:
      break;
  }
  switch (n.op) {
    case OpCode::kReshape:
      return ReshapeOperand(f);
    case OpCode::kBroadcast:
      return BroadcastOperand(f);
    case OpCode::kTranspose:
      return TransposeOperand(f);
    case OpCode::kSlice:
      return SliceOperand(f);
    case OpCode::kReverse:
      return ReverseOperand(f);
    case OpCode::kConcatenate:
      return ConcatenateOperands(f);
    case OpCode::kPad:
      return PadOperands(f);
    default:
      return Unimplemented(DescribeNode(kc_.graph, f.node) +
                           " is not supported by the elemental emitter");
  }
}

Status ElementalEmitter::Malformed(const Frame& f, const std::string& what) const {
  return InvalidArgument(DescribeNode(kc_.graph, f.node) + ": " + what);
}

const std::vector<int64_t>& ElementalEmitter::OperandDims(const Frame& f, size_t i) const {
  const Graph& g = kc_.graph;
  return g.nodes[g.nodes[f.node].operands[i]].shape.dims;
}

// A scalar operand is read at 0; any other must have the node's shape.
Status ElementalEmitter::ElementwiseOperands(Frame& f) {
  const Node& n = kc_.graph.nodes[f.node];
  for (size_t i = 0; i < n.operands.size(); ++i) {
    if (OperandDims(f, i).empty()) {
      f.operand_index.push_back(IrIndex{{}, kc_.Index(0)});
    } else if (OperandDims(f, i) != n.shape.dims) {
      return Malformed(f, "operand " + std::to_string(i) + " has a different shape");
    } else {
      f.operand_index.push_back(f.index);
    }
  }
  return Status::Ok();
}

// A reshape keeps the element's linear index. Where the index's coordinates are known and the
// operand shares its trailing dimensions with the reshape, those and the leading dimensions
// they share keep their coordinates, and only the dimensions between are delinearised again, from
// the linear index of the reshape's coordinates there: an operand broadcast along the images and
// channels of a tensor whose pixels are merged, `[N, H, W, C]` as `[N, H·W, C]`, then reads the
// image and the channel the kernel already has (loop-invariant in a column reduction over the
// pixels), not quotients and remainders of the element's linear index.
Status ElementalEmitter::ReshapeOperand(Frame& f) {
  const std::vector<int64_t>& out = kc_.graph.nodes[f.node].shape.dims;
  const std::vector<int64_t>& in = OperandDims(f, 0);
  IrIndex k{{}, LinearOf(f.index, out)};
  const auto shared = static_cast<int64_t>(std::min(in.size(), out.size()));
  int64_t suffix = 0;
  while (suffix < shared && in.rbegin()[suffix] == out.rbegin()[suffix]) ++suffix;
  // Only where trailing dimensions are shared: the others keep the code the GPU measured.
  if (f.index.dims.size() != out.size() || suffix == 0) {
    f.operand_index.push_back(k);
    return Status::Ok();
  }
  int64_t prefix = 0;
  while (prefix + suffix < shared && in[prefix] == out[prefix]) ++prefix;
  const auto& coords = f.index.dims;
  const std::vector<int64_t> in_middle(in.begin() + prefix, in.end() - suffix);
  k.dims.assign(coords.begin(), coords.begin() + prefix);
  if (!in_middle.empty()) {
    const std::vector<llvm::Value*> middle =
        Delinearize(Linearize({coords.begin() + prefix, coords.end() - suffix},
                              {out.begin() + prefix, out.end() - suffix}),
                    in_middle);
    k.dims.insert(k.dims.end(), middle.begin(), middle.end());
  }
  k.dims.insert(k.dims.end(), coords.end() - suffix, coords.end());
  f.operand_index.push_back(k);
  return Status::Ok();
}

// The operand's coordinates are the output's along the kept dimensions, 0 along its own
// dimensions of size 1.
Status ElementalEmitter::BroadcastOperand(Frame& f) {
  const Node& n = kc_.graph.nodes[f.node];
  const std::vector<int64_t>& in = OperandDims(f, 0);
  if (n.dimensions.size() != in.size()) return Malformed(f, "dimensions do not match the operand");
  const auto& j = DimsOf(f.index, n.shape.dims);
  IrIndex k;
  for (size_t i = 0; i < in.size(); ++i) {
    const int64_t d = n.dimensions[i];
    if (d < 0 || d >= n.shape.rank()) return Malformed(f, "broadcast dimension out of range");
    k.dims.push_back(in[i] == 1 ? kc_.Index(0) : j[d]);
  }
  if (in.empty()) k.linear = kc_.Index(0);
  f.operand_index.push_back(k);
  return Status::Ok();
}

Status ElementalEmitter::TransposeOperand(Frame& f) {
  const Node& n = kc_.graph.nodes[f.node];
  const int rank = n.shape.rank();
  if (static_cast<int>(n.dimensions.size()) != rank) return Malformed(f, "bad permutation");
  const auto& j = DimsOf(f.index, n.shape.dims);
  IrIndex k;
  k.dims.assign(rank, nullptr);
  for (int i = 0; i < rank; ++i) {
    const int64_t d = n.dimensions[i];
    if (d < 0 || d >= rank || k.dims[d]) return Malformed(f, "bad permutation");
    k.dims[d] = j[i];
  }
  f.operand_index.push_back(k);
  return Status::Ok();
}

Status ElementalEmitter::SliceOperand(Frame& f) {
  const Node& n = kc_.graph.nodes[f.node];
  const int rank = n.shape.rank();
  if (static_cast<int>(n.slice_starts.size()) != rank ||
      static_cast<int>(n.slice_strides.size()) != rank) {
    return Malformed(f, "slice attributes do not match the rank");
  }
  const auto& j = DimsOf(f.index, n.shape.dims);
  IrIndex k;
  for (int i = 0; i < rank; ++i) {
    llvm::Value* v = j[i];
    if (n.slice_strides[i] != 1) v = b_.CreateMul(v, kc_.Index(n.slice_strides[i]), "", true, true);
    if (n.slice_starts[i] != 0) v = b_.CreateAdd(v, kc_.Index(n.slice_starts[i]), "", true, true);
    k.dims.push_back(v);
  }
  f.operand_index.push_back(k);
  return Status::Ok();
}

Status ElementalEmitter::ReverseOperand(Frame& f) {
  const Node& n = kc_.graph.nodes[f.node];
  const std::vector<int64_t>& out_dims = n.shape.dims;
  const auto& j = DimsOf(f.index, out_dims);
  IrIndex k{j, nullptr};
  for (int64_t d : n.dimensions) {
    if (d < 0 || d >= n.shape.rank()) return Malformed(f, "reverse dimension out of range");
    k.dims[d] = b_.CreateSub(kc_.Index(out_dims[d] - 1), j[d]);
  }
  f.operand_index.push_back(k);
  return Status::Ok();
}

// One index per operand, each at the output's coordinate less the operands before it along the
// concatenated dimension. Every operand is read (the result is a select), so each read is kept
// in bounds.
Status ElementalEmitter::ConcatenateOperands(Frame& f) {
  const Node& n = kc_.graph.nodes[f.node];
  const int rank = n.shape.rank();
  if (n.dimensions.size() != 1 || n.dimensions[0] < 0 || n.dimensions[0] >= rank) {
    return Malformed(f, "concatenate needs one valid dimension");
  }
  const int64_t cd = n.dimensions[0];
  const auto& j = DimsOf(f.index, n.shape.dims);
  int64_t offset = 0;
  for (size_t i = 0; i < n.operands.size(); ++i) {
    const std::vector<int64_t>& in = OperandDims(f, i);
    if (static_cast<int>(in.size()) != rank) return Malformed(f, "operand rank differs");
    IrIndex k{j, nullptr};
    k.dims[cd] = Clamp(b_.CreateSub(j[cd], kc_.Index(offset)), std::max<int64_t>(in[cd] - 1, 0));
    f.operand_index.push_back(k);
    offset += in[cd];
  }
  return Status::Ok();
}

// The operand's index (clamped in bounds) and the pad value's; f.aux holds whether the output
// element falls on an operand element, past the low padding and on the interior stride.
Status ElementalEmitter::PadOperands(Frame& f) {
  const Node& n = kc_.graph.nodes[f.node];
  const int rank = n.shape.rank();
  const std::vector<int64_t>& in = OperandDims(f, 0);
  if (static_cast<int>(in.size()) != rank || static_cast<int>(n.pad_low.size()) != rank ||
      static_cast<int>(n.pad_interior.size()) != rank) {
    return Malformed(f, "pad attributes do not match the rank");
  }
  const auto& j = DimsOf(f.index, n.shape.dims);
  IrIndex k;
  llvm::Value* inside = b_.getTrue();
  for (int i = 0; i < rank; ++i) {
    llvm::Value* t = b_.CreateSub(j[i], kc_.Index(n.pad_low[i]));
    llvm::Value* q = t;
    llvm::Value* ok = b_.CreateICmpSGE(t, kc_.Index(0));
    if (n.pad_interior[i] > 0) {
      llvm::Value* step = kc_.Index(n.pad_interior[i] + 1);
      llvm::Value* tc = b_.CreateSelect(ok, t, kc_.Index(0));
      q = b_.CreateUDiv(tc, step);
      ok = b_.CreateAnd(ok, b_.CreateICmpEQ(b_.CreateURem(tc, step), kc_.Index(0)));
    }
    ok = b_.CreateAnd(ok, b_.CreateICmpSLT(q, kc_.Index(in[i])));
    inside = b_.CreateAnd(inside, ok);
    k.dims.push_back(Clamp(q, std::max<int64_t>(in[i] - 1, 0)));
  }
  f.aux = inside;
  f.operand_index.push_back(k);
  f.operand_index.push_back(IrIndex{{}, kc_.Index(0)});
  return Status::Ok();
}

StatusOr<llvm::Value*> ElementalEmitter::Emit(int root, const IrIndex& root_index) {
  if (root < 0 || root >= static_cast<int>(kc_.graph.nodes.size())) {
    return InvalidArgument("kernel " + kc_.spec.name + " refers to node " + std::to_string(root) +
                           ", which is out of range");
  }
  std::vector<Frame> stack;
  stack.push_back(MakeFrame(root, Normalize(root, root_index)));
  const Key root_key = KeyOf(root, stack.back().index);
  while (!stack.empty()) {
    if (stack.size() > max_stack_) {
      return InvalidArgument("the graph has a cycle through " + DescribeNode(kc_.graph, root));
    }
    Frame& f = stack.back();
    Key key = KeyOf(f.node, f.index);
    if (memo_.count(key)) {
      stack.pop_back();
      continue;
    }
    if (llvm::Value* pinned = PinnedValue(f.node, f.index)) {
      memo_[key] = pinned;
      stack.pop_back();
      continue;
    }
    if (auto stored = stored_.find(key); stored != stored_.end()) {
      memo_[key] = Widened(stored->second);
      stored_.erase(stored);
      stack.pop_back();
      continue;
    }
    auto buf = kc_.buffers.find(f.node);
    if (buf != kc_.buffers.end()) {
      LoadInput(f.node, f.index, buf->second);
      stack.pop_back();
      continue;
    }
    if (!f.expanded) {
      STITCH_RETURN_IF_ERROR(CheckNode(f.node));
      STITCH_RETURN_IF_ERROR(PrepareOperands(f));
      f.expanded = true;
      const Node& n = kc_.graph.nodes[f.node];
      std::vector<Frame> pending;
      for (size_t i = 0; i < f.operand_index.size(); ++i) {
        IrIndex oi = Normalize(n.operands[i], f.operand_index[i]);
        f.operand_index[i] = oi;
        if (!memo_.count(KeyOf(n.operands[i], oi))) pending.push_back(MakeFrame(n.operands[i], oi));
      }
      for (auto& p : pending) stack.push_back(std::move(p));  // may invalidate `f`
      continue;
    }
    STITCH_ASSIGN_OR_RETURN(llvm::Value * v, Compute(f));
    memo_[key] = v;
    stack.pop_back();
  }
  return memo_.at(root_key);
}

void ElementalEmitter::LoadInput(int node, const IrIndex& index, llvm::Value* buffer) {
  const Shape& s = kc_.graph.nodes[node].shape;
  memo_[KeyOf(node, index)] = LoadElement(b_, s.dtype, buffer, LinearOf(index, s.dims));
}

void ElementalEmitter::EmitLoads(const std::vector<int>& nodes,
                                 const std::vector<llvm::Value*>& linears, Widening widening) {
  std::vector<Frame> stack;
  // Pushed in reverse, so that the first lane's loads are emitted first.
  for (auto linear = linears.rbegin(); linear != linears.rend(); ++linear) {
    for (auto node = nodes.rbegin(); node != nodes.rend(); ++node) {
      if (*node < 0 || *node >= static_cast<int>(kc_.graph.nodes.size())) continue;
      stack.push_back(MakeFrame(*node, Normalize(*node, IrIndex{{}, *linear})));
    }
  }
  std::set<Key> seen;
  std::vector<std::pair<int, IrIndex>> inputs;  // the buffer elements to load, in order
  // Each node is expanded once per distinct index, as Emit does; the bound only stops a
  // malformed (cyclic) graph, which Emit then reports.
  const size_t max_visits = max_stack_ * 4 * std::max<size_t>(linears.size(), 1);
  while (!stack.empty() && seen.size() < max_visits) {
    Frame f = std::move(stack.back());
    stack.pop_back();
    const Key key = KeyOf(f.node, f.index);
    if (memo_.count(key) || stored_.count(key) || !seen.insert(key).second) continue;
    if (pinned_any_.count(f.node) || (f.index.linear && pinned_.count({f.node, f.index.linear}))) {
      continue;
    }
    if (kc_.buffers.count(f.node)) {
      inputs.emplace_back(f.node, f.index);
      continue;
    }
    const OpClass c = ClassOf(kc_.graph.nodes[f.node].op);
    if (c != OpClass::kElementwise && c != OpClass::kDataMovement) continue;
    if (!CheckNode(f.node).ok() || !PrepareOperands(f).ok()) continue;
    const Node& n = kc_.graph.nodes[f.node];
    for (size_t i = 0; i < f.operand_index.size(); ++i) {
      stack.push_back(MakeFrame(n.operands[i], Normalize(n.operands[i], f.operand_index[i])));
    }
  }
  LoadInputs(inputs, widening);
}

namespace {

// Whether ComputeElementwise computes node `id` with a math library function of more than one
// instruction (every CallMath but rsqrt, fast_fdivide and fast_exp). f64 is never approximate.
bool CallsMathFunction(const Graph& g, int id, bool approximate) {
  const Node& n = g.nodes[id];
  if (n.operands.empty()) return false;
  const DType t = g.nodes[n.operands[0]].shape.dtype;
  if (!IsFloat(t)) return false;
  switch (n.op) {
    case OpCode::kLog:
    case OpCode::kLog1p:
    case OpCode::kExpm1:
    case OpCode::kSin:
    case OpCode::kCos:
    case OpCode::kTan:
    case OpCode::kCbrt:
    case OpCode::kPow:
    case OpCode::kAtan2:
    case OpCode::kRem:
      return true;
    case OpCode::kExp:
    case OpCode::kLogistic:
    case OpCode::kErf:
    case OpCode::kTanh:
      return t == DType::kF64 || !approximate;
    default:
      return false;
  }
}

}  // namespace

bool ElementalEmitter::CallsMathLibrary(const std::vector<int>& nodes) const {
  std::vector<int> stack = nodes;
  std::set<int> seen;
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    if (id < 0 || id >= static_cast<int>(kc_.graph.nodes.size()) || !seen.insert(id).second ||
        kc_.buffers.count(id) || pinned_any_.count(id)) {
      continue;
    }
    const Node& n = kc_.graph.nodes[id];
    const OpClass c = ClassOf(n.op);
    if (c != OpClass::kElementwise && c != OpClass::kDataMovement) continue;
    if (CallsMathFunction(kc_.graph, id, kc_.ApproximateMath(id))) return true;
    stack.insert(stack.end(), n.operands.begin(), n.operands.end());
  }
  return false;
}

void ElementalEmitter::LoadInputs(const std::vector<std::pair<int, IrIndex>>& inputs,
                                  Widening widening) {
  // Only sub-word elements can be part of a vector loaded as words; the others keep their
  // index arithmetic next to their load.
  std::vector<ElementAccess> accesses;
  for (const auto& [node, index] : inputs) {
    const Shape& s = kc_.graph.nodes[node].shape;
    accesses.push_back({s.dtype, kc_.buffers.at(node),
                        AccessedAsWords(kc_.ctx, s.dtype) ? LinearOf(index, s.dims) : nullptr});
  }
  const std::map<size_t, std::vector<size_t>> vectors = PackedVectors(b_, accesses);
  std::vector<bool> in_vector(inputs.size(), false);
  for (const auto& [earliest, lanes] : vectors) {
    for (size_t k : lanes) in_vector[k] = true;
  }
  const auto keep = [&](size_t i, llvm::Value* value, int64_t lane) {
    const auto& [node, index] = inputs[i];
    const Stored stored{accesses[i].dtype, value, lane};
    if (widening == Widening::kAtFirstUse) {
      stored_[KeyOf(node, index)] = stored;
    } else {
      memo_[KeyOf(node, index)] = Widened(stored);
    }
  };
  // Elements loaded alone, per buffer: their indices and addresses (SetLaneAddressesFromFirst).
  std::map<llvm::Value*, std::vector<std::pair<llvm::Value*, llvm::Value*>>> alone;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ElementAccess& a = accesses[i];
    if (auto v = vectors.find(i); v != vectors.end()) {
      llvm::Value* words =
          LoadPackedWords(b_, a.dtype, a.base, accesses[v->second[0]].index, v->second.size());
      for (size_t k = 0; k < v->second.size(); ++k) {
        keep(v->second[k], words, static_cast<int64_t>(k));
      }
    } else if (!in_vector[i]) {
      const auto& [node, index] = inputs[i];
      const Shape& s = kc_.graph.nodes[node].shape;
      llvm::Value* at = a.index == nullptr ? LinearOf(index, s.dims) : a.index;
      llvm::Value* address =
          lane_addresses_from_first_ ? AddressAfter(alone[a.base], a.dtype, at) : nullptr;
      if (address == nullptr) {
        address = b_.CreateInBoundsGEP(StorageType(kc_.ctx, a.dtype), a.base, at);
      }
      if (lane_addresses_from_first_) alone[a.base].emplace_back(at, address);
      keep(i, LoadStored(b_, a.dtype, a.base, at, address), -1);
    }
  }
}

llvm::Value* ElementalEmitter::AddressAfter(
    const std::vector<std::pair<llvm::Value*, llvm::Value*>>& loaded, DType dtype,
    llvm::Value* index) {
  llvm::Type* st = StorageType(kc_.ctx, dtype);
  const int64_t widest = kMaxVectorBytes / std::max<int64_t>(DTypeBytes(dtype), 1);
  for (const auto& [earlier, address] : loaded) {
    const std::optional<int64_t> d = ConstantDistance(index, earlier);
    if (d && *d > 0 && *d < widest) {
      return b_.CreateInBoundsGEP(st, address, kc_.Index(*d));
    }
  }
  return nullptr;
}

llvm::Value* ElementalEmitter::Widened(const Stored& stored) {
  llvm::Value* value = stored.lane < 0 ? stored.value
                                       : PackedLane(b_, stored.dtype, stored.value,
                                                    static_cast<size_t>(stored.lane));
  return WidenStored(b_, stored.dtype, value);
}

llvm::Value* ElementalEmitter::ExpOf(int node, llvm::Value* x) {
  const bool approximate = x->getType()->isFloatTy() && kc_.ApproximateMath(node);
  return CallMath(approximate ? "fast_exp" : "exp", {x});
}

llvm::Value* ElementalEmitter::TanhOf(int node, llvm::Value* x) {
  if (!x->getType()->isFloatTy() || !kc_.ApproximateMath(node)) return CallMath("tanh", {x});
  llvm::Type* ty = x->getType();
  llvm::Value* ax = b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
  llvm::Value* e = CallMath("fast_exp", {b_.CreateFMul(ax, llvm::ConstantFP::get(ty, 2.0))});
  llvm::Value* q = CallMath("fast_fdivide", {llvm::ConstantFP::get(ty, 2.0),
                                             b_.CreateFAdd(llvm::ConstantFP::get(ty, 1.0), e)});
  llvm::Value* magnitude = b_.CreateFSub(llvm::ConstantFP::get(ty, 1.0), q);
  // x's sign on the magnitude's bits: one LOP3, where NVPTX lowers llvm.copysign to six
  // instructions. The magnitude's own sign bit is cleared: at the division's bound, 1 - q is
  // -2^-22 for x = 0.
  llvm::Type* i32 = b_.getInt32Ty();
  llvm::Value* bits = b_.CreateOr(b_.CreateAnd(b_.CreateBitCast(magnitude, i32), 0x7fffffff),
                                  b_.CreateAnd(b_.CreateBitCast(x, i32), 0x80000000));
  return b_.CreateBitCast(bits, ty);
}

llvm::Value* ElementalEmitter::ErfOf(int node, llvm::Value* x) {
  if (!x->getType()->isFloatTy() || !kc_.ApproximateMath(node)) return CallMath("erf", {x});
  const ErfQuotient q = EmitErfQuotientF32(b_, x);
  return CallMath("fast_fdivide", {q.numerator, q.denominator});
}

std::pair<llvm::Value*, llvm::Value*> ElementalEmitter::RngBlockOf(llvm::Value* k) {
  static_assert(kRngUniformWordsPerBlock == 4, "blocks of four words");
  llvm::Value* first = k;
  int64_t offset = 0;
  int64_t width = 1;
  if (auto lane = lanes_.find(k); lane != lanes_.end()) {
    first = lane->second.first;
    offset = lane->second.offset;
    width = lane->second.width;
  } else if (auto start = vector_starts_.find(k); start != vector_starts_.end()) {
    width = start->second;
  }
  llvm::Value* block;
  llvm::Value* word;
  if (width % 4 == 0) {
    block = b_.CreateAdd(b_.CreateLShr(first, 2), kc_.Index(offset / 4));
    word = b_.getInt32(static_cast<uint32_t>(offset % 4));
  } else {
    block = b_.CreateLShr(k, 2);
    word = b_.CreateTrunc(b_.CreateAnd(k, kc_.Index(3)), b_.getInt32Ty());
  }
  return {b_.CreateZExtOrTrunc(block, b_.getInt64Ty()), word};
}

llvm::Value* ElementalEmitter::Trig(TrigFunction fn, const char* libdevice_name, llvm::Value* x) {
  return x->getType()->isFloatTy() ? EmitF32Trig(b_, fn, x) : CallMath(libdevice_name, {x});
}

llvm::Value* ElementalEmitter::CallMath(const char* name, const std::vector<llvm::Value*>& args) {
  llvm::Type* ty = args[0]->getType();
  std::string full = std::string("__nv_") + name + (ty->isFloatTy() ? "f" : "");
  std::vector<llvm::Type*> params(args.size(), ty);
  auto callee = kc_.module.getOrInsertFunction(full, llvm::FunctionType::get(ty, params, false));
  if (auto* fn = llvm::dyn_cast<llvm::Function>(callee.getCallee())) {
    // Pure and always returning, as libdevice's definitions are: a loop's loads after the call
    // are then known to run whenever the loop does, so LLVM may hoist them. NVPTX inlines the
    // definitions first; the emulator's host copy calls these declarations.
    fn->setDoesNotAccessMemory();
    fn->setDoesNotThrow();
    fn->setWillReturn();
    fn->addFnAttr(llvm::Attribute::NoSync);
    fn->addFnAttr(llvm::Attribute::NoFree);
  }
  return b_.CreateCall(callee, args);
}

llvm::Value* ElementalEmitter::ComputeConstant(int id, const IrIndex& index) {
  const Node& n = kc_.graph.nodes[id];
  const DType t = n.shape.dtype;
  const bool is_float = IsFloat(t);
  const size_t count = n.literal.size();
  auto element = [&](size_t i) -> llvm::Constant* {
    return is_float ? FloatConstant(kc_.ctx, t, n.literal.f[i])
                    : IntConstant(kc_.ctx, t, n.literal.i[i]);
  };
  if (count == 0) return llvm::Constant::getNullValue(ComputeType(kc_.ctx, t));
  if (count == 1 || n.shape.rank() == 0) return element(0);
  bool splat = true;
  for (size_t i = 1; i < count && splat; ++i) {
    splat = is_float ? n.literal.f[i] == n.literal.f[0] : n.literal.i[i] == n.literal.i[0];
  }
  if (splat) return element(0);
  auto it = constant_arrays_.find(id);
  llvm::Type* elem_ty =
      t == DType::kPred ? llvm::Type::getInt8Ty(kc_.ctx) : ComputeType(kc_.ctx, t);
  if (it == constant_arrays_.end()) {
    std::vector<llvm::Constant*> values;
    values.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      llvm::Constant* c = element(i);
      if (t == DType::kPred) c = llvm::ConstantInt::get(elem_ty, n.literal.i[i] != 0 ? 1 : 0);
      values.push_back(c);
    }
    auto* arr_ty = llvm::ArrayType::get(elem_ty, count);
    auto* gv = new llvm::GlobalVariable(
        kc_.module, arr_ty, /*isConstant=*/true, llvm::GlobalValue::PrivateLinkage,
        llvm::ConstantArray::get(arr_ty, values), "constant." + std::to_string(id));
    gv->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
    it = constant_arrays_.emplace(id, gv).first;
  }
  llvm::Value* lin = LinearOf(index, n.shape.dims);
  llvm::Value* v = b_.CreateLoad(elem_ty, b_.CreateInBoundsGEP(elem_ty, it->second, lin));
  if (t == DType::kPred) v = b_.CreateICmpNE(v, b_.getInt8(0));
  return v;
}

StatusOr<llvm::Value*> ElementalEmitter::Compute(Frame& f) {
  const Graph& g = kc_.graph;
  const Node& n = g.nodes[f.node];
  std::vector<llvm::Value*> ops;
  for (size_t i = 0; i < n.operands.size(); ++i) {
    ops.push_back(memo_.at(KeyOf(n.operands[i], f.operand_index[i])));
  }
  const DType t = n.shape.dtype;
  switch (n.op) {
    case OpCode::kParameter:
      return InvalidArgument(DescribeNode(g, f.node) +
                             " is a parameter that is not an input of kernel " + kc_.spec.name);
    case OpCode::kConstant:
      if (!n.literal.f.empty() && !IsFloat(t))
        return InvalidArgument(DescribeNode(g, f.node) + ": float literal for an integer dtype");
      if (n.literal.size() > 1 && n.literal.size() != static_cast<size_t>(n.shape.elements())) {
        return InvalidArgument(DescribeNode(g, f.node) + ": literal size does not match the shape");
      }
      if (IsFloat(t) && n.literal.f.empty() && !n.literal.i.empty()) {
        return InvalidArgument(DescribeNode(g, f.node) + ": integer literal for a float dtype");
      }
      return ComputeConstant(f.node, f.index);
    case OpCode::kIota: {
      if (n.dimensions.size() != 1 || n.dimensions[0] < 0 || n.dimensions[0] >= n.shape.rank()) {
        return InvalidArgument(DescribeNode(g, f.node) + ": iota needs one valid dimension");
      }
      llvm::Value* j = DimsOf(f.index, n.shape.dims)[n.dimensions[0]];
      return ConvertValue(b_, b_.CreateSExtOrTrunc(j, b_.getInt64Ty()), DType::kS64, t);
    }
    case OpCode::kRngUniform: {
      if (!IsFloat(t))
        return InvalidArgument(DescribeNode(g, f.node) + ": rng-uniform must be a float");
      llvm::Value* seed = ops[0];
      if (!seed->getType()->isIntegerTy(64)) {
        return InvalidArgument(DescribeNode(g, f.node) + ": the seed must be a u64 scalar");
      }
      auto [block, word] = RngBlockOf(LinearOf(f.index, n.shape.dims));
      llvm::Value* w =
          EmitPhiloxWord(b_, seed, block, word, static_cast<uint32_t>(n.rng_stream & 0xffffffffu));
      // 24 random bits times 2^-24 are exact in f32, so no f64 instruction is needed for any
      // float dtype (RoundFloatTo rounds f16 and bf16 from the exact value, widens for f64).
      llvm::Value* u = b_.CreateUIToFP(b_.CreateLShr(w, 8), b_.getFloatTy());
      u = b_.CreateFMul(u, llvm::ConstantFP::get(b_.getFloatTy(), 1.0 / 16777216.0));
      return RoundFloatTo(b_, u, t);
    }
    case OpCode::kPad:
      return b_.CreateSelect(f.aux, ops[0], ops[1]);
    case OpCode::kConcatenate: {
      const int64_t cd = n.dimensions[0];
      llvm::Value* j = DimsOf(f.index, n.shape.dims)[cd];
      llvm::Value* result = ops.back();
      int64_t end = n.shape.dims[cd];
      for (int i = static_cast<int>(ops.size()) - 1; i > 0; --i) {
        end -= g.nodes[n.operands[i]].shape.dims[cd];
        result = b_.CreateSelect(b_.CreateICmpSLT(j, kc_.Index(end)), ops[i - 1], result);
      }
      return result;
    }
    case OpCode::kBroadcast:
    case OpCode::kReshape:
    case OpCode::kTranspose:
    case OpCode::kSlice:
    case OpCode::kReverse:
      if (g.nodes[n.operands[0]].shape.dtype != t) {
        return InvalidArgument(DescribeNode(g, f.node) + ": dtype differs from the operand's");
      }
      return ops[0];
    default:
      break;
  }
  if (ClassOf(n.op) == OpClass::kElementwise) return ComputeElementwise(f.node, ops);
  return Unimplemented(DescribeNode(g, f.node) + " is not supported by the elemental emitter");
}

StatusOr<llvm::Value*> ElementalEmitter::ComputeElementwise(int id,
                                                            const std::vector<llvm::Value*>& ops) {
  const Graph& g = kc_.graph;
  const Node& n = g.nodes[id];
  const DType t = n.shape.dtype;
  // The dtype the op works on: its first non-predicate operand (select's first operand is
  // the predicate; compare's result is pred).
  const int main_operand = n.op == OpCode::kSelect ? 1 : 0;
  const DType in_t = g.nodes[n.operands[main_operand]].shape.dtype;
  const bool fp = IsFloat(in_t);
  const bool is_signed = IsSignedInt(in_t);
  auto unsupported = [&]() {
    return Unimplemented(DescribeNode(g, id) + " is not supported for dtype " +
                         std::string(DTypeName(in_t)));
  };
  // Every operand except select's predicate must have the operand dtype the op expects.
  for (size_t i = 0; i < ops.size(); ++i) {
    if (n.op == OpCode::kSelect && i == 0) {
      if (!ops[0]->getType()->isIntegerTy(1)) {
        return InvalidArgument(DescribeNode(g, id) + ": select needs a pred first operand");
      }
      continue;
    }
    if (ops[i]->getType() != ops[main_operand]->getType()) {
      return InvalidArgument(DescribeNode(g, id) + ": operand dtypes differ");
    }
  }
  llvm::Type* ty = ops[main_operand]->getType();
  llvm::Value* x = ops[0];
  llvm::Value* y = ops.size() > 1 ? ops[1] : nullptr;
  auto fconst = [&](double v) { return llvm::ConstantFP::get(ty, v); };
  auto iconst = [&](int64_t v) { return llvm::ConstantInt::get(ty, static_cast<uint64_t>(v)); };
  auto intrinsic = [&](llvm::Intrinsic::ID iid, std::vector<llvm::Value*> args) -> llvm::Value* {
    return b_.CreateIntrinsic(iid, {ty}, args);
  };
  auto float_only = [&](auto fn) -> StatusOr<llvm::Value*> {
    if (!fp) return unsupported();
    return fn();
  };
  auto int_only = [&](auto fn) -> StatusOr<llvm::Value*> {
    if (fp) return unsupported();
    return fn();
  };
  auto max_of = [&](llvm::Value* a, llvm::Value* c) -> llvm::Value* {
    if (fp) return FloatMax(b_, a, c);
    return b_.CreateSelect(is_signed ? b_.CreateICmpSGT(a, c) : b_.CreateICmpUGT(a, c), a, c);
  };
  auto min_of = [&](llvm::Value* a, llvm::Value* c) -> llvm::Value* {
    if (fp) return FloatMin(b_, a, c);
    return b_.CreateSelect(is_signed ? b_.CreateICmpSLT(a, c) : b_.CreateICmpULT(a, c), a, c);
  };
  const unsigned bits = fp ? 0 : ty->getIntegerBitWidth();
  switch (n.op) {
    case OpCode::kNeg:
      return fp ? b_.CreateFNeg(x) : b_.CreateSub(iconst(0), x);
    case OpCode::kAbs:
      if (fp) return intrinsic(llvm::Intrinsic::fabs, {x});
      if (!is_signed) return x;
      return b_.CreateSelect(b_.CreateICmpSLT(x, iconst(0)), b_.CreateSub(iconst(0), x), x);
    case OpCode::kExp:
      return float_only([&] { return ExpOf(id, x); });
    case OpCode::kLog:
      return float_only([&] { return CallMath("log", {x}); });
    case OpCode::kLog1p:
      return float_only([&] { return CallMath("log1p", {x}); });
    case OpCode::kExpm1:
      return float_only([&] { return CallMath("expm1", {x}); });
    case OpCode::kTanh:
      return float_only([&] { return TanhOf(id, x); });
    case OpCode::kErf:
      return float_only([&] { return ErfOf(id, x); });
    // f32 sine, cosine and tangent are stitch's own (trig.h): libdevice's keep a stack frame.
    case OpCode::kSin:
      return float_only([&] { return Trig(TrigFunction::kSin, "sin", x); });
    case OpCode::kCos:
      return float_only([&] { return Trig(TrigFunction::kCos, "cos", x); });
    case OpCode::kTan:
      return float_only([&] { return Trig(TrigFunction::kTan, "tan", x); });
    case OpCode::kCbrt:
      return float_only([&] { return CallMath("cbrt", {x}); });
    case OpCode::kPow:
      return float_only([&] { return CallMath("pow", {x, y}); });
    case OpCode::kAtan2:
      return float_only([&] { return CallMath("atan2", {x, y}); });
    // Approximate math where SEMANTICS.md's tolerance allows it (f32 compute; division and exp
    // only where CodegenOptions::approximate_math says so): libdevice's __nv_rsqrtf is
    // rsqrt.approx.f32, relative error below 2^-22.9, __nv_fast_fdividef is div.approx.f32, 2
    // ulp for denominators below 2^126 (above, where 1 + e^-x is huge, it gives 0, the logistic's
    // f32 value there), and __nv_fast_expf is ex2.approx.ftz.f32 of x * log2(e) (ExpOf). The
    // exact sequences take an order of magnitude more instructions per element. f64 stays
    // exact.
    case OpCode::kLogistic:
      return float_only([&] {
        llvm::Value* e = ExpOf(id, b_.CreateFNeg(x));
        llvm::Value* d = b_.CreateFAdd(fconst(1.0), e);
        return ty->isFloatTy() && kc_.ApproximateMath(id)
                   ? CallMath("fast_fdivide", {fconst(1.0), d})
                   : b_.CreateFDiv(fconst(1.0), d);
      });
    case OpCode::kSqrt:
      return float_only([&] { return intrinsic(llvm::Intrinsic::sqrt, {x}); });
    case OpCode::kRsqrt:
      return float_only([&] {
        return ty->isFloatTy() ? CallMath("rsqrt", {x})
                               : b_.CreateFDiv(fconst(1.0), intrinsic(llvm::Intrinsic::sqrt, {x}));
      });
    case OpCode::kFloor:
      return float_only([&] { return intrinsic(llvm::Intrinsic::floor, {x}); });
    case OpCode::kCeil:
      return float_only([&] { return intrinsic(llvm::Intrinsic::ceil, {x}); });
    case OpCode::kRound:
      return float_only([&] { return intrinsic(llvm::Intrinsic::round, {x}); });
    case OpCode::kRoundNearestEven:
      return float_only([&] { return intrinsic(llvm::Intrinsic::rint, {x}); });
    case OpCode::kIsFinite:
      return float_only([&]() -> llvm::Value* {
        return b_.CreateFCmpOLT(intrinsic(llvm::Intrinsic::fabs, {x}),
                                llvm::ConstantFP::getInfinity(ty));
      });
    case OpCode::kSign:
      if (fp) {
        llvm::Value* r = b_.CreateSelect(b_.CreateFCmpOLT(x, fconst(0)), fconst(-1), x);
        return b_.CreateSelect(b_.CreateFCmpOGT(x, fconst(0)), fconst(1), r);
      }
      if (!is_signed) return b_.CreateZExt(b_.CreateICmpNE(x, iconst(0)), ty);
      return b_.CreateSub(b_.CreateZExt(b_.CreateICmpSGT(x, iconst(0)), ty),
                          b_.CreateZExt(b_.CreateICmpSLT(x, iconst(0)), ty));
    case OpCode::kNot:
      return int_only([&] { return b_.CreateNot(x); });
    case OpCode::kPopcnt:
      return int_only([&] { return intrinsic(llvm::Intrinsic::ctpop, {x}); });
    case OpCode::kConvert:
      return ConvertValue(b_, x, in_t, t);
    case OpCode::kBitcastConvert: {
      llvm::Value* v = BitcastValue(b_, x, in_t, t);
      if (!v) {
        return InvalidArgument(DescribeNode(g, id) + ": cannot bitcast " +
                               std::string(DTypeName(in_t)) + " to " + std::string(DTypeName(t)));
      }
      return v;
    }
    case OpCode::kAdd:
      return fp ? b_.CreateFAdd(x, y) : b_.CreateAdd(x, y);
    case OpCode::kSub:
      return fp ? b_.CreateFSub(x, y) : b_.CreateSub(x, y);
    case OpCode::kMul:
      return fp ? b_.CreateFMul(x, y) : b_.CreateMul(x, y);
    case OpCode::kDiv:
    case OpCode::kRem: {
      const bool div = n.op == OpCode::kDiv;
      if (fp && div && ty->isFloatTy() && kc_.ApproximateMath(id)) {
        return CallMath("fast_fdivide", {x, y});
      }
      if (fp) return div ? b_.CreateFDiv(x, y) : CallMath("fmod", {x, y});
      // Replace the divisors that would be UB by 1 and patch the results afterwards.
      llvm::Value* zero = b_.CreateICmpEQ(y, iconst(0));
      llvm::Value* overflow = b_.getFalse();
      if (is_signed) {
        llvm::Value* int_min = llvm::ConstantInt::get(ty, llvm::APInt::getSignedMinValue(bits));
        overflow = b_.CreateAnd(b_.CreateICmpEQ(x, int_min), b_.CreateICmpEQ(y, iconst(-1)));
      }
      llvm::Value* safe_y = b_.CreateSelect(b_.CreateOr(zero, overflow), iconst(1), y);
      if (div) {
        llvm::Value* q = is_signed ? b_.CreateSDiv(x, safe_y) : b_.CreateUDiv(x, safe_y);
        // With y replaced by 1, INT_MIN / 1 is already INT_MIN.
        return b_.CreateSelect(zero, iconst(-1), q);
      }
      llvm::Value* r = is_signed ? b_.CreateSRem(x, safe_y) : b_.CreateURem(x, safe_y);
      // x rem 0 = x; INT_MIN rem 1 is already 0.
      return b_.CreateSelect(zero, x, r);
    }
    case OpCode::kMax:
      return max_of(x, y);
    case OpCode::kMin:
      return min_of(x, y);
    case OpCode::kAnd:
      return int_only([&] { return b_.CreateAnd(x, y); });
    case OpCode::kOr:
      return int_only([&] { return b_.CreateOr(x, y); });
    case OpCode::kXor:
      return int_only([&] { return b_.CreateXor(x, y); });
    case OpCode::kShiftLeft:
    case OpCode::kShiftRightLogical:
    case OpCode::kShiftRightArithmetic:
      return int_only([&]() -> llvm::Value* {
        llvm::Value* too_big = b_.CreateICmpUGE(y, iconst(bits));
        llvm::Value* amount = b_.CreateSelect(too_big, iconst(0), y);
        if (n.op == OpCode::kShiftLeft) {
          return b_.CreateSelect(too_big, iconst(0), b_.CreateShl(x, amount));
        }
        if (n.op == OpCode::kShiftRightLogical) {
          return b_.CreateSelect(too_big, iconst(0), b_.CreateLShr(x, amount));
        }
        return b_.CreateAShr(x, b_.CreateSelect(too_big, iconst(bits - 1), amount));
      });
    case OpCode::kCompare: {
      using P = llvm::CmpInst::Predicate;
      P p;
      switch (n.direction) {
        case CompareDirection::kEq:
          p = fp ? P::FCMP_OEQ : P::ICMP_EQ;
          break;
        case CompareDirection::kNe:
          p = fp ? P::FCMP_UNE : P::ICMP_NE;
          break;
        case CompareDirection::kLt:
          p = fp ? P::FCMP_OLT : is_signed ? P::ICMP_SLT : P::ICMP_ULT;
          break;
        case CompareDirection::kLe:
          p = fp ? P::FCMP_OLE : is_signed ? P::ICMP_SLE : P::ICMP_ULE;
          break;
        case CompareDirection::kGt:
          p = fp ? P::FCMP_OGT : is_signed ? P::ICMP_SGT : P::ICMP_UGT;
          break;
        case CompareDirection::kGe:
          p = fp ? P::FCMP_OGE : is_signed ? P::ICMP_SGE : P::ICMP_UGE;
          break;
        default:
          return InvalidArgument(DescribeNode(g, id) + ": unknown compare direction");
      }
      return fp ? b_.CreateFCmp(p, x, y) : b_.CreateICmp(p, x, y);
    }
    case OpCode::kSelect:
      return b_.CreateSelect(x, ops[1], ops[2]);
    case OpCode::kClamp:
      // clamp(lo, x, hi) = min(max(x, lo), hi).
      return min_of(max_of(ops[1], ops[0]), ops[2]);
    default:
      break;
  }
  return Unimplemented(DescribeNode(g, id) + " is not supported by the elemental emitter");
}

}  // namespace stitch::codegen
