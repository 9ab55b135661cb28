#include "compile_worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string_view>
#include <thread>

#include "stitch/driver/bundle.h"
#include "stitch/ir/graph_proto.h"
#include "stitch/plan/target.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#include <sanitizer/common_interface_defs.h>
#define STITCH_SANITIZER_SHADOW 1
#endif

extern char** environ;

namespace stitch::daemon {
namespace {

// The worker's end of the socketpair.
constexpr int kWorkerFd = 3;
// A worker that fails to allocate within its RLIMIT_AS exits with this code, so that the
// supervisor tells a memory limit from a crash.
constexpr int kExitOutOfMemory = 86;
// A frame bigger than this is a protocol error (bundles are bounded by the message limit).
constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 31;

using Clock = std::chrono::steady_clock;

// ---- framing: a frame is a u64 length and that many bytes; its payload is a sequence of
// fields, each a u32 length and that many bytes. Host byte order: both ends are one binary.

void AppendField(std::string& out, std::string_view field) {
  const auto n = static_cast<uint32_t>(field.size());
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out.append(field);
}

std::optional<std::vector<std::string_view>> SplitFields(std::string_view payload) {
  std::vector<std::string_view> fields;
  while (!payload.empty()) {
    uint32_t n = 0;
    if (payload.size() < sizeof n) return std::nullopt;
    std::memcpy(&n, payload.data(), sizeof n);
    payload.remove_prefix(sizeof n);
    if (payload.size() < n) return std::nullopt;
    fields.push_back(payload.substr(0, n));
    payload.remove_prefix(n);
  }
  return fields;
}

// Waits until `fd` is ready for `events` or `deadline` passes; false on timeout.
bool WaitReady(int fd, short events, std::optional<Clock::time_point> deadline) {
  while (true) {
    int timeout_ms = -1;
    if (deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now());
      if (left.count() <= 0) return false;
      timeout_ms = static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30));
    }
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, timeout_ms);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return true;  // let the read or write report the error
  }
}

enum class IoResult { kOk, kClosed, kTimeout };

IoResult WriteAll(int fd, std::string_view bytes, std::optional<Clock::time_point> deadline) {
  while (!bytes.empty()) {
    if (!WaitReady(fd, POLLOUT, deadline)) return IoResult::kTimeout;
    ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return IoResult::kClosed;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return IoResult::kOk;
}

IoResult ReadAll(int fd, char* out, size_t size, std::optional<Clock::time_point> deadline) {
  while (size > 0) {
    if (!WaitReady(fd, POLLIN, deadline)) return IoResult::kTimeout;
    ssize_t n = ::read(fd, out, size);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return IoResult::kClosed;
    out += n;
    size -= static_cast<size_t>(n);
  }
  return IoResult::kOk;
}

IoResult WriteFrame(int fd, const std::string& payload, std::optional<Clock::time_point> deadline) {
  const uint64_t n = payload.size();
  std::string frame(reinterpret_cast<const char*>(&n), sizeof n);
  frame += payload;
  return WriteAll(fd, frame, deadline);
}

IoResult ReadFrame(int fd, std::string* payload, std::optional<Clock::time_point> deadline) {
  uint64_t n = 0;
  IoResult r = ReadAll(fd, reinterpret_cast<char*>(&n), sizeof n, deadline);
  if (r != IoResult::kOk) return r;
  if (n > kMaxFrameBytes) return IoResult::kClosed;
  payload->resize(n);
  return ReadAll(fd, payload->data(), n, deadline);
}

std::string SignalName(int sig) {
  switch (sig) {
    case SIGABRT:
      return "SIGABRT (abort)";
    case SIGSEGV:
      return "SIGSEGV (segmentation fault)";
    case SIGBUS:
      return "SIGBUS (bus error)";
    case SIGFPE:
      return "SIGFPE (arithmetic fault)";
    case SIGILL:
      return "SIGILL (illegal instruction)";
    case SIGKILL:
      return "SIGKILL (killed, e.g. by the kernel's out-of-memory killer)";
    default:
      return "signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")";
  }
}

