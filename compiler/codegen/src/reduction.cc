#include "reduction.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/IntrinsicsNVPTX.h>

#include <algorithm>
#include <optional>

#include "dtype_lowering.h"
#include "grid_barrier.h"
#include "index_alignment.h"
#include "machine_functions.h"
#include "stitch/plan/op_classes.h"

namespace stitch::codegen {

StatusOr<ReduceInfo> MakeReduceInfo(KernelContext& kc, int id) {
  const Graph& g = kc.graph;
  const Node& n = g.nodes[id];
  if (n.op != OpCode::kReduce || n.operands.size() != 2) {
    return InvalidArgument(DescribeNode(g, id) + " needs operands {input, init}");
  }
  for (int o : n.operands) {
    if (o < 0 || o >= static_cast<int>(g.nodes.size())) {
      return InvalidArgument(DescribeNode(g, id) + " has an out-of-range operand");
    }
  }
  ReduceInfo r;
  r.node = id;
  r.input = n.operands[0];
  r.init = n.operands[1];
  r.kind = n.reduce_kind;
  r.dtype = n.shape.dtype;
  r.acc_ty = ComputeType(kc.ctx, r.dtype);
  if (g.nodes[r.input].shape.dtype != r.dtype || g.nodes[r.init].shape.dtype != r.dtype ||
      g.nodes[r.init].shape.rank() != 0) {
    return InvalidArgument(DescribeNode(g, id) +
                           ": input and init must have the result dtype; init is a scalar");
  }
  if (IsFloat(r.dtype) && (r.kind == ReduceKind::kAnd || r.kind == ReduceKind::kOr)) {
    return InvalidArgument(DescribeNode(g, id) + ": and/or reduce of a float");
  }
  if (r.kind < ReduceKind::kSum || r.kind > ReduceKind::kOr) {
    return InvalidArgument(DescribeNode(g, id) + ": unknown combiner");
  }
  return r;
}

namespace {

// The geometry of reduce `hero`: its input's dimensions split into kept and reduced ones,
// checked against its dimensions list and its result shape.
StatusOr<ReduceGeometry> HeroGeometry(const KernelContext& kc, int hero) {
  const Graph& g = kc.graph;
  const Node& h = g.nodes[hero];
  ReduceGeometry geo;
  geo.input_dims = g.nodes[h.operands[0]].shape.dims;
  const int rank = static_cast<int>(geo.input_dims.size());
  std::vector<bool> reduced(rank, false);
  for (int64_t d : h.dimensions) {
    if (d < 0 || d >= rank || reduced[d]) {
      return InvalidArgument(DescribeNode(g, hero) + ": bad reduced dimension " +
                             std::to_string(d));
    }
    reduced[d] = true;
  }
  for (int d = 0; d < rank; ++d) {
    if (reduced[d]) {
      geo.reduced_pos.push_back(d);
      geo.reduced_sizes.push_back(geo.input_dims[d]);
      geo.reduced *= geo.input_dims[d];
    } else {
      geo.kept_pos.push_back(d);
      geo.kept_sizes.push_back(geo.input_dims[d]);
      geo.kept *= geo.input_dims[d];
    }
  }
  if (kc.Varies(h.operands[0])) {
    geo.kept_varies = !reduced[0];
    geo.reduced_varies = reduced[0];
  }
  if (h.shape.dims != geo.kept_sizes) {
    return InvalidArgument(DescribeNode(g, hero) + ": result shape " + h.shape.ToString() +
                           " is not the input's kept dimensions");
  }
  // The dimensions were checked above; those of size 1 do not affect linear offsets.
  geo.reduced_is_suffix = ReducesTrailingDims(g, hero);
  geo.reduced_is_prefix = !geo.reduced_is_suffix && ReducesLeadingDims(g, hero);
  return geo;
}

// Sorts the kernel's output at `slot` into `plan`: the hero, another reduce of the hero's
// geometry (added to the plan's reduces), a full-size side output, or an epilogue value of the
// kept element count. Anything else is UNIMPLEMENTED.
Status AddReduceKernelOutput(KernelContext& kc, size_t slot, ReducePlan& plan) {
  const Graph& g = kc.graph;
  const int hero = kc.spec.hero;
  const Node& h = g.nodes[hero];
  const ReduceGeometry& geo = plan.geometry;
  const int out = kc.spec.outputs[slot];
  if (out == hero) {
    plan.reduces[0].is_output = true;
    plan.kept_outputs.push_back(slot);
    return Status::Ok();
  }
  const Node& n = g.nodes[out];
  if (n.op != OpCode::kReduce && n.shape.elements() != geo.kept &&
      n.shape.elements() == geo.kept * geo.reduced) {
    if (!geo.reduced_is_suffix && !geo.reduced_is_prefix) {
      return Unimplemented(DescribeNode(g, out) + " is a full-size output of reduce kernel " +
                           kc.spec.name + ", whose reduced dimensions are not at either end");
    }
    plan.side_outputs.push_back(slot);
    return Status::Ok();
  }
  if (n.op != OpCode::kReduce) {
    if (n.shape.elements() != geo.kept) {
      return Unimplemented(DescribeNode(g, out) + " is an output of reduce kernel " + kc.spec.name +
                           " but does not have the reduce's element count");
    }
    plan.epilogue.push_back(out);
    plan.kept_outputs.push_back(slot);
    return Status::Ok();
  }
  if (n.operands.empty() || n.operands[0] < 0 ||
      n.operands[0] >= static_cast<int>(g.nodes.size()) ||
      g.nodes[n.operands[0]].shape.dims != geo.input_dims || n.dimensions != h.dimensions) {
    return Unimplemented(DescribeNode(g, out) + " does not share the geometry of hero " +
                         DescribeNode(g, hero));
  }
  plan.kept_outputs.push_back(slot);
  for (ReduceInfo& r : plan.reduces) {
    if (r.node == out) {
      r.is_output = true;
      return Status::Ok();
    }
  }
  STITCH_ASSIGN_OR_RETURN(ReduceInfo r, MakeReduceInfo(kc, out));
  r.is_output = true;
  plan.reduces.push_back(r);
  return Status::Ok();
}

}  // namespace

StatusOr<ReducePlan> AnalyzeReduceKernel(KernelContext& kc) {
  const Graph& g = kc.graph;
  const int hero = kc.spec.hero;
  if (hero < 0 || hero >= static_cast<int>(g.nodes.size()) || g.nodes[hero].op != OpCode::kReduce) {
    return InvalidArgument("kernel " + kc.spec.name + ": hero " + std::to_string(hero) +
                           " is not a reduce node");
  }
  ReducePlan plan;
  STITCH_ASSIGN_OR_RETURN(ReduceInfo first, MakeReduceInfo(kc, hero));
  plan.reduces.push_back(first);
  STITCH_ASSIGN_OR_RETURN(plan.geometry, HeroGeometry(kc, hero));
  for (size_t slot = 0; slot < kc.spec.outputs.size(); ++slot) {
    STITCH_RETURN_IF_ERROR(AddReduceKernelOutput(kc, slot, plan));
  }
  return plan;
}

IrIndex InputIndex(KernelContext& kc, ElementalEmitter& em, const ReduceGeometry& geo,
                   llvm::Value* k, llvm::Value* r) {
  llvm::IRBuilder<>& b = kc.b;
  IrIndex idx;
  if (geo.reduced_is_suffix) {
    idx.linear =
        b.CreateAdd(b.CreateMul(k, kc.Index(geo.reduced), "", true, true), r, "", true, true);
    return idx;
  }
  if (geo.reduced_is_prefix) {
    idx.linear = b.CreateAdd(b.CreateMul(r, kc.Index(geo.kept), "", true, true), k, "", true, true);
    return idx;
  }
  std::vector<llvm::Value*> kd = em.Delinearize(k, geo.kept_sizes);
  std::vector<llvm::Value*> rd = em.Delinearize(r, geo.reduced_sizes);
  idx.dims.assign(geo.input_dims.size(), nullptr);
  for (size_t i = 0; i < geo.kept_pos.size(); ++i) idx.dims[geo.kept_pos[i]] = kd[i];
  for (size_t i = 0; i < geo.reduced_pos.size(); ++i) idx.dims[geo.reduced_pos[i]] = rd[i];
  return idx;
}

llvm::Value* Identity(llvm::IRBuilder<>& b, const ReduceInfo& r) {
  llvm::Type* ty = r.acc_ty;
  const bool fp = ty->isFloatingPointTy();
  const bool is_signed = IsSignedInt(r.dtype);
  const unsigned bits = fp ? 0 : ty->getIntegerBitWidth();
  switch (r.kind) {
    case ReduceKind::kSum:
    case ReduceKind::kOr:
      return llvm::Constant::getNullValue(ty);
    case ReduceKind::kProd:
      return fp ? llvm::ConstantFP::get(ty, 1.0) : llvm::ConstantInt::get(ty, 1);
    case ReduceKind::kAnd:
      return llvm::Constant::getAllOnesValue(ty);
    case ReduceKind::kMax:
      if (fp) return llvm::ConstantFP::getInfinity(ty, /*Negative=*/true);
      return llvm::ConstantInt::get(
          ty, is_signed ? llvm::APInt::getSignedMinValue(bits) : llvm::APInt::getMinValue(bits));
    case ReduceKind::kMin:
      if (fp) return llvm::ConstantFP::getInfinity(ty, /*Negative=*/false);
      return llvm::ConstantInt::get(
          ty, is_signed ? llvm::APInt::getSignedMaxValue(bits) : llvm::APInt::getMaxValue(bits));
  }
  return llvm::Constant::getNullValue(ty);
}

llvm::Value* Combine(llvm::IRBuilder<>& b, const ReduceInfo& r, llvm::Value* a, llvm::Value* c) {
  const bool fp = r.acc_ty->isFloatingPointTy();
  const bool is_signed = IsSignedInt(r.dtype);
  switch (r.kind) {
    case ReduceKind::kSum:
      return fp ? b.CreateFAdd(a, c) : b.CreateAdd(a, c);
    case ReduceKind::kProd:
      return fp ? b.CreateFMul(a, c) : b.CreateMul(a, c);
    case ReduceKind::kMax:
      if (fp) return FloatMax(b, a, c);
      return b.CreateSelect(is_signed ? b.CreateICmpSGT(a, c) : b.CreateICmpUGT(a, c), a, c);
    case ReduceKind::kMin:
      if (fp) return FloatMin(b, a, c);
      return b.CreateSelect(is_signed ? b.CreateICmpSLT(a, c) : b.CreateICmpULT(a, c), a, c);
    case ReduceKind::kAnd:
      return b.CreateAnd(a, c);
    case ReduceKind::kOr:
      return b.CreateOr(a, c);
  }
  return a;
}

void InitAccumulators(KernelContext& kc, std::vector<ReduceInfo>& reduces) {
  for (auto& r : reduces) {
    if (!r.acc) r.acc = EntryAlloca(kc, r.acc_ty, "acc");
    kc.b.CreateStore(Identity(kc.b, r), r.acc);
  }
}

namespace {

// Emits the element at `idx` of every reduce's input, in plan order, and stores the side
// outputs' element there, or, given `deferred`, appends those stores to it for the caller to
// issue; returns the reduce inputs' values.
StatusOr<std::vector<llvm::Value*>> EmitElement(KernelContext& kc, ElementalEmitter& em,
                                                const ReducePlan& plan, const IrIndex& idx,
                                                std::vector<ElementStore>* deferred = nullptr) {
  std::vector<llvm::Value*> values;
  for (const auto& red : plan.reduces) {
    STITCH_ASSIGN_OR_RETURN(llvm::Value * v, em.Emit(red.input, idx));
    values.push_back(v);
  }
  for (size_t slot : plan.side_outputs) {
    const int out = kc.spec.outputs[slot];
    STITCH_ASSIGN_OR_RETURN(llvm::Value * v, em.Emit(out, IrIndex{{}, idx.linear}));
    const ElementStore store{kc.graph.nodes[out].shape.dtype, v, kc.output_buffers[slot],
                             idx.linear};
    if (deferred != nullptr) {
      deferred->push_back(store);
    } else {
      StoreElement(kc.b, store.dtype, store.value, store.base, store.index);
    }
  }
  return values;
}

// Combines elements' values (each as EmitElement returns them) into the accumulators, in order.
void CombineElements(KernelContext& kc, const ReducePlan& plan,
                     const std::vector<std::vector<llvm::Value*>>& elements) {
  for (size_t i = 0; i < plan.reduces.size(); ++i) {
    const ReduceInfo& red = plan.reduces[i];
    llvm::Value* acc = kc.b.CreateLoad(red.acc_ty, red.acc);
    for (const std::vector<llvm::Value*>& values : elements) {
      acc = Combine(kc.b, red, acc, values[i]);
    }
    kc.b.CreateStore(acc, red.acc);
  }
}

// Whether `columns` are consecutive kept columns (k, k + 1, ...) whose elements are
// consecutive elements of the input too, though the reduced dimensions are not the input's
// leading ones: the input's minor-most dimension is kept and the lane's width divides it, so
// the lane's columns share every other coordinate (a reduction over the pixels of NHWC
// storage, [N, H·W, C] reduced over H·W, whose lanes each take a few channels).
bool ConsecutiveInMinorDimension(const std::vector<AccumulatedColumn>& columns) {
  const ReduceGeometry& geo = columns[0].plan->geometry;
  const int64_t width = static_cast<int64_t>(columns.size());
  if (width < 2 || geo.reduced_is_prefix || geo.reduced_is_suffix || geo.kept_pos.empty() ||
      geo.kept_pos.back() != static_cast<int>(geo.input_dims.size()) - 1 ||
      geo.input_dims.back() % width != 0) {
    return false;
  }
  for (size_t c = 1; c < columns.size(); ++c) {
    if (ConstantDistance(columns[c].k, columns[0].k) != static_cast<int64_t>(c)) return false;
  }
  return true;
}

// The indices of the `width` consecutive input elements from `first` on, a multiple of the
// width that divides the input's minor-most dimension: the first linearised, the others its
// vector lanes (ElementalEmitter::VectorLanes), each lane's coordinates, where `first` has
// them, the first's with the minor-most one moved on.
std::vector<IrIndex> VectorLaneIndices(KernelContext& kc, ElementalEmitter& em,
                                       const IrIndex& first, const std::vector<int64_t>& input_dims,
                                       int64_t width) {
  llvm::Value* linear = first.linear ? first.linear : em.Linearize(first.dims, input_dims);
  const std::vector<llvm::Value*> lanes = em.VectorLanes(linear, width);
  std::vector<IrIndex> indices;
  for (size_t e = 0; e < lanes.size(); ++e) {
    IrIndex lane{first.dims, lanes[e]};
    if (e > 0 && !lane.dims.empty()) {
      lane.dims.back() =
          kc.b.CreateAdd(first.dims.back(), kc.Index(static_cast<int64_t>(e)), "", true, true);
    }
    indices.push_back(std::move(lane));
  }
  return indices;
}

// The index of element `r` of every column. Where the kept columns are the input's trailing
// dimensions, a later column's element is the first column's plus their distance, formed so
// in the IR: the vectoriser merges accesses only where their addresses differ by constants
// it can see. Where they share the input's minor-most dimension only, the first column's
// element is linearised and the others are its vector lanes (ElementalEmitter::VectorLanes),
// each lane's coordinates the first's with the minor-most one moved on.
std::vector<IrIndex> ColumnIndices(KernelContext& kc, ElementalEmitter& em,
                                   const std::vector<AccumulatedColumn>& columns, llvm::Value* r) {
  if (ConsecutiveInMinorDimension(columns)) {
    const ReduceGeometry& geo = columns[0].plan->geometry;
    return VectorLaneIndices(kc, em, InputIndex(kc, em, geo, columns[0].k, r), geo.input_dims,
                             static_cast<int64_t>(columns.size()));
  }
  std::vector<IrIndex> indices;
  for (size_t c = 0; c < columns.size(); ++c) {
    const std::optional<int64_t> distance =
        c == 0 ? std::nullopt : ConstantDistance(columns[c].k, columns[0].k);
    IrIndex idx;
    if (distance && indices[0].linear && columns[0].plan->geometry.reduced_is_prefix) {
      idx.linear = kc.b.CreateAdd(indices[0].linear, kc.Index(*distance), "", true, true);
    } else {
      idx = InputIndex(kc, em, columns[c].plan->geometry, columns[c].k, r);
    }
    indices.push_back(std::move(idx));
  }
  return indices;
}

// The nodes a lane of columns computes at each element: its reduces' inputs and its side
// outputs.
std::vector<int> LaneNodes(const KernelContext& kc, const ReducePlan& plan) {
  std::vector<int> nodes;
  for (const auto& red : plan.reduces) nodes.push_back(red.input);
  for (size_t slot : plan.side_outputs) nodes.push_back(kc.spec.outputs[slot]);
  return nodes;
}

// Issues the loads of `nodes` at every column's element at `indices` before any column's
// math, as vectors, each converted where its column first uses it. For lanes whose math calls
// the math library (#11's erf): the library's branches end the straight line within which
// the backend's vectorizer merges the columns' loads, and converting every column at once
// keeps twice the registers live (#11 spilled 80 bytes in its loop). Other lanes' loads merge
// as emitted, and their code stays as the GPU runs measured it.
void LoadColumnsFirst(ElementalEmitter& em, const std::vector<int>& nodes,
                      const std::vector<IrIndex>& indices) {
  std::vector<llvm::Value*> linears;
  for (const IrIndex& idx : indices) {
    if (idx.linear == nullptr) return;
    linears.push_back(idx.linear);
  }
  em.EmitLoads(nodes, linears, ElementalEmitter::Widening::kAtFirstUse);
}

// Emits `count` elements r, r + step, ... of every column before combining any, so their
// loads are in flight together.
Status AccumulateElements(KernelContext& kc, ElementalEmitter& em,
                          const std::vector<AccumulatedColumn>& columns, llvm::Value* r,
                          int64_t step, int64_t count) {
  std::vector<std::vector<std::vector<llvm::Value*>>> elements(columns.size());
  const std::vector<int> lane_nodes = LaneNodes(kc, *columns[0].plan);
  const bool load_first = columns.size() > 1 && em.CallsMathLibrary(lane_nodes);
  for (int64_t u = 0; u < count; ++u) {
    llvm::Value* ru = u == 0 ? r : kc.b.CreateAdd(r, kc.Index(u * step), "", true, true);
    em.ResetScope();
    const std::vector<IrIndex> indices = ColumnIndices(kc, em, columns, ru);
    if (load_first) LoadColumnsFirst(em, lane_nodes, indices);
    // Such lanes' side outputs are stored after every column's math too: the library's
    // branches would leave each column's store alone in its block, element-wide (#11's
    // gradient took eight 2-byte stores where one 16-byte store does).
    std::vector<ElementStore> stores;
    for (size_t c = 0; c < columns.size(); ++c) {
      STITCH_ASSIGN_OR_RETURN(
          std::vector<llvm::Value*> values,
          EmitElement(kc, em, *columns[c].plan, indices[c], load_first ? &stores : nullptr));
      elements[c].push_back(std::move(values));
    }
    StoreElements(kc.b, stores);
  }
  for (size_t c = 0; c < columns.size(); ++c) CombineElements(kc, *columns[c].plan, elements[c]);
  return Status::Ok();
}

}  // namespace

Status EmitAccumulateLoop(KernelContext& kc, ElementalEmitter& em,
                          const std::vector<AccumulatedColumn>& columns, llvm::Value* start,
                          llvm::Value* end, int64_t step, int loads_per_step, const char* name) {
  const int64_t unroll = std::max(loads_per_step, 1);
  llvm::Value* rest = start;
  if (unroll > 1) {
    // r + (unroll - 1) * step < end: the step's last element is in range.
    llvm::Value* last_start = kc.b.CreateSub(end, kc.Index((unroll - 1) * step), "", false, true);
    STITCH_RETURN_IF_ERROR(EmitForLoop(
        kc, name, start, last_start, kc.Index(unroll * step),
        [&](llvm::Value* r) { return AccumulateElements(kc, em, columns, r, step, unroll); }, &rest,
        /*unrollable=*/false));
  }
  return EmitForLoop(
      kc, (std::string(name) + ".rest").c_str(), rest, end, kc.Index(step),
      [&](llvm::Value* r) { return AccumulateElements(kc, em, columns, r, step, 1); }, nullptr,
      /*unrollable=*/unroll == 1);
}

bool ReducedVectorWidthFits(const ReduceGeometry& geo, int64_t width) {
  if (width == 1) return true;
  const int rank = static_cast<int>(geo.input_dims.size());
  return width > 1 && rank > 0 && !geo.reduced_pos.empty() && geo.reduced_pos.back() == rank - 1 &&
         geo.input_dims.back() % width == 0 && !(rank == 1 && geo.reduced_varies);
}

namespace {

// The input indices of vector `q`'s elements (kept k, reduced q * width + e).
std::vector<IrIndex> ReducedVectorIndices(KernelContext& kc, ElementalEmitter& em,
                                          const ReduceGeometry& geo, llvm::Value* k, llvm::Value* q,
                                          int64_t width) {
  llvm::Value* r = kc.b.CreateMul(q, kc.Index(width), "", true, true);
  return VectorLaneIndices(kc, em, InputIndex(kc, em, geo, k, r), geo.input_dims, width);
}

// Emits `count` vectors q, q + step, ... of `width` elements each: every element's loads
// first, packed until their math reads them, then each element's values and side outputs,
// combined in order after all of them.
Status AccumulateVectors(KernelContext& kc, ElementalEmitter& em, const ReducePlan& plan,
                         llvm::Value* k, llvm::Value* q, int64_t step, int64_t count,
                         int64_t width) {
  std::vector<std::vector<llvm::Value*>> elements;
  const std::vector<int> lane_nodes = LaneNodes(kc, plan);
  for (int64_t u = 0; u < count; ++u) {
    llvm::Value* qu = u == 0 ? q : kc.b.CreateAdd(q, kc.Index(u * step), "", true, true);
    em.ResetScope();
    const std::vector<IrIndex> indices = ReducedVectorIndices(kc, em, plan.geometry, k, qu, width);
    std::vector<llvm::Value*> linears;
    for (const IrIndex& idx : indices) linears.push_back(idx.linear);
    em.EmitLoads(lane_nodes, linears, ElementalEmitter::Widening::kAtFirstUse);
    // The side outputs' stores follow the vector's math, side by side, so they merge too.
    std::vector<ElementStore> stores;
    for (const IrIndex& idx : indices) {
      STITCH_ASSIGN_OR_RETURN(std::vector<llvm::Value*> values,
                              EmitElement(kc, em, plan, idx, &stores));
      elements.push_back(std::move(values));
    }
    StoreElements(kc.b, stores);
  }
  CombineElements(kc, plan, elements);
  return Status::Ok();
}

}  // namespace

Status EmitAccumulateLoop(KernelContext& kc, ElementalEmitter& em, const ReducePlan& plan,
                          llvm::Value* k, llvm::Value* start, llvm::Value* end, int64_t step,
                          int loads_per_step, const char* name, int64_t width) {
  if (width <= 1) {
    return EmitAccumulateLoop(kc, em, {AccumulatedColumn{&plan, k}}, start, end, step,
                              loads_per_step, name);
  }
  const int64_t unroll = std::max(loads_per_step, 1);
  llvm::Value* rest = start;
  auto vectors = [&](int64_t count) {
    return [&, count](llvm::Value* q) {
      return AccumulateVectors(kc, em, plan, k, q, step, count, width);
    };
  };
  if (unroll > 1) {
    llvm::Value* last_start = kc.b.CreateSub(end, kc.Index((unroll - 1) * step), "", false, true);
    STITCH_RETURN_IF_ERROR(EmitForLoop(kc, name, start, last_start, kc.Index(unroll * step),
                                       vectors(unroll), &rest, /*unrollable=*/false));
  }
  return EmitForLoop(kc, (std::string(name) + ".rest").c_str(), rest, end, kc.Index(step),
                     vectors(1), nullptr, /*unrollable=*/unroll == 1);
}

namespace {

llvm::Value* Shuffle32(llvm::IRBuilder<>& b, llvm::Value* v, int offset, bool butterfly) {
  const bool is_float = v->getType()->isFloatTy();
  auto id = butterfly ? (is_float ? llvm::Intrinsic::nvvm_shfl_sync_bfly_f32
                                  : llvm::Intrinsic::nvvm_shfl_sync_bfly_i32)
                      : (is_float ? llvm::Intrinsic::nvvm_shfl_sync_down_f32
                                  : llvm::Intrinsic::nvvm_shfl_sync_down_i32);
  // Clamp 0x1f: lanes past the end of the warp read their own value.
  return b.CreateIntrinsic(id, {}, {b.getInt32(-1), v, b.getInt32(offset), b.getInt32(0x1f)});
}

llvm::Value* Shuffle(llvm::IRBuilder<>& b, llvm::Value* v, int offset, bool butterfly) {
  llvm::Type* ty = v->getType();
  if (ty->isFloatTy() || ty->isIntegerTy(32)) return Shuffle32(b, v, offset, butterfly);
  if (ty->isIntegerTy() && ty->getIntegerBitWidth() < 32) {
    llvm::Value* w = Shuffle32(b, b.CreateZExt(v, b.getInt32Ty()), offset, butterfly);
    return b.CreateTrunc(w, ty);
  }
  // 64-bit values travel as two 32-bit halves.
  llvm::Value* bits = ty->isDoubleTy() ? b.CreateBitCast(v, b.getInt64Ty()) : v;
  llvm::Value* lo = Shuffle32(b, b.CreateTrunc(bits, b.getInt32Ty()), offset, butterfly);
  llvm::Value* hi =
      Shuffle32(b, b.CreateTrunc(b.CreateLShr(bits, 32), b.getInt32Ty()), offset, butterfly);
  llvm::Value* joined = b.CreateOr(b.CreateZExt(lo, b.getInt64Ty()),
                                   b.CreateShl(b.CreateZExt(hi, b.getInt64Ty()), 32));
  return ty->isDoubleTy() ? b.CreateBitCast(joined, ty) : joined;
}

}  // namespace

llvm::Value* WarpReduce(KernelContext& kc, const ReduceInfo& r, llvm::Value* v, int width) {
  // Lane 0 of a group only ever reads lanes inside its group, so groups narrower than a
  // warp need no segment mask.
  for (int offset = width / 2; offset > 0; offset /= 2) {
    v = Combine(kc.b, r, v, Shuffle(kc.b, v, offset, /*butterfly=*/false));
  }
  return v;
}

llvm::Value* WarpAllReduce(KernelContext& kc, const ReduceInfo& r, llvm::Value* v, int width) {
  // XOR partners stay inside aligned groups of `width` lanes, and every lane ends with the
  // group's result.
  for (int offset = width / 2; offset > 0; offset /= 2) {
    v = Combine(kc.b, r, v, Shuffle(kc.b, v, offset, /*butterfly=*/true));
  }
  return v;
}

llvm::Type* SharedType(llvm::Type* acc_ty) {
  return acc_ty->isIntegerTy(1) ? llvm::Type::getInt8Ty(acc_ty->getContext()) : acc_ty;
}

llvm::Value* ToShared(llvm::IRBuilder<>& b, llvm::Value* v) {
  return v->getType()->isIntegerTy(1) ? b.CreateZExt(v, b.getInt8Ty()) : v;
}

llvm::Value* FromShared(llvm::IRBuilder<>& b, llvm::Value* v, llvm::Type* acc_ty) {
  return acc_ty->isIntegerTy(1) ? b.CreateTrunc(v, acc_ty) : v;
}

Status WriteReduceOutputs(KernelContext& kc, ElementalEmitter& em, const ReducePlan& plan,
                          const std::vector<llvm::Value*>& partials, llvm::Value* k) {
  em.ResetScope();
  const Graph& g = kc.graph;
  for (size_t i = 0; i < plan.reduces.size(); ++i) {
    const ReduceInfo& r = plan.reduces[i];
    STITCH_ASSIGN_OR_RETURN(llvm::Value * init, em.Emit(r.init, IrIndex{{}, kc.Index(0)}));
    // The init value enters exactly once per output, after all partials are combined.
    llvm::Value* result = Combine(kc.b, r, init, partials[i]);
    llvm::Value* seed_index = g.nodes[r.node].shape.rank() == 0 ? kc.Index(0) : k;
    em.Seed(r.node, seed_index, result);
  }
  for (size_t o : plan.kept_outputs) {
    const int out = kc.spec.outputs[o];
    IrIndex idx{{}, g.nodes[out].shape.rank() == 0 ? kc.Index(0) : k};
    STITCH_ASSIGN_OR_RETURN(llvm::Value * v, em.Emit(out, idx));
    StoreElement(kc.b, g.nodes[out].shape.dtype, v, kc.output_buffers[o], k);
  }
  return Status::Ok();
}

namespace {

constexpr uint64_t kPartialAlignment = 256;

llvm::Value* PartialSlot(KernelContext& kc, llvm::Value* chunk, llvm::Value* k, int64_t kept) {
  llvm::IRBuilder<>& b = kc.b;
  return b.CreateAdd(b.CreateMul(chunk, kc.Index(kept), "", true, true), k, "", true, true);
}

llvm::Value* PartialAddress(KernelContext& kc, const ReduceInfo& r, llvm::Value* base,
                            llvm::Value* chunk, llvm::Value* k, int64_t kept) {
  return kc.b.CreateInBoundsGEP(SharedType(r.acc_ty), base, {PartialSlot(kc, chunk, k, kept)});
}

}  // namespace

StatusOr<PartialArrays> LayoutPartials(KernelContext& kc, const ReducePlan& plan, int64_t chunks) {
  if (kc.workspace == nullptr) {
    return Internal("kernel " + kc.spec.name +
                    ": a split reduction needs the workspace of a global_stitch kernel");
  }
  PartialArrays arrays;
  arrays.chunks = chunks;
  uint64_t offset =
      (kc.workspace_offset + kPartialAlignment - 1) / kPartialAlignment * kPartialAlignment;
  const llvm::DataLayout& dl = kc.module.getDataLayout();
  for (const ReduceInfo& r : plan.reduces) {
    arrays.base.push_back(kc.b.CreateConstInBoundsGEP1_64(kc.b.getInt8Ty(), kc.workspace, offset));
    const uint64_t bytes = dl.getTypeAllocSize(SharedType(r.acc_ty)) *
                           static_cast<uint64_t>(chunks) *
                           static_cast<uint64_t>(plan.geometry.kept);
    offset += (bytes + kPartialAlignment - 1) / kPartialAlignment * kPartialAlignment;
  }
  arrays.end_offset = offset;
  return arrays;
}

void StoreColumnPartials(KernelContext& kc, const ReducePlan& plan, const PartialArrays& arrays,
                         const std::vector<std::vector<llvm::Value*>>& partials, llvm::Value* chunk,
                         llvm::Value* first) {
  llvm::Value* first_slot = PartialSlot(kc, chunk, first, plan.geometry.kept);
  const llvm::DataLayout& dl = kc.module.getDataLayout();
  for (size_t i = 0; i < plan.reduces.size(); ++i) {
    llvm::Type* st = SharedType(plan.reduces[i].acc_ty);
    for (size_t j = 0; j < partials.size(); ++j) {
      // Each slot is formed as the first's plus j, and the arrays are 256-byte aligned, so
      // the vectoriser sees the stores adjacent and the first's alignment.
      llvm::Value* slot =
          j == 0 ? first_slot
                 : kc.b.CreateAdd(first_slot, kc.Index(static_cast<int64_t>(j)), "", true, true);
      const uint64_t align = ElementAlignment(slot, dl.getTypeStoreSize(st));
      kc.b.CreateAlignedStore(ToShared(kc.b, partials[j][i]),
                              kc.b.CreateInBoundsGEP(st, arrays.base[i], {slot}),
                              llvm::Align(align));
    }
  }
}

std::vector<std::vector<llvm::Value*>> LoadColumnPartials(KernelContext& kc, const ReducePlan& plan,
                                                          const PartialArrays& arrays,
                                                          llvm::Value* chunk, llvm::Value* first,
                                                          int width) {
  llvm::Value* first_slot = PartialSlot(kc, chunk, first, plan.geometry.kept);
  const llvm::DataLayout& dl = kc.module.getDataLayout();
  std::vector<std::vector<llvm::Value*>> partials(static_cast<size_t>(width));
  for (int j = 0; j < width; ++j) {
    // Formed as StoreColumnPartials forms them, for the same vectors.
    llvm::Value* slot =
        j == 0 ? first_slot : kc.b.CreateAdd(first_slot, kc.Index(j), "", true, true);
    for (size_t i = 0; i < plan.reduces.size(); ++i) {
      const ReduceInfo& r = plan.reduces[i];
      llvm::Type* st = SharedType(r.acc_ty);
      const uint64_t align = ElementAlignment(slot, dl.getTypeStoreSize(st));
      llvm::Value* v = kc.b.CreateAlignedLoad(
          st, kc.b.CreateInBoundsGEP(st, arrays.base[i], {slot}), llvm::Align(align));
      partials[static_cast<size_t>(j)].push_back(FromShared(kc.b, v, r.acc_ty));
    }
  }
  return partials;
}

void StorePartials(KernelContext& kc, const ReducePlan& plan, const PartialArrays& arrays,
                   const std::vector<llvm::Value*>& partials, llvm::Value* chunk, llvm::Value* k) {
  StoreColumnPartials(kc, plan, arrays, {partials}, chunk, k);
}

Status EmitCombinePartials(KernelContext& kc, ElementalEmitter& em, const ReducePlan& plan,
                           const PartialArrays& arrays) {
  llvm::IRBuilder<>& b = kc.b;
  GridBarrier(kc, kc.workspace);
  // Warps are numbered across the grid; a warp's lanes split the output's chunks. The loop
  // over outputs is uniform across a warp, so every lane reaches the shuffles.
  llvm::Value* threads = b.CreateMul(BlockDim(kc, Dim::kX), BlockDim(kc, Dim::kY));
  llvm::Value* tid = LinearThreadIdx(kc);
  llvm::Value* lane = b.CreateURem(tid, kc.Index(32));
  llvm::Value* warp =
      b.CreateUDiv(b.CreateAdd(b.CreateMul(BlockIdx(kc, Dim::kX), threads), tid), kc.Index(32));
  llvm::Value* warps = b.CreateUDiv(b.CreateMul(GridDim(kc, Dim::kX), threads), kc.Index(32));
  std::vector<ReduceInfo> reduces = plan.reduces;
  for (ReduceInfo& r : reduces) r.acc = nullptr;
  const int64_t loads = CombineLoadsInFlight(arrays.chunks);
  return EmitForLoop(
      kc, "combine", warp, KeptCount(kc, plan.geometry), warps, [&](llvm::Value* k) -> Status {
        InitAccumulators(kc, reduces);
        // A lane loads `loads` of its partials before combining any: they come from L2, and
        // loaded one after another they would cost a round trip each. A chunk past the last
        // loads the last chunk's partial (any valid address) and combines the identity.
        STITCH_RETURN_IF_ERROR(EmitForLoop(
            kc, "chunk", lane, kc.Index(arrays.chunks), kc.Index(32 * loads),
            [&](llvm::Value* c) -> Status {
              std::vector<std::vector<llvm::Value*>> partials(reduces.size());
              std::vector<llvm::Value*> valid;
              for (int64_t j = 0; j < loads; ++j) {
                llvm::Value* chunk = b.CreateAdd(c, kc.Index(32 * j));
                valid.push_back(b.CreateICmpSLT(chunk, kc.Index(arrays.chunks)));
                llvm::Value* read =
                    b.CreateSelect(valid.back(), chunk, kc.Index(arrays.chunks - 1));
                for (size_t i = 0; i < reduces.size(); ++i) {
                  const ReduceInfo& r = reduces[i];
                  llvm::Type* st = SharedType(r.acc_ty);
                  partials[i].push_back(FromShared(
                      b,
                      b.CreateLoad(
                          st, PartialAddress(kc, r, arrays.base[i], read, k, plan.geometry.kept)),
                      r.acc_ty));
                }
              }
              for (size_t i = 0; i < reduces.size(); ++i) {
                const ReduceInfo& r = reduces[i];
                llvm::Value* acc = b.CreateLoad(r.acc_ty, r.acc);
                for (int64_t j = 0; j < loads; ++j) {
                  acc = b.CreateSelect(valid[j], Combine(b, r, acc, partials[i][j]), acc);
                }
                b.CreateStore(acc, r.acc);
              }
              return Status::Ok();
            },
            nullptr, /*unrollable=*/false));
        std::vector<llvm::Value*> totals;
        for (const ReduceInfo& r : reduces) {
          totals.push_back(WarpReduce(kc, r, b.CreateLoad(r.acc_ty, r.acc), 32));
        }
        return EmitIf(kc, "write", b.CreateICmpEQ(lane, kc.Index(0)),
                      [&] { return WriteReduceOutputs(kc, em, plan, totals, k); });
      });
}

std::pair<llvm::Value*, llvm::Value*> ChunkRange(KernelContext& kc, llvm::Value* reduced,
                                                 int64_t chunks, llvm::Value* chunk) {
  llvm::IRBuilder<>& b = kc.b;
  // Constant counts fold, so exact kernels get the constant chunk size.
  llvm::Value* size = b.CreateUDiv(b.CreateAdd(reduced, kc.Index(chunks - 1)), kc.Index(chunks));
  llvm::Value* lo = b.CreateMul(chunk, size, "", true, true);
  llvm::Value* lo_clamped = b.CreateSelect(b.CreateICmpSLT(lo, reduced), lo, reduced);
  llvm::Value* hi = b.CreateAdd(lo_clamped, size, "", true, true);
  hi = b.CreateSelect(b.CreateICmpSLT(hi, reduced), hi, reduced);
  return {lo_clamped, hi};
}

llvm::Value* KeptCount(KernelContext& kc, const ReduceGeometry& geo) {
  return kc.RunCount(geo.kept, geo.kept_varies);
}

llvm::Value* ReducedCount(KernelContext& kc, const ReduceGeometry& geo) {
  return kc.RunCount(geo.reduced, geo.reduced_varies);
}

Status EmitWarpRowLoop(KernelContext& kc, llvm::Value* rows, int lanes, int64_t warps_per_block,
                       const WarpRowBody& body) {
  llvm::IRBuilder<>& b = kc.b;
  const int64_t rows_per_warp = 32 / lanes;
  llvm::Value* groups =
      b.CreateUDiv(b.CreateAdd(rows, kc.Index(rows_per_warp - 1)), kc.Index(rows_per_warp));
  llvm::Value* lane = ThreadIdx(kc, Dim::kX);
  llvm::Value* sub = b.CreateUDiv(lane, kc.Index(lanes));
  llvm::Value* seg = b.CreateURem(lane, kc.Index(lanes));
  llvm::Value* warps = kc.Index(warps_per_block);
  llvm::Value* first =
      b.CreateAdd(b.CreateMul(BlockIdx(kc, Dim::kX), warps), ThreadIdx(kc, Dim::kY));
  llvm::Value* stride = b.CreateMul(GridDim(kc, Dim::kX), warps);
  return EmitForLoop(kc, "rowgroup", first, groups, stride, [&](llvm::Value* grp) {
    llvm::Value* row = b.CreateAdd(b.CreateMul(grp, kc.Index(rows_per_warp)), sub);
    return body(row, b.CreateICmpSLT(row, rows), seg);
  });
}

}  // namespace stitch::codegen
