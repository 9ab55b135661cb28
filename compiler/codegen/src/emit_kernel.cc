// EmitKernel: validates a KernelSpec, builds the portable module around the emitter for its
// kind and serialises it as bitcode.
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "emitters.h"
#include "grid_barrier.h"
#include "stitch/codegen/codegen.h"
#include "stitch/codegen/llvm_pipeline.h"

namespace stitch {
namespace {

using codegen::DescribeNode;

// The data layout LLVM 16's NVPTX backend uses for 64-bit pointers.
constexpr char kDataLayout[] = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64";

bool IsPtxIdentifier(const std::string& s) {
  if (s.empty() || s.size() > 1024) return false;
  auto first_ok = [](char c) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '$';
  };
  if (!first_ok(s[0])) return false;
  for (char c : s) {
    if (!first_ok(c) && !std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

Status ValidateSpec(const Graph& g, const KernelSpec& spec) {
  const int n = static_cast<int>(g.nodes.size());
  const std::string k = "kernel '" + spec.name + "'";
  if (!IsPtxIdentifier(spec.name)) {
    return InvalidArgument(k + ": the name is not a valid PTX identifier");
  }
  if (spec.outputs.empty()) return InvalidArgument(k + " has no outputs");
  auto check_ids = [&](const std::vector<int>& ids, const char* what) -> Status {
    std::set<int> seen;
    for (int id : ids) {
      if (id < 0 || id >= n) {
        return InvalidArgument(k + ": " + what + " entry " + std::to_string(id) +
                               " is not a node of graph '" + g.name + "'");
      }
      if (!seen.insert(id).second) {
        return InvalidArgument(k + ": " + DescribeNode(g, id) + " is listed twice in " + what);
      }
    }
    return Status::Ok();
  };
  STITCH_RETURN_IF_ERROR(check_ids(spec.nodes, "nodes"));
  STITCH_RETURN_IF_ERROR(check_ids(spec.inputs, "inputs"));
  STITCH_RETURN_IF_ERROR(check_ids(spec.outputs, "outputs"));
  std::set<int> computed(spec.nodes.begin(), spec.nodes.end());
  std::set<int> inputs(spec.inputs.begin(), spec.inputs.end());
  for (int id : spec.inputs) {
    if (computed.count(id)) {
      return InvalidArgument(k + ": " + DescribeNode(g, id) + " is both an input and a node");
    }
  }
  for (int id : spec.outputs) {
    if (!computed.count(id) && !inputs.count(id)) {
      return InvalidArgument(k + ": output " + DescribeNode(g, id) +
                             " is neither computed by the kernel nor one of its inputs");
    }
    if (inputs.count(id)) {
      return InvalidArgument(k + ": output " + DescribeNode(g, id) +
                             " is also an input; a buffer cannot be both");
    }
  }
  for (int id : spec.nodes) {
    for (int o : g.nodes[id].operands) {
      if (o < 0 || o >= n) {
        return InvalidArgument(k + ": " + DescribeNode(g, id) + " has an out-of-range operand " +
                               std::to_string(o));
      }
    }
  }
  if (spec.kind == KernelKind::kGlobalStitch) {
    if (spec.phases.empty()) return InvalidArgument(k + ": a global_stitch kernel needs phases");
    for (const KernelSpec& phase : spec.phases) {
      STITCH_RETURN_IF_ERROR(ValidateSpec(g, phase));
      for (int id : phase.nodes) {
        if (!computed.count(id) && !inputs.count(id)) {
          return InvalidArgument(k + ": phase " + phase.name + " computes " + DescribeNode(g, id) +
                                 ", which is neither a node nor an input of the kernel");
        }
      }
    }
    return Status::Ok();
  }
  if (!spec.phases.empty()) return InvalidArgument(k + ": only global_stitch kernels have phases");
  if (spec.kind != KernelKind::kLoop && spec.hero < 0) {
    return InvalidArgument(k + ": a reduce kernel needs a hero");
  }
  if (spec.kind != KernelKind::kLoop && !computed.count(spec.hero) &&
      std::find(spec.outputs.begin(), spec.outputs.end(), spec.hero) == spec.outputs.end()) {
    return InvalidArgument(k + ": the hero is not one of the kernel's nodes");
  }
  return Status::Ok();
}

// Whether 32-bit index arithmetic is safe: every index space the kernel touches, plus the
// grid-stride step, stays below 2^31.
bool Fits32(const Graph& g, const KernelSpec& spec) {
  constexpr int64_t kLimit = int64_t{1} << 30;
  auto small = [&](int id) { return g.nodes[id].shape.elements() < kLimit; };
  for (int id : spec.nodes) {
    if (!small(id)) return false;
    for (int o : g.nodes[id].operands) {
      if (!small(o)) return false;
    }
  }
  for (int id : spec.inputs) {
    if (!small(id)) return false;
  }
  for (int id : spec.outputs) {
    if (!small(id)) return false;
  }
  return true;
}

void AddAnnotation(llvm::Module& m, llvm::Function* fn, const char* key, int value) {
  llvm::LLVMContext& ctx = m.getContext();
  llvm::Metadata* md[] = {
      llvm::ValueAsMetadata::get(fn), llvm::MDString::get(ctx, key),
      llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(llvm::Type::getInt32Ty(ctx), value))};
  m.getOrInsertNamedMetadata("nvvm.annotations")->addOperand(llvm::MDNode::get(ctx, md));
}

}  // namespace

namespace codegen {

StatusOr<EmittedNest> EmitNest(KernelContext& kc) {
  switch (kc.spec.kind) {
    case KernelKind::kLoop:
      return EmitLoopKernel(kc);
    case KernelKind::kRowReduce:
      return EmitRowReduceKernel(kc);
    case KernelKind::kColumnReduce:
      return EmitColumnReduceKernel(kc);
    case KernelKind::kRowStitch:
      return EmitRowStitchKernel(kc);
    case KernelKind::kGlobalStitch:
      return EmitGlobalStitchKernel(kc);
  }
  return Internal("kernel " + kc.spec.name + " has an unknown kind");
}

// Per node of `g`: whether its division and exp may be approximate under `policy`. Under
// kWhereOutputsAreHalf, a node whose every path to the graph's outputs ends at an f16 or
// bf16 output: reductions on the way are fine, since the output's rounding (2^-11 and 2^-8
// relative) is far coarser than the division's 2 ulp of f32.
std::vector<bool> ApproximateMathNodes(const Graph& g, CodegenOptions::ApproximateMath policy) {
  using Policy = CodegenOptions::ApproximateMath;
  if (policy != Policy::kWhereOutputsAreHalf) {
    return std::vector<bool>(g.nodes.size(), policy == Policy::kAlways);
  }
  std::vector<bool> is_output(g.nodes.size(), false);
  for (int o : g.outputs) is_output[static_cast<size_t>(o)] = true;
  const std::vector<std::vector<int>> users = g.Users();
  std::vector<bool> half_only(g.nodes.size(), false);
  const std::vector<int> order = TopologicalOrder(g);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const size_t id = static_cast<size_t>(*it);
    const DType t = g.nodes[id].shape.dtype;
    bool reached = is_output[id];
    bool half = !is_output[id] || t == DType::kF16 || t == DType::kBF16;
    for (int u : users[id]) {
      reached = true;
      half = half && half_only[static_cast<size_t>(u)];
    }
    half_only[id] = reached && half;
  }
  return half_only;
}

}  // namespace codegen

StatusOr<CompiledKernel> EmitKernel(const Graph& g, const KernelSpec& spec,
                                    const CodegenOptions& options, const ShapeClass* shape_class) {
  STITCH_RETURN_IF_ERROR(ValidateSpec(g, spec));
  if (spec.mapping.work_items == 0) {
    return InvalidArgument("kernel '" + spec.name +
                           "' has no thread mapping: schedule it (schedule.h) before codegen");
  }
  llvm::LLVMContext ctx;
  auto module = std::make_unique<llvm::Module>("stitch." + spec.name, ctx);
  module->setTargetTriple(codegen::kNvptxTriple);
  module->setDataLayout(kDataLayout);

  CompiledKernel kernel;
  kernel.name = spec.name;
  kernel.kind = spec.kind;
  kernel.param_nodes = spec.inputs;
  kernel.param_nodes.insert(kernel.param_nodes.end(), spec.outputs.begin(), spec.outputs.end());

  llvm::Type* ptr = llvm::PointerType::get(ctx, 0);
  // Global kernels keep their grid barrier's word there, split reductions their partials.
  const bool has_workspace =
      spec.kind == KernelKind::kGlobalStitch || spec.mapping.reduce_chunks > 1;
  kernel.takes_outer_extent = shape_class != nullptr;
  std::vector<llvm::Type*> params(kernel.param_nodes.size() + (has_workspace ? 1 : 0), ptr);
  if (kernel.takes_outer_extent) params.push_back(llvm::Type::getInt64Ty(ctx));
  auto* fty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), params, false);
  llvm::Function* fn =
      llvm::Function::Create(fty, llvm::GlobalValue::ExternalLinkage, spec.name, module.get());
  fn->addFnAttr(llvm::Attribute::NoUnwind);

  llvm::IRBuilder<> b(ctx);
  codegen::KernelContext kc{g, spec, options, ctx, *module, fn, b, {}, {}};
  kc.approximate_math = codegen::ApproximateMathNodes(g, options.approximate_math);
  kc.index_ty = Fits32(g, spec) ? b.getInt32Ty() : b.getInt64Ty();
  for (size_t i = 0; i < kernel.param_nodes.size(); ++i) {
    llvm::Argument* arg = fn->getArg(static_cast<unsigned>(i));
    int node = kernel.param_nodes[i];
    const bool is_input = i < spec.inputs.size();
    arg->setName((is_input ? "in." : "out.") + std::to_string(node));
    // Buffers of one launch never overlap: each node has its own allocation. Their
    // alignment lets the backend merge a thread's adjacent elements into vector accesses.
    arg->addAttr(llvm::Attribute::NoAlias);
    arg->addAttr(llvm::Attribute::getWithAlignment(ctx, llvm::Align(kMaxVectorBytes)));
    arg->addAttr(llvm::Attribute::NoCapture);
    if (is_input) {
      arg->addAttr(llvm::Attribute::ReadOnly);
      kc.buffers[node] = arg;
    } else {
      kc.output_buffers.push_back(arg);
    }
  }

  if (has_workspace) {
    llvm::Argument* ws = fn->getArg(static_cast<unsigned>(kernel.param_nodes.size()));
    ws->setName("workspace");
    ws->addAttr(llvm::Attribute::NoCapture);
    kc.workspace = ws;
  }

  auto* entry = llvm::BasicBlock::Create(ctx, "entry", fn);
  b.SetInsertPoint(entry);
  if (kernel.takes_outer_extent) {
    llvm::Argument* extent = fn->getArg(static_cast<unsigned>(params.size() - 1));
    extent->setName("outer_extent");
    kc.shape_class = shape_class;
    // The extent is at most the top the index type was chosen for.
    kc.outer_extent = b.CreateTrunc(extent, kc.index_ty);
  }
  StatusOr<codegen::EmittedNest> nest = codegen::EmitNest(kc);
  if (!nest.ok()) return nest.status().WithContext("kernel " + spec.name);
  b.CreateRetVoid();

  kernel.launch = nest->launch;
  kernel.shared_bytes = nest->shared_bytes;
  kernel.dynamic_shared_bytes = nest->dynamic_shared_bytes;
  if (has_workspace) {
    kernel.workspace_bytes = (std::max<uint64_t>(nest->workspace_end, 8) + 255) / 256 * 256;
  }
  const llvm::Function* barrier = module->getFunction(codegen::kGridBarrierFunction);
  kernel.cooperative = barrier != nullptr && !barrier->use_empty();
  if (kernel.cooperative) {
    if (!has_workspace) {
      return Internal("kernel " + spec.name + " has a grid barrier but no workspace");
    }
    // The grid was sized for this many co-resident blocks per SM; ptxas must keep the
    // registers low enough for them (.minnctapersm), or the grid barrier would deadlock.
    const int sms = options.target.device().sms;
    const uint64_t per_sm = (kernel.launch.blocks() + sms - 1) / sms;
    AddAnnotation(*module, fn, "minctasm", static_cast<int>(std::max<uint64_t>(per_sm, 1)));
  }
  AddAnnotation(*module, fn, "kernel", 1);
  AddAnnotation(*module, fn, "maxntidx", static_cast<int>(kernel.launch.block[0]));
  AddAnnotation(*module, fn, "maxntidy", static_cast<int>(kernel.launch.block[1]));
  AddAnnotation(*module, fn, "maxntidz", static_cast<int>(kernel.launch.block[2]));

  std::string verify_log;
  llvm::raw_string_ostream vos(verify_log);
  if (llvm::verifyModule(*module, &vos)) {
    return Internal("kernel " + spec.name + ": emitted an invalid LLVM module: " + vos.str());
  }
  llvm::raw_string_ostream os(kernel.portable_ir);
  llvm::WriteBitcodeToFile(*module, os);
  os.flush();
  return kernel;
}

}  // namespace stitch
