// Fuzzes stitchd's YAML config file: the input is written to a file and read with
// --config, as the daemon reads it at start. A config that parses must print (ToYaml) to a
// file that parses back to the same config, as --print-config promises.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include "stitch/daemon/config.h"

namespace {

// One scratch file per process, rewritten for every input and removed at exit.
std::string scratch_path;

void RemoveScratch() { unlink(scratch_path.c_str()); }

const std::string& ScratchPath() {
  if (scratch_path.empty()) {
    std::string p = "/tmp/stitch_config_fuzz_XXXXXX";
    const int fd = mkstemp(p.data());
    if (fd < 0) std::abort();
    close(fd);
    scratch_path = p;
    std::atexit(RemoveScratch);
  }
  return scratch_path;
}

void WriteScratch(std::string_view text) {
  std::ofstream out(ScratchPath(), std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out) std::abort();
}

stitch::StatusOr<stitch::daemon::ParsedArgs> Parse() {
  // A fixed environment, and an explicit --target so that no input makes the parser probe
  // the CUDA driver; the file's own target is still read and checked before the flag wins.
  stitch::daemon::Environment env;
  env.home = "/home/fuzz";
  const char* argv[] = {"stitchd", "--config", ScratchPath().c_str(), "--target", "sm_90"};
  return stitch::daemon::ParseCommandLine(5, argv, env);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  WriteScratch(std::string_view(reinterpret_cast<const char*>(data), size));
  stitch::StatusOr<stitch::daemon::ParsedArgs> parsed = Parse();
  if (!parsed.ok()) return 0;
  const std::string yaml = stitch::daemon::ToYaml(parsed->config);
  WriteScratch(yaml);
  stitch::StatusOr<stitch::daemon::ParsedArgs> again = Parse();
  if (!again.ok() || stitch::daemon::ToYaml(again->config) != yaml) {
    std::fprintf(stderr, "printed config does not read back:\n%s\n%s\n", yaml.c_str(),
                 again.ok() ? "" : again.status().ToString().c_str());
    std::abort();
  }
  return 0;
}
