#include "stitch/daemon/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "stitch/plan/target.h"

namespace stitch::daemon {
namespace {

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

Environment RootEnv() {
  Environment env;
  env.home = "/root";
  env.is_root = true;
  return env;
}

Environment UserEnv() {
  Environment env;
  env.home = "/home/ada";
  env.xdg_state_home = "/home/ada/.state";
  env.xdg_runtime_dir = "/run/user/1000";
  return env;
}

Environment BareUserEnv() {
  Environment env;
  env.home = "/home/ada";
  return env;
}

StatusOr<ParsedArgs> Parse(std::vector<std::string> args, const Environment& env = UserEnv()) {
  args.insert(args.begin(), "stitchd");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return ParseCommandLine(static_cast<int>(argv.size()), argv.data(), env);
}

// Parses args that must be valid and returns the config.
DaemonConfig ParseOk(std::vector<std::string> args, const Environment& env = UserEnv()) {
  StatusOr<ParsedArgs> parsed = Parse(std::move(args), env);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  if (!parsed.ok()) return {};
  EXPECT_FALSE(parsed->exit_now);
  return parsed->config;
}

// Parses args that must be rejected with `code` and returns the message.
std::string ParseError(std::vector<std::string> args, const Environment& env = UserEnv(),
                       StatusCode code = StatusCode::kInvalidArgument) {
  StatusOr<ParsedArgs> parsed = Parse(std::move(args), env);
  EXPECT_FALSE(parsed.ok());
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), code) << parsed.status().ToString();
  return parsed.status().message();
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "config_test.XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }

