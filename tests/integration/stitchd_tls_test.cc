// TLS and mutual TLS on stitchd's TCP listener, against a real stitchd process and the real
// client library (C++ and C ABI), with certificates the test makes with the openssl command
// line: a CA, a server certificate for 127.0.0.1 and localhost, a client certificate of that
// CA, one of another CA, and one of the right CA that has expired.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "stitch/client/client.h"
#include "stitch_client.h"
#include "support/command.h"
#include "support/daemon_requests.h"
#include "support/stitchd_process.h"

namespace stitch::testing {
namespace {

using client::Client;
using client::ClientOptions;
using client::Outcome;
using std::chrono::milliseconds;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Waits (at most 10 s) until the daemon's log holds `part` `count` times; returns the log.
// gRPC writes each refused handshake's reason to the daemon's stderr as it closes the
// connection, so the line may land just after the client has seen the close.
std::string WaitForLog(const StitchdProcess& d, const std::string& part, size_t count) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::string log = d.log();
  while (Count(log, part) < count && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(milliseconds(20));
    log = d.log();
  }
  return log;
}

// Runs `command` in `dir` and returns its output; fails the test when it exits nonzero.
std::string Shell(const std::string& dir, const std::string& command) {
  int status = 0;
  std::string out = RunCommand("cd '" + dir + "' && { " + command + " ; } 2>&1", &status);
  EXPECT_EQ(status, 0) << "$ " << command << "\n" << out;
  return out;
}

// The certificates, made once for the whole suite (key generation is the slow part).
class Certificates {
 public:
  Certificates() {
    const std::string& d = dir_.path();
    // EC keys: generated in milliseconds, and what a modern deployment would use.
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    auto ca = [&](const std::string& name, const std::string& cn) {
      Shell(d, "openssl req -x509 " + key + " -keyout " + name + ".key -out " + name +
                   ".pem -days 30 -subj '/CN=" + cn + "'");
    };
    auto leaf = [&](const std::string& name, const std::string& cn, const std::string& issuer,
                    const std::string& ext) {
      std::ofstream(d + "/" + name + ".ext") << ext << "\n";
      Shell(d, "openssl req " + key + " -keyout " + name + ".key -out " + name +
                   ".csr -subj '/CN=" + cn + "'");
      Shell(d, "openssl x509 -req -in " + name + ".csr -CA " + issuer + ".pem -CAkey " + issuer +
                   ".key -CAcreateserial -days 30 -out " + name + ".pem -extfile " + name + ".ext");
    };
    ca("ca", "stitch test CA");
    ca("other_ca", "another CA");
    leaf("server", "localhost", "ca",
         "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth");
    leaf("client", "training-job", "ca", "extendedKeyUsage=clientAuth");
    leaf("stranger", "training-job", "other_ca", "extendedKeyUsage=clientAuth");
    // An expired client certificate of the right CA: `openssl x509 -req` cannot backdate in
    // OpenSSL 3.0, `openssl ca` can, with a minimal CA configuration.
    std::ofstream(d + "/ca.cnf") << "[ca]\ndefault_ca = test_ca\n"
                                 << "[test_ca]\ndatabase = " << d << "/index.txt\n"
                                 << "new_certs_dir = " << d << "/issued\n"
                                 << "certificate = " << d << "/ca.pem\n"
                                 << "private_key = " << d << "/ca.key\n"
                                 << "serial = " << d << "/ca.serial\n"
                                 << "default_md = sha256\npolicy = any\n"
                                 << "x509_extensions = client_ext\n"
                                 << "[any]\ncommonName = supplied\n"
                                 << "[client_ext]\nextendedKeyUsage = clientAuth\n";
    Shell(d, "mkdir -p issued && : > index.txt && echo 1000 > ca.serial");
    Shell(d, "openssl req " + key + " -keyout expired.key -out expired.csr -subj '/CN=old-job'");
    Shell(d,
          "openssl ca -batch -notext -config ca.cnf -in expired.csr -out expired.pem "
          "-startdate 20200101000000Z -enddate 20200201000000Z");
  }

  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }
  const std::string& dir() const { return dir_.path(); }

