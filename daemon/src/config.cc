#include "stitch/daemon/config.h"

#include <pwd.h>
#include <sys/types.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "gpu_detect.h"
#include "stitch/cache/redis_cluster.h"
#include "stitch/plan/target.h"

#ifndef STITCH_VERSION
#define STITCH_VERSION "unknown"
#endif

namespace stitch::daemon {
namespace {

// sockaddr_un::sun_path holds 108 bytes including the terminating NUL.
constexpr size_t kMaxSocketPathBytes = 107;
constexpr uint32_t kMaxWorkers = 1024;
constexpr uint32_t kMaxQueue = 1u << 20;
constexpr double kMaxDrainSeconds = 3600;

// ---- value parsing: each returns an error message without location, or nullopt ----------

using Error = std::optional<std::string>;

std::string Quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF). --print-config writes YAML, whose emitter replaces anything else with U+FFFD, so
// a value that is not UTF-8 could not be read back as itself.
bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    unsigned char lo = 0x80;
    unsigned char hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      length = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      length = 3;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      length = 4;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + length > s.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    i += length;
  }
  return true;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

template <typename T>
bool ParseUnsigned(std::string_view s, T* out) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s.front()))) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 10);
  return ec == std::errc() && end == s.data() + s.size();
}

Error ParseSize(std::string_view s, uint64_t* out) {
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  if (digits == 0) {
    return "expected a size such as 268435456, 256MiB or 10GiB, got " + Quoted(s);
  }
  uint64_t number = 0;
  if (!ParseUnsigned(s.substr(0, digits), &number)) return "size " + Quoted(s) + " is too large";
  std::string_view unit = s.substr(digits);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  const std::string u = Lower(unit);
  int shift = -1;
  if (u.empty() || u == "b") {
    shift = 0;
  } else if (u == "k" || u == "kib") {
    shift = 10;
  } else if (u == "m" || u == "mib") {
    shift = 20;
  } else if (u == "g" || u == "gib") {
    shift = 30;
  } else if (u == "t" || u == "tib") {
    shift = 40;
  } else if (u == "kb" || u == "mb" || u == "gb" || u == "tb") {
    return "ambiguous unit in " + Quoted(s) + "; use KiB, MiB, GiB or TiB (powers of 1024)";
  } else {
    return "unknown size unit " + Quoted(unit) + " in " + Quoted(s) +
           "; expected B, K/KiB, M/MiB, G/GiB or T/TiB";
  }
  if (shift > 0 && number > (std::numeric_limits<uint64_t>::max() >> shift)) {
    return "size " + Quoted(s) + " is too large";
  }
  *out = number << shift;
  return std::nullopt;
}

std::string FormatSize(uint64_t bytes) {
  static constexpr std::pair<int, const char*> kUnits[] = {
      {40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}};
  if (bytes != 0) {
    for (const auto& [shift, name] : kUnits) {
      const uint64_t unit = uint64_t{1} << shift;
      if (bytes % unit == 0) return std::to_string(bytes / unit) + name;
    }
  }
  return std::to_string(bytes);
}

Error ParseBool(std::string_view s, bool* out) {
  const std::string v = Lower(s);
  if (v == "true" || v == "yes" || v == "on" || v == "1") {
    *out = true;
  } else if (v == "false" || v == "no" || v == "off" || v == "0") {
    *out = false;
  } else {
    return "expected true or false, got " + Quoted(s);
  }
  return std::nullopt;
}

Error ParseMode(std::string_view s, uint32_t* out) {
  std::string_view digits = s;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'o' || digits[1] == 'O')) {
    digits.remove_prefix(2);
  }
  const bool octal =
      !digits.empty() && digits.size() <= 4 &&
      std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '7'; });
  uint32_t mode = 0;
  if (!octal ||
      std::from_chars(digits.data(), digits.data() + digits.size(), mode, 8).ec != std::errc()) {
    return "expected octal permission bits such as \"0660\", got " + Quoted(s);
  }
  if (mode > 0777) {
    return "mode " + Quoted(s) + " sets bits beyond 0777 (setuid/setgid/sticky)";
  }
  *out = mode;
  return std::nullopt;
}

std::string FormatMode(uint32_t mode) {
  char buf[16];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), mode, 8);
  std::string digits(buf, end);
  if (digits.size() < 4) digits.insert(0, 4 - digits.size(), '0');
  return digits;
}

Error ValidateListen(std::string_view s) {
  if (s.empty()) return std::nullopt;
  const std::string expected = "expected host:port such as 0.0.0.0:7070 or [::]:7070";
  const size_t colon = s.rfind(':');
  if (colon == std::string_view::npos) return expected + ", got " + Quoted(s) + " (no port)";
  std::string_view host = s.substr(0, colon);
  const std::string_view port_text = s.substr(colon + 1);
  uint32_t port = 0;
  if (!ParseUnsigned(port_text, &port) || port > 65535) {
    return "port " + Quoted(port_text) + " in " + Quoted(s) + " is not a number in 0..65535";
  }
  if (host.empty()) return expected + ", got " + Quoted(s) + " (no host)";
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return expected + ", got " + Quoted(s);
    const std::string_view inner = host.substr(1, host.size() - 2);
    const size_t zone = inner.find('%');
    const std::string_view address = inner.substr(0, zone);
    const bool ok = address.find(':') != std::string_view::npos &&
                    std::all_of(address.begin(), address.end(), [](char c) {
                      return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
                    });
    if (!ok) return "host " + Quoted(host) + " in " + Quoted(s) + " is not an IPv6 address";
    return std::nullopt;
  }
  if (host.find(':') != std::string_view::npos) {
    return "IPv6 host in " + Quoted(s) + " needs brackets, e.g. [::1]:7070";
  }
  const bool ok = std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
  });
  if (!ok || host.front() == '-' || host.front() == '.') {
    return "host " + Quoted(host) + " in " + Quoted(s) + " is not a host name or address";
  }
  return std::nullopt;
}

