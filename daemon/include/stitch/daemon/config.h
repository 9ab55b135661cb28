// stitchd's configuration: command-line flags, an optional YAML file, and defaults that
// depend on who runs the daemon.
//
// Precedence is flag > file > default. Every YAML key has a flag of the same name with dashes
// instead of underscores (`disk_cache_bytes` / `--disk-cache-bytes`).
//
// Value syntax, shared by the file and the flags:
//   sizes        a decimal integer with an optional binary unit: B, K/KiB, M/MiB, G/GiB,
//                T/TiB (case-insensitive, all powers of 1024): "268435456", "256MiB", "512k".
//                SI spellings such as "10GB" are rejected rather than guessed at.
//   socket_mode  octal permission bits, with or without a leading 0 or 0o: "0660", "660".
//                Quote it in YAML ("0660") so other YAML readers do not take it for a number.
//   listen       host:port, where host is a name, an IPv4 address or a bracketed IPv6
//                address ("[::]:7070"); port 0 picks a free port; "" disables the listener.
//   booleans     true/false (also yes/no, on/off, 1/0).
//   durations    drain_seconds is a non-negative number of seconds, fractions allowed;
//                the cluster_*_ms and cluster_ttl_seconds keys are positive integers.
//   files        cluster_password_file and cluster_secret_file name files whose contents
//                (less one trailing newline) are the secret, e.g. a mounted Kubernetes
//                Secret; --print-config shows the paths, never the contents.
//                tls_cert_file, tls_key_file and tls_client_ca_file name PEM files in the
//                same way; they are read and checked when the daemon starts, not here.
//
// Thread-safety: the functions are reentrant; ParseCommandLine may load the CUDA driver to
// resolve target "auto", so call it once, early in main().
#pragma once

#include <cstdint>
#include <string>

#include "stitch/base/status.h"

namespace stitch::daemon {

// Facts about the process environment, gathered once in main() so nothing else reads getenv.
struct Environment {
  std::string home;             // $HOME, or the passwd entry's home when HOME is unset
  std::string xdg_state_home;   // $XDG_STATE_HOME; ignored unless absolute
  std::string xdg_runtime_dir;  // $XDG_RUNTIME_DIR; ignored unless absolute
  bool is_root = false;         // effective uid 0
};

// The one place that calls getenv/geteuid.
Environment ReadEnvironment();

struct DaemonConfig {
  // RocksDB and its lock. Default: root → /var/lib/stitchd; otherwise
  // $XDG_STATE_HOME/stitchd, or ~/.local/state/stitchd.
  std::string data_dir;
  // Default: root → /run/stitchd/stitchd.sock; otherwise $XDG_RUNTIME_DIR/stitchd/stitchd.sock,
  // or <data_dir>/stitchd.sock when XDG_RUNTIME_DIR is unset. "" disables the unix socket.
  // At most 107 bytes (sockaddr_un::sun_path).
  std::string socket_path;
  // So unprivileged clients on the node can connect.
  uint32_t socket_mode = 0666;
  // TCP host:port of the gRPC service; "" disables; port 0 picks a free one. Loopback by
  // default: anyone who can reach the port can make the node compile, so listening on other
  // interfaces is a deliberate setting, normally together with the tls_* keys below.
  std::string grpc_listen = "127.0.0.1:7070";
  // TLS on the TCP listener (never on the unix socket, which stays local and plaintext).
  // PEM files, e.g. a mounted Kubernetes Secret, read once at start (not reloaded); a
  // certificate needs its key and vice versa. "" serves plaintext TCP.
  std::string tls_cert_file;  // the server's certificate chain
  std::string tls_key_file;   // its private key (unencrypted)
  // CA bundle of the client certificates; when set, clients must present a certificate it
  // verifies (mutual TLS). Needs tls_cert_file.
  std::string tls_client_ca_file;
  // Refuse plaintext TCP: start-up fails when grpc_listen is set without tls_cert_file.
  bool grpc_require_tls = false;
  // host:port of /metrics and /healthz; "" disables.
  std::string metrics_listen = "0.0.0.0:9464";
  uint64_t memory_cache_bytes = uint64_t{256} << 20;
  uint64_t disk_cache_bytes = uint64_t{10} << 30;
  // Compile threads. 0 on input means std::thread::hardware_concurrency() (at least 1);
  // after ParseCommandLine it is always in 1..1024.
  uint32_t workers = 0;
  // Compiles waiting beyond this are refused with RESOURCE_EXHAUSTED.
  uint32_t max_queue = 256;
  // Where compiles run: "process", supervised worker processes (README "Compiles are
  // isolated"), or "thread", the compile pool's threads in stitchd itself.
  std::string compile_isolation = "process";
  // Per-compile limits of a worker: CPU seconds (RLIMIT_CPU), address space (RLIMIT_AS) and
  // wall-clock seconds (the supervisor kills the worker).
  uint32_t compile_cpu_seconds = 300;
  uint64_t compile_memory_bytes = uint64_t{8} << 30;
  uint32_t compile_timeout_seconds = 600;
  // How long a failed compile's error answers requests for its key; 0 disables.
  uint32_t negative_cache_seconds = 60;
  // Test only: graphs named stitch.fault.{abort,spin,oom,sleep} make their worker abort,
  // spin, allocate without bound or sleep. Off by default; never set it in production.
  bool compile_fault_injection = false;
  // Not a configuration key: the executable workers run, which must be stitchd (it serves
  // --compile-worker). main() sets it to stitchd itself; empty with compile_isolation
  // process makes Daemon::Start fail.
  std::string compile_worker_executable;
  // "sm_80", "sm_90", ... or "auto"; after ParseCommandLine never "auto": the GPU of device 0,
  // or sm_90 when there is none.
  std::string target = "auto";
  // Namespaces the cache, e.g. per deployment.
  std::string salt;
  // Never produce cubin.
  bool ptx_only = false;
  // gRPC's limit is an int, so at most 2^31 - 1.
  uint64_t max_message_bytes = uint64_t{64} << 20;
  std::string log_format = "text";  // "text" | "json"
  std::string log_level = "info";   // trace debug info warn error critical off
  // On SIGTERM, how long in-flight requests may take.
  double drain_seconds = 10;