// ---- the worker process ----------------------------------------------------------------

[[noreturn]] void OutOfMemory() {
  static constexpr char kMessage[] = "stitchd compile worker: out of memory (RLIMIT_AS)\n";
  ssize_t ignored = ::write(2, kMessage, sizeof kMessage - 1);
  static_cast<void>(ignored);
  ::_exit(kExitOutOfMemory);
}

#if defined(STITCH_SANITIZER_SHADOW)
// The bytes of address space this process has mapped (/proc/self/statm), 0 when unknown.
uint64_t MappedBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long pages = 0;
  const int read = std::fscanf(f, "%llu", &pages);
  std::fclose(f);
  return read == 1 ? pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

// A sanitizer dies with its own report when an allocation fails; at the address-space limit
// that is an out-of-memory, and the worker says so in the supervisor's terms.
void OnSanitizerDeath() {
  rlimit as{};
  constexpr uint64_t kSlack = uint64_t{256} << 20;
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY &&
      MappedBytes() + kSlack >= as.rlim_cur) {
    ::_exit(kExitOutOfMemory);
  }
}
#endif

// Limits the address space to `memory_bytes`. ASan and TSan reserve terabytes of shadow at
// start, so under them the limit is what is mapped by then plus `memory_bytes`.
void LimitAddressSpace(uint64_t memory_bytes) {
  uint64_t limit = memory_bytes;
#if defined(STITCH_SANITIZER_SHADOW)
  limit += MappedBytes();
  __sanitizer_set_death_callback(OnSanitizerDeath);
#endif
  rlimit as{limit, limit};
  ::setrlimit(RLIMIT_AS, &as);
}

// Gives the next compile `cpu_seconds` more CPU seconds than this process has used so far.
void ArmCpuLimit(uint64_t cpu_seconds) {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  const uint64_t used = static_cast<uint64_t>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + 1;
  rlimit limit{};
  ::getrlimit(RLIMIT_CPU, &limit);
  rlim_t soft = used + cpu_seconds;
  if (limit.rlim_max != RLIM_INFINITY && soft > limit.rlim_max) soft = limit.rlim_max;
  limit.rlim_cur = soft;
  ::setrlimit(RLIMIT_CPU, &limit);
}

