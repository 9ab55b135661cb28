// Cache archives: a node's entries in one file, to carry a cache to an air-gapped cluster or
// bake it into a CI image.
//
// Layout (integers little-endian):
//
//   header   "STKARCH" + '\0' | u32 archive format version (kArchiveFormatVersion)
//   record   'R' | u32 key length | u64 envelope length | key | envelope (entry.h)
//   ...
//   trailer  'E' | u64 record count, and nothing after it
//
// Records come most recently used first, as the store listed them. Each envelope carries its
// own SHA-256 and bundle format version, so the archive needs no checksum of its own; the
// trailer's count catches a file cut at a record boundary or records dropped from it.
//
// Thread-safety: the functions are pure apart from the file they touch; an ArchiveWriter is
// used from one thread at a time. Errors: a Status naming the file and, for a bad entry, its
// index and key; nothing throws.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/cache/kernel_store.h"

namespace stitch::cache {

// Bumped whenever the framing above changes; readers refuse any other version.
inline constexpr uint32_t kArchiveFormatVersion = 1;

// Keys are 64 hex digits; the bound only stops a damaged length from allocating much.
inline constexpr uint32_t kMaxArchiveKeyBytes = 4096;

// One record: the key it is stored under and its sealed bundle.
struct ArchiveEntry {
  std::string key;
  BundlePtr bundle;
};

// What an archive holds once written.
struct ArchiveSummary {
  uint64_t entries = 0;
  uint64_t bytes = 0;  // the whole file
};

// Writes an archive record by record, so an exporter never holds a whole cache in memory.
// Records go to a temporary file next to the destination, which Commit syncs and renames
// into place: a crash or an abandoned writer never leaves a partial archive under the name.
class ArchiveWriter {
 public:
  // Returns a writer for `path` whose temporary file holds the header, or UNAVAILABLE naming
  // the directory when the file cannot be created.
  static StatusOr<ArchiveWriter> Create(const std::string& path);

  ArchiveWriter(ArchiveWriter&& other) noexcept;
  ArchiveWriter& operator=(ArchiveWriter&& other) noexcept;
  ArchiveWriter(const ArchiveWriter&) = delete;
  ArchiveWriter& operator=(const ArchiveWriter&) = delete;
  // Removes the temporary file unless Commit succeeded.
  ~ArchiveWriter();

  // Appends `bundle` under `key`. Returns INVALID_ARGUMENT naming the entry's index and key
  // when the bundle is unsealed or carries another key (an archive that a reader would refuse
  // is never written), UNAVAILABLE on a write error, after which the writer is unusable.
  Status Add(std::string_view key, const v1::KernelBundle& bundle);

  // Writes the trailer, syncs, and renames the file to its path. Returns what the archive
  // holds, or UNAVAILABLE naming the path (the temporary file is then removed).
  StatusOr<ArchiveSummary> Commit();

 private:
  ArchiveWriter(std::string path, std::string temp_path, int fd);
  Status Append(std::string_view bytes);
  void Abandon();

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  uint64_t entries_ = 0;
  uint64_t bytes_ = 0;
};

// Writes `entries`, in order, to an archive at `path` (see ArchiveWriter). Returns what it
// wrote, or the first error of ArchiveWriter (INVALID_ARGUMENT for an entry without a
// bundle).
StatusOr<ArchiveSummary> WriteArchive(const std::string& path,
                                      const std::vector<ArchiveEntry>& entries);

// Reads and verifies the archive at `path`: every envelope decodes (its digest and format
// version hold), every bundle is sealed and carries its record's key, no key repeats, and the
// trailer's count matches. Returns the entries in archive order, all in memory, or the first
// failure, refusing the whole archive: NOT_FOUND when the file is missing, DATA_LOSS for a
// damaged or truncated file, FAILED_PRECONDITION for another archive or bundle format version.
// A bad record's message names its index and key. Lengths are checked against the file
// size before anything is allocated, so arbitrary bytes are refused, never trusted.
StatusOr<std::vector<ArchiveEntry>> ReadArchive(const std::string& path);

}  // namespace stitch::cache