 private:
  TempDir dir_;
};

class StitchdTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { certs_ = new Certificates(); }
  static void TearDownTestSuite() {
    delete certs_;
    certs_ = nullptr;
  }

  static std::string Cert(const std::string& name) { return certs_->Path(name); }

  DaemonPaths Paths() const { return dir_.Daemon(); }

  // A daemon whose TCP port serves TLS with the server certificate, requiring client
  // certificates of the test CA when `mutual`.
  std::unique_ptr<StitchdProcess> StartTls(bool mutual) {
    std::vector<std::string> args = {"--tls-cert-file", Cert("server.pem"), "--tls-key-file",
                                     Cert("server.key"), "--grpc-require-tls"};
    if (mutual) {
      args.push_back("--tls-client-ca-file");
      args.push_back(Cert("ca.pem"));
    }
    auto d = std::make_unique<StitchdProcess>(Paths(), args);
    EXPECT_TRUE(d->started()) << d->log();
    return d;
  }

  // Deadlines generous enough for a loaded 2-core CI machine; a refused handshake fails at
  // once, so they only bound the accepted calls.
  static ClientOptions TcpOptions(const StitchdProcess& d, const std::string& ca,
                                  const std::string& cert = "", const std::string& key = "") {
    ClientOptions o;
    o.address = "127.0.0.1:" + std::to_string(d.grpc_port());
    o.local_cache_entries = 0;
    o.compile_deadline = milliseconds(120000);
    o.admin_deadline = milliseconds(10000);
    if (!ca.empty()) o.tls_ca_file = Cert(ca);
    if (!cert.empty()) o.tls_cert_file = Cert(cert);
    if (!key.empty()) o.tls_key_file = Cert(key);
    return o;
  }

  // Returns the reason of a compile through `options` that must fall back.
  static std::string RefusedReason(const ClientOptions& options) {
    Client c(options);
    client::Result r = c.Compile(HloRequest(SoftmaxHlo(4, 8)));
    EXPECT_EQ(r.outcome, Outcome::kFallback);
    EXPECT_EQ(r.bundle, nullptr);
    return r.reason;
  }

  // Starts a daemon that must refuse to start; returns its exit code and log.
  std::pair<int, std::string> FailedStart(const std::vector<std::string>& args) {
    StitchdProcess d(Paths(), args);
    EXPECT_FALSE(d.started());
    const int code = d.Wait(std::chrono::seconds(30));
    return {code, d.log()};
  }

  static Certificates* certs_;
  TempDir dir_;
};

Certificates* StitchdTlsTest::certs_ = nullptr;

TEST_F(StitchdTlsTest, TheTestCertificatesAreWhatTheyClaim) {
  const std::string& d = certs_->dir();
  EXPECT_TRUE(
      Contains(Shell(d, "openssl verify -CAfile ca.pem server.pem client.pem"), "client.pem: OK"));
  const std::string san = Shell(d, "openssl x509 -in server.pem -noout -ext subjectAltName");
  EXPECT_TRUE(Contains(san, "DNS:localhost")) << san;
  EXPECT_TRUE(Contains(san, "IP Address:127.0.0.1")) << san;
  // The expired certificate is signed by the right CA but no longer valid.
  int status = 0;
  std::string out =
      RunCommand("cd '" + d + "' && openssl verify -CAfile ca.pem expired.pem 2>&1", &status);
  EXPECT_NE(status, 0) << out;
  EXPECT_TRUE(Contains(out, "certificate has expired")) << out;
  out =
      RunCommand("cd '" + d + "' && openssl x509 -in expired.pem -noout -checkend 0 2>&1", &status);
  EXPECT_NE(status, 0) << out;
  out = RunCommand("cd '" + d + "' && openssl x509 -in expired.pem -noout -enddate", &status);
  EXPECT_TRUE(Contains(out, "2020")) << out;
  out = RunCommand("cd '" + d + "' && openssl verify -CAfile ca.pem stranger.pem 2>&1", &status);
  EXPECT_NE(status, 0) << out;
}

