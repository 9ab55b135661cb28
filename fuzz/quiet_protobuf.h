// Shared by the fuzzers whose input is protobuf.
#pragma once

#include <google/protobuf/stubs/logging.h>

// Protobuf logs an error for every string field with invalid UTF-8 it parses. The parse
// fails as it should; the log lines would only slow the run and bury libFuzzer's output.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}