Error ValidateSocketPath(std::string_view path) {
  if (path.size() > kMaxSocketPathBytes) {
    return "socket path " + Quoted(path) + " is " + std::to_string(path.size()) +
           " bytes; unix socket paths must be shorter than 108 bytes";
  }
  if (path.find('\0') != std::string_view::npos) return "socket path contains a NUL byte";
  return std::nullopt;
}

std::string FormatDouble(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, end);
}

// ---- the option table ------------------------------------------------------------------

// One configurable key. `apply` parses text into the config; `show` renders the value in a
// form `apply` accepts, for --print-config and the help text.
struct OptionSpec {
  const char* key;
  const char* help;
  bool is_bool_flag = false;
  bool is_string = false;  // YAML null means "", and ToYaml quotes the value
  Error (*apply)(std::string_view text, DaemonConfig& c);
  std::string (*show)(const DaemonConfig& c);
};

// How the help text names an option's value.
const char* TypeName(std::string_view key) {
  static constexpr std::pair<std::string_view, const char*> kNames[] = {
      {"data_dir", "PATH"},
      {"socket", "PATH"},
      {"socket_mode", "MODE"},
      {"grpc_listen", "HOST:PORT"},
      {"metrics_listen", "HOST:PORT"},
      {"tls_cert_file", "PATH"},
      {"tls_key_file", "PATH"},
      {"tls_client_ca_file", "PATH"},
      {"workers", "N"},
      {"max_queue", "N"},
      {"compile_isolation", "process|thread"},
      {"compile_cpu_seconds", "SECONDS"},
      {"compile_timeout_seconds", "SECONDS"},
      {"negative_cache_seconds", "SECONDS"},
      {"target", "SM"},
      {"salt", "TEXT"},
      {"log_format", "FORMAT"},
      {"log_level", "LEVEL"},
      {"drain_seconds", "SECONDS"},
      {"cluster_nodes", "HOST:PORT,..."},
      {"cluster_user", "NAME"},
      {"cluster_password_file", "PATH"},
      {"cluster_secret_file", "PATH"},
      {"cluster_key_prefix", "TEXT"},
      {"node_name", "NAME"},
      {"cluster_ttl_seconds", "SECONDS"},
      {"runtime_records_max", "N"},
      {"metrics_top_keys", "N"},
      {"cluster_breaker_failures", "N"},
      {"max_graph_nodes", "N"},
      {"max_tensor_rank", "N"},
      {"max_tensor_elements", "N"},
      {"max_usage_records", "N"},
      {"max_list_entries", "N"},
      {"max_concurrent_streams", "N"},
  };
  for (const auto& [k, name] : kNames) {
    if (k == key) return name;
  }
  if (key.ends_with("_ms")) return "MS";
  return "SIZE";
}

