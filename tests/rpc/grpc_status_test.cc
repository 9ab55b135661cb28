#include "stitch/rpc/grpc_status.h"

#include <gtest/gtest.h>

#include <string>

namespace stitch::rpc {
namespace {

constexpr StatusCode kEveryStitchCode[] = {
    StatusCode::kOk,
    StatusCode::kInvalidArgument,
    StatusCode::kUnimplemented,
    StatusCode::kResourceExhausted,
    StatusCode::kNotFound,
    StatusCode::kInternal,
    StatusCode::kUnavailable,
    StatusCode::kFailedPrecondition,
    StatusCode::kDeadlineExceeded,
    StatusCode::kDataLoss,
};

TEST(GrpcStatus, EveryStitchCodeTravelsAsTheGrpcCodeOfTheSameName) {
  for (StatusCode code : kEveryStitchCode) {
    const grpc::StatusCode wire = ToGrpcCode(code);
    EXPECT_EQ(std::string(GrpcCodeName(wire)), StatusCodeName(code));
    EXPECT_EQ(FromGrpcCode(wire), code) << StatusCodeName(code);
  }
}

TEST(GrpcStatus, CodesWithoutAStitchNameReadAsRetryableOrInternal) {
  EXPECT_EQ(FromGrpcCode(grpc::StatusCode::OUT_OF_RANGE), StatusCode::kInvalidArgument);
  for (grpc::StatusCode c :
       {grpc::StatusCode::CANCELLED, grpc::StatusCode::ABORTED, grpc::StatusCode::PERMISSION_DENIED,
        grpc::StatusCode::UNAUTHENTICATED}) {
    EXPECT_EQ(FromGrpcCode(c), StatusCode::kUnavailable) << GrpcCodeName(c);
  }
  EXPECT_EQ(FromGrpcCode(grpc::StatusCode::UNKNOWN), StatusCode::kInternal);
  EXPECT_EQ(FromGrpcCode(grpc::StatusCode::ALREADY_EXISTS), StatusCode::kInternal);
  EXPECT_STREQ(GrpcCodeName(static_cast<grpc::StatusCode>(99)), "UNKNOWN");
}

TEST(GrpcStatus, StatusKeepsItsMessage) {
  const grpc::Status ok = ToGrpcStatus(Status::Ok());
  EXPECT_TRUE(ok.ok());
  const grpc::Status bad = ToGrpcStatus(NotFound("no entry for key ab"));
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(bad.error_message(), "no entry for key ab");
}

}  // namespace
}  // namespace stitch::rpc