TEST_F(StitchdTlsTest, MutualTlsAcceptsAClientCertificateOfTheCa) {
  std::unique_ptr<StitchdProcess> d = StartTls(true);
  ASSERT_TRUE(d->started());
  EXPECT_TRUE(Contains(d->log(), "mtls")) << d->log();
  Client c(TcpOptions(*d, "ca.pem", "client.pem", "client.key"));
  client::Result r = c.Compile(HloRequest(SoftmaxHlo(4, 8)));
  ASSERT_TRUE(r.ok()) << r.reason << "\n" << d->log();
  EXPECT_EQ(r.outcome, Outcome::kCompiled);
  EXPECT_EQ(r.key.size(), 64u);
  StatusOr<v1::StatsResponse> stats = c.Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
}

TEST_F(StitchdTlsTest, MutualTlsRefusesClientsWithoutAGoodCertificate) {
  std::unique_ptr<StitchdProcess> d = StartTls(true);
  ASSERT_TRUE(d->started());
  // The client sees the daemon close the connection during the handshake; the daemon's log
  // says why, one line per refusal.
  const std::string address = "127.0.0.1:" + std::to_string(d->grpc_port());
  auto refused = [&](const std::string& reason) {
    EXPECT_TRUE(reason.starts_with("UNAVAILABLE: failed to connect to all addresses")) << reason;
    EXPECT_TRUE(Contains(reason, address)) << reason;
  };
  // No client certificate at all, though the client verifies the server.
  refused(RefusedReason(TcpOptions(*d, "ca.pem")));
  EXPECT_EQ(Count(WaitForLog(*d, "peer did not return a certificate", 1),
                  "peer did not return a certificate"),
            1u);
  // A certificate of another CA.
  refused(RefusedReason(TcpOptions(*d, "ca.pem", "stranger.pem", "stranger.key")));
  EXPECT_EQ(Count(WaitForLog(*d, "certificate verify failed", 1), "certificate verify failed"), 1u);
  // A certificate of the right CA that has expired (TheTestCertificatesAreWhatTheyClaim
  // shows that expiry is all that is wrong with it).
  refused(RefusedReason(TcpOptions(*d, "ca.pem", "expired.pem", "expired.key")));
  EXPECT_EQ(Count(WaitForLog(*d, "certificate verify failed", 2), "certificate verify failed"), 2u);
  // Plaintext to the TLS port.
  refused(RefusedReason(TcpOptions(*d, "")));
  EXPECT_TRUE(Contains(WaitForLog(*d, "wrong version number", 1), "wrong version number"));
  // The admin calls are refused the same way.
  Client no_cert(TcpOptions(*d, "ca.pem"));
  StatusOr<v1::StatsResponse> stats = no_cert.Stats();
  EXPECT_EQ(stats.status().code(), StatusCode::kUnavailable) << stats.status().ToString();
  // Nothing was compiled for any of them; the unix socket stays open to local processes
  // without certificates.
  ClientOptions local;
  local.address = d->address();
  local.admin_deadline = milliseconds(10000);
  Client unix_client(local);
  StatusOr<v1::StatsResponse> local_stats = unix_client.Stats();
  ASSERT_TRUE(local_stats.ok()) << local_stats.status().ToString();
  EXPECT_EQ(ScrapeMetric(*d, "stitch_compiles_total{result=\"ok\"}"), 0);
  // A client with the right certificate still gets through afterwards.
  Client good(TcpOptions(*d, "ca.pem", "client.pem", "client.key"));
  EXPECT_TRUE(good.Compile(HloRequest(SoftmaxHlo(4, 8))).ok());
}

