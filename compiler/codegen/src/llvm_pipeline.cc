#include "stitch/codegen/llvm_pipeline.h"

#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassManager.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Transforms/Scalar/InferAddressSpaces.h>
#include <llvm/Transforms/Vectorize/LoadStoreVectorizer.h>

namespace stitch::codegen {
namespace {

constexpr unsigned kGlobalAddressSpace = 1;

// The analysis managers of one pipeline run, registered with the target's analyses.
struct Analyses {
  explicit Analyses(llvm::TargetMachine* machine) : builder(machine) {
    builder.registerModuleAnalyses(modules);
    builder.registerCGSCCAnalyses(sccs);
    builder.registerFunctionAnalyses(functions);
    builder.registerLoopAnalyses(loops);
    builder.crossRegisterProxies(loops, functions, sccs, modules);
  }
  llvm::LoopAnalysisManager loops;
  llvm::FunctionAnalysisManager functions;
  llvm::CGSCCAnalysisManager sccs;
  llvm::ModuleAnalysisManager modules;
  llvm::PassBuilder builder;
};

// Routes every use of each pointer parameter through global memory and back, the form the
// address-space inference starts from.
void CastParametersToGlobal(llvm::Function& fn) {
  if (fn.isDeclaration()) return;
  llvm::IRBuilder<> b(&*fn.getEntryBlock().getFirstInsertionPt());
  for (llvm::Argument& arg : fn.args()) {
    if (!arg.getType()->isPointerTy() || arg.use_empty()) continue;
    llvm::Value* global =
        b.CreateAddrSpaceCast(&arg, llvm::PointerType::get(fn.getContext(), kGlobalAddressSpace));
    llvm::Value* generic = b.CreateAddrSpaceCast(global, arg.getType());
    arg.replaceUsesWithIf(generic, [&](llvm::Use& u) { return u.getUser() != global; });
  }
}

}  // namespace

void RunModulePipeline(llvm::Module& module, llvm::TargetMachine* machine, PipelineLevel level) {
  Analyses a(machine);
  if (machine) machine->registerPassBuilderCallbacks(a.builder);
  const llvm::OptimizationLevel opt =
      level == PipelineLevel::kO3 ? llvm::OptimizationLevel::O3 : llvm::OptimizationLevel::O2;
  llvm::ModulePassManager mpm = a.builder.buildPerModuleDefaultPipeline(opt);
  mpm.run(module, a.modules);
}

void ContractSingleUseProducts(llvm::Module& module) {
  for (llvm::Function& fn : module) {
    for (llvm::Instruction& inst : llvm::instructions(fn)) {
      if (inst.getOpcode() != llvm::Instruction::FMul || !inst.hasOneUse()) continue;
      auto* sum = llvm::dyn_cast<llvm::Instruction>(*inst.user_begin());
      if (sum == nullptr || (sum->getOpcode() != llvm::Instruction::FAdd &&
                             sum->getOpcode() != llvm::Instruction::FSub)) {
        continue;
      }
      inst.setHasAllowContract(true);
      sum->setHasAllowContract(true);
    }
  }
}

void RunGlobalAccessPasses(llvm::Module& module, llvm::TargetMachine* machine) {
  for (llvm::Function& fn : module) CastParametersToGlobal(fn);
  Analyses a(machine);
  llvm::FunctionPassManager fpm;
  fpm.addPass(llvm::InferAddressSpacesPass());
  fpm.addPass(llvm::LoadStoreVectorizerPass());
  for (llvm::Function& fn : module) {
    if (!fn.isDeclaration()) fpm.run(fn, a.functions);
  }
}

}  // namespace stitch::codegen
