// The test gets spdlog only as a link dependency of stitch_daemon, not its compile
// definitions; it must see spdlog's headers configured as the compiled library was.
#ifndef SPDLOG_COMPILED_LIB
#define SPDLOG_COMPILED_LIB 1
#endif

#include "../../daemon/src/logging.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace stitch::daemon {
namespace {

using nlohmann::json;

// Redirects file descriptor 2 into a temporary file for the object's lifetime.
class StderrCapture {
 public:
  StderrCapture() {
    std::string pattern = (std::filesystem::temp_directory_path() / "logging_test.XXXXXX").string();
    const int fd = mkstemp(pattern.data());
    path_ = pattern;
    std::fflush(stderr);
    saved_ = dup(2);
    dup2(fd, 2);
    close(fd);
  }
  ~StderrCapture() {
    Stop();
    std::filesystem::remove(path_);
  }

  // Restores stderr and returns what was written.
  std::string Stop() {
    if (saved_ >= 0) {
      std::fflush(stderr);
      dup2(saved_, 2);
      close(saved_);
      saved_ = -1;
      std::ifstream in(path_, std::ios::binary);
      std::stringstream s;
      s << in.rdbuf();
      text_ = s.str();
    }
    return text_;
  }

 private:
  std::string path_;
  int saved_ = -1;
  std::string text_;
};

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// Whether `s` is a timestamp like "2026-11-21T10:00:00.123Z".
bool IsTimestamp(std::string_view s) {
  constexpr std::string_view kShape = "0000-00-00T00:00:00.000Z";
  if (s.size() != kShape.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (kShape[i] == '0' ? !std::isdigit(static_cast<unsigned char>(s[i])) : s[i] != kShape[i]) {
      return false;
    }
  }
  return true;
}

// Checks a text-format line: a timestamp, a space, then exactly `rest`.
::testing::AssertionResult IsTextLine(const std::string& line, std::string_view rest) {
  constexpr size_t kStampSize = 24;
  if (line.size() > kStampSize && IsTimestamp(std::string_view(line).substr(0, kStampSize)) &&
      line[kStampSize] == ' ' && std::string_view(line).substr(kStampSize + 1) == rest) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "line \"" << line << "\" is not <timestamp> \"" << rest << "\"";
}

class LoggingTest : public ::testing::Test {
 protected:
  void TearDown() override { ASSERT_TRUE(InitLogging("text", "info").ok()); }
};

TEST_F(LoggingTest, JsonLinesRoundTripTheMessage) {
  ASSERT_TRUE(InitLogging("json", "info").ok());
  const std::string tricky =
      "say \"hi\" \\ path C:\\tmp\nnext line\ttab, 41.2 µs, bell \x07, del \x7f, ✓";
  StderrCapture capture;
  spdlog::info("{}", tricky);
  spdlog::warn("plain {}", 42);
  const std::vector<std::string> lines = Lines(capture.Stop());
  ASSERT_EQ(lines.size(), 2u);

  const json first = json::parse(lines[0]);
  EXPECT_EQ(first.size(), 4u);
  EXPECT_TRUE(IsTimestamp(first.at("ts").get<std::string>())) << lines[0];
  EXPECT_EQ(first.at("level"), "info");
  EXPECT_EQ(first.at("logger"), "stitchd");
  EXPECT_EQ(first.at("msg").get<std::string>(), tricky);
  EXPECT_EQ(lines[0].find('\t'), std::string::npos);
  EXPECT_NE(lines[0].find("µs"), std::string::npos);  // non-ASCII stays UTF-8, unescaped

  const json second = json::parse(lines[1]);
  EXPECT_EQ(second.at("level"), "warn");
  EXPECT_EQ(second.at("msg"), "plain 42");
}

TEST_F(LoggingTest, JsonReplacesInvalidUtf8) {
  ASSERT_TRUE(InitLogging("json", "info").ok());
  StderrCapture capture;
  spdlog::info("bad \xC3 byte, overlong \xC0\xAF, surrogate \xED\xA0\x80, ok \xC3\xA9");
  const std::vector<std::string> lines = Lines(capture.Stop());
  ASSERT_EQ(lines.size(), 1u);
  const json j = json::parse(lines[0]);
  const std::string msg = j.at("msg");
  EXPECT_NE(msg.find("bad \xEF\xBF\xBD byte"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ok \xC3\xA9"), std::string::npos) << msg;
}

TEST_F(LoggingTest, OneLinePerEventInBothFormats) {
  for (const char* format : {"json", "text"}) {
    ASSERT_TRUE(InitLogging(format, "trace").ok());
    StderrCapture capture;
    spdlog::info("first\nsecond\r\nthird");
    spdlog::debug("\n");
    spdlog::trace("");
    EXPECT_EQ(Lines(capture.Stop()).size(), 3u) << format;
  }
}

TEST_F(LoggingTest, TextFormat) {
  ASSERT_TRUE(InitLogging("text", "info").ok());
  StderrCapture capture;
  spdlog::info("compile done key={} ms={}", "ab12", 41.2);
  spdlog::error("two\nlines\there");
  const std::vector<std::string> lines = Lines(capture.Stop());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(IsTextLine(lines[0], "info  compile done key=ab12 ms=41.2"));
  EXPECT_TRUE(IsTextLine(lines[1], R"(error two\nlines\there)"));
}

TEST_F(LoggingTest, LevelFiltering) {
  ASSERT_TRUE(InitLogging("json", "warn").ok());
  StderrCapture capture;
  spdlog::debug("hidden debug");
  spdlog::info("hidden info");
  LogEvent(spdlog::level::info, "hidden_event", {{"k", "v"}});
  spdlog::warn("shown warn");
  spdlog::error("shown error");
  spdlog::critical("shown critical");
  const std::vector<std::string> lines = Lines(capture.Stop());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(json::parse(lines[0]).at("level"), "warn");
  EXPECT_EQ(json::parse(lines[1]).at("level"), "error");
  EXPECT_EQ(json::parse(lines[2]).at("level"), "critical");

  ASSERT_TRUE(InitLogging("json", "off").ok());
  StderrCapture silent;
  spdlog::critical("nothing");
  EXPECT_EQ(silent.Stop(), "");
}

TEST_F(LoggingTest, LogEventFieldsInJson) {
  ASSERT_TRUE(InitLogging("json", "info").ok());
  const std::string key = "ab12\"cd";
  StderrCapture capture;
  LogEvent(spdlog::level::info, "compile_done",
           {{"key", key},
            {"ms", 41.2},
            {"bytes", uint64_t{1} << 40},
            {"delta", -3},
            {"cached", false},
            {"note", std::string("µs\nnext")},
            {"msg", "shadowed"},
            {"ratio", std::numeric_limits<double>::infinity()}});
  const std::vector<std::string> lines = Lines(capture.Stop());
  ASSERT_EQ(lines.size(), 1u);
  const json j = json::parse(lines[0]);
  EXPECT_EQ(j.at("msg"), "compile_done");
  EXPECT_EQ(j.at("level"), "info");
  EXPECT_EQ(j.at("key"), key);
  ASSERT_TRUE(j.at("ms").is_number()) << lines[0];
  EXPECT_DOUBLE_EQ(j.at("ms").get<double>(), 41.2);
  EXPECT_EQ(j.at("bytes").get<uint64_t>(), uint64_t{1} << 40);
  EXPECT_EQ(j.at("delta").get<int>(), -3);
  EXPECT_EQ(j.at("cached"), false);
  EXPECT_EQ(j.at("note"), "µs\nnext");
  EXPECT_EQ(j.at("msg_"), "shadowed");
  EXPECT_EQ(j.at("ratio"), "inf");
}

TEST_F(LoggingTest, LogEventFieldsInText) {
  ASSERT_TRUE(InitLogging("text", "info").ok());
  StderrCapture capture;
  LogEvent(spdlog::level::warn, "compile_slow",
           {{"key", "ab12"}, {"ms", 41.2}, {"why", "queue \"full\""}, {"empty", ""}});
  const std::vector<std::string> lines = Lines(capture.Stop());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(
      IsTextLine(lines[0], R"(warn  compile_slow key=ab12 ms=41.2 why="queue \"full\"" empty="")"));
}

TEST_F(LoggingTest, OrdinaryMessagesNeverTakeEventFields) {
  ASSERT_TRUE(InitLogging("json", "info").ok());
  StderrCapture capture;
  spdlog::info("compile_done key=ab12 ms=41.2");
  const std::vector<std::string> lines = Lines(capture.Stop());
  ASSERT_EQ(lines.size(), 1u);
  const json j = json::parse(lines[0]);
  EXPECT_EQ(j.at("msg"), "compile_done key=ab12 ms=41.2");
  EXPECT_FALSE(j.contains("key"));
}

TEST_F(LoggingTest, ConcurrentLinesStayWhole) {
  ASSERT_TRUE(InitLogging("json", "info").ok());
  constexpr int kThreads = 4;
  constexpr int kPerThread = 200;
  StderrCapture capture;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kPerThread; ++i) {
        if (i % 2 == 0) {
          LogEvent(spdlog::level::info, "tick", {{"thread", t}, {"i", i}});
        } else {
          spdlog::info("thread {} line {}", t, i);
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const std::vector<std::string> lines = Lines(capture.Stop());
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kPerThread));
  int events = 0;
  for (const std::string& line : lines) {
    const json j = json::parse(line);
    if (j.at("msg") == "tick") {
      ++events;
      EXPECT_TRUE(j.at("thread").is_number());
    }
  }
  EXPECT_EQ(events, kThreads * kPerThread / 2);
}

TEST_F(LoggingTest, RejectsUnknownFormatAndLevel) {
  const Status format = InitLogging("xml", "info");
  EXPECT_EQ(format.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(format.message().find("xml"), std::string::npos);
  const Status level = InitLogging("text", "loud");
  EXPECT_EQ(level.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(level.message().find("loud"), std::string::npos);
}

}  // namespace
}  // namespace stitch::daemon