TEST_F(StitchdTlsTest, ServerTlsAcceptsClientsThatVerifyTheServer) {
  std::unique_ptr<StitchdProcess> d = StartTls(false);
  ASSERT_TRUE(d->started());
  // No client certificate needed.
  Client c(TcpOptions(*d, "ca.pem"));
  client::Result r = c.Compile(HloRequest(SoftmaxHlo(4, 16)));
  ASSERT_TRUE(r.ok()) << r.reason;
  // A client that trusts another CA does not accept the daemon's certificate.
  const std::string wrong_ca = RefusedReason(TcpOptions(*d, "other_ca.pem"));
  EXPECT_TRUE(wrong_ca.starts_with("UNAVAILABLE")) << wrong_ca;
  EXPECT_TRUE(Contains(wrong_ca, "certificate verify failed")) << wrong_ca;
  // Nor does a client that expects another name than the certificate carries.
  ClientOptions renamed = TcpOptions(*d, "ca.pem");
  renamed.tls_server_name = "stitchd.example.com";
  const std::string wrong_name = RefusedReason(renamed);
  EXPECT_TRUE(wrong_name.starts_with("UNAVAILABLE")) << wrong_name;
  EXPECT_TRUE(Contains(wrong_name, "stitchd.example.com is not in peer certificate")) << wrong_name;
  // The override is what the name check uses: the certificate's own name passes.
  ClientOptions named = TcpOptions(*d, "ca.pem");
  named.tls_server_name = "localhost";
  EXPECT_TRUE(Client(named).Compile(HloRequest(SoftmaxHlo(4, 16))).ok());
  // Plaintext is refused here too.
  const std::string plaintext = RefusedReason(TcpOptions(*d, ""));
  EXPECT_TRUE(plaintext.starts_with("UNAVAILABLE")) << plaintext;
}

TEST_F(StitchdTlsTest, TheCAbiCarriesTheCredentials) {
  std::unique_ptr<StitchdProcess> d = StartTls(true);
  ASSERT_TRUE(d->started());
  const std::string address = "127.0.0.1:" + std::to_string(d->grpc_port());
  const std::string hlo = SoftmaxHlo(8, 8);

  stitch_client* good =
      stitch_client_create_tls(address.c_str(), 10000, 120000, Cert("ca.pem").c_str(),
                               Cert("client.pem").c_str(), Cert("client.key").c_str());
  ASSERT_NE(good, nullptr);
  stitch_result* r = stitch_client_compile_hlo(good, hlo.data(), hlo.size(), nullptr);
  EXPECT_EQ(stitch_result_outcome(r), STITCH_COMPILED) << stitch_result_reason(r);
  EXPECT_GT(stitch_result_kernel_count(r), 0u);
  stitch_result_free(r);
  stitch_client_destroy(good);

  // Server verification alone is not enough for a daemon that requires client certificates.
  stitch_client* no_cert = stitch_client_create_tls(address.c_str(), 10000, 120000,
                                                    Cert("ca.pem").c_str(), nullptr, nullptr);
  r = stitch_client_compile_hlo(no_cert, hlo.data(), hlo.size(), nullptr);
  EXPECT_EQ(stitch_result_outcome(r), STITCH_FALLBACK);
  EXPECT_TRUE(std::string(stitch_result_reason(r)).starts_with("UNAVAILABLE"))
      << stitch_result_reason(r);
  stitch_result_free(r);
  stitch_client_destroy(no_cert);

  // A CA file that does not exist is named in the reason, without a connection attempt.
  const std::string missing = certs_->dir() + "/missing-ca.pem";
  stitch_client* broken =
      stitch_client_create_tls(address.c_str(), 10000, 120000, missing.c_str(), nullptr, nullptr);
  r = stitch_client_compile_hlo(broken, hlo.data(), hlo.size(), nullptr);
  EXPECT_EQ(stitch_result_outcome(r), STITCH_FALLBACK);
  const std::string reason = stitch_result_reason(r);
  EXPECT_TRUE(reason.starts_with("FAILED_PRECONDITION")) << reason;
  EXPECT_TRUE(Contains(reason, "tls_ca_file")) << reason;
  EXPECT_TRUE(Contains(reason, missing)) << reason;
  stitch_result_free(r);
  stitch_client_destroy(broken);
}

