// Kernels written as LLVM assembly text in tests, turned into the bitcode a CompiledKernel
// carries.
#pragma once

#include <gtest/gtest.h>
#include <llvm/AsmParser/Parser.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>

#include <memory>
#include <string>

namespace stitch::testing {

// Returns the bitcode of the module in `text`, or "" after reporting its parse error as a
// test failure.
inline std::string TextIrToBitcode(const std::string& text) {
  llvm::LLVMContext ctx;
  llvm::SMDiagnostic diag;
  std::unique_ptr<llvm::Module> m = llvm::parseAssemblyString(text, diag, ctx);
  if (m == nullptr) {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    diag.print("kernel", os);
    ADD_FAILURE() << os.str();
    return "";
  }
  std::string bitcode;
  llvm::raw_string_ostream os(bitcode);
  llvm::WriteBitcodeToFile(*m, os);
  os.flush();
  return bitcode;
}

}  // namespace stitch::testing
