// An exclusive, advisory lock held by one stitchd at a time on a file, so that two daemons
// never share a cache directory or a unix socket path.
//
// The lock is flock(2), which belongs to the open file description: it is released when the
// LockFile is destroyed or the process dies, however it dies, and a second Acquire of the same
// path fails even within one process. The file is never unlinked, because removing it would
// let a third process lock a fresh inode while another still holds the old one.
//
// Thread-safety: a LockFile is a plain movable handle; distinct objects may be used from
// different threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "stitch/base/status.h"

namespace stitch::daemon {

class LockFile {
 public:
  // Opens (creating it, and its parent directory, if needed) and locks `path`, then writes our
  // pid into it. When another process holds it, returns FAILED_PRECONDITION such as
  // "another stitchd (pid 1234) holds /x/stitchd.lock; it already serves <what>".
  static StatusOr<LockFile> Acquire(const std::string& path, std::string_view what);

  LockFile(LockFile&& other) noexcept;
  LockFile& operator=(LockFile&& other) noexcept;
  LockFile(const LockFile&) = delete;
  LockFile& operator=(const LockFile&) = delete;
  ~LockFile();

  // Unlocks and closes now; the destructor then does nothing. In a forked child this only
  // closes its copy of the descriptor, leaving the parent's lock in place.
  void Release();

  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  LockFile(int fd, std::string path);

  int fd_ = -1;
  int owner_pid_ = 0;  // the process that locked; a forked child must not unlock
  std::string path_;
};

// Creates the parent directory of `socket_path` (like mkdir -p; new directories get
// `dir_mode`), so that "<socket_path>.lock" can be taken next to it.
Status PrepareSocketDirectory(const std::string& socket_path, uint32_t dir_mode = 0755);

// Removes a stale socket left at `socket_path` by a daemon that died; fine if there is none.
// Refuses to remove anything that is not a socket. Call it only while holding
// "<socket_path>.lock", since the socket could otherwise belong to a live daemon.
Status RemoveStaleSocket(const std::string& socket_path);

// PrepareSocketDirectory, then RemoveStaleSocket, for a caller that already holds the lock.
// The lock file lives in the same directory, so a fresh start goes PrepareSocketDirectory,
// LockFile::Acquire("<socket_path>.lock"), RemoveStaleSocket.
Status PrepareSocketPath(const std::string& socket_path, uint32_t dir_mode = 0755);

// chmod(2) for the socket after bind, so that clients of other users can connect.
Status SetSocketMode(const std::string& socket_path, uint32_t mode);

// mkdir -p: creates `path` and its missing parents with `mode`; fine if it exists as a
// directory.
Status MakeDirectories(const std::string& path, uint32_t mode = 0755);

}  // namespace stitch::daemon
