// stitchctl: compile, run on the emulator, extract and key stitch graphs from the shell.
#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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

// A subcommand and what runs it once the command line names it.
struct Command {
  CLI::App* parsed_by;
  std::function<int()> run;
};

// The options of a command that asks a running stitchd: its address and the TLS flags.
CLI::Option* AddDaemonOptions(CLI::App* command, std::string& daemon) {
  CLI::Option* address =
      command->add_option("--daemon", daemon, "stitchd address: unix:///path, /path or host:port");
  AddTlsOptions(command);
  return address;
}

Command AddCompile(CLI::App& app) {
  auto args = std::make_shared<stitch::ctl::CompileArgs>();
  auto* c = app.add_subcommand("compile", "Compile HLO text or a stitch.v1.Graph to kernels");
  c->add_option("file", args->file, "HLO text, binary stitch.v1.Graph or its JSON")->required();
  AddTargetOption(c, args->target);
  c->add_flag("--json", args->json, "Print JSON");
  c->add_flag("--ptx", args->print_ptx, "Print each kernel's PTX");
  c->add_flag("!--no-cubin", args->cubin, "Stop at PTX");
  c->add_option("--dump-dir", args->dump_dir,
                "Write each kernel's portable IR (.bc), PTX and cubin to this directory");
  c->add_option("--daemon", args->daemon,
                "Ask this stitchd (unix:///path, /path or host:port) instead of compiling here");
  AddTlsOptions(c);
  return {c, [args] {
            if (!args->daemon.empty() && !args->dump_dir.empty()) {
              return stitch::ctl::Fail(
                  "--dump-dir needs an in-process compile: a daemon returns no portable IR");
            }
            return args->daemon.empty() ? stitch::ctl::RunCompile(*args)
                                        : stitch::ctl::RunCompileOnDaemon(*args);
          }};
}

Command AddStats(CLI::App& app) {
  auto args = std::make_shared<stitch::ctl::DaemonArgs>();
  auto* st = app.add_subcommand("stats", "Print a running stitchd's counters");
  AddDaemonOptions(st, args->daemon);
  st->add_flag("--json", args->json, "Print JSON");
  return {st, [args] { return stitch::ctl::RunStats(*args); }};
}

Command AddRuntimes(CLI::App& app) {
  auto args = std::make_shared<stitch::ctl::DaemonArgs>();
  auto* rt = app.add_subcommand("runtimes", "Print the GPU times jobs measured, beside the model");
  AddDaemonOptions(rt, args->daemon);
  rt->add_option("--limit", args->limit, "At most this many keys, most measured first");
  auto* json = rt->add_flag("--json", args->json, "Print JSON");
  rt->add_flag("--csv", args->csv, "Print CSV, one row per key and timed kernels")->excludes(json);
  return {rt, [args] { return stitch::ctl::RunRuntimes(*args); }};
}

// `cache ls`, `cache get`, `cache export` and `cache import`.
std::vector<Command> AddCache(CLI::App& app) {
  auto* cache = app.add_subcommand("cache", "Inspect a running stitchd's kernel cache");
  cache->require_subcommand(1);

  auto list = std::make_shared<stitch::ctl::DaemonArgs>();
  auto* ls = cache->add_subcommand("ls", "List cached bundles, most recently used first");
  AddDaemonOptions(ls, list->daemon);
  ls->add_option("--limit", list->limit, "At most this many entries");
  ls->add_flag("--json", list->json, "Print JSON");

  auto one = std::make_shared<stitch::ctl::DaemonArgs>();
  auto* get = cache->add_subcommand("get", "Show one cached bundle");
  get->add_option("key", one->key, "The bundle's key (64 hex digits)")->required();
  AddDaemonOptions(get, one->daemon);
  get->add_option("--out", one->out, "Write the serialized stitch.v1.KernelBundle here");
  get->add_flag("--json", one->json, "Print JSON");

  auto out = std::make_shared<stitch::ctl::CacheTransferArgs>();
  auto* exp = cache->add_subcommand("export", "Write every cached bundle to an archive file");
  exp->add_option("file", out->file, "The archive to write")->required();
  auto* exp_dir = exp->add_option("--data-dir", out->data_dir, "A stopped stitchd's data dir");
  exp->add_option("--daemon", out->daemon,
                  "A running stitchd instead (unix:///path, /path or host:port)")
      ->excludes(exp_dir);
  AddTlsOptions(exp);

  auto in = std::make_shared<stitch::ctl::CacheTransferArgs>();
  auto* imp = cache->add_subcommand("import", "Verify an archive and store its bundles");
  imp->add_option("file", in->file, "The archive to read")->required();
  imp->add_option("--data-dir", in->data_dir, "A stopped stitchd's data dir")->required();

  return {{ls, [list] { return stitch::ctl::RunCacheList(*list); }},
          {get, [one] { return stitch::ctl::RunCacheGet(*one); }},
          {exp, [out] { return stitch::ctl::RunCacheExport(*out); }},
          {imp, [in] { return stitch::ctl::RunCacheImport(*in); }}};
}

