// Test-only mutations of a compiled kernel's portable IR, to show that a check sees the class
// of bug it is meant to see. Never used outside tests.
#pragma once

#include <llvm/Analysis/ValueTracking.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <string>
#include <vector>

#include "stitch/codegen/codegen.h"

namespace stitch::testing {

// Moves every store through the kernel parameter that holds node `node`'s buffer by
// `elements` elements of the stored type: an off-by-`elements` store index. Returns how many
// stores it moved (0 when the kernel does not write that node), or INVALID_ARGUMENT when the
// IR does not parse.
inline StatusOr<int> ShiftStoresToParameter(CompiledKernel& kernel, int node, int64_t elements) {
  auto at = std::find(kernel.param_nodes.begin(), kernel.param_nodes.end(), node);
  if (at == kernel.param_nodes.end()) return 0;
  const unsigned param = static_cast<unsigned>(at - kernel.param_nodes.begin());
  llvm::LLVMContext ctx;
  auto buffer = llvm::MemoryBuffer::getMemBuffer(kernel.portable_ir, kernel.name, false);
  auto parsed = llvm::parseBitcodeFile(buffer->getMemBufferRef(), ctx);
  if (!parsed) {
    return InvalidArgument("kernel " + kernel.name + ": " + llvm::toString(parsed.takeError()));
  }
  std::unique_ptr<llvm::Module> module = std::move(*parsed);
  llvm::Function* fn = module->getFunction(kernel.name);
  if (fn == nullptr || fn->arg_size() <= param) {
    return InvalidArgument("kernel " + kernel.name + " is not in its own IR");
  }
  llvm::Argument* target = fn->getArg(param);
  std::vector<llvm::StoreInst*> stores;
  for (llvm::Instruction& inst : llvm::instructions(*fn)) {
    auto* store = llvm::dyn_cast<llvm::StoreInst>(&inst);
    if (store != nullptr && llvm::getUnderlyingObject(store->getPointerOperand(), 0) == target) {
      stores.push_back(store);
    }
  }
  for (llvm::StoreInst* store : stores) {
    llvm::IRBuilder<> b(store);
    store->setOperand(1, b.CreateGEP(store->getValueOperand()->getType(),
                                     store->getPointerOperand(), b.getInt64(elements)));
  }
  kernel.portable_ir.clear();
  llvm::raw_string_ostream os(kernel.portable_ir);
  llvm::WriteBitcodeToFile(*module, os);
  os.flush();
  return static_cast<int>(stores.size());
}

}  // namespace stitch::testing
