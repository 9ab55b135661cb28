// The stitchctl subcommands. Each returns the process exit status and prints a one-line
// error naming the problem on stderr when it fails.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/client/client.h"
#include "stitch/plan/target.h"

namespace stitch::ctl {

struct CompileArgs {
  std::string file;
  // In-process compiles default to Target(); a daemon compiles for its own target unless
  // one is named.
  std::optional<Target> target;
  bool json = false;
  bool print_ptx = false;
  bool cubin = true;
  // When set, each kernel's portable IR (.bc), PTX (.ptx) and cubin (.cubin) are written
  // there as <graph index>_<kernel name>.<ext>, for llvm-dis, ptxas -v or cuobjdump.
  std::string dump_dir;
  std::string daemon;  // when set, ask this stitchd instead of compiling in-process
};
int RunCompile(const CompileArgs& args);
int RunCompileOnDaemon(const CompileArgs& args);

// Arguments of the commands that talk to a running stitchd.
struct DaemonArgs {
  std::string daemon = "unix:///run/stitchd/stitchd.sock";
  bool json = false;
  bool csv = false;      // runtimes
  uint32_t limit = 100;  // cache ls, runtimes
  std::string key;       // cache get
  std::string out;       // cache get: write the serialized bundle here
};
int RunStats(const DaemonArgs& args);
int RunCacheList(const DaemonArgs& args);
int RunCacheGet(const DaemonArgs& args);
// Prints the measured runtimes the daemon holds, one row per key and timed fallback, with
// the cost model's figures beside them: a table, --json, or --csv (the training-data export).
int RunRuntimes(const DaemonArgs& args);

// Arguments of cache export and cache import, which move entries between a node's cache and
// an archive file (stitch/cache/entry_archive.h).
struct CacheTransferArgs {
  std::string file;      // the archive
  std::string data_dir;  // a stopped stitchd's --data-dir
  std::string daemon;    // export only: a running stitchd instead of a data dir
};
// Writes every entry of the data dir's cache, or of the running daemon's, to the archive.
int RunCacheExport(const CacheTransferArgs& args);
// Verifies the whole archive, then stores its entries in the stopped daemon's data dir;
// a refused archive leaves the data dir untouched.
int RunCacheImport(const CacheTransferArgs& args);

// Arguments of warm, which has a daemon compile a model's memory-intensive subgraphs.
struct WarmArgs {
  std::string module;  // HLO module text
  std::string daemon;
  std::optional<Target> target;  // the daemon's own when unset
  bool json = false;
  uint32_t timeout_seconds = 300;  // per subgraph, from when it is sent
  uint32_t jobs = 4;               // subgraphs in flight at once
};
// Returns 0 when every subgraph was compiled or found cached; prints progress on stderr and
// a summary (with each failure's reason) on stdout.
int RunWarm(const WarmArgs& args);

// Returns the gRPC target for a --daemon flag: a path starting with '/' is a Unix socket.
std::string DaemonAddress(const std::string& flag);

// The --tls-ca, --tls-cert, --tls-key and --tls-server-name flags of every command that
// talks to a stitchd, for a "host:port" whose daemon serves TLS (ClientOptions' tls_*
// fields); empty leaves TLS off.
struct DaemonTls {
  std::string ca;
  std::string cert;
  std::string key;
  std::string server_name;
};
// Returns the process's TLS flags; main() fills them while parsing the command line.
DaemonTls& DaemonTlsFlags();

// Returns client options for a --daemon flag: its address and the TLS flags.
client::ClientOptions DaemonClientOptions(const std::string& daemon);

struct RunArgs {
  std::string file;
  bool emulate = false;
  std::vector<std::string> inputs;  // .npy files, one per parameter
  std::string outputs_dir;
  uint64_t seed = 1;
  bool random_order = false;
  bool json = false;
  Target target;
  // Parameter numbers whose dimension 0 varies, named on every graph of the file (replacing
  // any it names): each compiles for its shape class and runs at its own extent.
  std::optional<std::vector<int64_t>> outer_parameters;
};
int RunRun(const RunArgs& args);
// Returns the numbers of a --outer-parameters flag ("0,2"); INVALID_ARGUMENT naming an entry
// that is not a number or is negative.
StatusOr<std::vector<int64_t>> ParseOuterParameters(const std::string& flag);

struct ExtractArgs {
  std::string module;
  std::string out_dir;
};
int RunExtract(const ExtractArgs& args);

struct KeyArgs {
  std::string file;
  std::string against;  // second file to explain the difference with
  bool explain = false;
  Target target;
  std::string salt;
};
int RunKey(const KeyArgs& args);

// Prints "stitchctl: <message>" on stderr and returns 1.
int Fail(const std::string& message);

}  // namespace stitch::ctl
