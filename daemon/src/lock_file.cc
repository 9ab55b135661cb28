#include "lock_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <string>
#include <utility>

namespace stitch::daemon {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

std::string ParentOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return "";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// The pid written by the holder, or 0 when the file does not hold one (yet).
long ReadPid(int fd) {
  char buf[32];
  ssize_t n;
  do {
    n = pread(fd, buf, sizeof(buf), 0);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return 0;
  long pid = 0;
  auto [end, ec] = std::from_chars(buf, buf + n, pid);
  if (ec != std::errc() || pid <= 0) return 0;
  return pid;
}

Status WritePid(int fd, const std::string& path) {
  const std::string text = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0) {
    return FailedPrecondition("cannot truncate lock file " + path + ": " + ErrnoText(errno));
  }
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = pwrite(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return FailedPrecondition("cannot write lock file " + path + ": " + ErrnoText(errno));
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<LockFile> LockFile::Acquire(const std::string& path, std::string_view what) {
  if (path.empty()) return InvalidArgument("lock file path is empty");
  if (const std::string parent = ParentOf(path); !parent.empty()) {
    STITCH_RETURN_IF_ERROR(MakeDirectories(parent));
  }
  int fd;
  do {
    fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    return FailedPrecondition("cannot open lock file " + path + ": " + ErrnoText(errno));
  }
  LockFile lock(fd, path);  // closes fd on every early return below

  int rc;
  do {
    rc = flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      const long pid = ReadPid(fd);
      const std::string holder =
          pid > 0 ? "another stitchd (pid " + std::to_string(pid) + ")" : "another stitchd";
      return FailedPrecondition(holder + " holds " + path + "; it already serves " +
                                std::string(what));
    }
    return FailedPrecondition("cannot lock " + path + ": " + ErrnoText(err));
  }
  STITCH_RETURN_IF_ERROR(WritePid(fd, path));
  return lock;
}

LockFile::LockFile(int fd, std::string path)
    : fd_(fd), owner_pid_(static_cast<int>(getpid())), path_(std::move(path)) {}

LockFile::LockFile(LockFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      owner_pid_(other.owner_pid_),
      path_(std::move(other.path_)) {}

LockFile& LockFile::operator=(LockFile&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = std::exchange(other.fd_, -1);
    owner_pid_ = other.owner_pid_;
    path_ = std::move(other.path_);
  }
  return *this;
}

LockFile::~LockFile() { Release(); }

void LockFile::Release() {
  if (fd_ < 0) return;
  // The lock belongs to the open file description, which a forked child shares: unlocking
  // from the owner releases it even while such a child lives, and a child must not unlock
  // its parent's lock by running a destructor.
  if (static_cast<int>(getpid()) == owner_pid_) flock(fd_, LOCK_UN);
  close(fd_);
  fd_ = -1;
}

Status MakeDirectories(const std::string& path, uint32_t mode) {
  if (path.empty()) return InvalidArgument("directory path is empty");
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::Ok();
    return FailedPrecondition(path + " exists and is not a directory");
  }
  if (errno != ENOENT) {
    return FailedPrecondition("cannot inspect " + path + ": " + ErrnoText(errno));
  }
  if (const std::string parent = ParentOf(path); !parent.empty() && parent != path) {
    STITCH_RETURN_IF_ERROR(MakeDirectories(parent, mode));
  }
  if (mkdir(path.c_str(), static_cast<mode_t>(mode)) != 0 && errno != EEXIST) {
    return FailedPrecondition("cannot create directory " + path + ": " + ErrnoText(errno));
  }
  // Another process may have created something else at the path in between.
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return FailedPrecondition("cannot create directory " + path);
  }
  return Status::Ok();
}

Status PrepareSocketDirectory(const std::string& socket_path, uint32_t dir_mode) {
  if (socket_path.empty()) return InvalidArgument("socket path is empty");
  if (const std::string parent = ParentOf(socket_path); !parent.empty()) {
    return MakeDirectories(parent, dir_mode);
  }
  return Status::Ok();
}

Status PrepareSocketPath(const std::string& socket_path, uint32_t dir_mode) {
  STITCH_RETURN_IF_ERROR(PrepareSocketDirectory(socket_path, dir_mode));
  return RemoveStaleSocket(socket_path);
}

Status RemoveStaleSocket(const std::string& socket_path) {
  if (socket_path.empty()) return InvalidArgument("socket path is empty");
  struct stat st {};
  if (lstat(socket_path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return FailedPrecondition("cannot inspect " + socket_path + ": " + ErrnoText(errno));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return FailedPrecondition(socket_path + " exists and is not a socket; refusing to replace it");
  }
  if (unlink(socket_path.c_str()) != 0 && errno != ENOENT) {
    return FailedPrecondition("cannot remove stale socket " + socket_path + ": " +
                              ErrnoText(errno));
  }
  return Status::Ok();
}

Status SetSocketMode(const std::string& socket_path, uint32_t mode) {
  if (chmod(socket_path.c_str(), static_cast<mode_t>(mode)) != 0) {
    return FailedPrecondition("cannot chmod " + socket_path + ": " + ErrnoText(errno));
  }
  return Status::Ok();
}

}  // namespace stitch::daemon
