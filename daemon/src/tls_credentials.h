// The TLS settings of stitchd's TCP listener: the PEM files the tls_* keys name, read and
// checked once at start so that a wrong file is a clear start-up error rather than a listener
// that fails every handshake (or a crash inside gRPC).
//
// Thread-safety: reentrant.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "stitch/base/status.h"
#include "stitch/daemon/config.h"

namespace stitch::daemon {

// How the TCP listener authenticates, for logs and the runtime file.
enum class TcpSecurity {
  kPlaintext,  // no tls_cert_file
  kTls,        // the server proves itself; any client may connect
  kMutualTls,  // and clients must present a certificate tls_client_ca_file verifies
};

// Returns "plaintext", "tls" or "mtls".
const char* TcpSecurityName(TcpSecurity security);

// Returns what `config`'s tls_* keys ask for.
TcpSecurity TcpSecurityOf(const DaemonConfig& config);

// Returns the credentials of the TCP listener: insecure without tls_cert_file, else TLS with
// the certificate chain and key, requiring and verifying client certificates when
// tls_client_ca_file is set. Returns INVALID_ARGUMENT naming the key and the path for a file
// that cannot be read, is empty or over 1 MiB, holds no PEM certificate (or key), a key that
// is encrypted or does not belong to the first certificate.
StatusOr<std::shared_ptr<grpc::ServerCredentials>> TcpServerCredentials(const DaemonConfig& config);

}  // namespace stitch::daemon