  std::string Write(const std::string& name, const std::string& text) const {
    const std::string file = path_ + "/" + name;
    std::ofstream(file) << text;
    return file;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ConfigTest, DefaultsForRoot) {
  const DaemonConfig c = ParseOk({"--target", "sm_80"}, RootEnv());
  EXPECT_EQ(c.data_dir, "/var/lib/stitchd");
  EXPECT_EQ(c.socket_path, "/run/stitchd/stitchd.sock");
  EXPECT_EQ(c.socket_mode, 0666u);
  // TCP is loopback-only unless configured: anyone reaching the port could make it compile.
  EXPECT_EQ(c.grpc_listen, "127.0.0.1:7070");
  EXPECT_EQ(c.tls_cert_file, "");
  EXPECT_FALSE(c.grpc_require_tls);
  EXPECT_EQ(c.metrics_listen, "0.0.0.0:9464");
  EXPECT_EQ(c.memory_cache_bytes, uint64_t{256} << 20);
  EXPECT_EQ(c.disk_cache_bytes, uint64_t{10} << 30);
  EXPECT_GE(c.workers, 1u);
  EXPECT_LE(c.workers, 1024u);
  EXPECT_EQ(c.max_queue, 256u);
  EXPECT_EQ(c.target, "sm_80");
  EXPECT_EQ(c.salt, "");
  EXPECT_FALSE(c.ptx_only);
  EXPECT_EQ(c.max_message_bytes, uint64_t{64} << 20);
  EXPECT_EQ(c.log_format, "text");
  EXPECT_EQ(c.log_level, "info");
  EXPECT_EQ(c.drain_seconds, 10.0);
  EXPECT_EQ(c.config_file, "");
}

TEST(ConfigTest, DefaultsForUserFollowXdg) {
  const DaemonConfig c = ParseOk({"--target", "sm_80"}, UserEnv());
  EXPECT_EQ(c.data_dir, "/home/ada/.state/stitchd");
  EXPECT_EQ(c.socket_path, "/run/user/1000/stitchd/stitchd.sock");
}

TEST(ConfigTest, DefaultsForUserWithoutXdg) {
  const DaemonConfig c = ParseOk({"--target", "sm_80"}, BareUserEnv());
  EXPECT_EQ(c.data_dir, "/home/ada/.local/state/stitchd");
  EXPECT_EQ(c.socket_path, "/home/ada/.local/state/stitchd/stitchd.sock");
}

TEST(ConfigTest, RelativeXdgPathsAreIgnored) {
  Environment env = BareUserEnv();
  env.xdg_state_home = "relative/state";
  env.xdg_runtime_dir = "relative/run";
  const DaemonConfig c = ParseOk({"--target", "sm_80"}, env);
  EXPECT_EQ(c.data_dir, "/home/ada/.local/state/stitchd");
  EXPECT_EQ(c.socket_path, "/home/ada/.local/state/stitchd/stitchd.sock");
}

TEST(ConfigTest, DefaultSocketFollowsDataDirFlag) {
  const DaemonConfig c = ParseOk({"--target", "sm_80", "--data-dir", "/srv/k"}, BareUserEnv());
  EXPECT_EQ(c.data_dir, "/srv/k");
  EXPECT_EQ(c.socket_path, "/srv/k/stitchd.sock");
}

TEST(ConfigTest, NoHomeNeedsDataDir) {
  Environment env;
  EXPECT_TRUE(Contains(ParseError({"--target", "sm_80"}, env), "--data-dir"));
  const DaemonConfig c = ParseOk({"--target", "sm_80", "--data-dir", "/d"}, env);
  EXPECT_EQ(c.socket_path, "/d/stitchd.sock");
}

TEST(ConfigTest, FlagBeatsFileBeatsDefault) {
  TempDir dir;
  const std::string file = dir.Write("stitchd.yaml",
                                     "workers: 3\n"
                                     "max_queue: 10\n"
                                     "log_level: debug\n"
                                     "target: sm_86\n");
  const DaemonConfig c = ParseOk({"--config", file, "--workers", "5", "--target=sm_90"});
  EXPECT_EQ(c.workers, 5u);         // flag
  EXPECT_EQ(c.target, "sm_90");     // flag, --key=value form
  EXPECT_EQ(c.max_queue, 10u);      // file
  EXPECT_EQ(c.log_level, "debug");  // file
  EXPECT_EQ(c.log_format, "text");  // default
  EXPECT_EQ(c.config_file, file);
}

TEST(ConfigTest, RepeatedFlagTakesTheLast) {
  EXPECT_EQ(ParseOk({"--target", "sm_80", "--max-queue", "4", "--max-queue", "9"}).max_queue, 9u);
}

TEST(ConfigTest, Sizes) {
  auto memory = [](const std::string& text) {
    return ParseOk({"--target", "sm_80", "--memory-cache-bytes", text}).memory_cache_bytes;
  };
  EXPECT_EQ(memory("123"), 123u);
  EXPECT_EQ(memory("123B"), 123u);
  EXPECT_EQ(memory("512k"), 512u << 10);
  EXPECT_EQ(memory("512KiB"), 512u << 10);
  EXPECT_EQ(memory("256MiB"), uint64_t{256} << 20);
  EXPECT_EQ(memory("256 MiB"), uint64_t{256} << 20);
  EXPECT_EQ(memory("10GiB"), uint64_t{10} << 30);
  EXPECT_EQ(memory("2g"), uint64_t{2} << 30);
  EXPECT_EQ(memory("1T"), uint64_t{1} << 40);

  EXPECT_TRUE(Contains(ParseError({"--memory-cache-bytes", "10GB"}), "--memory-cache-bytes"));
  EXPECT_TRUE(Contains(ParseError({"--memory-cache-bytes", "10GB"}), "GiB"));
  EXPECT_TRUE(Contains(ParseError({"--disk-cache-bytes", "12xb"}), "--disk-cache-bytes"));
  EXPECT_TRUE(Contains(ParseError({"--disk-cache-bytes", "12xb"}), "unit"));
  EXPECT_TRUE(Contains(ParseError({"--disk-cache-bytes", "0"}), "greater than 0"));
  EXPECT_TRUE(Contains(ParseError({"--disk-cache-bytes=-1"}), "--disk-cache-bytes"));
  EXPECT_TRUE(Contains(ParseError({"--disk-cache-bytes", "1.5GiB"}), "--disk-cache-bytes"));
  EXPECT_TRUE(Contains(ParseError({"--disk-cache-bytes", "99999999999999999999"}), "too large"));
  EXPECT_TRUE(Contains(ParseError({"--disk-cache-bytes", "20000000T"}), "too large"));
  EXPECT_TRUE(Contains(ParseError({"--max-message-bytes", "2GiB"}), "--max-message-bytes"));
  EXPECT_EQ(ParseOk({"--target", "sm_80", "--max-message-bytes", "2147483647"}).max_message_bytes,
            2147483647u);
}

TEST(ConfigTest, YamlErrorsNameFileLineAndKey) {
  TempDir dir;
  const std::string file = dir.Write("bad.yaml", "workers: 2\ndisk_cache_bytes: 10 gigs\n");
  const std::string message = ParseError({"--config", file});
  EXPECT_TRUE(Contains(message, file + ":2"));
  EXPECT_TRUE(Contains(message, "disk_cache_bytes"));
  EXPECT_TRUE(Contains(message, "gigs"));
}

TEST(ConfigTest, UnknownYamlKey) {
  TempDir dir;
  const std::string file = dir.Write("typo.yaml", "log_level: info\nworkrs: 3\n");
  const std::string message = ParseError({"--config", file});
  EXPECT_TRUE(Contains(message, file + ":2"));
  EXPECT_TRUE(Contains(message, "unknown key 'workrs'"));
  EXPECT_TRUE(Contains(message, "did you mean 'workers'"));

  const std::string far = dir.Write("far.yaml", "colour: blue\n");
  EXPECT_TRUE(Contains(ParseError({"--config", far}), "known keys are"));
}

TEST(ConfigTest, UnknownFlag) {
  EXPECT_TRUE(Contains(ParseError({"--bogus", "1"}), "--bogus"));
  EXPECT_TRUE(Contains(ParseError({"stray"}), "stray"));
  EXPECT_TRUE(Contains(ParseError({"--workers"}), "--workers"));
}

TEST(ConfigTest, WrongTypes) {
  TempDir dir;
  const std::string list = dir.Write("list.yaml", "workers: [1, 2]\n");
  EXPECT_TRUE(Contains(ParseError({"--config", list}), "workers"));
  EXPECT_TRUE(Contains(ParseError({"--config", list}), "list"));
  const std::string map = dir.Write("map.yaml", "\nsalt:\n  a: 1\n");
  EXPECT_TRUE(Contains(ParseError({"--config", map}), map + ":2: salt"));
  const std::string text = dir.Write("text.yaml", "max_queue: lots\n");
  EXPECT_TRUE(Contains(ParseError({"--config", text}), "max_queue"));
  EXPECT_TRUE(Contains(ParseError({"--config", text}), "'lots'"));
  const std::string empty = dir.Write("null.yaml", "workers:\n");
  EXPECT_TRUE(Contains(ParseError({"--config", empty}), "workers: has no value"));
  const std::string boolean = dir.Write("bool.yaml", "ptx_only: maybe\n");
  EXPECT_TRUE(Contains(ParseError({"--config", boolean}), "ptx_only"));

  EXPECT_TRUE(Contains(ParseError({"--workers", "four"}), "--workers"));
  EXPECT_TRUE(Contains(ParseError({"--workers", "1025"}), "--workers"));
  EXPECT_TRUE(Contains(ParseError({"--workers=-1"}), "--workers"));
  EXPECT_TRUE(Contains(ParseError({"--max-queue", "0"}), "--max-queue"));
  EXPECT_TRUE(Contains(ParseError({"--drain-seconds", "-1"}), "--drain-seconds"));
  EXPECT_TRUE(Contains(ParseError({"--drain-seconds", "nan"}), "--drain-seconds"));
  EXPECT_EQ(ParseOk({"--target", "sm_80", "--drain-seconds", "2.5"}).drain_seconds, 2.5);
}

TEST(ConfigTest, DuplicateYamlKey) {
  TempDir dir;
  const std::string file = dir.Write("dup.yaml", "workers: 1\nworkers: 2\n");
  const std::string message = ParseError({"--config", file});
  EXPECT_TRUE(Contains(message, "duplicate key 'workers'"));
  EXPECT_TRUE(Contains(message, file + ":1"));
}

TEST(ConfigTest, SocketPathLimit) {
  const std::string long_path = "/tmp/" + std::string(120, 's') + ".sock";
  const std::string message = ParseError({"--socket", long_path});
  EXPECT_TRUE(Contains(message, "--socket"));
  EXPECT_TRUE(Contains(message, "108"));

  const std::string at_limit = "/" + std::string(106, 's');
  EXPECT_EQ(ParseOk({"--target", "sm_80", "--socket", at_limit}).socket_path, at_limit);
  EXPECT_TRUE(Contains(ParseError({"--socket", at_limit + "s"}), "108"));

  // A default derived from a long data dir is checked too.
  EXPECT_TRUE(
      Contains(ParseError({"--data-dir", "/" + std::string(110, 'd')}, BareUserEnv()), "--socket"));
}

TEST(ConfigTest, EmptyValuesDisable) {
  const DaemonConfig c =
      ParseOk({"--target", "sm_80", "--socket", "", "--grpc-listen=", "--metrics-listen", ""});
  EXPECT_EQ(c.socket_path, "");
  EXPECT_EQ(c.grpc_listen, "");
  EXPECT_EQ(c.metrics_listen, "");

  TempDir dir;
  const std::string file = dir.Write("off.yaml", "socket:\ngrpc_listen: \"\"\n");
  const DaemonConfig f = ParseOk({"--target", "sm_80", "--config", file});
  EXPECT_EQ(f.socket_path, "");
  EXPECT_EQ(f.grpc_listen, "");
  EXPECT_EQ(f.metrics_listen, "0.0.0.0:9464");

  EXPECT_TRUE(Contains(ParseError({"--data-dir", ""}), "--data-dir"));
}

TEST(ConfigTest, SocketMode) {
  auto mode = [](const std::string& text) {
    return ParseOk({"--target", "sm_80", "--socket-mode", text}).socket_mode;
  };
  EXPECT_EQ(mode("0660"), 0660u);
  EXPECT_EQ(mode("660"), 0660u);
  EXPECT_EQ(mode("0o600"), 0600u);
  EXPECT_EQ(mode("0"), 0u);
  for (const char* bad : {"0999", "rw-rw----", "01777", "", "0x1ff", "-660", "00660"}) {
    EXPECT_TRUE(Contains(ParseError({"--socket-mode", bad}), "--socket-mode")) << bad;
  }

  TempDir dir;
  // Unquoted, YAML 1.1 would read 0660 as octal and 1.2 as decimal; either way it is octal here.
  const std::string plain = dir.Write("mode.yaml", "socket_mode: 0660\n");
  EXPECT_EQ(ParseOk({"--target", "sm_80", "--config", plain}).socket_mode, 0660u);
  const std::string quoted = dir.Write("quoted.yaml", "socket_mode: \"0640\"\n");
  EXPECT_EQ(ParseOk({"--target", "sm_80", "--config", quoted}).socket_mode, 0640u);
  const std::string bad = dir.Write("bad.yaml", "socket_mode: 0789\n");
  EXPECT_TRUE(Contains(ParseError({"--config", bad}), "socket_mode"));
}

TEST(ConfigTest, LogSettings) {
  EXPECT_EQ(ParseOk({"--target", "sm_80", "--log-level", "warn"}).log_level, "warn");
  EXPECT_EQ(ParseOk({"--target", "sm_80", "--log-format", "json"}).log_format, "json");
  const std::string level = ParseError({"--log-level", "verbose"});
  EXPECT_TRUE(Contains(level, "--log-level"));
  EXPECT_TRUE(Contains(level, "verbose"));
  EXPECT_TRUE(Contains(ParseError({"--log-format", "xml"}), "--log-format"));
}

TEST(ConfigTest, ListenAddresses) {
  for (const char* good : {"127.0.0.1:0", "0.0.0.0:7070", "[::]:7070", "[::1]:65535",
                           "localhost:80", "node-1.example.com:9464", "[fe80::1%eth0]:1"}) {
    EXPECT_EQ(ParseOk({"--target", "sm_80", "--grpc-listen", good}).grpc_listen, good);
  }
  for (const char* bad : {"7070", "localhost", "host:99999", "host:", ":7070", "::1:7070", "a b:1",
                          "[zz]:1", "[::1]7070", "host:-1"}) {
    EXPECT_TRUE(Contains(ParseError({"--metrics-listen", bad}), "--metrics-listen")) << bad;
  }
}

TEST(ConfigTest, WorkersZeroResolves) {
  const DaemonConfig c = ParseOk({"--target", "sm_80", "--workers", "0"});
  EXPECT_GE(c.workers, 1u);
  EXPECT_LE(c.workers, 1024u);
  EXPECT_EQ(ParseOk({"--target", "sm_80", "--workers", "1024"}).workers, 1024u);
}

TEST(ConfigTest, Targets) {
  StatusOr<ParsedArgs> autodetected = Parse({});
  ASSERT_TRUE(autodetected.ok()) << autodetected.status().ToString();
  const std::string& target = autodetected->config.target;
  EXPECT_TRUE(Target::Parse(target).ok()) << target;
  EXPECT_FALSE(autodetected->target_note.empty());
  EXPECT_TRUE(Contains(autodetected->target_note, autodetected->config.target));

  StatusOr<ParsedArgs> given = Parse({"--target", "sm_89"});
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(given->config.target, "sm_89");
  EXPECT_EQ(given->target_note, "");

  // The config accepts exactly the targets the compiler plans for (Target::Parse).
  for (const Target& good : Target::Supported()) {
    EXPECT_EQ(ParseOk({"--target", good.name()}).target, good.name());
  }
  EXPECT_EQ(ParseOk({"--target", "sm_90a"}).target, "sm_90a");
  // A device is spelled in any case and kept in the canonical spelling the cache key takes.
  EXPECT_EQ(ParseOk({"--target", "sm_90/H200"}).target, "sm_90/h200");
  EXPECT_EQ(ParseOk({"--target", "sm_90/h100"}).target, "sm_90");
  EXPECT_TRUE(Contains(ParseError({"--target", "sm_80/h200"}), "is not supported"));
  for (const char* bad : {"sm_7", "sm_9000", "compute_90", "sm_90b", "SM_90", "90"}) {
    const std::string error = ParseError({"--target", bad});
    EXPECT_TRUE(Contains(error, "--target")) << bad;
    EXPECT_TRUE(Contains(error, "not a GPU architecture like sm_80")) << error;
  }
  // Well formed, but a GPU the compiler has no device figures for: the error lists the
  // supported targets.
  for (const char* unknown : {"sm_40", "sm_50", "sm_70", "sm_100", "sm_120", "sm_130"}) {
    const std::string error = ParseError({"--target", unknown});
    EXPECT_TRUE(Contains(error, "is not supported")) << error;
    EXPECT_TRUE(Contains(error, Target::SupportedList())) << error;
  }
}

TEST(ConfigTest, PtxOnlyFlag) {
  EXPECT_FALSE(ParseOk({"--target", "sm_80"}).ptx_only);
  EXPECT_TRUE(ParseOk({"--target", "sm_80", "--ptx-only"}).ptx_only);
  TempDir dir;
  const std::string file = dir.Write("ptx.yaml", "ptx_only: true\n");
  EXPECT_TRUE(ParseOk({"--target", "sm_80", "--config", file}).ptx_only);
  EXPECT_FALSE(ParseOk({"--target", "sm_80", "--config", file, "--ptx-only=false"}).ptx_only);
}

TEST(ConfigTest, CompileIsolationKeys) {
  // Defaults: isolated, generous limits, a short negative TTL, no fault injection.
  const DaemonConfig d = ParseOk({});
  EXPECT_EQ(d.compile_isolation, "process");
  EXPECT_EQ(d.compile_cpu_seconds, 300u);
  EXPECT_EQ(d.compile_memory_bytes, uint64_t{8} << 30);
  EXPECT_EQ(d.compile_timeout_seconds, 600u);
  EXPECT_EQ(d.negative_cache_seconds, 60u);
  EXPECT_FALSE(d.compile_fault_injection);

  const DaemonConfig c =
      ParseOk({"--compile-isolation", "thread", "--compile-cpu-seconds", "5",
               "--compile-memory-bytes", "1GiB", "--compile-timeout-seconds", "7",
               "--negative-cache-seconds", "0", "--compile-fault-injection"});
  EXPECT_EQ(c.compile_isolation, "thread");
  EXPECT_EQ(c.compile_cpu_seconds, 5u);
  EXPECT_EQ(c.compile_memory_bytes, uint64_t{1} << 30);
  EXPECT_EQ(c.compile_timeout_seconds, 7u);
  EXPECT_EQ(c.negative_cache_seconds, 0u);
  EXPECT_TRUE(c.compile_fault_injection);

  TempDir dir;
  const std::string yaml = ToYaml(c);
  EXPECT_TRUE(Contains(yaml, "compile_memory_bytes: 1GiB\n")) << yaml;
  const DaemonConfig r = ParseOk({"--config", dir.Write("isolation.yaml", yaml)});
  EXPECT_EQ(ToYaml(r), yaml);

  EXPECT_TRUE(
      Contains(ParseError({"--compile-isolation", "fork"}), "expected process or thread, got"));
  EXPECT_TRUE(Contains(ParseError({"--compile-cpu-seconds", "0"}), "1..86400"));
  EXPECT_TRUE(Contains(ParseError({"--compile-memory-bytes", "1MiB"}), "at least 256MiB"));
  EXPECT_TRUE(Contains(ParseError({"--compile-timeout-seconds", "0"}), "1..86400"));
}

TEST(ConfigTest, ToYamlRoundTrips) {
  DaemonConfig c;
  c.data_dir = "/srv/stitchd data";
  c.socket_path = "";
  c.socket_mode = 0640;
  c.grpc_listen = "[::]:0";
  c.metrics_listen = "127.0.0.1:9100";
  c.memory_cache_bytes = (uint64_t{3} << 30) + 1;
  c.disk_cache_bytes = uint64_t{5} << 40;
  c.workers = 7;
  c.max_queue = 99;
  c.target = "sm_86";
  c.salt = "a \"quoted\": #salt\\ with µs, 'ticks' and\nnewline";
  c.ptx_only = true;
  c.max_message_bytes = 512 << 10;
  c.log_format = "json";
  c.log_level = "trace";
  c.drain_seconds = 0.25;

  TempDir dir;
  const std::string yaml = ToYaml(c);
  const std::string file = dir.Write("round.yaml", yaml);
  const DaemonConfig r = ParseOk({"--config", file});
  EXPECT_EQ(r.data_dir, c.data_dir);
  EXPECT_EQ(r.socket_path, c.socket_path);
  EXPECT_EQ(r.socket_mode, c.socket_mode);
  EXPECT_EQ(r.grpc_listen, c.grpc_listen);
  EXPECT_EQ(r.metrics_listen, c.metrics_listen);
  EXPECT_EQ(r.memory_cache_bytes, c.memory_cache_bytes);
  EXPECT_EQ(r.disk_cache_bytes, c.disk_cache_bytes);
  EXPECT_EQ(r.workers, c.workers);
  EXPECT_EQ(r.max_queue, c.max_queue);
  EXPECT_EQ(r.target, c.target);
  EXPECT_EQ(r.salt, c.salt);
  EXPECT_EQ(r.ptx_only, c.ptx_only);
  EXPECT_EQ(r.max_message_bytes, c.max_message_bytes);
  EXPECT_EQ(r.log_format, c.log_format);
  EXPECT_EQ(r.log_level, c.log_level);
  EXPECT_EQ(r.drain_seconds, c.drain_seconds);
  EXPECT_EQ(ToYaml(r), yaml);
  EXPECT_TRUE(Contains(yaml, "disk_cache_bytes: 5TiB\n"));
  EXPECT_TRUE(Contains(yaml, "socket_mode: \"0640\"\n"));
}

// Found by fuzz/config_fuzzer: a data_dir with bytes that are not UTF-8 was accepted, and
// --print-config wrote each as U+FFFD, so the printed config read back as another one (here
// its default socket path grew past the unix limit). Such values are refused up front.
TEST(ConfigTest, ValuesMustBeUtf8) {
  TempDir dir;
  const std::string file = dir.Write("latin1.yaml", "data_dir: /var/lib/caf\xe9\n");
  const std::string message = ParseError({"--config", file});
  EXPECT_TRUE(Contains(message, file + ":1: data_dir"));
  EXPECT_TRUE(Contains(message, "not valid UTF-8"));
  EXPECT_TRUE(Contains(ParseError({"--salt", "\xc0\xaf"}), "--salt: the value is not valid UTF-8"));
  EXPECT_TRUE(Contains(ParseError({"--salt", "\xed\xa0\x80"}), "not valid UTF-8"));  // surrogate

  const std::string utf8 = dir.Write("utf8.yaml", "data_dir: /var/lib/café\nsalt: \"µs 🙂\"\n");
  const DaemonConfig c = ParseOk({"--config", utf8});
  EXPECT_EQ(c.data_dir, "/var/lib/café");
  const std::string printed = dir.Write("printed.yaml", ToYaml(c));
  EXPECT_EQ(ToYaml(ParseOk({"--config", printed})), ToYaml(c));
}

TEST(ConfigTest, PrintConfigPrintsTheResolvedYaml) {
  StatusOr<ParsedArgs> parsed = Parse({"--print-config", "--workers", "0"}, RootEnv());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(parsed->exit_now);
  EXPECT_EQ(parsed->exit_code, 0);
  EXPECT_EQ(parsed->exit_message, ToYaml(parsed->config));
  EXPECT_TRUE(Contains(parsed->exit_message, "data_dir: \"/var/lib/stitchd\"\n"));
  EXPECT_FALSE(Contains(parsed->exit_message, "workers: 0\n"));
  EXPECT_FALSE(Contains(parsed->exit_message, "target: auto"));
}

TEST(ConfigTest, HelpAndVersionExitZero) {
  StatusOr<ParsedArgs> help = Parse({"--help"});
  ASSERT_TRUE(help.ok()) << help.status().ToString();
  EXPECT_TRUE(help->exit_now);
  EXPECT_EQ(help->exit_code, 0);
  for (const char* flag :
       {"--data-dir", "--socket", "--socket-mode", "--grpc-listen", "--metrics-listen",
        "--memory-cache-bytes", "--disk-cache-bytes", "--workers", "--max-queue", "--target",
        "--salt", "--ptx-only", "--max-message-bytes", "--log-format", "--log-level",
        "--drain-seconds", "--config", "--print-config", "--version"}) {
    EXPECT_TRUE(Contains(help->exit_message, flag));
  }
  // Help wins over errors elsewhere on the line.
  StatusOr<ParsedArgs> help_with_bad = Parse({"--workers", "many", "-h"});
  ASSERT_TRUE(help_with_bad.ok());
  EXPECT_TRUE(help_with_bad->exit_now);

  StatusOr<ParsedArgs> version = Parse({"--version"});
  ASSERT_TRUE(version.ok());
  EXPECT_TRUE(version->exit_now);
  EXPECT_EQ(version->exit_code, 0);
  EXPECT_TRUE(Contains(version->exit_message, "stitchd "));
}

TEST(ConfigTest, MalformedYamlNamesTheFile) {
  TempDir dir;
  const std::string file = dir.Write("broken.yaml", "workers: 2\nsalt: [unclosed\n");
  const std::string message = ParseError({"--config", file});
  EXPECT_TRUE(Contains(message, file));
  EXPECT_TRUE(Contains(message, "malformed YAML"));

  const std::string list = dir.Write("list.yaml", "- workers\n- 2\n");
  EXPECT_TRUE(Contains(ParseError({"--config", list}), list));

  const std::string empty = dir.Write("empty.yaml", "# nothing set\n");
  EXPECT_EQ(ParseOk({"--target", "sm_80", "--config", empty}).max_queue, 256u);
}

TEST(ConfigTest, MissingConfigFile) {
  TempDir dir;
  const std::string file = dir.path() + "/absent.yaml";
  const std::string message = ParseError({"--config", file}, UserEnv(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(message, file));
  EXPECT_TRUE(Contains(message, "--config"));
}

}  // namespace
}  // namespace stitch::daemon

