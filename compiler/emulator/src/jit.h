// A thin wrapper over ORC's LLJIT for the host: optimises retargeted modules and loads
// each into its own JITDylib, where the emulator runtime and the process's symbols
// (libm) resolve its external references.
//
// Thread-safety: a Jit may be used from one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "stitch/base/status.h"

namespace llvm {
class DataLayout;
class LLVMContext;
class Module;
class TargetMachine;
namespace orc {
class LLJIT;
class ThreadSafeContext;
}  // namespace orc
}  // namespace llvm

namespace stitch::emu {

class Jit {
 public:
  // Returns a JIT for the host, or INTERNAL when the native target cannot be set up.
  static StatusOr<std::unique_ptr<Jit>> Create();
  ~Jit();

  const std::string& triple() const { return triple_; }
  const llvm::DataLayout& data_layout() const;

  // Runs the O2 pipeline tuned for the host on `module`.
  void Optimize(llvm::Module& module);

  // Compiles `module` (which must live in `context`) in a fresh JITDylib and returns the
  // address of `symbol`; `*extra` receives the address of `extra_symbol` when that is not
  // empty. Returns INTERNAL when compiling or linking fails, naming missing symbols.
  StatusOr<uint64_t> Load(std::unique_ptr<llvm::Module> module,
                          std::unique_ptr<llvm::LLVMContext> context, const std::string& symbol,
                          const std::string& extra_symbol, uint64_t* extra);

 private:
  Jit() = default;

  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::unique_ptr<llvm::TargetMachine> tm_;
  std::string triple_;
  uint64_t next_dylib_ = 0;
};

}  // namespace stitch::emu