std::string FlagName(std::string_view key) {
  std::string flag = "--" + std::string(key);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

// Options that set one text or integer field, so each such option is one line of the table.
template <std::string DaemonConfig::*Field>
Error ApplyText(std::string_view t, DaemonConfig& c) {
  if (t.find('\0') != std::string_view::npos) return "contains a NUL byte";
  c.*Field = t;
  return std::nullopt;
}
template <std::string DaemonConfig::*Field>
std::string ShowText(const DaemonConfig& c) {
  return c.*Field;
}
template <uint32_t DaemonConfig::*Field, uint32_t Min, uint32_t Max>
Error ApplyBounded(std::string_view t, DaemonConfig& c) {
  uint32_t v = 0;
  if (!ParseUnsigned(t, &v) || v < Min || v > Max) {
    return "expected an integer in " + std::to_string(Min) + ".." + std::to_string(Max) + ", got " +
           Quoted(t);
  }
  c.*Field = v;
  return std::nullopt;
}
template <uint32_t DaemonConfig::*Field>
std::string ShowUnsigned(const DaemonConfig& c) {
  return std::to_string(c.*Field);
}
// The same for counts that need 64 bits.
template <uint64_t DaemonConfig::*Field, uint64_t Min, uint64_t Max>
Error ApplyBounded64(std::string_view t, DaemonConfig& c) {
  uint64_t v = 0;
  if (!ParseUnsigned(t, &v) || v < Min || v > Max) {
    return "expected an integer in " + std::to_string(Min) + ".." + std::to_string(Max) + ", got " +
           Quoted(t);
  }
  c.*Field = v;
  return std::nullopt;
}
template <uint64_t DaemonConfig::*Field>
std::string ShowUnsigned64(const DaemonConfig& c) {
  return std::to_string(c.*Field);
}
// Sizes, with units, within Min..Max bytes.
template <uint64_t DaemonConfig::*Field, uint64_t Min, uint64_t Max>
Error ApplySizeBounded(std::string_view t, DaemonConfig& c) {
  uint64_t v = 0;
  if (Error e = ParseSize(t, &v)) return e;
  if (v < Min || v > Max) {
    return "expected a size in " + FormatSize(Min) + ".." + FormatSize(Max) + ", got " + Quoted(t);
  }
  c.*Field = v;
  return std::nullopt;
}
template <uint64_t DaemonConfig::*Field>
std::string ShowSize(const DaemonConfig& c) {
  return FormatSize(c.*Field);
}

Error ApplyClusterNodes(std::string_view t, DaemonConfig& c) {
  size_t start = 0;
  while (start < t.size()) {
    const size_t comma = std::min(t.find(',', start), t.size());
    StatusOr<cache::redis::NodeAddress> node =
        cache::redis::ParseNodeAddress(t.substr(start, comma - start));
    if (!node.ok()) return node.status().message();
    start = comma + 1;
  }
  c.cluster_nodes = t;
  return std::nullopt;
}

Error ApplyKeyPrefix(std::string_view t, DaemonConfig& c) {
  if (t.empty() || t.find_first_of("{}") != std::string_view::npos) {
    return "must be non-empty and free of braces (they would change the keys' hash slots)";
  }
  c.cluster_key_prefix = t;
  return std::nullopt;
}

const std::vector<OptionSpec>& Options() {
  static const std::vector<OptionSpec> kOptions = {
      {"data_dir", "Directory of the kernel cache (RocksDB) and its lock", false, true,
       [](std::string_view t, DaemonConfig& c) -> Error {
         if (t.empty()) return "must not be empty";
         if (t.find('\0') != std::string_view::npos) return "contains a NUL byte";
         c.data_dir = t;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return c.data_dir; }},
      {"socket", "Unix socket path of the gRPC service; \"\" disables it", false, true,
       [](std::string_view t, DaemonConfig& c) -> Error {
         if (Error e = ValidateSocketPath(t)) return e;
         c.socket_path = t;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return c.socket_path; }},
      {"socket_mode", "Permission bits of the unix socket, in octal", false, false,
       [](std::string_view t, DaemonConfig& c) { return ParseMode(t, &c.socket_mode); },
       [](const DaemonConfig& c) { return FormatMode(c.socket_mode); }},
      {"grpc_listen", "TCP host:port of the gRPC service; port 0 picks one; \"\" disables it",
       false, true,
       [](std::string_view t, DaemonConfig& c) -> Error {
         if (Error e = ValidateListen(t)) return e;
         c.grpc_listen = t;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return c.grpc_listen; }},
      {"tls_cert_file", "PEM certificate chain of TLS on grpc_listen; \"\" serves plaintext TCP",
       false, true, ApplyText<&DaemonConfig::tls_cert_file>,
       ShowText<&DaemonConfig::tls_cert_file>},
      {"tls_key_file", "PEM private key of tls_cert_file", false, true,
       ApplyText<&DaemonConfig::tls_key_file>, ShowText<&DaemonConfig::tls_key_file>},
      {"tls_client_ca_file", "PEM CA of client certificates; set: TCP clients need one (mTLS)",
       false, true, ApplyText<&DaemonConfig::tls_client_ca_file>,
       ShowText<&DaemonConfig::tls_client_ca_file>},
      {"grpc_require_tls", "Refuse to start when grpc_listen would serve plaintext TCP", true,
       false, [](std::string_view t, DaemonConfig& c) { return ParseBool(t, &c.grpc_require_tls); },
       [](const DaemonConfig& c) { return std::string(c.grpc_require_tls ? "true" : "false"); }},
      {"metrics_listen", "host:port serving /metrics and /healthz; \"\" disables it", false, true,
       [](std::string_view t, DaemonConfig& c) -> Error {
         if (Error e = ValidateListen(t)) return e;
         c.metrics_listen = t;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return c.metrics_listen; }},
      {"memory_cache_bytes", "In-memory kernel cache size, e.g. 256MiB", false, false,
       [](std::string_view t, DaemonConfig& c) -> Error {
         uint64_t v = 0;
         if (Error e = ParseSize(t, &v)) return e;
         if (v == 0) return "must be greater than 0";
         c.memory_cache_bytes = v;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return FormatSize(c.memory_cache_bytes); }},
      {"disk_cache_bytes", "On-disk kernel cache size, e.g. 10GiB", false, false,
       [](std::string_view t, DaemonConfig& c) -> Error {
         uint64_t v = 0;
         if (Error e = ParseSize(t, &v)) return e;
         if (v == 0) return "must be greater than 0";
         c.disk_cache_bytes = v;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return FormatSize(c.disk_cache_bytes); }},
      {"workers", "Compile threads, 1..1024; 0 means one per hardware thread", false, false,
       [](std::string_view t, DaemonConfig& c) -> Error {
         uint32_t v = 0;
         if (!ParseUnsigned(t, &v) || v > kMaxWorkers) {
           return "expected an integer in 0..1024, got " + Quoted(t);
         }
         c.workers = v;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return std::to_string(c.workers); }},
      {"max_queue", "Compiles that may wait for a worker; beyond it requests are refused", false,
       false,
       [](std::string_view t, DaemonConfig& c) -> Error {
         uint32_t v = 0;
         if (!ParseUnsigned(t, &v) || v < 1 || v > kMaxQueue) {
           return "expected an integer in 1.." + std::to_string(kMaxQueue) + ", got " + Quoted(t);
         }
         c.max_queue = v;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return std::to_string(c.max_queue); }},
      {"compile_isolation",
       "Where compiles run: process (supervised worker processes with the limits below) or "
       "thread (in stitchd itself, unprotected)",
       false, true,
       [](std::string_view t, DaemonConfig& c) -> Error {
         if (t != "process" && t != "thread") {
           return "expected process or thread, got " + Quoted(t);
         }
         c.compile_isolation = t;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return c.compile_isolation; }},
      {"compile_cpu_seconds", "CPU seconds one compile may use in its worker, 1..86400", false,
       false,
       [](std::string_view t, DaemonConfig& c) -> Error {
         uint32_t v = 0;
         if (!ParseUnsigned(t, &v) || v < 1 || v > 86400) {
           return "expected an integer in 1..86400, got " + Quoted(t);
         }
         c.compile_cpu_seconds = v;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return std::to_string(c.compile_cpu_seconds); }},
      {"compile_memory_bytes", "Address space of a compile worker, e.g. 8GiB (at least 256MiB)",
       false, false,
       [](std::string_view t, DaemonConfig& c) -> Error {
         uint64_t v = 0;
         if (Error e = ParseSize(t, &v)) return e;
         if (v < (uint64_t{256} << 20)) return "must be at least 256MiB, got " + Quoted(t);
         c.compile_memory_bytes = v;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return FormatSize(c.compile_memory_bytes); }},
      {"compile_timeout_seconds", "Wall-clock seconds one compile may take, 1..86400", false, false,
       [](std::string_view t, DaemonConfig& c) -> Error {
         uint32_t v = 0;
         if (!ParseUnsigned(t, &v) || v < 1 || v > 86400) {
           return "expected an integer in 1..86400, got " + Quoted(t);
         }
         c.compile_timeout_seconds = v;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return std::to_string(c.compile_timeout_seconds); }},
      {"negative_cache_seconds",
       "How long a failed compile's error answers its key without compiling; 0 disables", false,
       false,
       [](std::string_view t, DaemonConfig& c) -> Error {
         uint32_t v = 0;
         if (!ParseUnsigned(t, &v) || v > 86400) {
           return "expected an integer in 0..86400, got " + Quoted(t);
         }
         c.negative_cache_seconds = v;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return std::to_string(c.negative_cache_seconds); }},
      {"compile_fault_injection",
       "TEST ONLY: graphs named stitch.fault.abort/spin/oom/sleep crash their compile worker", true,
       false,
       [](std::string_view t, DaemonConfig& c) { return ParseBool(t, &c.compile_fault_injection); },
       [](const DaemonConfig& c) {
         return std::string(c.compile_fault_injection ? "true" : "false");
       }},
      {"target",
       "GPU architecture such as sm_80, sm_90 or sm_90a, with a device of it such as "
       "sm_90/h200, or auto (device 0, else sm_90)",
       false, false,
       [](std::string_view t, DaemonConfig& c) -> Error {
         if (t == "auto") {
           c.target = t;
           return std::nullopt;
         }
         StatusOr<Target> parsed = Target::Parse(t);
         if (!parsed.ok()) return parsed.status().message() + " (or auto)";
         c.target = parsed->name();  // canonical: sm_90/H200 and sm_90/h200 are one target
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return c.target; }},
      {"salt", "Namespaces the cache keys, e.g. per deployment", false, true,
       [](std::string_view t, DaemonConfig& c) -> Error {
         c.salt = t;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return c.salt; }},
      {"ptx_only", "Serve PTX only, never cubin", true, false,
       [](std::string_view t, DaemonConfig& c) { return ParseBool(t, &c.ptx_only); },
       [](const DaemonConfig& c) { return std::string(c.ptx_only ? "true" : "false"); }},
      {"max_message_bytes", "Largest gRPC message accepted or sent, e.g. 64MiB", false, false,
       [](std::string_view t, DaemonConfig& c) -> Error {
         uint64_t v = 0;
         if (Error e = ParseSize(t, &v)) return e;
         if (v == 0) return "must be greater than 0";
         if (v > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
           return "must be below 2GiB (gRPC's limit is 2147483647 bytes), got " + Quoted(t);
         }
         c.max_message_bytes = v;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return FormatSize(c.max_message_bytes); }},
      {"log_format", "text or json (one object per line)", false, false,
       [](std::string_view t, DaemonConfig& c) -> Error {
         if (t != "text" && t != "json") return "expected text or json, got " + Quoted(t);
         c.log_format = t;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return c.log_format; }},
      {"log_level", "trace, debug, info, warn, error, critical or off", false, false,
       [](std::string_view t, DaemonConfig& c) -> Error {
         static constexpr std::string_view kLevels[] = {"trace", "debug",    "info", "warn",
                                                        "error", "critical", "off"};
         if (std::find(std::begin(kLevels), std::end(kLevels), t) == std::end(kLevels)) {
           return "expected one of trace, debug, info, warn, error, critical, off, got " +
                  Quoted(t);
         }
         c.log_level = t;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return c.log_level; }},
      {"drain_seconds", "On SIGTERM, how long in-flight requests may take", false, false,
       [](std::string_view t, DaemonConfig& c) -> Error {
         double v = 0;
         auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
         if (t.empty() || ec != std::errc() || end != t.data() + t.size() || !std::isfinite(v) ||
             v < 0 || v > kMaxDrainSeconds) {
           return "expected a number of seconds in 0..3600, got " + Quoted(t);
         }
         c.drain_seconds = v;
         return std::nullopt;
       },
       [](const DaemonConfig& c) { return FormatDouble(c.drain_seconds); }},
      {"cluster_nodes", "Seed nodes of the Redis Cluster tier; \"\" runs without one", false, true,
       ApplyClusterNodes, ShowText<&DaemonConfig::cluster_nodes>},
      {"cluster_user", "ACL user the cluster tier authenticates as; \"\" is default", false, true,
       ApplyText<&DaemonConfig::cluster_user>, ShowText<&DaemonConfig::cluster_user>},
      {"cluster_password_file", "File holding the cluster user's password", false, true,
       ApplyText<&DaemonConfig::cluster_password_file>,
       ShowText<&DaemonConfig::cluster_password_file>},
      {"cluster_secret_file", "File holding the HMAC secret of cluster entries", false, true,
       ApplyText<&DaemonConfig::cluster_secret_file>, ShowText<&DaemonConfig::cluster_secret_file>},
      {"cluster_key_prefix", "First component of every cluster key", false, true, ApplyKeyPrefix,
       ShowText<&DaemonConfig::cluster_key_prefix>},
      {"node_name", "Names this node in cluster leases; \"\" is hostname:pid", false, true,
       ApplyText<&DaemonConfig::node_name>, ShowText<&DaemonConfig::node_name>},
      {"cluster_ttl_seconds", "Cluster entries expire this long after their last hit", false, false,
       ApplyBounded<&DaemonConfig::cluster_ttl_seconds, 1, 366 * 24 * 3600>,
       ShowUnsigned<&DaemonConfig::cluster_ttl_seconds>},
      {"cluster_read_timeout_ms", "Deadline of each cluster read", false, false,
       ApplyBounded<&DaemonConfig::cluster_read_timeout_ms, 1, 60000>,
       ShowUnsigned<&DaemonConfig::cluster_read_timeout_ms>},
      {"cluster_write_timeout_ms", "Deadline of each cluster write or lease call", false, false,
       ApplyBounded<&DaemonConfig::cluster_write_timeout_ms, 1, 60000>,
       ShowUnsigned<&DaemonConfig::cluster_write_timeout_ms>},
      {"cluster_lease_ms", "How long a compile lease holds a key for the cluster", false, false,
       ApplyBounded<&DaemonConfig::cluster_lease_ms, 100, 3600000>,
       ShowUnsigned<&DaemonConfig::cluster_lease_ms>},
      {"cluster_breaker_failures", "Cluster failures in a row that open the breaker", false, false,
       ApplyBounded<&DaemonConfig::cluster_breaker_failures, 1, 1000>,
       ShowUnsigned<&DaemonConfig::cluster_breaker_failures>},
      {"cluster_breaker_open_ms", "How long an open breaker skips the cluster", false, false,
       ApplyBounded<&DaemonConfig::cluster_breaker_open_ms, 1, 3600000>,
       ShowUnsigned<&DaemonConfig::cluster_breaker_open_ms>},
      {"runtime_records_max", "Keys whose measured runtimes the node keeps", false, false,
       ApplyBounded<&DaemonConfig::runtime_records_max, 0, 100000000>,
       ShowUnsigned<&DaemonConfig::runtime_records_max>},
      {"metrics_top_keys", "Most-measured keys exported per key on /metrics", false, false,
       ApplyBounded<&DaemonConfig::metrics_top_keys, 0, 1000>,
       ShowUnsigned<&DaemonConfig::metrics_top_keys>},
      // Input limits. Rank and elements may only go below the compiler's defaults
      // (GraphLimits), which limits_test checks the defaults here against.
      {"max_graph_nodes", "Nodes of one graph (and its outputs); larger graphs are refused", false,
       false, ApplyBounded<&DaemonConfig::max_graph_nodes, 1, 1000000>,
       ShowUnsigned<&DaemonConfig::max_graph_nodes>},
      {"max_tensor_rank", "Dimensions of any one tensor of a graph, 1..8", false, false,
       ApplyBounded<&DaemonConfig::max_tensor_rank, 1, 8>,
       ShowUnsigned<&DaemonConfig::max_tensor_rank>},
      {"max_tensor_elements", "Elements of any one tensor of a graph, up to 2^34", false, false,
       ApplyBounded64<&DaemonConfig::max_tensor_elements, 1, uint64_t{1} << 34>,
       ShowUnsigned64<&DaemonConfig::max_tensor_elements>},
      {"max_hlo_text_bytes", "HLO text of one Compile, Lookup or Extract request, up to 256MiB",
       false, false, ApplySizeBounded<&DaemonConfig::max_hlo_text_bytes, 1, uint64_t{256} << 20>,
       ShowSize<&DaemonConfig::max_hlo_text_bytes>},
      {"max_usage_records", "Records of one ReportUsage request", false, false,
       ApplyBounded<&DaemonConfig::max_usage_records, 1, 1000000>,
       ShowUnsigned<&DaemonConfig::max_usage_records>},
      {"max_list_entries", "Entries of one ListEntries or ListRuntimes answer", false, false,
       ApplyBounded<&DaemonConfig::max_list_entries, 1, 1000000>,
       ShowUnsigned<&DaemonConfig::max_list_entries>},
      {"max_concurrent_streams", "Calls in flight per client connection; more wait their turn",
       false, false, ApplyBounded<&DaemonConfig::max_concurrent_streams, 1, 65536>,
       ShowUnsigned<&DaemonConfig::max_concurrent_streams>},
  };
  return kOptions;
}

const OptionSpec* FindOption(std::string_view key) {
  for (const OptionSpec& o : Options()) {
    if (key == o.key) return &o;
  }
  return nullptr;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string UnknownKeyMessage(std::string_view key) {
  std::string message = "unknown key " + Quoted(key);
  const OptionSpec* best = nullptr;
  size_t best_distance = 3;
  for (const OptionSpec& o : Options()) {
    const size_t d = EditDistance(key, o.key);
    if (d < best_distance) {
      best = &o;
      best_distance = d;
    }
  }
  if (best != nullptr) return message + "; did you mean " + Quoted(best->key) + "?";
  message += "; known keys are";
  const char* sep = " ";
  for (const OptionSpec& o : Options()) {
    message += sep;
    message += o.key;
    sep = ", ";
  }
  return message;
}

// ---- defaults ---------------------------------------------------------------------------

bool IsAbsolute(const std::string& path) { return !path.empty() && path.front() == '/'; }

StatusOr<std::string> DefaultDataDir(const Environment& env) {
  if (env.is_root) return std::string("/var/lib/stitchd");
  if (IsAbsolute(env.xdg_state_home)) return env.xdg_state_home + "/stitchd";
  if (IsAbsolute(env.home)) return env.home + "/.local/state/stitchd";
  return InvalidArgument(
      "--data-dir: no default: neither XDG_STATE_HOME nor HOME is an absolute path; set "
      "--data-dir or data_dir");
}

std::string DefaultSocketPath(const Environment& env, const std::string& data_dir) {
  if (env.is_root) return "/run/stitchd/stitchd.sock";
  if (IsAbsolute(env.xdg_runtime_dir)) return env.xdg_runtime_dir + "/stitchd/stitchd.sock";
  return data_dir + "/stitchd.sock";
}

// ---- the YAML file ----------------------------------------------------------------------

// A value gathered from the file or the flags, with where it came from for messages.
struct RawValue {
  std::string text;
  std::string where;  // "file.yaml:3: workers" or "--workers"
};

std::string LineOf(const std::string& file, const YAML::Mark& mark) {
  if (mark.is_null()) return file;
  return file + ":" + std::to_string(mark.line + 1);
}

Status ReadYamlFile(const std::string& file, std::map<std::string, RawValue>* out) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    const int err = errno;
    const std::string message = "--config: cannot read " + file + ": " + std::strerror(err);
    return err == ENOENT ? NotFound(message) : InvalidArgument(message);
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return InvalidArgument("--config: cannot read " + file);

  YAML::Node root;
  try {
    root = YAML::Load(text.str());
  } catch (const YAML::ParserException& e) {
    return InvalidArgument(file + ":" + std::to_string(e.mark.line + 1) + ":" +
                           std::to_string(e.mark.column + 1) + ": malformed YAML: " + e.msg);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(file + ": malformed YAML: " + e.what());
  }
  if (root.IsNull()) return Status::Ok();
  if (!root.IsMap()) {
    return InvalidArgument(LineOf(file, root.Mark()) +
                           ": expected a mapping of keys to values at the top level");
  }
  std::map<std::string, std::string> first_seen;
  for (const auto& entry : root) {
    // Copies: the iterator yields proxies that do not outlive the statement.
    const YAML::Node key_node = entry.first;
    const YAML::Node value = entry.second;
    const std::string line = LineOf(file, key_node.Mark());
    if (!key_node.IsScalar()) return InvalidArgument(line + ": keys must be plain names");
    const std::string key = key_node.Scalar();
    const OptionSpec* spec = FindOption(key);
    if (spec == nullptr) return InvalidArgument(line + ": " + UnknownKeyMessage(key));
    if (auto [prev, inserted] = first_seen.emplace(key, line); !inserted) {
      return InvalidArgument(line + ": duplicate key " + Quoted(key) + " (first at " +
                             prev->second + ")");
    }
    const std::string where = line + ": " + key;
    std::string scalar;
    if (value.IsScalar()) {
      scalar = value.Scalar();
    } else if (value.IsNull() && spec->is_string) {
      scalar.clear();
    } else if (value.IsNull()) {
      return InvalidArgument(where + ": has no value");
    } else {
      return InvalidArgument(where + ": expected a single value, got a " +
                             (value.IsSequence() ? "list" : "mapping"));
    }
    (*out)[key] = RawValue{std::move(scalar), where};
  }
  return Status::Ok();
}

// ---- checks across keys ------------------------------------------------------------------

// The TLS keys' combinations; the files themselves are read and parsed when the daemon
// starts (a config printed or checked elsewhere need not hold the secrets).
Status CheckTls(const DaemonConfig& config) {
  if (!config.tls_cert_file.empty() && config.tls_key_file.empty()) {
    return InvalidArgument("--tls-key-file: required with --tls-cert-file (" +
                           config.tls_cert_file + ")");
  }
  if (config.tls_cert_file.empty() && !config.tls_key_file.empty()) {
    return InvalidArgument("--tls-cert-file: required with --tls-key-file (" + config.tls_key_file +
                           ")");
  }
  if (config.tls_cert_file.empty() && !config.tls_client_ca_file.empty()) {
    return InvalidArgument(
        "--tls-client-ca-file: needs --tls-cert-file and --tls-key-file (clients are verified "
        "only over TLS)");
  }
  if (config.grpc_require_tls && !config.grpc_listen.empty() && config.tls_cert_file.empty()) {
    return InvalidArgument("--grpc-require-tls: grpc_listen " + Quoted(config.grpc_listen) +
                           " would serve plaintext TCP; set tls_cert_file and tls_key_file, or "
                           "grpc_listen \"\" to serve the unix socket alone");
  }
  return Status::Ok();
}

// ---- YAML output ------------------------------------------------------------------------

std::string YamlScalar(const std::string& value, bool quote) {
  YAML::Emitter out;
  if (quote) out << YAML::DoubleQuoted;
  out << value;
  return out.c_str();
}

std::string HelpFooter() {
  return "Every flag also has a YAML key with underscores (--disk-cache-bytes / "
         "disk_cache_bytes); flags win over the --config file, which wins over defaults.\n"
         "Sizes are integers with an optional unit B, K/KiB, M/MiB, G/GiB, T/TiB (powers of "
         "1024).\n"
         "The socket defaults to /run/stitchd/stitchd.sock for root, else to "
         "$XDG_RUNTIME_DIR/stitchd/stitchd.sock, or to <data_dir>/stitchd.sock without "
         "XDG_RUNTIME_DIR.";
}

// ---- the command line ---------------------------------------------------------------------

// The flags of every setting, registered on `app`; what CLI11 parses lands in the vectors,
// one entry per spec of Options(), in its order.
struct FlagValues {
  std::vector<std::string> text;
  std::vector<CLI::Option*> options;
  // One value per boolean flag; a deque, so the references CLI11 keeps stay valid.
  std::deque<bool> bools;
};

// `default_data_dir` is DefaultDataDir(env), shown as the data directory's and the socket's
// defaults.
void AddSettingFlags(CLI::App& app, const Environment& env,
                     const StatusOr<std::string>& default_data_dir, FlagValues& flags) {
  const std::vector<OptionSpec>& specs = Options();
  const DaemonConfig defaults;
  flags.text.resize(specs.size());
  flags.options.resize(specs.size());
  flags.bools.assign(specs.size(), false);
  for (size_t i = 0; i < specs.size(); ++i) {
    const OptionSpec& spec = specs[i];
    const std::string flag = FlagName(spec.key);
    if (spec.is_bool_flag) {
      flags.options[i] = app.add_flag(flag, flags.bools[i], spec.help);
      continue;
    }
    const std::string key = spec.key;
    std::string shown;
    if (key == "data_dir") {
      shown = default_data_dir.ok() ? *default_data_dir : std::string("(none; HOME is unset)");
    } else if (key == "socket") {
      shown = default_data_dir.ok() ? DefaultSocketPath(env, *default_data_dir) : "";
    } else {
      shown = spec.show(defaults);
    }
    flags.options[i] = app.add_option(flag, flags.text[i], spec.help)
                           ->type_name(TypeName(spec.key))
                           ->default_str(shown)
                           ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
}

// argv as CLI11 should read it. CLI11 reads "--socket=" as a missing value, though it is the
// natural way to pass the empty string that disables a listener; it is handed over as
// "--socket" "". `storage` keeps the rewritten flags and must outlive the result.
std::vector<const char*> SplitEmptyValues(int argc, const char* const* argv,
                                          std::deque<std::string>& storage) {
  std::vector<const char*> args;
  bool options_ended = false;
  for (int i = 0; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") options_ended = true;
    if (!options_ended && i > 0 && arg.size() > 3 && arg.starts_with("--") && arg.back() == '=' &&
        arg.find('=') == arg.size() - 1) {
      storage.emplace_back(arg.substr(0, arg.size() - 1));
      args.push_back(storage.back().c_str());
      args.push_back("");
      continue;
    }
    args.push_back(argv[i]);
  }
  if (args.empty()) args.push_back("stitchd");
  return args;
}

// Applies the --config file's values, then the flags', to `config`, each setting checked as
// it is applied; sets `given` to the keys either named.
Status ApplySettings(const std::map<std::string, RawValue>& file_values, const FlagValues& flags,
                     DaemonConfig& config, std::set<std::string>& given) {
  const std::vector<OptionSpec>& specs = Options();
  auto apply = [&](const OptionSpec& spec, const RawValue& raw) -> Status {
    if (!IsUtf8(raw.text)) return InvalidArgument(raw.where + ": the value is not valid UTF-8");
    if (Error e = spec.apply(raw.text, config)) return InvalidArgument(raw.where + ": " + *e);
    given.insert(spec.key);
    return Status::Ok();
  };
  // The table order, not the file order, so that errors come out the same way each time.
  for (const OptionSpec& spec : specs) {
    if (auto it = file_values.find(spec.key); it != file_values.end()) {
      STITCH_RETURN_IF_ERROR(apply(spec, it->second));
    }
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    if (flags.options[i]->empty()) continue;
    const std::string text =
        specs[i].is_bool_flag ? (flags.bools[i] ? "true" : "false") : flags.text[i];
    STITCH_RETURN_IF_ERROR(apply(specs[i], RawValue{text, FlagName(specs[i].key)}));
  }
  return Status::Ok();
}

// The defaults that depend on the environment or on other settings (the data directory, the
// socket in it, the worker count), and the checks across keys. `default_data_dir` is
// DefaultDataDir(env).
Status CompleteConfig(const std::set<std::string>& given, const Environment& env,
                      const StatusOr<std::string>& default_data_dir, DaemonConfig& config) {
  if (!given.count("data_dir")) {
    if (!default_data_dir.ok()) return default_data_dir.status();
    config.data_dir = *default_data_dir;
  }
  if (!given.count("socket")) {
    config.socket_path = DefaultSocketPath(env, config.data_dir);
    if (Error e = ValidateSocketPath(config.socket_path)) {
      return InvalidArgument("--socket: the default " + *e + "; set --socket or socket");
    }
  }
  if (!config.cluster_nodes.empty() && config.cluster_secret_file.empty()) {
    return InvalidArgument(
        "--cluster-secret-file: required with --cluster-nodes (entries shared by the cluster "
        "carry an HMAC under this secret)");
  }
  STITCH_RETURN_IF_ERROR(CheckTls(config));
  if (config.workers == 0) {
    config.workers = std::clamp(std::thread::hardware_concurrency(), 1u, kMaxWorkers);
  }
  return Status::Ok();
}

// Target "auto": the target of CUDA device 0, or the default target where no GPU is seen.
// Returns the line main() logs about the choice.
StatusOr<std::string> ResolveAutoTarget(DaemonConfig& config) {
  std::string why_not;
  std::optional<DetectedGpu> detected = DetectGpu(&why_not);
  if (!detected) {
    config.target = Target().name();
    return "target auto: " + why_not + "; using " + config.target;
  }
  // A GPU stitchd cannot plan for is an error, not a guess: kernels built for another
  // architecture would not load on it.
  StatusOr<Target> t = Target::ForGpu(detected->arch, detected->name);
  if (!t.ok()) {
    return InvalidArgument("--target auto: CUDA device 0 is " + detected->arch +
                           ", which stitchd does not compile for; it compiles for " +
                           Target::SupportedList());
  }
  config.target = t->name();
  return "target auto: CUDA device 0 is " + (detected->name.empty() ? "a GPU" : detected->name) +
         " (" + detected->arch + "), planned as " + t->device().name + ": " + t->name();
}

}  // namespace

Environment ReadEnvironment() {
  Environment env;
  auto get = [](const char* name) {
    const char* v = std::getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  env.home = get("HOME");
  env.xdg_state_home = get("XDG_STATE_HOME");
  env.xdg_runtime_dir = get("XDG_RUNTIME_DIR");
  env.is_root = geteuid() == 0;
  if (env.home.empty()) {
    // Services started without HOME still have a passwd entry.
    long size = sysconf(_SC_GETPW_R_SIZE_MAX);
    std::vector<char> buf(size > 0 ? static_cast<size_t>(size) : 16384);
    passwd pw{};
    passwd* result = nullptr;
    if (getpwuid_r(geteuid(), &pw, buf.data(), buf.size(), &result) == 0 && result != nullptr &&
        result->pw_dir != nullptr) {
      env.home = result->pw_dir;
    }
  }
  return env;
}

StatusOr<ParsedArgs> ParseCommandLine(int argc, const char* const* argv, const Environment& env) {
  ParsedArgs parsed;
  CLI::App app("stitchd serves compiled GPU kernels to the processes of this node over gRPC.",
               "stitchd");
  app.set_version_flag("--version", std::string("stitchd ") + STITCH_VERSION);
  app.footer(HelpFooter());
  app.get_formatter()->column_width(34);
  std::string config_file;
  bool print_config = false;
  app.add_option("--config", config_file, "YAML file of settings (keys as below)")
      ->type_name("FILE");
  app.add_flag("--print-config", print_config, "Print the resolved configuration as YAML and exit");
  const StatusOr<std::string> default_data_dir = DefaultDataDir(env);
  FlagValues flags;
  AddSettingFlags(app, env, default_data_dir, flags);

  std::deque<std::string> split_flags;
  std::vector<const char*> args = SplitEmptyValues(argc, argv, split_flags);
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::CallForHelp&) {
    parsed.exit_now = true;
    parsed.exit_message = app.help();
    return parsed;
  } catch (const CLI::CallForVersion& e) {
    parsed.exit_now = true;
    parsed.exit_message = std::string(e.what()) + "\n";
    return parsed;
  } catch (const CLI::ParseError& e) {
    return InvalidArgument(std::string(e.what()) + " (see --help)");
  }

  std::map<std::string, RawValue> file_values;
  if (!config_file.empty()) {
    STITCH_RETURN_IF_ERROR(ReadYamlFile(config_file, &file_values));
  }
  DaemonConfig& config = parsed.config;
  config.config_file = config_file;
  std::set<std::string> given;
  STITCH_RETURN_IF_ERROR(ApplySettings(file_values, flags, config, given));
  STITCH_RETURN_IF_ERROR(CompleteConfig(given, env, default_data_dir, config));
  if (config.target == "auto") {
    STITCH_ASSIGN_OR_RETURN(parsed.target_note, ResolveAutoTarget(config));
  }
  if (print_config) {
    parsed.exit_now = true;
    parsed.exit_message = ToYaml(config);
  }
  return parsed;
}

std::string ToYaml(const DaemonConfig& config) {
  std::string out = "# stitchd configuration (stitchd --config FILE)\n";
  for (const OptionSpec& spec : Options()) {
    out += "\n# ";
    out += spec.help;
    out += "\n";
    out += spec.key;
    out += ": ";
    // socket_mode is quoted so that YAML readers keep it a string rather than an integer.
    const bool quote = spec.is_string || std::string_view(spec.key) == "socket_mode";
    out += YamlScalar(spec.show(config), quote);
    out += "\n";
  }
  return out;
}

}  // namespace stitch::daemon
