#include "logging.h"

#include <spdlog/formatter.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

namespace stitch::daemon {
namespace {

enum class Format { kText, kJson };

// A LogEvent call in progress on this thread. The logger is synchronous, so the formatter
// runs inside the call and can pick up the fields; it matches them to the message by the
// payload's address, so that no other message, whatever its text, is taken for an event.
struct PendingEvent {
  const char* payload = nullptr;
  size_t payload_size = 0;
  std::string_view event;
  std::initializer_list<LogField> fields;
};
thread_local const PendingEvent* t_pending_event = nullptr;

void Append(spdlog::memory_buf_t& dest, std::string_view s) {
  dest.append(s.data(), s.data() + s.size());
}

constexpr char kHex[] = "0123456789abcdef";

// The length of the well-formed UTF-8 sequence at s[i], or 0 if it is not one.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  size_t length;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // UTF-16 surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // beyond U+10FFFF
  } else {
    return 0;
  }
  if (i + length > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return length;
}

// Appends `s` as a JSON string, quotes included. Bytes that are not UTF-8 become U+FFFD, so
// the line stays valid JSON whatever a message carries.
void AppendJsonString(spdlog::memory_buf_t& dest, std::string_view s) {
  dest.push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = Utf8SequenceLength(s, i);
      if (n == 0) {
        Append(dest, "\xEF\xBF\xBD");
        ++i;
      } else {
        Append(dest, s.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        Append(dest, "\\\"");
        break;
      case '\\':
        Append(dest, "\\\\");
        break;
      case '\b':
        Append(dest, "\\b");
        break;
      case '\f':
        Append(dest, "\\f");
        break;
      case '\n':
        Append(dest, "\\n");
        break;
      case '\r':
        Append(dest, "\\r");
        break;
      case '\t':
        Append(dest, "\\t");
        break;
      default:
        if (c < 0x20) {
          const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
          dest.append(esc, esc + sizeof(esc));
        } else {
          dest.push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  dest.push_back('"');
}

// Appends `s` with control characters escaped, so that it cannot break the line.
void AppendTextEscaped(std::string& out, std::string_view s) {
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c != 0x7F) {
      out.push_back(ch);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
}

bool NeedsQuotes(std::string_view v) {
  if (v.empty()) return true;
  for (const char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7F || c == '"' || c == '=' || c == '\\') return true;
  }
  return false;
}

// "event k=v k2="v with spaces"", the payload of a LogEvent message in either format.
std::string EventText(std::string_view event, std::initializer_list<LogField> fields) {
  std::string out(event);
  for (const LogField& f : fields) {
    out.push_back(' ');
    out += f.key;
    out.push_back('=');
    const std::string_view v = f.value.text();
    if (f.value.kind() != LogValue::Kind::kString || !NeedsQuotes(v)) {
      out += v;
      continue;
    }
    out.push_back('"');
    for (const char ch : v) {
      if (ch == '"' || ch == '\\') {
        out.push_back('\\');
        out.push_back(ch);
      } else {
        AppendTextEscaped(out, std::string_view(&ch, 1));
      }
    }
    out.push_back('"');
  }
  return out;
}

std::string_view LevelName(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
      return "trace";
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warn";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "critical";
    default:
      return "off";
  }
}

bool ParseLevel(const std::string& name, spdlog::level::level_enum* level) {
  static constexpr std::pair<std::string_view, spdlog::level::level_enum> kLevels[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},   {"critical", spdlog::level::critical},
      {"off", spdlog::level::off},
  };
  for (const auto& [n, l] : kLevels) {
    if (name == n) {
      *level = l;
      return true;
    }
  }
  return false;
}

bool IsReservedMember(std::string_view key) {
  return key == "ts" || key == "level" || key == "logger" || key == "msg";
}

class LineFormatter final : public spdlog::formatter {
 public:
  explicit LineFormatter(Format format) : format_(format) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    if (format_ == Format::kText) {
      Append(dest, Timestamp(msg.time));
      dest.push_back(' ');
      const std::string_view level = LevelName(msg.level);
      Append(dest, level);
      for (size_t pad = level.size(); pad < 5; ++pad) dest.push_back(' ');
      dest.push_back(' ');
      std::string text;
      text.reserve(payload.size());
      AppendTextEscaped(text, payload);
      Append(dest, text);
      dest.push_back('\n');
      return;
    }

