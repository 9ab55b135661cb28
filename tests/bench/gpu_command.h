// Running gpu_bench and frameworks.py from the GPU benchmark's tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace stitch::gpu::test {

struct CommandResult {
  int exit_status = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Splits a CSV line whose only quoted field may contain commas.
inline std::vector<std::string> CsvFields(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

inline void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
}

// A fresh directory under the system's temporary directory, removed with this object.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path().string() + "/stitch_gpu_" +
              std::to_string(::getpid()) + "_" + name) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs `command` through the shell; stdout and stderr are kept apart.
inline CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  ScratchDir scratch("stderr");
  const std::string err_path = scratch.path() + "/stderr.txt";
  std::FILE* pipe = ::popen((command + " 2>" + err_path).c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) result.out.append(buf, n);
  const int status = ::pclose(pipe);
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.err = ReadFile(err_path);
  return result;
}

inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A CSV file's rows as column name -> value (CsvFields' quoting), each checked to have the
// header's field count.
inline std::vector<std::map<std::string, std::string>> ReadCsvRows(const std::string& path) {
  const std::vector<std::string> lines = Lines(ReadFile(path));
  std::vector<std::map<std::string, std::string>> rows;
  if (lines.empty()) return rows;
  const std::vector<std::string> header = CsvFields(lines[0]);
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> f = CsvFields(lines[i]);
    EXPECT_EQ(f.size(), header.size()) << lines[i];
    std::map<std::string, std::string> row;
    for (size_t c = 0; c < header.size() && c < f.size(); ++c) row[header[c]] = f[c];
    rows.push_back(std::move(row));
  }
  return rows;
}

// Expects `command` to have been refused as a usage error (exit status 3) with `message` on
// stderr.
inline void ExpectRefused(const CommandResult& command, const std::string& message) {
  EXPECT_EQ(command.exit_status, 3) << command.err << command.out;
  EXPECT_NE(command.err.find(message), std::string::npos) << command.err;
}

inline std::string GpuBench() { return std::string(STITCH_BINARY_DIR) + "/bench/gpu/gpu_bench"; }
inline std::string CostModelPrice() {
  return std::string(STITCH_BINARY_DIR) + "/bench/gpu/cost_model_price";
}

inline std::string FrameworksPy() {
  return std::string(STITCH_SOURCE_DIR) + "/bench/gpu/frameworks.py";
}

}  // namespace stitch::gpu::test