// Test-only faults, by graph name (compile_fault_injection).
void InjectFault(const std::string& name) {
  if (name == "stitch.fault.abort") std::abort();
  if (name == "stitch.fault.spin") {
    volatile uint64_t n = 0;
    while (true) n = n + 1;
  }
  if (name == "stitch.fault.sleep") {
    while (true) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  if (name == "stitch.fault.oom") {
    std::vector<std::unique_ptr<char[]>> hoard;
    while (true) {
      constexpr size_t kChunk = size_t{64} << 20;
      // Reserved, not touched: RLIMIT_AS counts address space, and touching 2 GiB would take
      // the test seconds of CPU. One byte written keeps the allocation from being elided.
      hoard.push_back(std::unique_ptr<char[]>(new char[kChunk]));
      static_cast<volatile char*>(hoard.back().get())[0] = 1;
    }
  }
}

// The key context of `options`, built once per target, cubin choice, salt and limits: building
// it probes the CUDA toolkit, which the resolver also does once per profile.
const KeyContext& KeyContextOf(const CompileOptions& options) {
  static std::map<std::string, KeyContext> contexts;  // the worker serves on one thread
  std::string profile = options.codegen.target.name() + (options.codegen.emit_cubin ? "+" : "-") +
                        std::to_string(options.limits.max_nodes) + "/" +
                        std::to_string(options.limits.max_elements_per_tensor) + "/" +
                        std::to_string(options.limits.max_rank) + "/" + options.salt;
  auto it = contexts.find(profile);
  if (it == contexts.end()) it = contexts.emplace(profile, KeyContextFor(options)).first;
  return it->second;
}

std::string Answer(const Status& status, const std::string& bundle_bytes) {
  std::string out;
  AppendField(out, std::to_string(static_cast<int>(status.code())));
  AppendField(out, status.message());
  AppendField(out, bundle_bytes);
  return out;
}

// Compiles one request: graph, key, target, "1" for cubin, salt, and the three graph limits.
std::string Serve(std::string_view payload, bool fault_injection) {
  std::optional<std::vector<std::string_view>> f = SplitFields(payload);
  if (!f || f->size() != 8) return Answer(Internal("malformed compile worker request"), "");
  const std::vector<std::string_view>& fields = *f;
  v1::Graph proto;
  if (!proto.ParseFromArray(fields[0].data(), static_cast<int>(fields[0].size()))) {
    return Answer(Internal("compile worker: the graph does not parse"), "");
  }
  StatusOr<Graph> graph = FromProto(proto);
  if (!graph.ok()) return Answer(graph.status(), "");
  StatusOr<Target> target = Target::Parse(fields[2]);
  if (!target.ok()) return Answer(target.status(), "");
  CompileOptions options;
  options.codegen.target = *target;
  options.codegen.emit_cubin = fields[3] == "1";
  options.salt = std::string(fields[4]);
  options.limits.max_nodes = std::strtoll(std::string(fields[5]).c_str(), nullptr, 10);
  options.limits.max_elements_per_tensor =
      std::strtoll(std::string(fields[6]).c_str(), nullptr, 10);
  options.limits.max_rank =
      static_cast<int>(std::strtol(std::string(fields[7]).c_str(), nullptr, 10));
  if (fault_injection) InjectFault(graph->name);
  // The daemon keyed the graph; a different key here means the options did not travel whole,
  // and a bundle stored under the daemon's key would be wrong.
  CacheKey key = ComputeKey(*graph, KeyContextOf(options));
  if (key.hex != fields[1]) {
    return Answer(Internal("compile worker computed key " + key.hex + ", the daemon " +
                           std::string(fields[1])),
                  "");
  }
  StatusOr<CompileResult> result = CompileVerifiedGraph(*graph, key, options);
  if (!result.ok()) return Answer(result.status(), "");
  return Answer(Status::Ok(), ToBundle(*result, options).SerializeAsString());
}

}  // namespace

const char* CompileFailureKindName(CompileFailureKind kind) {
  switch (kind) {
    case CompileFailureKind::kNone:
      return "none";
    case CompileFailureKind::kCrash:
      return "crash";
    case CompileFailureKind::kCpuLimit:
      return "cpu_limit";
    case CompileFailureKind::kMemoryLimit:
      return "memory_limit";
    case CompileFailureKind::kTimeout:
      return "timeout";
    case CompileFailureKind::kError:
      return "error";
  }
  return "error";
}

int RunCompileWorker(int argc, char** argv) {
  uint64_t cpu_seconds = 300;
  uint64_t memory_bytes = 0;
  bool fault_injection = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--cpu-seconds" && i + 1 < argc) cpu_seconds = std::strtoull(argv[++i], nullptr, 10);
    if (a == "--memory-bytes" && i + 1 < argc) memory_bytes = std::strtoull(argv[++i], nullptr, 10);
    if (a == "--fault-injection") fault_injection = true;
  }
  // A daemon gone mid-answer shows as a failed write, not a signal.
  ::signal(SIGPIPE, SIG_IGN);
  // Ctrl-C reaches the terminal's whole process group; the daemon drains its compiles then,
  // so they must not die under it. The daemon ends a worker by closing its socket.
  ::signal(SIGINT, SIG_IGN);
  // A daemon killed outright takes its workers with it, even one stuck in a compile.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (memory_bytes > 0) LimitAddressSpace(memory_bytes);
  // No core files: a crashing compile should not fill the node's disk.
  rlimit core{0, 0};
  ::setrlimit(RLIMIT_CORE, &core);
  std::set_new_handler(OutOfMemory);
  std::string payload;
  while (ReadFrame(kWorkerFd, &payload, std::nullopt) == IoResult::kOk) {
    ArmCpuLimit(cpu_seconds);
    std::string answer = Serve(payload, fault_injection);
    if (WriteFrame(kWorkerFd, answer, std::nullopt) != IoResult::kOk) return 1;
  }
  return 0;  // the daemon closed the socket
}

