#include "stitch/rpc/grpc_status.h"

namespace stitch::rpc {
namespace {

struct CodePair {
  StatusCode stitch;
  grpc::StatusCode grpc;
};

// Each StatusCode and the gRPC code of the same name.
constexpr CodePair kSameName[] = {
    {StatusCode::kOk, grpc::StatusCode::OK},
    {StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
    {StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED},
    {StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
    {StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
    {StatusCode::kInternal, grpc::StatusCode::INTERNAL},
    {StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
    {StatusCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
    {StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
    {StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS},
};

}  // namespace

grpc::StatusCode ToGrpcCode(StatusCode code) {
  for (const CodePair& p : kSameName) {
    if (p.stitch == code) return p.grpc;
  }
  return grpc::StatusCode::UNKNOWN;
}

StatusCode FromGrpcCode(grpc::StatusCode code) {
  for (const CodePair& p : kSameName) {
    if (p.grpc == code) return p.stitch;
  }
  switch (code) {
    case grpc::StatusCode::OUT_OF_RANGE:
      return StatusCode::kInvalidArgument;
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
      return StatusCode::kUnavailable;
    default:
      return StatusCode::kInternal;
  }
}

const char* GrpcCodeName(grpc::StatusCode code) {
  for (const CodePair& p : kSameName) {
    if (p.grpc == code) return StatusCodeName(p.stitch);
  }
  switch (code) {
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(ToGrpcCode(status.code()), status.message());
}

}  // namespace stitch::rpc
