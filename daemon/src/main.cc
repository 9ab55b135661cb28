// stitchd: the node daemon. Configuration comes from flags and an optional YAML file
// (see config.h); SIGTERM or SIGINT drains in-flight work and exits 0.
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>
#include <string_view>

#include "compile_worker_main.h"
#include "daemon.h"
#include "logging.h"
#include "stitch/daemon/config.h"

namespace {

// Blocks the stop signals in every thread (threads inherit the mask), so they are taken
// only by the sigwait in main.
sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace stitch::daemon;
  // A compile worker (compile_worker.h) is stitchd exec'd by stitchd with this first argument.
  if (argc > 1 && std::string_view(argv[1]) == "--compile-worker") {
    return RunCompileWorker(argc, argv);
  }
  sigset_t stop_signals = BlockStopSignals();
  // A client that disconnects mid-write must not kill the daemon.
  std::signal(SIGPIPE, SIG_IGN);

  stitch::StatusOr<ParsedArgs> args = ParseCommandLine(argc, argv, ReadEnvironment());
  if (!args.ok()) {
    std::fprintf(stderr, "stitchd: %s\n", args.status().message().c_str());
    return 2;
  }
  if (args->exit_now) {
    std::fputs(args->exit_message.c_str(), stdout);
    return args->exit_code;
  }
  // Workers run this very binary; /proc/self/exe names it even after a reinstall moved it.
  args->config.compile_worker_executable = "/proc/self/exe";
  const DaemonConfig& config = args->config;
  stitch::Status logging = InitLogging(config.log_format, config.log_level);
  if (!logging.ok()) {
    std::fprintf(stderr, "stitchd: %s\n", logging.message().c_str());
    return 2;
  }
  if (!args->target_note.empty()) spdlog::info("{}", args->target_note);

  stitch::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(config);
  if (!daemon.ok()) {
    spdlog::critical("cannot start: {}", daemon.status().message());
    return 1;
  }
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  spdlog::info("received {}", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
  (*daemon)->Shutdown();
  // Everything that must outlive the process is saved and closed by now. Destroying the
  // stopped gRPC server would wait for idle client connections to go away (seconds), so the
  // process exits without running its destructor. A static holds it (volatile, so the store
  // is not optimised away), and leak checkers see it kept on purpose rather than lost.
  [[maybe_unused]] static Daemon* volatile kept = nullptr;
  kept = daemon->release();
  spdlog::shutdown();
  return 0;
}
