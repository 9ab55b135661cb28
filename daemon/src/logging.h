// stitchd's log output: spdlog's default logger, writing one line per event to stderr.
//
// Two formats:
//   text  2026-11-21T10:00:00.123Z info  compile_done key=ab12 ms=41.2
//   json  {"ts":"2026-11-21T10:00:00.123Z","level":"info","logger":"stitchd","msg":"..."}
// Timestamps are UTC with milliseconds. In text, control characters in a message are written
// as escapes (\n, \t, \xNN) so that an event never spans lines; in json, the message is a
// correctly escaped JSON string (invalid UTF-8 becomes U+FFFD).
//
// Code may log with spdlog's ordinary calls (spdlog::info("...")), or with LogEvent, whose
// fields become JSON members in json format and k=v pairs in text format.
//
// Thread-safety: InitLogging is for main() (and tests), before other threads log; LogEvent
// and spdlog's calls may then be made from any thread.
#pragma once

#include <spdlog/common.h>

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "stitch/base/status.h"

namespace stitch::daemon {

inline constexpr const char* kLoggerName = "stitchd";

// Replaces spdlog's default logger with one named "stitchd" writing `format` ("text" or
// "json") to stderr, at `level` and above (trace debug info warn error critical off).
// INVALID_ARGUMENT for an unknown format or level, leaving the current logger as it was.
Status InitLogging(const std::string& format, const std::string& level);

// One field value of a LogEvent: a string, or a number or bool that json format writes as a
// JSON number or boolean. A string value is referenced, not copied, so it must outlive the
// LogEvent call, as temporaries in the call's argument list do.
class LogValue {
 public:
  enum class Kind { kString, kNumber, kBool };

  LogValue(std::string_view s) : kind_(Kind::kString), text_(s) {}       // NOLINT
  LogValue(const std::string& s) : kind_(Kind::kString), text_(s) {}     // NOLINT
  LogValue(const char* s) : kind_(Kind::kString), text_(s) {}            // NOLINT
  LogValue(bool b) : kind_(Kind::kBool), text_(b ? "true" : "false") {}  // NOLINT
  template <std::integral T>
  requires(!std::same_as<T, bool>) LogValue(T v) : kind_(Kind::kNumber) {  // NOLINT
    if constexpr (std::signed_integral<T>) {
      SetInteger(static_cast<int64_t>(v));
    } else {
      SetUnsigned(static_cast<uint64_t>(v));
    }
  }
  template <std::floating_point T>
  LogValue(T v) : kind_(Kind::kNumber) {  // NOLINT
    SetDouble(static_cast<double>(v));
  }

  // Copies re-point a number's text at their own buffer.
  LogValue(const LogValue& other) { *this = other; }
  LogValue& operator=(const LogValue& other);

  Kind kind() const { return kind_; }
  // The value as text: the string itself, "41.2", "true".
  std::string_view text() const { return text_; }

 private:
  void SetInteger(int64_t v);
  void SetUnsigned(uint64_t v);
  void SetDouble(double v);  // NaN and infinities become strings, which JSON lacks

  void SetBuffered(const char* end);

  Kind kind_ = Kind::kString;
  bool buffered_ = false;  // text_ points into buf_
  std::string_view text_;
  char buf_[32] = {};
};

struct LogField {
  std::string_view key;
  LogValue value;
};

// Logs `event` (a short, stable name such as "compile_done") with `fields`:
//   LogEvent(spdlog::level::info, "compile_done", {{"key", key_hex}, {"ms", 41.2}});
// text: "compile_done key=ab12 ms=41.2" (values with spaces, quotes or '=' are quoted);
// json: {...,"msg":"compile_done","key":"ab12","ms":41.2}. A field named like a member the
// formatter writes (ts, level, logger, msg) gets a trailing underscore.
void LogEvent(spdlog::level::level_enum level, std::string_view event,
              std::initializer_list<LogField> fields);

}  // namespace stitch::daemon
