#include "jit.h"

#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>

#include <mutex>

#include "runtime.h"
#include "stitch/codegen/llvm_pipeline.h"

namespace stitch::emu {
namespace {

bool InitNativeTarget() {
  static const bool ok = [] {
    // Both return true on failure.
    const bool failed = llvm::InitializeNativeTarget() || llvm::InitializeNativeTargetAsmPrinter();
    return !failed;
  }();
  return ok;
}

}  // namespace

Jit::~Jit() = default;

const llvm::DataLayout& Jit::data_layout() const { return jit_->getDataLayout(); }

StatusOr<std::unique_ptr<Jit>> Jit::Create() {
  if (!InitNativeTarget()) return Internal("cannot initialise LLVM's native target");
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) {
    return Internal("cannot describe the host for the JIT: " + llvm::toString(jtmb.takeError()));
  }
  jtmb->setCodeGenOptLevel(llvm::CodeGenOpt::Default);
  auto tm = jtmb->createTargetMachine();
  if (!tm) {
    return Internal("cannot create the host target machine: " + llvm::toString(tm.takeError()));
  }
  auto lljit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(*jtmb).create();
  if (!lljit) return Internal("cannot create the JIT: " + llvm::toString(lljit.takeError()));
  std::unique_ptr<Jit> jit(new Jit());
  jit->jit_ = std::move(*lljit);
  jit->tm_ = std::move(*tm);
  jit->triple_ = jit->jit_->getTargetTriple().str();
  return jit;
}

void Jit::Optimize(llvm::Module& module) {
  codegen::RunModulePipeline(module, tm_.get(), codegen::PipelineLevel::kO2);
}

StatusOr<uint64_t> Jit::Load(std::unique_ptr<llvm::Module> module,
                             std::unique_ptr<llvm::LLVMContext> context, const std::string& symbol,
                             const std::string& extra_symbol, uint64_t* extra) {
  auto dylib = jit_->createJITDylib("stitch_kernel_" + std::to_string(next_dylib_++));
  if (!dylib) return Internal("cannot create a JITDylib: " + llvm::toString(dylib.takeError()));
  llvm::orc::JITDylib& jd = *dylib;

  llvm::orc::SymbolMap runtime;
  for (const auto& [name, address] : AllRuntimeSymbols()) {
    runtime[jit_->mangleAndIntern(name)] =
        llvm::JITEvaluatedSymbol(llvm::pointerToJITTargetAddress(address),
                                 llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable);
  }
  if (auto err = jd.define(llvm::orc::absoluteSymbols(std::move(runtime)))) {
    return Internal("cannot define the emulator runtime: " + llvm::toString(std::move(err)));
  }
  // Whatever else the code needs (libm for llvm.exp and friends, memcpy) comes from the
  // process.
  auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      jit_->getDataLayout().getGlobalPrefix());
  if (!process) {
    return Internal("cannot search the process for symbols: " +
                    llvm::toString(process.takeError()));
  }
  jd.addGenerator(std::move(*process));

  llvm::orc::ThreadSafeModule tsm(std::move(module), std::move(context));
  if (auto err = jit_->addIRModule(jd, std::move(tsm))) {
    return Internal("cannot add the kernel to the JIT: " + llvm::toString(std::move(err)));
  }
  auto addr = jit_->lookup(jd, symbol);
  if (!addr) return Internal("cannot compile the kernel: " + llvm::toString(addr.takeError()));
  if (!extra_symbol.empty()) {
    auto e = jit_->lookup(jd, extra_symbol);
    if (!e) return Internal("cannot compile the kernel: " + llvm::toString(e.takeError()));
    *extra = e->getValue();
  }
  return addr->getValue();
}

}  // namespace stitch::emu
