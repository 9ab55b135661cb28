#include "../../daemon/src/lock_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace stitch::daemon {
namespace {

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

class LockFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "lock_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `body` in a forked child and returns its exit status; what the child writes to the
// pipe comes back in *message.
template <typename Body>
int RunInChild(Body body, std::string* message) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string out;
    const int code = body(&out);
    if (!out.empty() && write(fds[1], out.data(), out.size()) < 0) _exit(99);
    _exit(code);
  }
  close(fds[1]);
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) message->append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Exit codes of a child's Acquire attempt.
constexpr int kAcquired = 0;
constexpr int kRefused = 1;
constexpr int kOtherError = 2;

int TryAcquireInChild(const std::string& path, std::string* message) {
  return RunInChild(
      [&](std::string* out) {
        StatusOr<LockFile> lock = LockFile::Acquire(path, "the cache");
        if (lock.ok()) return kAcquired;
        *out = lock.status().message();
        return lock.status().code() == StatusCode::kFailedPrecondition ? kRefused : kOtherError;
      },
      message);
}

TEST_F(LockFileTest, AcquireWritesPidAndCreatesTheDirectory) {
  const std::string path = dir_ + "/a/b/stitchd.lock";
  StatusOr<LockFile> lock = LockFile::Acquire(path, "the cache");
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  EXPECT_TRUE(lock->held());
  EXPECT_EQ(lock->path(), path);
  EXPECT_EQ(ReadFile(path), std::to_string(getpid()) + "\n");
}

TEST_F(LockFileTest, SecondAcquireInTheSameProcessFails) {
  const std::string path = dir_ + "/stitchd.lock";
  StatusOr<LockFile> first = LockFile::Acquire(path, "the cache in " + dir_);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  StatusOr<LockFile> second = LockFile::Acquire(path, "the cache in " + dir_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  const std::string& message = second.status().message();
  EXPECT_TRUE(Contains(message, "another stitchd (pid " + std::to_string(getpid()) + ")"));
  EXPECT_TRUE(Contains(message, path));
  EXPECT_TRUE(Contains(message, "it already serves the cache in " + dir_));
  // The refused attempt must not have disturbed the holder's pid.
  EXPECT_EQ(ReadFile(path), std::to_string(getpid()) + "\n");
}

TEST_F(LockFileTest, ChildProcessIsRefusedWhileHeldAndAcquiresAfterRelease) {
  const std::string path = dir_ + "/stitchd.lock";
  StatusOr<LockFile> lock = LockFile::Acquire(path, "the cache");
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();

  std::string message;
  EXPECT_EQ(TryAcquireInChild(path, &message), kRefused) << message;
  EXPECT_TRUE(Contains(message, "pid " + std::to_string(getpid())));
  EXPECT_TRUE(Contains(message, path));
  EXPECT_TRUE(Contains(message, "the cache"));

  lock->Release();
  EXPECT_FALSE(lock->held());
  EXPECT_TRUE(std::filesystem::exists(path));  // released, never unlinked
  message.clear();
  EXPECT_EQ(TryAcquireInChild(path, &message), kAcquired) << message;

  // The child has exited, so its lock is gone too.
  StatusOr<LockFile> again = LockFile::Acquire(path, "the cache");
  EXPECT_TRUE(again.ok()) << again.status().ToString();
}

TEST_F(LockFileTest, DestructorReleases) {
  const std::string path = dir_ + "/stitchd.lock";
  {
    StatusOr<LockFile> lock = LockFile::Acquire(path, "the cache");
    ASSERT_TRUE(lock.ok());
  }
  std::string message;
  EXPECT_EQ(TryAcquireInChild(path, &message), kAcquired) << message;
}

TEST_F(LockFileTest, RefusalNamesTheChildsPid) {
  const std::string path = dir_ + "/stitchd.lock";
  int ready[2];
  int go[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(go), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    close(go[1]);
    StatusOr<LockFile> lock = LockFile::Acquire(path, "socket /x.sock");
    const char ok = lock.ok() ? 'y' : 'n';
    if (write(ready[1], &ok, 1) != 1) _exit(3);
    char c;
    if (read(go[0], &c, 1) < 0) _exit(4);
    _exit(0);
  }
  close(ready[1]);
  close(go[0]);
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  EXPECT_EQ(ok, 'y');

  StatusOr<LockFile> lock = LockFile::Acquire(path, "socket /x.sock");
  EXPECT_FALSE(lock.ok());
  if (!lock.ok()) {
    EXPECT_EQ(lock.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(Contains(lock.status().message(), "another stitchd (pid " + std::to_string(child) +
                                                      ") holds " + path +
                                                      "; it already serves socket /x.sock"));
  }
  close(go[1]);  // lets the child exit
  close(ready[0]);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  StatusOr<LockFile> after = LockFile::Acquire(path, "socket /x.sock");
  EXPECT_TRUE(after.ok()) << after.status().ToString();
}

TEST_F(LockFileTest, MoveTransfersTheLock) {
  const std::string path = dir_ + "/stitchd.lock";
  StatusOr<LockFile> acquired = LockFile::Acquire(path, "the cache");
  ASSERT_TRUE(acquired.ok());
  LockFile moved(std::move(*acquired));
  EXPECT_TRUE(moved.held());
  EXPECT_FALSE(acquired->held());                       // NOLINT(bugprone-use-after-move)
  acquired = Status(StatusCode::kInternal, "dropped");  // destroys the moved-from handle
  std::string message;
  EXPECT_EQ(TryAcquireInChild(path, &message), kRefused) << message;

  LockFile assigned = std::move(moved);
  EXPECT_TRUE(assigned.held());
  message.clear();
  EXPECT_EQ(TryAcquireInChild(path, &message), kRefused) << message;
  assigned.Release();
  message.clear();
  EXPECT_EQ(TryAcquireInChild(path, &message), kAcquired) << message;
}

TEST_F(LockFileTest, ForkedChildDoesNotReleaseTheParentsLock) {
  const std::string path = dir_ + "/stitchd.lock";
  StatusOr<LockFile> lock = LockFile::Acquire(path, "the cache");
  ASSERT_TRUE(lock.ok());
  std::string unused;
  // The child shares the parent's descriptor; releasing its copy must leave the lock held.
  EXPECT_EQ(RunInChild(
                [&](std::string*) {
                  lock->Release();
                  return 0;
                },
                &unused),
            0);
  std::string message;
  EXPECT_EQ(TryAcquireInChild(path, &message), kRefused) << message;
}

TEST_F(LockFileTest, UnopenableLockFileIsAnError) {
  const std::string blocker = dir_ + "/file";
  std::ofstream(blocker) << "x";
  StatusOr<LockFile> lock = LockFile::Acquire(blocker + "/stitchd.lock", "the cache");
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(lock.status().message(), blocker));
}

// Leaves a socket file at `path` with nothing listening, as a daemon that died would.
void MakeStaleSocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
  close(fd);
}