TEST_F(StitchdTlsTest, StitchctlCarriesTheCredentials) {
  std::unique_ptr<StitchdProcess> d = StartTls(true);
  ASSERT_TRUE(d->started());
  const std::string daemon = "--daemon 127.0.0.1:" + std::to_string(d->grpc_port());
  const std::string ca = " --tls-ca " + Cert("ca.pem");
  const std::string pair = " --tls-cert " + Cert("client.pem") + " --tls-key " + Cert("client.key");
  stitch::testing::Outcome ok = RunStitchctl("stats " + daemon + ca + pair + " --json");
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_TRUE(Contains(ok.out, "\"compiles\"")) << ok.out;
  ok = RunStitchctl("cache ls " + daemon + ca + pair);
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  // Without the client certificate the daemon refuses the handshake.
  stitch::testing::Outcome refused = RunStitchctl("stats " + daemon + ca);
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_TRUE(Contains(refused.out, "UNAVAILABLE")) << refused.out;
  // Half a key pair is a usage error.
  stitch::testing::Outcome half =
      RunStitchctl("stats " + daemon + ca + " --tls-cert " + Cert("client.pem"));
  EXPECT_NE(half.exit_code, 0) << half.out;
  EXPECT_TRUE(Contains(half.out, "--tls-key")) << half.out;
}

TEST_F(StitchdTlsTest, RequireTlsRefusesToStartWithoutTlsFiles) {
  auto [code, log] = FailedStart({"--grpc-require-tls"});
  EXPECT_EQ(code, 2) << log;
  EXPECT_TRUE(Contains(log, "--grpc-require-tls")) << log;
  EXPECT_TRUE(Contains(log, "plaintext TCP")) << log;
  EXPECT_TRUE(Contains(log, "127.0.0.1:0")) << log;
}

TEST_F(StitchdTlsTest, RequireTlsWithoutTcpServesTheUnixSocket) {
  StitchdProcess d(Paths(), {"--grpc-require-tls", "--grpc-listen="});
  ASSERT_TRUE(d.started()) << d.log();
  EXPECT_EQ(d.grpc_port(), 0);
}

TEST_F(StitchdTlsTest, BadTlsFilesStopTheStartWithTheKeyAndPath) {
  const std::string missing = dir_.path() + "/no-such-cert.pem";
  auto [code, log] =
      FailedStart({"--tls-cert-file", missing, "--tls-key-file", Cert("server.key")});
  EXPECT_EQ(code, 1) << log;
  EXPECT_TRUE(Contains(log, "tls_cert_file: cannot read " + missing)) << log;

  const std::string garbage = dir_.path() + "/garbage.pem";
  std::ofstream(garbage) << "this is not a certificate\n";
  std::tie(code, log) =
      FailedStart({"--tls-cert-file", garbage, "--tls-key-file", Cert("server.key")});
  EXPECT_EQ(code, 1) << log;
  EXPECT_TRUE(Contains(log, "tls_cert_file: " + garbage + " holds no PEM certificate")) << log;

  // A key file holding a certificate, and a key of another certificate.
  std::tie(code, log) =
      FailedStart({"--tls-cert-file", Cert("server.pem"), "--tls-key-file", Cert("ca.pem")});
  EXPECT_EQ(code, 1) << log;
  EXPECT_TRUE(Contains(log, "tls_key_file: " + Cert("ca.pem") + " holds no")) << log;
  std::tie(code, log) =
      FailedStart({"--tls-cert-file", Cert("server.pem"), "--tls-key-file", Cert("client.key")});
  EXPECT_EQ(code, 1) << log;
  EXPECT_TRUE(Contains(log, "is not the key of the certificate in tls_cert_file")) << log;

  std::tie(code, log) = FailedStart({"--tls-cert-file", Cert("server.pem"), "--tls-key-file",
                                     Cert("server.key"), "--tls-client-ca-file", garbage});
  EXPECT_EQ(code, 1) << log;
  EXPECT_TRUE(Contains(log, "tls_client_ca_file: " + garbage)) << log;

  // A key without a certificate is a configuration error, found before anything starts.
  std::tie(code, log) = FailedStart({"--tls-key-file", Cert("server.key")});
  EXPECT_EQ(code, 2) << log;
  EXPECT_TRUE(Contains(log, "--tls-cert-file: required with --tls-key-file")) << log;
}

}  // namespace
}  // namespace stitch::testing
