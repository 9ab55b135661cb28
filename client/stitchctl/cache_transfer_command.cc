// stitchctl cache export / import: a node's cache entries to and from an archive file
// (stitch/cache/entry_archive.h), for clusters without a network path between them and for
// CI images.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "commands.h"
#include "stitch/cache/entry_archive.h"
#include "stitch/cache/rocksdb_store.h"
#include "stitch/client/client.h"

namespace stitch::ctl {
namespace {

// stitchd keeps its RocksDB and its lock file at these places under --data-dir.
std::string CachePath(const std::string& data_dir) { return data_dir + "/cache"; }
std::string LockPath(const std::string& data_dir) { return data_dir + "/stitchd.lock"; }

// The data dir's lock, the one stitchd takes (flock on stitchd.lock): while it is held no
// daemon can start on the directory, and it cannot be had while a daemon runs there.
class DataDirLock {
 public:
  // Returns the held lock, or FAILED_PRECONDITION saying which daemon holds it (the caller
  // says what to do about it).
  static StatusOr<DataDirLock> Acquire(const std::string& data_dir) {
    const std::string path = LockPath(data_dir);
    int fd;
    do {
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return FailedPrecondition("cannot open " + path + ": " + std::strerror(errno));
    DataDirLock lock(fd);
    int rc;
    do {
      rc = ::flock(fd, LOCK_EX | LOCK_NB);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0 && errno == EWOULDBLOCK) {
      const long pid = lock.HolderPid();
      return FailedPrecondition("a running stitchd" +
                                (pid > 0 ? " (pid " + std::to_string(pid) + ")" : std::string()) +
                                " holds " + path);
    }
    if (rc != 0) return FailedPrecondition("cannot lock " + path + ": " + std::strerror(errno));
    lock.RecordPid();
    return lock;
  }

  DataDirLock(DataDirLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  DataDirLock& operator=(DataDirLock&&) = delete;
  ~DataDirLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the flock
  }

 private:
  explicit DataDirLock(int fd) : fd_(fd) {}

  long HolderPid() const {
    char buf[32];
    const ssize_t n = ::pread(fd_, buf, sizeof buf, 0);
    long pid = 0;
    if (n <= 0 || std::from_chars(buf, buf + n, pid).ec != std::errc()) return 0;
    return pid;
  }

  // A daemon refused the lock names the pid in the file, which should be ours rather than
  // that of the daemon that last ran. Best effort: the lock holds without it.
  void RecordPid() {
    const std::string text = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) == 0) {
      [[maybe_unused]] const ssize_t n = ::pwrite(fd_, text.data(), text.size(), 0);
    }
  }

