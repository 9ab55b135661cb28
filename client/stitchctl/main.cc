// stitchctl: compile, run on the emulator, extract and key stitch graphs from the shell.
#include <CLI/CLI.hpp>

#include "commands.h"

namespace {

// Adds a --target option that parses its value with Target::Parse, so a bad spelling is a
// usage error naming the supported targets.
template <typename TargetField>
void AddTargetOption(CLI::App* command, TargetField& field) {
  command->add_option_function<std::string>(
      "--target",
      [&field](const std::string& spelling) {
        stitch::StatusOr<stitch::Target> target = stitch::Target::Parse(spelling);
        if (!target.ok()) throw CLI::ValidationError("--target", target.status().message());
        field = *target;
      },
      "GPU target: " + stitch::Target::SupportedList() + " (default " + stitch::Target().name() +
          ")");
}

// Adds the TLS flags of a command that talks to a stitchd (DaemonTls).
void AddTlsOptions(CLI::App* command) {
  stitch::ctl::DaemonTls& tls = stitch::ctl::DaemonTlsFlags();
  command->add_option("--tls-ca", tls.ca, "PEM CA that verifies a host:port daemon's certificate");
  auto* cert = command->add_option("--tls-cert", tls.cert,
                                   "PEM client certificate, for a daemon that requires one");
  auto* key = command->add_option("--tls-key", tls.key, "PEM key of --tls-cert");
  cert->needs(key);
  key->needs(cert);
  command->add_option("--tls-server-name", tls.server_name,
                      "Name the daemon's certificate must carry, if not the address's host");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace stitch::ctl;
  CLI::App app{"stitchctl: the stitchd command-line tool"};
  app.require_subcommand(1);

  CompileArgs compile;
  auto* c = app.add_subcommand("compile", "Compile HLO text or a stitch.v1.Graph to kernels");
  c->add_option("file", compile.file, "HLO text, binary stitch.v1.Graph or its JSON")->required();
  AddTargetOption(c, compile.target);
  c->add_flag("--json", compile.json, "Print JSON");
  c->add_flag("--ptx", compile.print_ptx, "Print each kernel's PTX");
  c->add_flag("!--no-cubin", compile.cubin, "Stop at PTX");
  c->add_option("--dump-dir", compile.dump_dir,
                "Write each kernel's portable IR (.bc), PTX and cubin to this directory");
  c->add_option("--daemon", compile.daemon,
                "Ask this stitchd (unix:///path, /path or host:port) instead of compiling here");

  DaemonArgs daemon;
  const char* kDaemonHelp = "stitchd address: unix:///path, /path or host:port";
  auto* st = app.add_subcommand("stats", "Print a running stitchd's counters");
  st->add_option("--daemon", daemon.daemon, kDaemonHelp);
  st->add_flag("--json", daemon.json, "Print JSON");
  auto* cache = app.add_subcommand("cache", "Inspect a running stitchd's kernel cache");
  cache->require_subcommand(1);
  auto* ls = cache->add_subcommand("ls", "List cached bundles, most recently used first");
  ls->add_option("--daemon", daemon.daemon, kDaemonHelp);
  ls->add_option("--limit", daemon.limit, "At most this many entries");
  ls->add_flag("--json", daemon.json, "Print JSON");
  auto* get = cache->add_subcommand("get", "Show one cached bundle");
  get->add_option("key", daemon.key, "The bundle's key (64 hex digits)")->required();
  get->add_option("--daemon", daemon.daemon, kDaemonHelp);
  get->add_option("--out", daemon.out, "Write the serialized stitch.v1.KernelBundle here");
  get->add_flag("--json", daemon.json, "Print JSON");

  auto* rt = app.add_subcommand("runtimes", "Print the GPU times jobs measured, beside the model");
  rt->add_option("--daemon", daemon.daemon, kDaemonHelp);
  rt->add_option("--limit", daemon.limit, "At most this many keys, most measured first");
  auto* rt_json = rt->add_flag("--json", daemon.json, "Print JSON");
  rt->add_flag("--csv", daemon.csv, "Print CSV, one row per key and timed kernels")
      ->excludes(rt_json);

  CacheTransferArgs transfer;
  auto* exp = cache->add_subcommand("export", "Write every cached bundle to an archive file");
  exp->add_option("file", transfer.file, "The archive to write")->required();
  auto* exp_dir = exp->add_option("--data-dir", transfer.data_dir, "A stopped stitchd's data dir");
  exp->add_option("--daemon", transfer.daemon,
                  "A running stitchd instead (unix:///path, /path or host:port)")
      ->excludes(exp_dir);
  auto* imp = cache->add_subcommand("import", "Verify an archive and store its bundles");
  imp->add_option("file", transfer.file, "The archive to read")->required();
  imp->add_option("--data-dir", transfer.data_dir, "A stopped stitchd's data dir")->required();

  WarmArgs warm;
  auto* w = app.add_subcommand(
      "warm", "Have a stitchd compile the memory-intensive subgraphs of an HLO module");
  w->add_option("module", warm.module, "HLO module text")->required();
  w->add_option("--daemon", warm.daemon, kDaemonHelp)->required();
  AddTargetOption(w, warm.target);
  w->add_flag("--json", warm.json, "Print the summary as JSON");
  w->add_option("--timeout", warm.timeout_seconds, "Seconds each subgraph may take (default 300)");
  w->add_option("--jobs", warm.jobs, "Subgraphs the daemon is asked for at once (default 4)");

  RunArgs run;
  std::string inputs;
  auto* r = app.add_subcommand("run", "Compile, run on the emulator, compare with the interpreter");
  r->add_option("file", run.file, "Graph file")->required();
  r->add_flag("--emulate", run.emulate, "Run on the host GPU emulator (the only backend today)");
  r->add_option("--inputs", inputs, "Comma-separated .npy files, one per parameter");
  r->add_option("--outputs", run.outputs_dir, "Directory to write outputs as .npy");
  r->add_option("--seed", run.seed, "Seed for random inputs");
  r->add_flag("--random-order", run.random_order, "Run threads in random order between barriers");
  AddTargetOption(r, run.target);
  r->add_flag("--json", run.json, "Print JSON");
  std::string outer_parameters;
  auto* outer_option = r->add_option(
      "--outer-parameters", outer_parameters,
      "Comma-separated parameter numbers whose dimension 0 varies: compile each graph's "
      "bucket of extents and run it at the graph's own");

  ExtractArgs extract;
  auto* e = app.add_subcommand("extract", "Write the memory-intensive subgraphs of an HLO module");
  e->add_option("module", extract.module, "HLO module text")->required();
  e->add_option("--out", extract.out_dir, "Output directory")->required();

  for (CLI::App* command : {c, st, ls, get, rt, exp, w}) AddTlsOptions(command);

  KeyArgs key;
  auto* k = app.add_subcommand("key", "Print a graph's cache key and its components");
  k->add_option("file", key.file, "Graph file")->required();
  k->add_flag("--explain", key.explain, "Print every component of the key");
  k->add_option("--against", key.against, "Explain how the key differs from this graph's");
  AddTargetOption(k, key.target);
  k->add_option("--salt", key.salt, "Namespace salt");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    return app.exit(err);
  }
  if (c->parsed()) {
    if (!compile.daemon.empty() && !compile.dump_dir.empty()) {
      return Fail("--dump-dir needs an in-process compile: a daemon returns no portable IR");
    }
    return compile.daemon.empty() ? RunCompile(compile) : RunCompileOnDaemon(compile);
  }
  if (st->parsed()) return RunStats(daemon);
  if (ls->parsed()) return RunCacheList(daemon);
  if (get->parsed()) return RunCacheGet(daemon);
  if (rt->parsed()) return RunRuntimes(daemon);
  if (exp->parsed()) return RunCacheExport(transfer);
  if (imp->parsed()) return RunCacheImport(transfer);
  if (w->parsed()) return RunWarm(warm);
  if (r->parsed()) {
    if (!inputs.empty()) run.inputs = CLI::detail::split(inputs, ',');
    if (outer_option->count() > 0) {
      stitch::StatusOr<std::vector<int64_t>> outer = ParseOuterParameters(outer_parameters);
      if (!outer.ok()) return Fail(outer.status().message());
      run.outer_parameters = *outer;
    }
    return RunRun(run);
  }
  if (e->parsed()) return RunExtract(extract);
  if (k->parsed()) return RunKey(key);
  return Fail("no subcommand");
}