  // The cluster tier on a Redis Cluster engine (Redis, Valkey or Kvrocks). Empty
  // cluster_nodes: no cluster tier; the node caches alone.
  std::string cluster_nodes;          // seed nodes, "host:port,host:port"
  std::string cluster_user;           // ACL user for AUTH; "" is the default user
  std::string cluster_password_file;  // holds the AUTH password; "" sends no AUTH
  std::string cluster_secret_file;    // holds the entries' HMAC secret; required with nodes
  std::string cluster_key_prefix = "stitch";
  std::string node_name;  // names this node in leases; "" means <hostname>:<pid>
  uint32_t cluster_ttl_seconds = 7 * 24 * 3600;
  uint32_t cluster_read_timeout_ms = 20;
  uint32_t cluster_write_timeout_ms = 250;
  // How long a node's lease holds a key while it compiles; a dead node's lease runs out then.
  uint32_t cluster_lease_ms = 30000;
  uint32_t cluster_breaker_failures = 5;
  uint32_t cluster_breaker_open_ms = 5000;
  // Keys whose measured runtimes (jobs' timings) the node keeps in its store; timings for
  // further keys are dropped and counted. About 200 bytes each.
  uint32_t runtime_records_max = 100000;
  // The most-measured keys exported one by one (stitch_key_seconds_per_call); bounded so a
  // node's series count stays small.
  uint32_t metrics_top_keys = 20;

  // Limits on every request's input (README "Limits"); a request past one is refused with a
  // message naming the key, its value and the request's figure. The graph limits default to
  // the compiler's GraphLimits (stitch/ir/graph.h), and may only lower its rank and element
  // ceilings.
  // Nodes of one graph, and entries of its output list.
  uint32_t max_graph_nodes = 20000;
  // Dimensions of any one tensor, 1..8.
  uint32_t max_tensor_rank = 8;
  // Elements of any one tensor, 1..2^34.
  uint64_t max_tensor_elements = uint64_t{1} << 34;
  // HLO text of one Compile, Lookup or Extract request, at most 256MiB (kMaxHloTextBytes);
  // max_message_bytes bounds it as well.
  uint64_t max_hlo_text_bytes = uint64_t{256} << 20;
  // Records of one ReportUsage request.
  uint32_t max_usage_records = 100000;
  // Entries of one ListEntries or ListRuntimes answer; a larger requested limit is capped.
  uint32_t max_list_entries = 100000;
  // Calls in flight on one client connection (HTTP/2 streams); the client queues further
  // calls until one finishes. A gRPC channel is one connection.
  uint32_t max_concurrent_streams = 100;

  // The YAML file read, if any; informational, not written by ToYaml.
  std::string config_file;
};

struct ParsedArgs {
  DaemonConfig config;
  // --help, --version or --print-config: print exit_message to stdout and exit.
  bool exit_now = false;
  int exit_code = 0;
  std::string exit_message;
  // How target "auto" was resolved, e.g. "no CUDA driver (libcuda.so.1 not found); using
  // sm_90"; empty when the target was given explicitly. For main() to log.
  std::string target_note;
};

// Parses argv with the flags above plus --config FILE, --print-config, --help and --version.
// Errors are INVALID_ARGUMENT naming the flag (e.g. "--workers: ...") or the YAML key with
// file:line ("/etc/stitchd.yaml:4: workers: ..."); NOT_FOUND when the --config file does not
// exist. "--key=" passes the empty string, which disables the socket and the listeners.
StatusOr<ParsedArgs> ParseCommandLine(int argc, const char* const* argv, const Environment& env);

// The config as YAML, what `stitchd --print-config` prints; reading it back with --config
// yields the same config.
std::string ToYaml(const DaemonConfig& config);

}  // namespace stitch::daemon