namespace stitch::daemon {
namespace {

TEST(ClusterConfigTest, FlagsAndFileSetTheClusterTier) {
  TempDir dir;
  const std::string file = dir.Write("c.yaml",
                                     "cluster_nodes: 10.0.0.1:6379,10.0.0.2:6380\n"
                                     "cluster_user: stitchd\n"
                                     "cluster_secret_file: /etc/stitchd/secret\n"
                                     "cluster_ttl_seconds: 3600\n"
                                     "cluster_read_timeout_ms: 15\n");
  const DaemonConfig c = ParseOk({"--target", "sm_80", "--config", file, "--cluster-lease-ms",
                                  "60000", "--node-name", "gpu-17"});
  EXPECT_EQ(c.cluster_nodes, "10.0.0.1:6379,10.0.0.2:6380");
  EXPECT_EQ(c.cluster_user, "stitchd");
  EXPECT_EQ(c.cluster_secret_file, "/etc/stitchd/secret");
  EXPECT_EQ(c.cluster_ttl_seconds, 3600u);
  EXPECT_EQ(c.cluster_read_timeout_ms, 15u);
  EXPECT_EQ(c.cluster_write_timeout_ms, 250u);
  EXPECT_EQ(c.cluster_lease_ms, 60000u);
  EXPECT_EQ(c.node_name, "gpu-17");
  // --print-config shows where the secrets are, and reads back to the same config.
  const std::string yaml = ToYaml(c);
  EXPECT_TRUE(Contains(yaml, "cluster_secret_file: \"/etc/stitchd/secret\""));
  const DaemonConfig again = ParseOk({"--config", dir.Write("again.yaml", yaml)});
  EXPECT_EQ(again.cluster_nodes, c.cluster_nodes);
  EXPECT_EQ(again.cluster_lease_ms, c.cluster_lease_ms);
  EXPECT_EQ(ToYaml(again), yaml);
}

TEST(ClusterConfigTest, TheDefaultIsNoClusterTier) {
  const DaemonConfig c = ParseOk({"--target", "sm_80"});
  EXPECT_EQ(c.cluster_nodes, "");
  EXPECT_EQ(c.cluster_key_prefix, "stitch");
}

TEST(ClusterConfigTest, BadClusterSettingsNameTheKey) {
  EXPECT_TRUE(Contains(ParseError({"--cluster-nodes", "10.0.0.1", "--cluster-secret-file", "/s"}),
                       "--cluster-nodes"));
  EXPECT_TRUE(Contains(
      ParseError({"--cluster-nodes", "h:1,h:99999", "--cluster-secret-file", "/s"}), "port"));
  EXPECT_TRUE(Contains(ParseError({"--cluster-nodes", "h:1"}), "--cluster-secret-file"));
  EXPECT_TRUE(Contains(ParseError({"--cluster-key-prefix", "a{b}"}), "braces"));
  EXPECT_TRUE(Contains(ParseError({"--cluster-read-timeout-ms", "0"}), "1..60000"));
  EXPECT_TRUE(Contains(ParseError({"--cluster-lease-ms", "soon"}), "'soon'"));
}

}  // namespace
}  // namespace stitch::daemon