// ---- the supervisor ----------------------------------------------------------------------

CompileWorkers::CompileWorkers(std::string executable, CompileWorkerLimits limits, uint32_t count)
    : executable_(std::move(executable)), limits_(limits), workers_(count == 0 ? 1 : count) {}

CompileWorkers::~CompileWorkers() {
  std::lock_guard lock(mu_);
  for (Worker& w : workers_) {
    if (w.pid <= 0) continue;
    ::close(w.fd);
    w.fd = -1;
    const auto give_up = Clock::now() + std::chrono::seconds(1);
    int status = 0;
    while (::waitpid(w.pid, &status, WNOHANG) == 0) {
      if (Clock::now() >= give_up) {
        ::kill(w.pid, SIGKILL);
        ::waitpid(w.pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    w.pid = -1;
  }
}

uint64_t CompileWorkers::restarts() const {
  std::lock_guard lock(mu_);
  return restarts_;
}

Status CompileWorkers::Spawn(Worker& w) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return Unavailable(std::string("compile worker: socketpair: ") + std::strerror(errno));
  }
  std::vector<std::string> args = {executable_,      "--compile-worker",
                                   "--cpu-seconds",  std::to_string(limits_.cpu_seconds),
                                   "--memory-bytes", std::to_string(limits_.memory_bytes)};
  if (limits_.fault_injection) args.push_back("--fault-injection");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // posix_spawn, not fork: forking the multithreaded daemon and running anything but exec in
  // the child is unsafe. dup2 onto fd 3 clears its close-on-exec flag; every other socket of
  // the daemon is close-on-exec.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], kWorkerFd);
  // The daemon blocks SIGTERM and SIGINT for its sigwait; the worker starts with none blocked.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGXCPU);  // its default action ends a worker past its CPU limit
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, executable_.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return Unavailable("compile worker: cannot start " + executable_ + ": " + std::strerror(rc));
  }
  w.pid = pid;
  w.fd = fds[0];
  return Status::Ok();
}