    const PendingEvent* event = t_pending_event;
    if (event != nullptr &&
        (event->payload != payload.data() || event->payload_size != payload.size())) {
      event = nullptr;
    }
    Append(dest, "{\"ts\":\"");
    Append(dest, Timestamp(msg.time));
    Append(dest, "\",\"level\":\"");
    Append(dest, LevelName(msg.level));
    Append(dest, "\",\"logger\":");
    AppendJsonString(dest, std::string_view(msg.logger_name.data(), msg.logger_name.size()));
    Append(dest, ",\"msg\":");
    AppendJsonString(dest, event != nullptr ? event->event : payload);
    if (event != nullptr) {
      for (const LogField& f : event->fields) {
        dest.push_back(',');
        if (IsReservedMember(f.key)) {
          AppendJsonString(dest, std::string(f.key) + "_");
        } else {
          AppendJsonString(dest, f.key);
        }
        dest.push_back(':');
        if (f.value.kind() == LogValue::Kind::kString) {
          AppendJsonString(dest, f.value.text());
        } else {
          Append(dest, f.value.text());
        }
      }
    }
    Append(dest, "}\n");
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<LineFormatter>(format_);
  }

 private:
  // "2026-11-21T10:00:00.123Z". The formatter runs under its sink's lock, so the cached
  // seconds need no lock of their own.
  std::string_view Timestamp(spdlog::log_clock::time_point time) {
    using namespace std::chrono;
    const auto since_epoch = duration_cast<milliseconds>(time.time_since_epoch()).count();
    std::time_t seconds = static_cast<std::time_t>(since_epoch / 1000);
    int millis = static_cast<int>(since_epoch % 1000);
    if (millis < 0) {
      millis += 1000;
      --seconds;
    }
    if (seconds != cached_seconds_) {
      std::tm utc{};
      gmtime_r(&seconds, &utc);
      std::snprintf(cached_prefix_, sizeof(cached_prefix_), "%04d-%02d-%02dT%02d:%02d:%02d",
                    utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min,
                    utc.tm_sec);
      cached_seconds_ = seconds;
    }
    std::snprintf(stamp_, sizeof(stamp_), "%s.%03dZ", cached_prefix_, millis);
    return stamp_;
  }

  Format format_;
  std::time_t cached_seconds_ = -1;
  char cached_prefix_[48] = {};
  char stamp_[64] = {};
};

}  // namespace

LogValue& LogValue::operator=(const LogValue& other) {
  if (this == &other) return *this;
  kind_ = other.kind_;
  buffered_ = other.buffered_;
  std::copy(std::begin(other.buf_), std::end(other.buf_), std::begin(buf_));
  text_ = buffered_ ? std::string_view(buf_, other.text_.size()) : other.text_;
  return *this;
}

void LogValue::SetBuffered(const char* end) {
  buffered_ = true;
  text_ = std::string_view(buf_, static_cast<size_t>(end - buf_));
}

void LogValue::SetInteger(int64_t v) {
  SetBuffered(std::to_chars(buf_, buf_ + sizeof(buf_), v).ptr);
}

void LogValue::SetUnsigned(uint64_t v) {
  SetBuffered(std::to_chars(buf_, buf_ + sizeof(buf_), v).ptr);
}

void LogValue::SetDouble(double v) {
  if (!std::isfinite(v)) {
    kind_ = Kind::kString;
    buffered_ = false;
    text_ = std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
    return;
  }
  SetBuffered(std::to_chars(buf_, buf_ + sizeof(buf_), v).ptr);
}

Status InitLogging(const std::string& format, const std::string& level) {
  Format f;
  if (format == "text") {
    f = Format::kText;
  } else if (format == "json") {
    f = Format::kJson;
  } else {
    return InvalidArgument("log_format: expected text or json, got '" + format + "'");
  }
  spdlog::level::level_enum l;
  if (!ParseLevel(level, &l)) {
    return InvalidArgument(
        "log_level: expected one of trace, debug, info, warn, error, critical, off, got '" + level +
        "'");
  }
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  sink->set_formatter(std::make_unique<LineFormatter>(f));
  auto logger = std::make_shared<spdlog::logger>(kLoggerName, std::move(sink));
  logger->set_level(l);
  spdlog::set_default_logger(std::move(logger));
  return Status::Ok();
}

void LogEvent(spdlog::level::level_enum level, std::string_view event,
              std::initializer_list<LogField> fields) {
  spdlog::logger* logger = spdlog::default_logger_raw();
  if (logger == nullptr || !logger->should_log(level)) return;
  const std::string text = EventText(event, fields);
  const PendingEvent pending{text.data(), text.size(), event, fields};
  struct Reset {
    const PendingEvent* previous;
    ~Reset() { t_pending_event = previous; }
  } reset{t_pending_event};
  t_pending_event = &pending;
  logger->log(level, spdlog::string_view_t(text.data(), text.size()));
}

}  // namespace stitch::daemon
