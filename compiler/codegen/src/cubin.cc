// AssembleCubin / CubinAvailable: PTX -> cubin with nvJitLink when it is linked in, else
// with the ptxas binary.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "stitch/codegen/codegen.h"
#include "tool_process.h"

#ifdef STITCH_HAVE_NVJITLINK
#include <nvJitLink.h>
#endif

namespace stitch {

std::string CodegenOptions::DefaultPtxasPath() { return STITCH_DEFAULT_PTXAS; }

namespace {

// Reads the register and local-memory figures from ptxas's verbose report, which both
// ptxas -v and nvJitLink's -verbose info log print: "N bytes stack frame, N bytes spill
// stores, N bytes spill loads" and "Used N registers".
CompiledKernel::AssemblyReport ParseAssemblyReport(const std::string& log) {
  CompiledKernel::AssemblyReport r;
  auto number_before = [&](const std::string& marker, int& out) {
    const size_t at = log.find(marker);
    if (at == std::string::npos) return false;
    size_t begin = at;
    while (begin > 0 && std::isdigit(static_cast<unsigned char>(log[begin - 1]))) --begin;
    if (begin == at) return false;
    out = std::atoi(log.substr(begin, at - begin).c_str());
    return true;
  };
  auto number_after = [&](const std::string& marker, int& out) {
    const size_t at = log.find(marker);
    if (at == std::string::npos) return false;
    out = std::atoi(log.c_str() + at + marker.size());
    return true;
  };
  r.reported = number_after("Used ", r.registers);
  number_before(" bytes stack frame", r.stack_bytes);
  number_before(" bytes spill stores", r.spill_store_bytes);
  number_before(" bytes spill loads", r.spill_load_bytes);
  return r;
}

// Reads a little-endian integer of `n` bytes at `at`, or 0 past the end.
uint64_t ReadLe(const std::string& b, size_t at, int n) {
  if (at + n > b.size()) return 0;
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}

#ifdef STITCH_HAVE_NVJITLINK
// Returns nvJitLink's error log, or with `info` its info log (the assembler's -verbose
// report); empty when there is none.
std::string JitLinkLog(nvJitLinkHandle h, bool info = false) {
  size_t size = 0;
  const nvJitLinkResult r =
      info ? nvJitLinkGetInfoLogSize(h, &size) : nvJitLinkGetErrorLogSize(h, &size);
  if (r != NVJITLINK_SUCCESS || size == 0) return "";
  std::string log(size, '\0');
  if ((info ? nvJitLinkGetInfoLog(h, log.data()) : nvJitLinkGetErrorLog(h, log.data())) !=
      NVJITLINK_SUCCESS) {
    return "";
  }
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

Status AssembleWithJitLink(CompiledKernel& kernel, const std::string& target) {
  std::string arch = "-arch=" + target;
  const char* opts[] = {arch.c_str(), "-verbose"};
  nvJitLinkHandle h = nullptr;
  nvJitLinkResult r = nvJitLinkCreate(&h, 2, opts);
  if (r != NVJITLINK_SUCCESS) {
    // Unavailable lets the caller fall back to ptxas (e.g. an arch this nvJitLink lacks).
    return Unavailable("nvJitLinkCreate(" + arch + ") failed with code " + std::to_string(r));
  }
  struct Destroy {
    nvJitLinkHandle* h;
    ~Destroy() { nvJitLinkDestroy(h); }
  } destroy{&h};
  r = nvJitLinkAddData(h, NVJITLINK_INPUT_PTX, kernel.ptx.data(), kernel.ptx.size(),
                       kernel.name.c_str());
  if (r == NVJITLINK_SUCCESS) r = nvJitLinkComplete(h);
  if (r != NVJITLINK_SUCCESS) {
    return Internal("nvJitLink could not assemble kernel " + kernel.name + " for " + target +
                    " (code " + std::to_string(r) + "): " + JitLinkLog(h));
  }
  size_t size = 0;
  if (nvJitLinkGetLinkedCubinSize(h, &size) != NVJITLINK_SUCCESS) {
    return Internal("nvJitLinkGetLinkedCubinSize failed: " + JitLinkLog(h));
  }
  std::string cubin(size, '\0');
  if (nvJitLinkGetLinkedCubin(h, cubin.data()) != NVJITLINK_SUCCESS) {
    return Internal("nvJitLinkGetLinkedCubin failed: " + JitLinkLog(h));
  }
  kernel.cubin = std::move(cubin);
  kernel.assembly = ParseAssemblyReport(JitLinkLog(h, /*info=*/true));
  kernel.assembly.instructions = CubinInstructions(kernel.cubin, kernel.name);
  return Status::Ok();
}
#endif

Status AssembleWithPtxas(CompiledKernel& kernel, const std::string& ptxas,
                         const std::string& target) {
  codegen::ToolDir dir;
  STITCH_ASSIGN_OR_RETURN(const std::string in, dir.Write("in.ptx", kernel.ptx));
  const std::string out = dir.path() + "/out.cubin";
  StatusOr<codegen::ToolRun> run =
      codegen::RunTool({ptxas, "-arch=" + target, "-v", "-o", out, in}, dir);
  if (!run.ok()) {
    return Status(run.status().code(), "ptxas: " + run.status().message());
  }
  if (!run->ok) {
    return Internal("ptxas failed on kernel " + kernel.name + " for " + target + ": " +
                    run->output);
  }
  kernel.cubin = codegen::ReadFileBytes(out);
  if (kernel.cubin.empty()) return Internal("ptxas produced no cubin for kernel " + kernel.name);
  kernel.assembly = ParseAssemblyReport(run->output);
  kernel.assembly.instructions = CubinInstructions(kernel.cubin, kernel.name);
  return Status::Ok();
}

}  // namespace

bool CubinAvailable(const CodegenOptions& options) {
  if (!options.emit_cubin) return false;
#ifdef STITCH_HAVE_NVJITLINK
  unsigned major = 0, minor = 0;
  if (nvJitLinkVersion(&major, &minor) == NVJITLINK_SUCCESS) return true;
#endif
  return codegen::IsExecutable(options.ptxas_path);
}

Status AssembleCubin(CompiledKernel& kernel, const CodegenOptions& options) {
  if (kernel.ptx.empty()) {
    return InvalidArgument("kernel " + kernel.name + " has no PTX; call LowerToPtx first");
  }
  if (!options.emit_cubin) return Unavailable("cubin emission is disabled");
#ifdef STITCH_HAVE_NVJITLINK
  if (!options.prefer_ptxas || !codegen::IsExecutable(options.ptxas_path)) {
    Status s = AssembleWithJitLink(kernel, options.target.arch());
    if (s.code() != StatusCode::kUnavailable || !codegen::IsExecutable(options.ptxas_path))
      return s;
  }
#endif
  if (!codegen::IsExecutable(options.ptxas_path)) {
    return Unavailable("neither nvJitLink nor ptxas (at '" + options.ptxas_path +
                       "') is available; PTX-only mode");
  }
  return AssembleWithPtxas(kernel, options.ptxas_path, options.target.arch());
}

int CubinInstructions(const std::string& cubin, const std::string& name) {
  constexpr uint64_t kInstructionBytes = 16;
  constexpr char kElfMagic[] = {0x7f, 'E', 'L', 'F'};
  constexpr char kElfClass64 = 2;
  if (cubin.size() < 64 || std::memcmp(cubin.data(), kElfMagic, sizeof(kElfMagic)) != 0 ||
      cubin[4] != kElfClass64) {
    return 0;
  }
  const uint64_t shoff = ReadLe(cubin, 0x28, 8);
  const uint64_t shentsize = ReadLe(cubin, 0x3a, 2);
  const uint64_t shnum = ReadLe(cubin, 0x3c, 2);
  if (shentsize < 64 || shoff + shnum * shentsize > cubin.size()) return 0;
  struct Symbol {
    std::string name;
    uint64_t section = 0, value = 0, size = 0;
  };
  std::vector<Symbol> functions;
  for (uint64_t i = 0; i < shnum; ++i) {
    const size_t sh = shoff + i * shentsize;
    if (ReadLe(cubin, sh + 4, 4) != 2) continue;  // SHT_SYMTAB
    const uint64_t offset = ReadLe(cubin, sh + 0x18, 8);
    const uint64_t size = ReadLe(cubin, sh + 0x20, 8);
    const uint64_t link = ReadLe(cubin, sh + 0x28, 4);
    const uint64_t entsize = std::max<uint64_t>(ReadLe(cubin, sh + 0x38, 8), 24);
    if (link >= shnum || offset + size > cubin.size()) return 0;
    const size_t strsh = shoff + link * shentsize;
    const uint64_t stroff = ReadLe(cubin, strsh + 0x18, 8);
    const uint64_t strsize = ReadLe(cubin, strsh + 0x20, 8);
    if (stroff + strsize > cubin.size()) return 0;
    for (uint64_t at = offset; at + 24 <= offset + size; at += entsize) {
      if ((ReadLe(cubin, at + 4, 1) & 0xf) != 2) continue;  // STT_FUNC
      const uint64_t name_at = ReadLe(cubin, at, 4);
      if (name_at >= strsize) continue;
      const char* text = cubin.data() + stroff + name_at;
      functions.push_back({std::string(text, strnlen(text, strsize - name_at)),
                           ReadLe(cubin, at + 6, 2), ReadLe(cubin, at + 8, 8),
                           ReadLe(cubin, at + 16, 8)});
    }
  }
  for (const Symbol& kernel : functions) {
    if (kernel.name != name) continue;
    uint64_t bytes = kernel.size;
    for (const Symbol& other : functions) {
      if (&other == &kernel || other.section != kernel.section) continue;
      if (other.value >= kernel.value && other.value + other.size <= kernel.value + kernel.size) {
        bytes -= other.size;
      }
    }
    return static_cast<int>(bytes / kInstructionBytes);
  }
  return 0;
}

}  // namespace stitch
