#include "tls_credentials.h"

#include <grpcpp/security/server_credentials.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace stitch::daemon {
namespace {

// Certificate chains and CA bundles are kilobytes; a larger file is a wrong path.
constexpr std::streamsize kMaxPemBytes = 1 << 20;

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;
using X509Ptr = std::unique_ptr<X509, X509Deleter>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyDeleter>;

// OpenSSL's reason for the last failure on this thread, and clears its queue so that it does
// not leak into gRPC's own handshakes.
std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof buf);
  return std::string(" (") + buf + ")";
}

StatusOr<std::string> ReadPem(const std::string& key, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument(key + ": cannot read " + path + ": " + std::strerror(errno));
  std::string text(static_cast<size_t>(kMaxPemBytes) + 1, '\0');
  in.read(text.data(), kMaxPemBytes + 1);
  if (in.bad()) return InvalidArgument(key + ": cannot read " + path);
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > static_cast<size_t>(kMaxPemBytes)) {
    return InvalidArgument(key + ": " + path + " is over 1 MiB; is it the right file?");
  }
  if (text.empty()) return InvalidArgument(key + ": " + path + " is empty");
  return text;
}

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Answers OpenSSL's request for a passphrase with none, so an encrypted key fails here
// instead of prompting on the daemon's terminal.
int NoPassphrase(char*, int, int, void*) { return -1; }

// Returns the first certificate of `pem`, checking that every PEM block in it parses.
StatusOr<X509Ptr> ParseCertificates(const std::string& key, const std::string& path,
                                    const std::string& pem) {
  BioPtr bio = MemoryBio(pem);
  X509Ptr first;
  int count = 0;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)) {
    if (count++ == 0) {
      first.reset(cert);
    } else {
      X509_free(cert);
    }
  }
  // Reading stops with "no start line" at the end of the input; anything else is a block
  // that does not parse.
  const unsigned long last = ERR_peek_last_error();
  const bool clean_end =
      ERR_GET_LIB(last) == ERR_LIB_PEM && ERR_GET_REASON(last) == PEM_R_NO_START_LINE;
  if (count == 0) {
    return InvalidArgument(key + ": " + path + " holds no PEM certificate" + OpenSslError());
  }
  if (last != 0 && !clean_end) {
    return InvalidArgument(key + ": " + path + ": certificate " + std::to_string(count + 1) +
                           " does not parse" + OpenSslError());
  }
  ERR_clear_error();
  return first;
}

}  // namespace

const char* TcpSecurityName(TcpSecurity security) {
  switch (security) {
    case TcpSecurity::kPlaintext:
      return "plaintext";
    case TcpSecurity::kTls:
      return "tls";
    case TcpSecurity::kMutualTls:
      return "mtls";
  }
  return "plaintext";
}

TcpSecurity TcpSecurityOf(const DaemonConfig& config) {
  if (config.tls_cert_file.empty()) return TcpSecurity::kPlaintext;
  return config.tls_client_ca_file.empty() ? TcpSecurity::kTls : TcpSecurity::kMutualTls;
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> TcpServerCredentials(
    const DaemonConfig& config) {
  const TcpSecurity security = TcpSecurityOf(config);
  if (security == TcpSecurity::kPlaintext) return grpc::InsecureServerCredentials();
  // The parser checks this for configs from flags and files; a config built in code is
  // checked here.
  if (config.tls_key_file.empty()) {
    return InvalidArgument("tls_key_file: required with tls_cert_file (" + config.tls_cert_file +
                           ")");
  }
  ERR_clear_error();
  STITCH_ASSIGN_OR_RETURN(std::string cert_pem, ReadPem("tls_cert_file", config.tls_cert_file));
  STITCH_ASSIGN_OR_RETURN(std::string key_pem, ReadPem("tls_key_file", config.tls_key_file));
  STITCH_ASSIGN_OR_RETURN(X509Ptr cert,
                          ParseCertificates("tls_cert_file", config.tls_cert_file, cert_pem));
  BioPtr key_bio = MemoryBio(key_pem);
  KeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr));
  if (!key) {
    return InvalidArgument("tls_key_file: " + config.tls_key_file +
                           " holds no unencrypted PEM private key" + OpenSslError());
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return InvalidArgument("tls_key_file: " + config.tls_key_file +
                           " is not the key of the certificate in tls_cert_file " +
                           config.tls_cert_file + OpenSslError());
  }
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({std::move(key_pem), std::move(cert_pem)});
  if (security == TcpSecurity::kMutualTls) {
    STITCH_ASSIGN_OR_RETURN(options.pem_root_certs,
                            ReadPem("tls_client_ca_file", config.tls_client_ca_file));
    STITCH_RETURN_IF_ERROR(
        ParseCertificates("tls_client_ca_file", config.tls_client_ca_file, options.pem_root_certs)
            .status());
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  } else {
    options.client_certificate_request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  }
  ERR_clear_error();
  return grpc::SslServerCredentials(options);
}

}  // namespace stitch::daemon