TEST_F(LockFileTest, PrepareSocketPathCreatesDirectories) {
  const std::string path = dir_ + "/run/stitchd/stitchd.sock";
  ASSERT_TRUE(PrepareSocketPath(path, 0750).ok());
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/run/stitchd").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_FALSE(std::filesystem::exists(path));
  // Idempotent.
  EXPECT_TRUE(PrepareSocketPath(path).ok());
}

TEST_F(LockFileTest, PrepareSocketPathRemovesAStaleSocket) {
  const std::string path = dir_ + "/stitchd.sock";
  MakeStaleSocket(path);
  ASSERT_TRUE(std::filesystem::is_socket(path));
  const Status status = PrepareSocketPath(path);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(LockFileTest, PrepareSocketPathRefusesOtherFiles) {
  const std::string path = dir_ + "/stitchd.sock";
  std::ofstream(path) << "precious";
  const Status status = PrepareSocketPath(path);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(status.message(), "not a socket"));
  EXPECT_EQ(ReadFile(path), "precious");

  const std::string under_file = path + "/x.sock";
  EXPECT_FALSE(PrepareSocketPath(under_file).ok());
}

TEST_F(LockFileTest, SocketStepsOneByOne) {
  const std::string path = dir_ + "/run/stitchd.sock";
  ASSERT_TRUE(PrepareSocketDirectory(path).ok());
  EXPECT_TRUE(std::filesystem::is_directory(dir_ + "/run"));
  StatusOr<LockFile> lock = LockFile::Acquire(path + ".lock", "socket " + path);
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  EXPECT_TRUE(RemoveStaleSocket(path).ok());  // nothing there
  MakeStaleSocket(path);
  EXPECT_TRUE(RemoveStaleSocket(path).ok());
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(LockFileTest, SetSocketMode) {
  const std::string path = dir_ + "/stitchd.sock";
  MakeStaleSocket(path);
  ASSERT_TRUE(SetSocketMode(path, 0660).ok());
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  ASSERT_TRUE(SetSocketMode(path, 0666).ok());
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0666u);

  const Status missing = SetSocketMode(dir_ + "/absent.sock", 0666);
  EXPECT_FALSE(missing.ok());
  EXPECT_TRUE(Contains(missing.message(), "absent.sock"));
}

}  // namespace
}  // namespace stitch::daemon
