// Compiles in supervised worker processes, so that a compile that crashes, aborts, spins or
// runs out of memory costs one request and never the daemon or its cache.
//
// A worker is the stitchd binary run as `stitchd --compile-worker ...` (exec'd, never a bare
// fork of the multithreaded daemon), one per compile-pool thread, each reused across compiles.
// Daemon and worker speak over a socketpair: length-prefixed frames of length-prefixed fields
// (compile_worker.cc). The worker rebuilds the resolver's compile options (target, cubin, salt,
// graph limits; every other option is the default on both sides), checks that it computes the
// same key, and runs CompileVerifiedGraph and ToBundle exactly as the daemon does in-thread,
// so its bundles are the in-thread bundles byte for byte (but for the measured compile time).
//
// Limits: the worker sets RLIMIT_AS once and, before each compile, the soft RLIMIT_CPU to its
// CPU time so far plus the per-compile budget (a SIGXCPU ends it); the supervisor kills a
// worker that runs past the wall-clock limit. A worker that dies is restarted at once.
//
// Thread-safety: Compile may be called from any thread, concurrently up to `count` calls (the
// compile pool's thread count); a further call waits for a worker. Errors are returned as a
// Status with the failure's kind, never thrown.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "compile_worker_main.h"
#include "stitch/base/status.h"
#include "stitch/driver/compile.h"
#include "stitch/ir/graph.h"
#include "stitch/ir/key.h"
#include "stitch/v1/kernel_bundle.pb.h"

namespace stitch::daemon {

// Why a compile failed; the `kind` label of stitch_compile_failures_total.
enum class CompileFailureKind { kNone, kCrash, kCpuLimit, kMemoryLimit, kTimeout, kError };

// Returns "crash", "cpu_limit", "memory_limit", "timeout" or "error" ("none" for kNone).
const char* CompileFailureKindName(CompileFailureKind kind);

struct CompileWorkerLimits {
  // CPU seconds one compile may use (RLIMIT_CPU, reset before each compile).
  uint64_t cpu_seconds = 300;
  // Address space of a worker process (RLIMIT_AS).
  uint64_t memory_bytes = uint64_t{8} << 30;
  // Wall-clock seconds one compile may take before the supervisor kills its worker.
  uint64_t wall_seconds = 600;
  // Test-only: honour graphs named stitch.fault.{abort,spin,oom,sleep} (compile_worker.cc).
  bool fault_injection = false;
};

// What one compile came to.
struct WorkerCompileResult {
  // OK with `bundle`, or the compiler's error, or the worker's death or limit (INTERNAL for
  // a crash, RESOURCE_EXHAUSTED for a limit), with a message that says which; UNAVAILABLE
  // when no worker could be started.
  Status status;
  v1::KernelBundle bundle;
  CompileFailureKind kind = CompileFailureKind::kNone;
  // A worker died (or was killed) during this compile and a new one was started.
  bool worker_restarted = false;
};

class CompileWorkers {
 public:
  // Runs up to `count` workers of `executable` (the stitchd binary), started on first use.
  CompileWorkers(std::string executable, CompileWorkerLimits limits, uint32_t count);
  // Closes every worker's socket (an idle worker exits on EOF) and reaps it, killing one
  // still running after a second.
  ~CompileWorkers();
  CompileWorkers(const CompileWorkers&) = delete;
  CompileWorkers& operator=(const CompileWorkers&) = delete;

  // Compiles the verified graph `g`, whose key under `options` is `key`, in a worker. Returns
  // the result; never throws. `options` must be the resolver's profile (see above).
  WorkerCompileResult Compile(const Graph& g, const CacheKey& key, const CompileOptions& options);

  // Workers started after a death so far.
  uint64_t restarts() const;

 private:
  struct Worker {
    pid_t pid = -1;
    int fd = -1;
    bool busy = false;
  };
  Status Spawn(Worker& w);
  // Reaps a dead or killed worker and returns its wait status.
  int Reap(Worker& w);

  const std::string executable_;
  const CompileWorkerLimits limits_;
  mutable std::mutex mu_;
  std::condition_variable free_cv_;
  std::vector<Worker> workers_;
  uint64_t restarts_ = 0;
};

}  // namespace stitch::daemon
