#include "stitch/cache/entry_archive.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>

#include "little_endian.h"
#include "stitch/cache/entry.h"

namespace stitch::cache {
namespace {

// Layout; see the file comment of entry_archive.h.
constexpr std::string_view kMagic{"STKARCH\0", 8};
constexpr char kRecordTag = 'R';
constexpr char kTrailerTag = 'E';
constexpr size_t kHeaderBytes = kMagic.size() + 4;
constexpr size_t kRecordHeaderBytes = 1 + 4 + 8;
constexpr size_t kTrailerBytes = 1 + 8;

std::string ErrnoText(int err) { return std::strerror(err); }

// A key as it may appear in a message: a damaged archive can hold any bytes, which must not
// garble the terminal or flood it.
std::string Printable(std::string_view key) {
  constexpr size_t kShown = 80;
  std::string out;
  for (size_t i = 0; i < key.size() && i < kShown; ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  if (key.size() > kShown) out += "... (" + std::to_string(key.size()) + " bytes)";
  return out;
}

std::string EntryName(uint64_t index, std::string_view key) {
  return "entry " + std::to_string(index) + " (key " + Printable(key) + ")";
}

// Returns OK when `bundle` may be archived under `key`, else why not.
Status CheckArchivable(std::string_view key, const v1::KernelBundle& bundle) {
  if (key.empty() || key.size() > kMaxArchiveKeyBytes) {
    return InvalidArgument("key is " + std::to_string(key.size()) + " bytes, expected 1 to " +
                           std::to_string(kMaxArchiveKeyBytes));
  }
  STITCH_RETURN_IF_ERROR(CheckSealed(bundle));
  if (bundle.key() != key) {
    return DataLoss("record holds the bundle of key " + Printable(bundle.key()));
  }
  return Status::Ok();
}

// Sequential reads that never go past the end of the file, so a length read from the file
// is checked before a buffer of that size exists.
class BoundedReader {
 public:
  BoundedReader(std::ifstream& in, uint64_t size) : in_(in), size_(size) {}

  uint64_t remaining() const { return size_ - offset_; }

  // Fills `out` with the next `n` bytes; false when fewer remain or the read fails.
  bool Read(uint64_t n, std::string& out) {
    if (n > remaining()) return false;
    out.resize(static_cast<size_t>(n));
    if (n > 0 && !in_.read(out.data(), static_cast<std::streamsize>(n))) return false;
    offset_ += n;
    return true;
  }

 private:
  std::ifstream& in_;
  uint64_t size_;
  uint64_t offset_ = 0;
};

// Reads one record's framing and verifies its envelope; `index` is the record's position.
StatusOr<ArchiveEntry> ReadRecord(BoundedReader& reader, uint64_t index) {
  const std::string at = "entry " + std::to_string(index);
  std::string head;
  if (!reader.Read(kRecordHeaderBytes - 1, head)) {
    return DataLoss(at + ": the file ends inside its header");
  }
  const uint64_t key_bytes = ReadLittleEndian(std::string_view(head).substr(0, 4));
  const uint64_t envelope_bytes = ReadLittleEndian(std::string_view(head).substr(4, 8));
  if (key_bytes == 0 || key_bytes > kMaxArchiveKeyBytes) {
    return DataLoss(at + ": key length " + std::to_string(key_bytes) + " is not within 1 to " +
                    std::to_string(kMaxArchiveKeyBytes));
  }
  if (key_bytes > reader.remaining() || envelope_bytes > reader.remaining() - key_bytes) {
    return DataLoss(at + ": its key and envelope (" + std::to_string(key_bytes) + " + " +
                    std::to_string(envelope_bytes) + " bytes) run past the end of the file (" +
                    std::to_string(reader.remaining()) + " bytes left); the file is truncated");
  }
  ArchiveEntry entry;
  std::string envelope;
  if (!reader.Read(key_bytes, entry.key) || !reader.Read(envelope_bytes, envelope)) {
    return DataLoss(at + ": read error");
  }
  StatusOr<v1::KernelBundle> bundle = DecodeEntry(envelope);
  if (!bundle.ok()) return bundle.status().WithContext(EntryName(index, entry.key));
  const Status archivable = CheckArchivable(entry.key, *bundle);
  if (!archivable.ok()) return archivable.WithContext(EntryName(index, entry.key));
  entry.bundle = std::make_shared<const v1::KernelBundle>(std::move(bundle).value());
  return entry;
}

StatusOr<std::vector<ArchiveEntry>> ReadVerified(std::ifstream& in, uint64_t size) {
  BoundedReader reader(in, size);
  std::string header;
  if (!reader.Read(kHeaderBytes, header) || std::string_view(header).substr(0, 8) != kMagic) {
    return DataLoss("not a stitch cache archive (no STKARCH header)");
  }
  const uint64_t version = ReadLittleEndian(std::string_view(header).substr(8, 4));
  if (version != kArchiveFormatVersion) {
    return FailedPrecondition("archive format version " + std::to_string(version) +
                              " is not this version's " + std::to_string(kArchiveFormatVersion));
  }
  std::vector<ArchiveEntry> entries;
  std::unordered_set<std::string> keys;
  for (;;) {
    std::string tag;
    if (!reader.Read(1, tag)) {
      return DataLoss("the file ends after " + std::to_string(entries.size()) +
                      " entries without its trailer; it is truncated");
    }
    if (tag[0] == kTrailerTag) break;
    if (tag[0] != kRecordTag) {
      return DataLoss("entry " + std::to_string(entries.size()) +
                      ": expected a record or the trailer, found byte " +
                      std::to_string(static_cast<unsigned char>(tag[0])));
    }
    STITCH_ASSIGN_OR_RETURN(ArchiveEntry entry, ReadRecord(reader, entries.size()));
    if (!keys.insert(entry.key).second) {
      return DataLoss(EntryName(entries.size(), entry.key) + ": repeats an earlier entry's key");
    }
    entries.push_back(std::move(entry));
  }
  std::string count;
  if (!reader.Read(kTrailerBytes - 1, count)) {
    return DataLoss("the file ends inside its trailer; it is truncated");
  }
  const uint64_t declared = ReadLittleEndian(count);
  if (declared != entries.size()) {
    return DataLoss("the trailer counts " + std::to_string(declared) + " entries but " +
                    std::to_string(entries.size()) + " were read");
  }
  if (reader.remaining() != 0) {
    return DataLoss(std::to_string(reader.remaining()) + " bytes follow the trailer");
  }
  return entries;
}

// A name in the destination's directory, so that the rename stays on one filesystem.
std::string TempPathFor(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

}  // namespace

StatusOr<ArchiveWriter> ArchiveWriter::Create(const std::string& path) {
  const std::string temp = TempPathFor(path);
  int fd;
  do {
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return Unavailable("cannot create " + temp + ": " + ErrnoText(errno));
  ArchiveWriter writer(path, temp, fd);
  std::string header(kMagic);
  AppendLittleEndian(header, kArchiveFormatVersion, 4);
  STITCH_RETURN_IF_ERROR(writer.Append(header));
  return writer;
}

ArchiveWriter::ArchiveWriter(std::string path, std::string temp_path, int fd)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}

ArchiveWriter::ArchiveWriter(ArchiveWriter&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(std::exchange(other.fd_, -1)),
      entries_(other.entries_),
      bytes_(other.bytes_) {}

ArchiveWriter& ArchiveWriter::operator=(ArchiveWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    temp_path_ = std::move(other.temp_path_);
    fd_ = std::exchange(other.fd_, -1);
    entries_ = other.entries_;
    bytes_ = other.bytes_;
  }
  return *this;
}

ArchiveWriter::~ArchiveWriter() { Abandon(); }

void ArchiveWriter::Abandon() {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  ::unlink(temp_path_.c_str());
}

Status ArchiveWriter::Append(std::string_view bytes) {
  if (fd_ < 0) return Unavailable("archive " + path_ + " is no longer being written");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const Status error = Unavailable("cannot write " + temp_path_ + ": " + ErrnoText(errno));
      Abandon();
      return error;
    }
    done += static_cast<size_t>(n);
  }
  bytes_ += bytes.size();
  return Status::Ok();
}

Status ArchiveWriter::Add(std::string_view key, const v1::KernelBundle& bundle) {
  const Status archivable = CheckArchivable(key, bundle);
  if (!archivable.ok()) {
    return InvalidArgument(EntryName(entries_, key) + ": " + archivable.ToString());
  }
  const std::string envelope = EncodeEntry(bundle);
  std::string head(1, kRecordTag);
  AppendLittleEndian(head, static_cast<uint32_t>(key.size()), 4);
  AppendLittleEndian(head, envelope.size(), 8);
  STITCH_RETURN_IF_ERROR(Append(head));
  STITCH_RETURN_IF_ERROR(Append(key));
  STITCH_RETURN_IF_ERROR(Append(envelope));
  ++entries_;
  return Status::Ok();
}

StatusOr<ArchiveSummary> ArchiveWriter::Commit() {
  std::string trailer(1, kTrailerTag);
  AppendLittleEndian(trailer, entries_, 8);
  STITCH_RETURN_IF_ERROR(Append(trailer));
  // Synced before the rename, so that after a crash the name holds the old file or the
  // whole new one.
  if (::fsync(fd_) != 0) {
    const Status error = Unavailable("cannot sync " + temp_path_ + ": " + ErrnoText(errno));
    Abandon();
    return error;
  }
  if (::close(std::exchange(fd_, -1)) != 0) {
    const Status error = Unavailable("cannot close " + temp_path_ + ": " + ErrnoText(errno));
    ::unlink(temp_path_.c_str());
    return error;
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const Status error =
        Unavailable("cannot rename " + temp_path_ + " to " + path_ + ": " + ErrnoText(errno));
    ::unlink(temp_path_.c_str());
    return error;
  }
  return ArchiveSummary{entries_, bytes_};
}

StatusOr<ArchiveSummary> WriteArchive(const std::string& path,
                                      const std::vector<ArchiveEntry>& entries) {
  STITCH_ASSIGN_OR_RETURN(ArchiveWriter writer, ArchiveWriter::Create(path));
  for (size_t i = 0; i < entries.size(); ++i) {
    const ArchiveEntry& e = entries[i];
    if (e.bundle == nullptr) return InvalidArgument(EntryName(i, e.key) + ": no bundle");
    STITCH_RETURN_IF_ERROR(writer.Add(e.key, *e.bundle));
  }
  return writer.Commit();
}

StatusOr<std::vector<ArchiveEntry>> ReadArchive(const std::string& path) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) {
    const std::string what = "cannot read archive " + path + ": " + ec.message();
    return ec == std::errc::no_such_file_or_directory ? NotFound(what) : Unavailable(what);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Unavailable("cannot open archive " + path);
  StatusOr<std::vector<ArchiveEntry>> entries = ReadVerified(in, size);
  if (!entries.ok()) return entries.status().WithContext("archive " + path);
  return entries;
}

}  // namespace stitch::cache