namespace stitch::daemon {
namespace {

TEST(TlsConfigTest, FlagsAndFileSetTls) {
  TempDir dir;
  const std::string file = dir.Write("t.yaml",
                                     "grpc_listen: \"0.0.0.0:7070\"\n"
                                     "tls_cert_file: /etc/stitchd/tls/tls.crt\n"
                                     "tls_key_file: /etc/stitchd/tls/tls.key\n"
                                     "grpc_require_tls: true\n");
  const DaemonConfig c = ParseOk(
      {"--target", "sm_80", "--config", file, "--tls-client-ca-file", "/etc/stitchd/tls/ca.crt"});
  EXPECT_EQ(c.tls_cert_file, "/etc/stitchd/tls/tls.crt");
  EXPECT_EQ(c.tls_key_file, "/etc/stitchd/tls/tls.key");
  EXPECT_EQ(c.tls_client_ca_file, "/etc/stitchd/tls/ca.crt");
  EXPECT_TRUE(c.grpc_require_tls);
  // --print-config shows the paths (the files are not read here) and reads back the same.
  const std::string yaml = ToYaml(c);
  EXPECT_TRUE(Contains(yaml, "tls_key_file: \"/etc/stitchd/tls/tls.key\"\n"));
  EXPECT_TRUE(Contains(yaml, "grpc_require_tls: true\n"));
  const DaemonConfig again = ParseOk({"--config", dir.Write("again.yaml", yaml)});
  EXPECT_EQ(again.tls_client_ca_file, c.tls_client_ca_file);
  EXPECT_TRUE(again.grpc_require_tls);
  EXPECT_EQ(ToYaml(again), yaml);
  // The boolean flags are independent of each other.
  const DaemonConfig flags = ParseOk({"--target", "sm_80", "--grpc-require-tls", "--grpc-listen="});
  EXPECT_TRUE(flags.grpc_require_tls);
  EXPECT_FALSE(flags.ptx_only);
  EXPECT_FALSE(ParseOk({"--target", "sm_80", "--config", file, "--grpc-require-tls=false"})
                   .grpc_require_tls);
}

TEST(TlsConfigTest, IncompleteTlsSettingsNameTheKey) {
  EXPECT_TRUE(Contains(ParseError({"--tls-cert-file", "/c.pem"}),
                       "--tls-key-file: required with --tls-cert-file"));
  EXPECT_TRUE(Contains(ParseError({"--tls-key-file", "/k.pem"}),
                       "--tls-cert-file: required with --tls-key-file"));
  EXPECT_TRUE(Contains(ParseError({"--tls-client-ca-file", "/ca.pem"}), "--tls-client-ca-file"));
}

TEST(TlsConfigTest, RequireTlsRefusesPlaintextTcp) {
  const std::string message = ParseError({"--grpc-require-tls", "--grpc-listen", "0.0.0.0:7070"});
  EXPECT_TRUE(Contains(message, "--grpc-require-tls"));
  EXPECT_TRUE(Contains(message, "'0.0.0.0:7070' would serve plaintext TCP"));
  // The default listener is TCP too, so the key alone refuses it.
  EXPECT_TRUE(Contains(ParseError({"--grpc-require-tls"}), "'127.0.0.1:7070'"));
  // With TLS files, or without a TCP listener, there is nothing to refuse.
  EXPECT_TRUE(ParseOk({"--target", "sm_80", "--grpc-require-tls", "--tls-cert-file", "/c.pem",
                       "--tls-key-file", "/k.pem"})
                  .grpc_require_tls);
  EXPECT_EQ(ParseOk({"--target", "sm_80", "--grpc-require-tls", "--grpc-listen="}).grpc_listen, "");
}

}  // namespace
}  // namespace stitch::daemon