int CompileWorkers::Reap(Worker& w) {
  int status = 0;
  // A worker whose socket reads EOF is exiting; one that closed it and lives on is killed
  // after a second rather than waited for forever.
  const auto give_up = Clock::now() + std::chrono::seconds(1);
  while (::waitpid(w.pid, &status, WNOHANG) == 0) {
    if (Clock::now() >= give_up) {
      ::kill(w.pid, SIGKILL);
      ::waitpid(w.pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::close(w.fd);
  w.pid = -1;
  w.fd = -1;
  return status;
}

WorkerCompileResult CompileWorkers::Compile(const Graph& g, const CacheKey& key,
                                            const CompileOptions& options) {
  WorkerCompileResult out;
  Worker* w = nullptr;
  {
    std::unique_lock lock(mu_);
    free_cv_.wait(lock, [&] {
      for (Worker& c : workers_) {
        if (!c.busy) {
          w = &c;
          return true;
        }
      }
      return false;
    });
    w->busy = true;
  }
  // The slot is this thread's until released below; only restarts_ needs the lock.
  auto release = [&] {
    std::lock_guard lock(mu_);
    w->busy = false;
    free_cv_.notify_one();
  };
  std::string request;
  AppendField(request, ToProto(g).SerializeAsString());
  AppendField(request, key.hex);
  AppendField(request, options.codegen.target.name());
  AppendField(request, options.codegen.emit_cubin ? "1" : "0");
  AppendField(request, options.salt);
  AppendField(request, std::to_string(options.limits.max_nodes));
  AppendField(request, std::to_string(options.limits.max_elements_per_tensor));
  AppendField(request, std::to_string(options.limits.max_rank));

  const std::string short_key = key.hex.substr(0, 16);
  const auto deadline = Clock::now() + std::chrono::seconds(limits_.wall_seconds);
  // A worker that died while idle (killed from outside) fails the write or the read at once
  // without having compiled anything; it is replaced and the request tried once more.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (w->pid <= 0) {
      if (Status s = Spawn(*w); !s.ok()) {
        release();
        out.status = s;
        out.kind = CompileFailureKind::kCrash;
        return out;
      }
    }
    const auto sent_at = Clock::now();
    IoResult io = WriteFrame(w->fd, request, deadline);
    std::string answer;
    if (io == IoResult::kOk) io = ReadFrame(w->fd, &answer, deadline);
    if (io == IoResult::kOk) {
      std::optional<std::vector<std::string_view>> f = SplitFields(answer);
      if (!f || f->size() != 3) {
        // A worker that speaks nonsense is not trusted with another request.
        ::kill(w->pid, SIGKILL);
        Reap(*w);
        std::lock_guard lock(mu_);
        ++restarts_;
        out.worker_restarted = true;
        out.status =
            Internal("compile worker sent a malformed answer while compiling " + short_key);
        out.kind = CompileFailureKind::kCrash;
        break;
      }
      const int code = std::atoi(std::string((*f)[0]).c_str());
      if (code != 0) {
        out.status = Status(static_cast<StatusCode>(code), std::string((*f)[1]));
        out.kind = CompileFailureKind::kError;
      } else if (!out.bundle.ParseFromArray((*f)[2].data(), static_cast<int>((*f)[2].size()))) {
        out.status = Internal("compile worker sent a bundle that does not parse for " + short_key);
        out.kind = CompileFailureKind::kError;
      }
      break;
    }
    const bool timed_out = io == IoResult::kTimeout;
    if (timed_out) ::kill(w->pid, SIGKILL);
    const int status = Reap(*w);
    {
      std::lock_guard lock(mu_);
      ++restarts_;
    }
    out.worker_restarted = true;
    if (timed_out) {
      out.status = ResourceExhausted("compile exceeded its wall-clock limit of " +
                                     std::to_string(limits_.wall_seconds) + " s while compiling " +
                                     short_key);
      out.kind = CompileFailureKind::kTimeout;
    } else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU) {
      out.status = ResourceExhausted("compile exceeded its CPU limit of " +
                                     std::to_string(limits_.cpu_seconds) + " s while compiling " +
                                     short_key);
      out.kind = CompileFailureKind::kCpuLimit;
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == kExitOutOfMemory) {
      out.status = ResourceExhausted("compile exceeded its memory limit of " +
                                     std::to_string(limits_.memory_bytes) +
                                     " bytes while compiling " + short_key);
      out.kind = CompileFailureKind::kMemoryLimit;
    } else {
      // Dead within a moment of the request, with an exit rather than a signal of its own
      // making: it was gone before it read the request. Try a fresh worker once.
      const bool died_idle = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL &&
                             Clock::now() - sent_at < std::chrono::milliseconds(50) && attempt == 0;
      if (died_idle) {
        spdlog::warn("compile worker was killed while idle; starting another");
        continue;
      }
      out.status =
          Internal("compile worker died: " +
                   (WIFSIGNALED(status) ? SignalName(WTERMSIG(status))
                                        : "exit code " + std::to_string(WEXITSTATUS(status))) +
                   " while compiling " + short_key);
      out.kind = CompileFailureKind::kCrash;
    }
    break;
  }
  if (out.worker_restarted && w->pid <= 0) {
    // Restart now, so that the next compile does not pay for the start.
    if (Status s = Spawn(*w); !s.ok()) spdlog::error("{}", s.message());
  }
  release();
  return out;
}

}  // namespace stitch::daemon