  int fd_ = -1;
};

// Opens the cache of a stopped daemon. The bound is lifted so that neither opening nor
// importing evicts anything; the daemon trims to its own bound when it next starts.
StatusOr<std::unique_ptr<cache::RocksDbStore>> OpenCache(const std::string& data_dir) {
  cache::RocksDbOptions options;
  options.path = CachePath(data_dir);
  options.capacity_bytes = std::numeric_limits<uint64_t>::max();
  options.block_cache_bytes = 8 << 20;
  return cache::RocksDbStore::Open(options);
}

// "1 entry", "2 entries".
std::string Entries(uint64_t n, const char* adjective = "") {
  return std::to_string(n) + " " + adjective + (n == 1 ? "entry" : "entries");
}

int Exported(const cache::ArchiveSummary& summary, const std::string& from,
             const std::string& file) {
  std::printf("exported %s (%llu bytes) from %s to %s\n", Entries(summary.entries).c_str(),
              static_cast<unsigned long long>(summary.bytes), from.c_str(), file.c_str());
  return 0;
}

int ExportFromDataDir(const CacheTransferArgs& args) {
  const std::string cache_path = CachePath(args.data_dir);
  if (!std::filesystem::is_directory(cache_path)) {
    return Fail("no kernel cache at " + cache_path + "; is " + args.data_dir +
                " a stitchd --data-dir?");
  }
  StatusOr<DataDirLock> lock = DataDirLock::Acquire(args.data_dir);
  if (!lock.ok()) {
    return Fail(lock.status().message() +
                "; stop the daemon before exporting its data dir, or export from it with "
                "--daemon ADDR");
  }
  StatusOr<std::unique_ptr<cache::RocksDbStore>> store = OpenCache(args.data_dir);
  if (!store.ok()) return Fail(store.status().ToString());
  StatusOr<cache::ArchiveWriter> writer = cache::ArchiveWriter::Create(args.file);
  if (!writer.ok()) return Fail(writer.status().ToString());
  StatusOr<uint64_t> skipped =
      (*store)->ForEach([&](std::string_view key, const v1::KernelBundle& bundle) {
        return writer->Add(key, bundle);
      });
  if (!skipped.ok()) return Fail(skipped.status().ToString());
  StatusOr<cache::ArchiveSummary> summary = writer->Commit();
  if (!summary.ok()) return Fail(summary.status().ToString());
  if (*skipped > 0) {
    std::fprintf(stderr, "stitchctl: left out %s that did not decode\n",
                 Entries(*skipped, "corrupt ").c_str());
  }
  const Status closed = (*store)->Close();
  if (!closed.ok()) return Fail(closed.ToString());
  return Exported(*summary, cache_path, args.file);
}

int ExportFromDaemon(const CacheTransferArgs& args) {
  client::ClientOptions options = DaemonClientOptions(args.daemon);
  options.local_cache_entries = 0;
  // One GetEntry carries a whole bundle, often several MiB.
  options.admin_deadline = std::chrono::seconds(60);
  client::Client c(options);
  StatusOr<v1::StatsResponse> stats = c.Stats();
  if (!stats.ok()) return Fail(args.daemon + ": " + stats.status().ToString());
  // The daemon caps the limit at what it is willing to list in one answer.
  StatusOr<v1::ListEntriesResponse> list = c.ListEntries(std::numeric_limits<uint32_t>::max());
  if (!list.ok()) return Fail(args.daemon + ": " + list.status().ToString());
  StatusOr<cache::ArchiveWriter> writer = cache::ArchiveWriter::Create(args.file);
  if (!writer.ok()) return Fail(writer.status().ToString());
  uint64_t gone = 0;
  for (const v1::EntrySummary& e : list->entries()) {
    StatusOr<v1::CompileResponse> entry = c.GetEntry(e.key());
    if (!entry.ok() && entry.status().code() == StatusCode::kNotFound) {
      ++gone;  // evicted since it was listed
      continue;
    }
    if (!entry.ok()) return Fail(args.daemon + ": " + e.key() + ": " + entry.status().ToString());
    const Status added = writer->Add(e.key(), entry->bundle());
    if (!added.ok()) return Fail(added.ToString());
  }
  StatusOr<cache::ArchiveSummary> summary = writer->Commit();
  if (!summary.ok()) return Fail(summary.status().ToString());
  if (gone > 0) {
    std::fprintf(stderr, "stitchctl: %s left the cache while exporting\n", Entries(gone).c_str());
  }
  if (static_cast<uint64_t>(list->entries_size()) < stats->entries()) {
    std::fprintf(stderr,
                 "stitchctl: the daemon listed %d of its %llu entries; stop it and export with "
                 "--data-dir for all of them\n",
                 list->entries_size(), static_cast<unsigned long long>(stats->entries()));
  }
  return Exported(*summary, args.daemon, args.file);
}

}  // namespace

int RunCacheExport(const CacheTransferArgs& args) {
  if (args.data_dir.empty() == args.daemon.empty()) {
    return Fail("cache export needs exactly one of --data-dir DIR and --daemon ADDR");
  }
  return args.daemon.empty() ? ExportFromDataDir(args) : ExportFromDaemon(args);
}

int RunCacheImport(const CacheTransferArgs& args) {
  // Everything is verified before the data dir is touched, so a refused archive leaves it
  // as it was.
  StatusOr<std::vector<cache::ArchiveEntry>> entries = cache::ReadArchive(args.file);
  if (!entries.ok()) return Fail(entries.status().ToString() + "; nothing was imported");
  std::error_code ec;
  std::filesystem::create_directories(args.data_dir, ec);
  if (ec) return Fail("cannot create " + args.data_dir + ": " + ec.message());
  StatusOr<DataDirLock> lock = DataDirLock::Acquire(args.data_dir);
  if (!lock.ok()) {
    return Fail(lock.status().message() + "; stop the daemon before importing into its data dir");
  }
  StatusOr<std::unique_ptr<cache::RocksDbStore>> store = OpenCache(args.data_dir);
  if (!store.ok()) return Fail(store.status().ToString());
  // Oldest first: the archive lists the most recently used entry first, and the last Put is
  // the most recent, so the recency order carries over.
  uint64_t imported = 0;
  for (auto it = entries->rbegin(); it != entries->rend(); ++it) {
    const Status put = (*store)->Put(it->key, it->bundle);
    if (!put.ok()) {
      return Fail(put.ToString() + " (after importing " + Entries(imported) + ")");
    }
    ++imported;
  }
  const Status closed = (*store)->Close();
  if (!closed.ok()) return Fail(closed.ToString());
  std::printf("imported %s from %s into %s\n", Entries(imported).c_str(), args.file.c_str(),
              CachePath(args.data_dir).c_str());
  return 0;
}

}  // namespace stitch::ctl