Command AddWarm(CLI::App& app) {
  auto args = std::make_shared<stitch::ctl::WarmArgs>();
  auto* w = app.add_subcommand(
      "warm", "Have a stitchd compile the memory-intensive subgraphs of an HLO module");
  w->add_option("module", args->module, "HLO module text")->required();
  AddDaemonOptions(w, args->daemon)->required();
  AddTargetOption(w, args->target);
  w->add_flag("--json", args->json, "Print the summary as JSON");
  w->add_option("--timeout", args->timeout_seconds, "Seconds each subgraph may take (default 300)");
  w->add_option("--jobs", args->jobs, "Subgraphs the daemon is asked for at once (default 4)");
  return {w, [args] { return stitch::ctl::RunWarm(*args); }};
}

Command AddRun(CLI::App& app) {
  struct Options {
    stitch::ctl::RunArgs run;
    std::string inputs;
    std::string outer_parameters;
    CLI::Option* outer_option = nullptr;
  };
  auto args = std::make_shared<Options>();
  auto* r = app.add_subcommand("run", "Compile, run on the emulator, compare with the interpreter");
  r->add_option("file", args->run.file, "Graph file")->required();
  r->add_flag("--emulate", args->run.emulate,
              "Run on the host GPU emulator (the only backend today)");
  r->add_option("--inputs", args->inputs, "Comma-separated .npy files, one per parameter");
  r->add_option("--outputs", args->run.outputs_dir, "Directory to write outputs as .npy");
  r->add_option("--seed", args->run.seed, "Seed for random inputs");
  r->add_flag("--random-order", args->run.random_order,
              "Run threads in random order between barriers");
  AddTargetOption(r, args->run.target);
  r->add_flag("--json", args->run.json, "Print JSON");
  args->outer_option = r->add_option(
      "--outer-parameters", args->outer_parameters,
      "Comma-separated parameter numbers whose dimension 0 varies: compile each graph's "
      "bucket of extents and run it at the graph's own");
  return {r, [args] {
            stitch::ctl::RunArgs& run = args->run;
            if (!args->inputs.empty()) run.inputs = CLI::detail::split(args->inputs, ',');
            if (args->outer_option->count() > 0) {
              stitch::StatusOr<std::vector<int64_t>> outer =
                  stitch::ctl::ParseOuterParameters(args->outer_parameters);
              if (!outer.ok()) return stitch::ctl::Fail(outer.status().message());
              run.outer_parameters = *outer;
            }
            return stitch::ctl::RunRun(run);
          }};
}

Command AddExtract(CLI::App& app) {
  auto args = std::make_shared<stitch::ctl::ExtractArgs>();
  auto* e = app.add_subcommand("extract", "Write the memory-intensive subgraphs of an HLO module");
  e->add_option("module", args->module, "HLO module text")->required();
  e->add_option("--out", args->out_dir, "Output directory")->required();
  return {e, [args] { return stitch::ctl::RunExtract(*args); }};
}

Command AddKey(CLI::App& app) {
  auto args = std::make_shared<stitch::ctl::KeyArgs>();
  auto* k = app.add_subcommand("key", "Print a graph's cache key and its components");
  k->add_option("file", args->file, "Graph file")->required();
  k->add_flag("--explain", args->explain, "Print every component of the key");
  k->add_option("--against", args->against, "Explain how the key differs from this graph's");
  AddTargetOption(k, args->target);
  k->add_option("--salt", args->salt, "Namespace salt");
  return {k, [args] { return stitch::ctl::RunKey(*args); }};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stitchctl: the stitchd command-line tool"};
  app.require_subcommand(1);
  std::vector<Command> commands = {AddCompile(app), AddStats(app)};
  for (Command& c : AddCache(app)) commands.push_back(std::move(c));
  for (Command c : {AddRuntimes(app), AddWarm(app), AddRun(app), AddExtract(app), AddKey(app)}) {
    commands.push_back(std::move(c));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    return app.exit(err);
  }
  for (const Command& c : commands) {
    if (c.parsed_by->parsed()) return c.run();
  }
  return stitch::ctl::Fail("no subcommand");
}
