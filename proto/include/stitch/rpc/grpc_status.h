// The one mapping between stitch's Status codes and gRPC's, used by the daemon to answer
// and by the client to read the answer.
//
// Thread-safety: pure functions.
#pragma once

#include <grpcpp/support/status.h>

#include "stitch/base/status.h"

namespace stitch::rpc {

// Returns the gRPC code a daemon answers `code` with: the code of the same name (every
// StatusCode has one).
grpc::StatusCode ToGrpcCode(StatusCode code);

// Returns the stitch code for a gRPC code: the code of the same name where one exists;
// OUT_OF_RANGE reads as kInvalidArgument; the codes that mean "not usable right now"
// (CANCELLED, ABORTED, PERMISSION_DENIED, UNAUTHENTICATED) read as kUnavailable, so a caller
// may retry later; anything else is kInternal.
StatusCode FromGrpcCode(grpc::StatusCode code);

// Returns the canonical upper-case name of a gRPC code, e.g. "UNAVAILABLE"; "UNKNOWN" for
// a value gRPC does not define.
const char* GrpcCodeName(grpc::StatusCode code);

// Returns `status` as a gRPC status with the same message (OK for OK).
grpc::Status ToGrpcStatus(const Status& status);

}  // namespace stitch::rpc
