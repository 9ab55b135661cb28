// LowerToPtx: portable module -> grid barrier body, libdevice (or fallback math) -> O3 ->
// PTX text.
#include <llvm/ADT/SmallString.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/Transforms/IPO/Internalize.h>

#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "device_math.h"
#include "grid_barrier.h"
#include "stitch/codegen/codegen.h"
#include "stitch/codegen/llvm_pipeline.h"

extern "C" {
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
}

namespace stitch {

std::string CodegenOptions::DefaultLibdevicePath() { return STITCH_DEFAULT_LIBDEVICE; }

namespace {

constexpr size_t kLargeKernelInstructions = 4000;

void InitNvptxOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

// libdevice's bytes, read once per path and kept for the process lifetime (lazy bitcode
// modules refer to the buffer while they live).
StatusOr<const llvm::MemoryBuffer*> LibdeviceBytes(const std::string& path) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::unique_ptr<llvm::MemoryBuffer>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(path);
  if (it != cache.end()) return it->second.get();
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!buf) {
    return NotFound("cannot read libdevice '" + path + "': " + buf.getError().message());
  }
  const llvm::MemoryBuffer* raw = buf->get();
  cache.emplace(path, std::move(*buf));
  return raw;
}

bool HasMathDeclarations(const llvm::Module& m) {
  for (const llvm::Function& f : m) {
    if (f.isDeclaration() && f.getName().startswith("__nv_")) return true;
  }
  return false;
}

Status LinkLibdevice(llvm::Module& m, const std::string& path) {
  STITCH_ASSIGN_OR_RETURN(const llvm::MemoryBuffer* bytes, LibdeviceBytes(path));
  auto lib = llvm::getLazyBitcodeModule(bytes->getMemBufferRef(), m.getContext());
  if (!lib) {
    return Internal("cannot parse libdevice '" + path + "': " + llvm::toString(lib.takeError()));
  }
  (*lib)->setTargetTriple(m.getTargetTriple());
  (*lib)->setDataLayout(m.getDataLayout());
  // Only the functions the kernel calls are materialised; they become internal so that O3
  // inlines them and drops the rest.
  bool failed = llvm::Linker::linkModules(
      m, std::move(*lib), llvm::Linker::Flags::LinkOnlyNeeded,
      [](llvm::Module& merged, const llvm::StringSet<>& linked) {
        llvm::internalizeModule(merged, [&linked](const llvm::GlobalValue& gv) {
          return !gv.hasName() || !linked.count(gv.getName());
        });
      });
  if (failed) return Internal("linking libdevice '" + path + "' failed");
  return Status::Ok();
}

}  // namespace

Status LowerToPtx(CompiledKernel& kernel, const CodegenOptions& options) {
  InitNvptxOnce();
  llvm::LLVMContext ctx;
  auto parsed =
      llvm::parseBitcodeFile(llvm::MemoryBufferRef(kernel.portable_ir, kernel.name + ".bc"), ctx);
  if (!parsed) {
    return InvalidArgument("kernel " + kernel.name + ": the portable IR does not parse: " +
                           llvm::toString(parsed.takeError()));
  }
  std::unique_ptr<llvm::Module> m = std::move(*parsed);
  m->setTargetTriple(codegen::kNvptxTriple);
  // The grid barrier gets its device body here; O3 inlines it into the kernel.
  STITCH_RETURN_IF_ERROR(codegen::DefineGridBarrier(*m).WithContext("kernel " + kernel.name));
  // cvt.rn.bf16.f32 and max.NaN.f32 are sm_80 instructions (PTX ISA 7.0).
  STITCH_RETURN_IF_ERROR(
      codegen::DefineMachineFunctions(*m, options.target.compute_capability() >= 80)
          .WithContext("kernel " + kernel.name));
  STITCH_RETURN_IF_ERROR(
      codegen::DefineFlushToZeroApproximations(*m).WithContext("kernel " + kernel.name));

  if (HasMathDeclarations(*m)) {
    std::ifstream probe(options.libdevice_path, std::ios::binary);
    if (!options.libdevice_path.empty() && probe.good()) {
      // libdevice asks __nvvm_reflect("__CUDA_FTZ"); denormals are kept.
      m->addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", uint32_t{0});
      STITCH_RETURN_IF_ERROR(
          LinkLibdevice(*m, options.libdevice_path).WithContext("kernel " + kernel.name));
    } else {
      STITCH_RETURN_IF_ERROR(codegen::DefineFallbackMath(*m).WithContext("kernel " + kernel.name));
    }
  }

  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(codegen::kNvptxTriple, error);
  if (!target) return Internal("NVPTX target unavailable: " + error);
  const Target& gpu = options.target;
  llvm::TargetOptions topts;
  std::unique_ptr<llvm::TargetMachine> tm(
      target->createTargetMachine(codegen::kNvptxTriple, gpu.llvm_cpu(), gpu.ptx_features(), topts,
                                  llvm::Reloc::PIC_, std::nullopt, llvm::CodeGenOpt::Aggressive));
  if (!tm) return Internal("cannot create an NVPTX target machine for " + gpu.name());
  m->setDataLayout(tm->createDataLayout());

  codegen::RunModulePipeline(*m, tm.get(), codegen::PipelineLevel::kO3);
  if (options.contract_products) codegen::ContractSingleUseProducts(*m);

  std::string verify_log;
  llvm::raw_string_ostream vos(verify_log);
  if (llvm::verifyModule(*m, &vos)) {
    return Internal("kernel " + kernel.name + ": optimised module is invalid: " + vos.str());
  }
  for (const llvm::Function& f : *m) {
    if (f.isDeclaration() && !f.isIntrinsic() && !f.use_empty()) {
      return Internal("kernel " + kernel.name + ": unresolved call to '" + f.getName().str() +
                      "' after linking the math library");
    }
  }

  // NVPTX's IR-level codegen passes (loop strength reduction, n-ary reassociation,
  // straight-line strength reduction) grow super-linearly with block size: on threefry-like
  // kernels with >10k instructions they take seconds. The IR is already at O3 and ptxas
  // optimises again, so huge kernels skip them.
  size_t instructions = 0;
  for (const llvm::Function& f : *m) instructions += f.getInstructionCount();
  if (instructions > kLargeKernelInstructions) {
    codegen::RunGlobalAccessPasses(*m, tm.get());
    tm->setOptLevel(llvm::CodeGenOpt::None);
  }

  llvm::SmallString<0> ptx;
  {
    llvm::raw_svector_ostream os(ptx);
    llvm::legacy::PassManager pm;
    if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CGFT_AssemblyFile)) {
      return Internal("the NVPTX backend cannot emit assembly for " + gpu.name());
    }
    pm.run(*m);
  }
  kernel.ptx.assign(ptx.begin(), ptx.end());
  return Status::Ok();
}

}  // namespace stitch
