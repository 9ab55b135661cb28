#include "stitch/cache/rocksdb_store.h"

#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "little_endian.h"
#include "stitch/cache/entry.h"
#include "store_util.h"

namespace stitch::cache {
namespace {

// Column families: entries (key -> envelope) live in the default one.
constexpr const char* kLruFamily = "lru";            // key -> access sequence, entry size
constexpr const char* kCountersFamily = "counters";  // name -> IEEE double
constexpr const char* kRuntimesFamily = "runtimes";  // key -> v1::KernelRuntimes

struct Meta {
  uint64_t seq = 0;   // larger is more recently used
  uint64_t size = 0;  // bytes of the stored envelope
};

std::string EncodeMeta(const Meta& m) {
  std::string out;
  out.reserve(16);
  AppendLittleEndian(out, m.seq, 8);
  AppendLittleEndian(out, m.size, 8);
  return out;
}

std::optional<Meta> DecodeMeta(std::string_view v) {
  if (v.size() != 16) return std::nullopt;
  return Meta{ReadLittleEndian(v.substr(0, 8)), ReadLittleEndian(v.substr(8, 8))};
}

rocksdb::Slice AsSlice(std::string_view s) { return {s.data(), s.size()}; }

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  if (s.IsCorruption()) return DataLoss(what + ": " + s.ToString());
  return Unavailable(what + ": " + s.ToString());
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Picks the strongest codec this RocksDB build links; LZ4 keeps reads of hot levels cheap
// while the bottommost level, where most bytes settle, trades CPU for size.
void ChooseCompression(rocksdb::ColumnFamilyOptions& cf) {
  const std::vector<rocksdb::CompressionType> have = rocksdb::GetSupportedCompressions();
  const auto supported = [&](rocksdb::CompressionType t) {
    return std::find(have.begin(), have.end(), t) != have.end();
  };
  rocksdb::CompressionType fast = rocksdb::kNoCompression;
  for (const auto t : {rocksdb::kLZ4Compression, rocksdb::kSnappyCompression}) {
    if (supported(t)) {
      fast = t;
      break;
    }
  }
  rocksdb::CompressionType dense = fast;
  for (const auto t : {rocksdb::kZSTD, rocksdb::kLZ4HCCompression}) {
    if (supported(t)) {
      dense = t;
      break;
    }
  }
  cf.compression = fast;
  cf.bottommost_compression = dense;
}

// RocksDB's own log, sent to the daemon's log instead of a LOG file in the cache directory.
// On a full disk a LOG file fails like any other write, and RocksDB 7.8 aborts the process
// when it appends to a log file whose previous append failed; the daemon's log does not live
// on the cache's disk. RocksDB's routine INFO lines (flushes, compactions) become debug lines.
class RocksLogger final : public rocksdb::Logger {
 public:
  explicit RocksLogger(std::string path)
      : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL), path_(std::move(path)) {}

  using rocksdb::Logger::Logv;

  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }

  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    spdlog::level::level_enum to = spdlog::level::debug;
    switch (level) {
      case rocksdb::InfoLogLevel::DEBUG_LEVEL:
        to = spdlog::level::trace;
        break;
      case rocksdb::InfoLogLevel::WARN_LEVEL:
        to = spdlog::level::warn;
        break;
      case rocksdb::InfoLogLevel::ERROR_LEVEL:
        to = spdlog::level::err;
        break;
      case rocksdb::InfoLogLevel::FATAL_LEVEL:
        to = spdlog::level::critical;
        break;
      default:
        break;
    }
    if (!spdlog::should_log(to)) return;
    char line[2048];
    const int n = std::vsnprintf(line, sizeof(line), format, ap);
    if (n < 0) return;
    spdlog::log(to, "rocksdb {}: {}", path_, line);
  }

 private:
  const std::string path_;
};

// After a write fails, the store stops writing and retries at most this often; each retry
// first asks RocksDB to resume from its background error (a full disk stops the database).
constexpr std::chrono::seconds kWriteRetryInterval{1};

class RocksDbStoreImpl final : public RocksDbStore {
 public:
  RocksDbStoreImpl(RocksDbOptions options, std::unique_ptr<rocksdb::DB> db,
                   std::vector<rocksdb::ColumnFamilyHandle*> handles,
                   rocksdb::ColumnFamilyHandle* entries, rocksdb::ColumnFamilyHandle* lru,
                   rocksdb::ColumnFamilyHandle* counters, rocksdb::ColumnFamilyHandle* runtimes)
      : options_(std::move(options)),
        db_(std::move(db)),
        handles_(std::move(handles)),
        entries_(entries),
        lru_(lru),
        counters_(counters),
        runtimes_(runtimes) {}

  ~RocksDbStoreImpl() override {
    const Status s = Close();
    if (!s.ok()) spdlog::error("cache: closing {}: {}", options_.path, s.ToString());
  }

  // Rebuilds the in-memory LRU index from the metadata family and trims the store to its
  // capacity, which may have shrunk since the last run.
  Status Load() {
    std::lock_guard lock(mu_);
    rocksdb::WriteBatch bad;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), lru_));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      const std::string key = it->key().ToString();
      const std::optional<Meta> meta = DecodeMeta(it->value().ToStringView());
      if (!meta || order_.contains(meta->seq)) {
        spdlog::warn("cache: dropping entry {}: unreadable or duplicate LRU metadata", key);
        STITCH_RETURN_IF_ERROR(FromRocks(bad.Delete(entries_, key), "cache batch"));
        STITCH_RETURN_IF_ERROR(FromRocks(bad.Delete(lru_, key), "cache batch"));
        ++corrupt_;
        continue;
      }
      meta_.emplace(key, *meta);
      order_.emplace(meta->seq, key);
      bytes_ += meta->size;
      next_seq_ = std::max(next_seq_, meta->seq + 1);
    }
    if (!it->status().ok()) {
      return FromRocks(it->status(), "cannot scan the LRU index of " + options_.path);
    }
    if (bad.Count() > 0) {
      STITCH_RETURN_IF_ERROR(FromRocks(Write(&bad), "cannot write " + options_.path));
    }
    return EvictLocked();
  }

  Tier tier() const override { return Tier::kDisk; }

  StatusOr<std::optional<Hit>> Get(std::string_view key) override {
    std::shared_lock life(life_mu_);
    if (db_ == nullptr) return ClosedError();
    {
      // The index is authoritative: every Put writes an entry and its metadata together.
      std::lock_guard lock(mu_);
      if (!meta_.contains(key)) return std::optional<Hit>();
    }
    rocksdb::PinnableSlice value;
    const rocksdb::Status rs = db_->Get(rocksdb::ReadOptions(), entries_, AsSlice(key), &value);
    if (rs.IsNotFound()) {
      DropCorrupt(key, std::nullopt, "LRU metadata without an entry");
      return std::optional<Hit>();
    }
    if (!rs.ok()) {
      return FromRocks(rs, "cannot read " + std::string(key) + " from " + options_.path);
    }
    StatusOr<v1::KernelBundle> decoded = DecodeEntry(value.ToStringView());
    if (!decoded.ok()) {
      DropCorrupt(key, value.ToStringView(), decoded.status().ToString());
      return std::optional<Hit>();
    }
    if (decoded->key() != key) {
      DropCorrupt(key, value.ToStringView(), "entry holds the bundle of " + decoded->key());
      return std::optional<Hit>();
    }
    Touch(key);
    return std::optional<Hit>(
        Hit{std::make_shared<const v1::KernelBundle>(std::move(decoded).value()), Tier::kDisk});
  }

  Status Put(std::string_view key, const BundlePtr& bundle) override {
    STITCH_RETURN_IF_ERROR(ValidateForPut(key, bundle));
    const std::string value = EncodeEntry(*bundle);
    std::shared_lock life(life_mu_);
    if (db_ == nullptr) return ClosedError();
    std::lock_guard lock(mu_);
    const uint64_t size = value.size();
    if (size > options_.capacity_bytes) return RemoveLocked(key);

    rocksdb::WriteBatch batch;
    const Meta meta{next_seq_, size};
    STITCH_RETURN_IF_ERROR(FromRocks(batch.Put(entries_, AsSlice(key), value), "cache batch"));
    STITCH_RETURN_IF_ERROR(
        FromRocks(batch.Put(lru_, AsSlice(key), EncodeMeta(meta)), "cache batch"));
    const auto old = meta_.find(key);
    uint64_t projected = bytes_ + size - (old == meta_.end() ? 0 : old->second.size);
    std::vector<std::map<uint64_t, std::string>::iterator> victims;
    for (auto it = order_.begin(); it != order_.end() && projected > options_.capacity_bytes;
         ++it) {
      if (it->second == key) continue;
      STITCH_RETURN_IF_ERROR(FromRocks(batch.Delete(entries_, it->second), "cache batch"));
      STITCH_RETURN_IF_ERROR(FromRocks(batch.Delete(lru_, it->second), "cache batch"));
      projected -= meta_.find(it->second)->second.size;
      victims.push_back(it);
    }
    STITCH_RETURN_IF_ERROR(
        FromRocks(Write(&batch), "cannot write " + std::string(key) + " to " + options_.path));

    for (const auto& v : victims) {
      meta_.erase(meta_.find(v->second));
      order_.erase(v);
    }
    evictions_ += victims.size();
    if (old != meta_.end()) {
      order_.erase(old->second.seq);
      old->second = meta;
    } else {
      meta_.emplace(std::string(key), meta);
    }
    order_.emplace(meta.seq, std::string(key));
    bytes_ = projected;
    ++next_seq_;
    return Status::Ok();
  }

  Status Erase(std::string_view key) override {
    std::shared_lock life(life_mu_);
    if (db_ == nullptr) return ClosedError();
    std::lock_guard lock(mu_);
    return RemoveLocked(key);
  }

  std::vector<EntryInfo> List(size_t limit) const override {
    std::shared_lock life(life_mu_);
    if (db_ == nullptr) return {};
    std::vector<std::pair<std::string, uint64_t>> picked;
    {
      std::lock_guard lock(mu_);
      for (auto it = order_.rbegin(); it != order_.rend() && picked.size() < limit; ++it) {
        picked.emplace_back(it->second, meta_.find(it->second)->second.size);
      }
    }
    std::vector<EntryInfo> out;
    out.reserve(picked.size());
    for (const auto& [key, size] : picked) {
      rocksdb::PinnableSlice value;
      if (!db_->Get(rocksdb::ReadOptions(), entries_, key, &value).ok()) continue;
      // A corrupt entry is left for the next Get to drop: listing must not write.
      const StatusOr<v1::KernelBundle> bundle = DecodeEntry(value.ToStringView());
      if (bundle.ok()) out.push_back(MakeEntryInfo(key, *bundle, size));
    }
    return out;
  }

  StatusOr<uint64_t> ForEach(const EntryVisitor& visit) const override {
    std::shared_lock life(life_mu_);
    if (db_ == nullptr) return ClosedError();
    // The keys are copied out so that the index lock is not held while `visit` runs.
    std::vector<std::string> keys;
    {
      std::lock_guard lock(mu_);
      keys.reserve(order_.size());
      for (auto it = order_.rbegin(); it != order_.rend(); ++it) keys.push_back(it->second);
    }
    uint64_t skipped = 0;
    for (const std::string& key : keys) {
      rocksdb::PinnableSlice value;
      const rocksdb::Status rs = db_->Get(rocksdb::ReadOptions(), entries_, key, &value);
      if (rs.IsNotFound()) continue;  // erased since the keys were copied
      STITCH_RETURN_IF_ERROR(FromRocks(rs, "cannot read " + key + " from " + options_.path));
      const StatusOr<v1::KernelBundle> bundle = DecodeEntry(value.ToStringView());
      if (!bundle.ok() || bundle->key() != key) {
        ++skipped;
        continue;
      }
      STITCH_RETURN_IF_ERROR(visit(key, *bundle));
    }
    return skipped;
  }

  StoreStats Stats() const override {
    std::lock_guard lock(mu_);
    StoreStats s;
    s.entries = meta_.size();
    s.bytes = bytes_;
    s.capacity_bytes = options_.capacity_bytes;
    s.evictions = evictions_;
    s.corrupt = corrupt_;
    s.write_errors = write_errors_.load();
    return s;
  }

  StatusOr<std::map<std::string, double>> LoadCounters() const override {
    std::shared_lock life(life_mu_);
    if (db_ == nullptr) return ClosedError();
    std::map<std::string, double> out;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), counters_));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (it->value().size() != 8) {
        spdlog::warn("cache: ignoring counter {} in {}: {} bytes, expected 8", it->key().ToString(),
                     options_.path, it->value().size());
        continue;
      }
      out[it->key().ToString()] =
          std::bit_cast<double>(ReadLittleEndian(it->value().ToStringView()));
    }
    if (!it->status().ok()) {
      return FromRocks(it->status(), "cannot read counters from " + options_.path);
    }
    return out;
  }

  Status SaveCounters(const std::map<std::string, double>& counters) override {
    std::shared_lock life(life_mu_);
    if (db_ == nullptr) return ClosedError();
    rocksdb::WriteBatch batch;
    for (const auto& [name, value] : counters) {
      std::string bits;
      AppendLittleEndian(bits, std::bit_cast<uint64_t>(value), 8);
      STITCH_RETURN_IF_ERROR(FromRocks(batch.Put(counters_, name, bits), "cache batch"));
    }
    return FromRocks(Write(&batch), "cannot write counters to " + options_.path);
  }

  StatusOr<std::vector<v1::KernelRuntimes>> LoadRuntimes() const override {
    std::shared_lock life(life_mu_);
    if (db_ == nullptr) return ClosedError();
    std::vector<v1::KernelRuntimes> out;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), runtimes_));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      v1::KernelRuntimes record;
      const rocksdb::Slice value = it->value();
      if (!record.ParseFromArray(value.data(), static_cast<int>(value.size())) ||
          record.key() != it->key().ToStringView()) {
        spdlog::warn("cache: ignoring unreadable runtime record {} in {}", it->key().ToString(),
                     options_.path);
        continue;
      }
      out.push_back(std::move(record));
    }
    if (!it->status().ok()) {
      return FromRocks(it->status(), "cannot read runtimes from " + options_.path);
    }
    return out;
  }

  Status SaveRuntimes(const std::vector<v1::KernelRuntimes>& records) override {
    std::shared_lock life(life_mu_);
    if (db_ == nullptr) return ClosedError();
    rocksdb::WriteBatch batch;
    for (const v1::KernelRuntimes& record : records) {
      if (record.key().empty()) return InvalidArgument("a runtime record needs a key");
      STITCH_RETURN_IF_ERROR(FromRocks(
          batch.Put(runtimes_, AsSlice(record.key()), record.SerializeAsString()), "cache batch"));
    }
    return FromRocks(Write(&batch), "cannot write runtimes to " + options_.path);
  }

  Status Close() override {
    std::unique_lock life(life_mu_);
    if (db_ == nullptr) return Status::Ok();
    rocksdb::FlushOptions flush;
    flush.wait = true;
    Status result = FromRocks(db_->Flush(flush, handles_), "cannot flush " + options_.path);
    for (rocksdb::ColumnFamilyHandle* h : handles_) {
      const rocksdb::Status s = db_->DestroyColumnFamilyHandle(h);
      if (result.ok() && !s.ok()) result = FromRocks(s, "cannot close " + options_.path);
    }
    handles_.clear();
    const rocksdb::Status s = db_->Close();
    if (result.ok() && !s.ok()) result = FromRocks(s, "cannot close " + options_.path);
    db_.reset();
    std::lock_guard lock(mu_);
    meta_.clear();
    order_.clear();
    bytes_ = 0;
    return result;
  }

 private:
  // Writes `batch` to the WAL (not fsynced) and the memtables; every write of the store goes
  // through here. A failed write is counted; after one, later writes fail at once, without
  // touching RocksDB, until kWriteRetryInterval has passed; then DB::Resume() clears RocksDB's
  // background error (it flushes the memtables to a new WAL, so it fails while the disk is
  // still full) and the write is tried again. Returns the write's status, or the first failure
  // while writes are suspended.
  rocksdb::Status Write(rocksdb::WriteBatch* batch) {
    std::lock_guard lock(write_mu_);
    const auto now = std::chrono::steady_clock::now();
    rocksdb::Status s;
    if (writes_failing_.load()) {
      if (now < retry_at_) {
        ++write_errors_;
        return failure_;
      }
      s = db_->Resume();
    }
    if (s.ok()) s = db_->Write(rocksdb::WriteOptions(), batch);
    if (s.ok()) {
      if (writes_failing_.exchange(false)) {
        spdlog::warn("cache: writes to {} succeed again, after {} failed writes", options_.path,
                     write_errors_.load() - errors_at_failure_);
      }
      return s;
    }
    ++write_errors_;
    retry_at_ = now + kWriteRetryInterval;
    if (!writes_failing_.exchange(true)) {
      failure_ = s;
      errors_at_failure_ = write_errors_.load() - 1;
      spdlog::error(
          "cache: cannot write to {}: {}; new bundles are kept in memory only, and "
          "writes are retried every {}s",
          options_.path, s.ToString(), kWriteRetryInterval.count());
    }
    return s;
  }

  Status ClosedError() const { return Unavailable("cache at " + options_.path + " is closed"); }

  // Marks `key` most recently used, in memory and on disk. A lost update only ages the
  // entry, so failures are logged rather than failing the hit.
  void Touch(std::string_view key) {
    std::lock_guard lock(mu_);
    const auto it = meta_.find(key);
    if (it == meta_.end() || it->second.seq + 1 == next_seq_) return;
    // While writes fail, a hit does not add a failed write of its own (nor a log line).
    if (writes_failing_.load()) return;
    const Meta meta{next_seq_, it->second.size};
    rocksdb::WriteBatch batch;
    rocksdb::Status s = batch.Put(lru_, AsSlice(key), EncodeMeta(meta));
    if (s.ok()) s = Write(&batch);
    if (!s.ok()) {
      spdlog::warn("cache: cannot record use of {} in {}: {}", key, options_.path, s.ToString());
      return;
    }
    order_.erase(it->second.seq);
    order_.emplace(meta.seq, it->first);
    it->second = meta;
    ++next_seq_;
  }

  // Drops the entry under `key` if it still holds `seen` (nullopt: still has no value), so
  // that a Put racing with this Get is never undone.
  void DropCorrupt(std::string_view key, std::optional<std::string_view> seen,
                   const std::string& reason) {
    std::lock_guard lock(mu_);
    if (!meta_.contains(key)) return;
    rocksdb::PinnableSlice now;
    const rocksdb::Status rs = db_->Get(rocksdb::ReadOptions(), entries_, AsSlice(key), &now);
    const bool unchanged =
        seen.has_value() ? (rs.ok() && now.ToStringView() == *seen) : rs.IsNotFound();
    if (!unchanged) return;
    spdlog::warn("cache: dropping entry {} from {}: {}", key, options_.path, reason);
    const Status s = RemoveLocked(key);
    if (!s.ok()) {
      spdlog::warn("cache: cannot drop entry {}: {}", key, s.ToString());
      return;
    }
    ++corrupt_;
  }

  // Deletes the entry under `key` (and any stray value without metadata) in one batch.
  Status RemoveLocked(std::string_view key) {
    rocksdb::WriteBatch batch;
    STITCH_RETURN_IF_ERROR(FromRocks(batch.Delete(entries_, AsSlice(key)), "cache batch"));
    STITCH_RETURN_IF_ERROR(FromRocks(batch.Delete(lru_, AsSlice(key)), "cache batch"));
    STITCH_RETURN_IF_ERROR(
        FromRocks(Write(&batch), "cannot erase " + std::string(key) + " from " + options_.path));
    const auto it = meta_.find(key);
    if (it != meta_.end()) {
      bytes_ -= it->second.size;
      order_.erase(it->second.seq);
      meta_.erase(it);
    }
    return Status::Ok();
  }

  // Evicts least-recently-used entries, in one batch, until the store fits its capacity.
  Status EvictLocked() {
    rocksdb::WriteBatch batch;
    uint64_t projected = bytes_;
    auto it = order_.begin();
    for (; it != order_.end() && projected > options_.capacity_bytes; ++it) {
      STITCH_RETURN_IF_ERROR(FromRocks(batch.Delete(entries_, it->second), "cache batch"));
      STITCH_RETURN_IF_ERROR(FromRocks(batch.Delete(lru_, it->second), "cache batch"));
      projected -= meta_.find(it->second)->second.size;
    }
    if (batch.Count() == 0) return Status::Ok();
    STITCH_RETURN_IF_ERROR(FromRocks(Write(&batch), "cannot evict from " + options_.path));
    for (auto v = order_.begin(); v != it;) {
      meta_.erase(meta_.find(v->second));
      v = order_.erase(v);
      ++evictions_;
    }
    bytes_ = projected;
    return Status::Ok();
  }

  const RocksDbOptions options_;

  // Held shared by every operation and exclusively by Close, so that Close waits for
  // in-flight reads and the database outlives them.
  mutable std::shared_mutex life_mu_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  rocksdb::ColumnFamilyHandle* entries_;
  rocksdb::ColumnFamilyHandle* lru_;
  rocksdb::ColumnFamilyHandle* counters_;
  rocksdb::ColumnFamilyHandle* runtimes_;

  // Guards the LRU index and orders the writes that change it, so that the index and the
  // database agree. Acquired after life_mu_.
  mutable std::mutex mu_;
  std::unordered_map<std::string, Meta, StringHash, std::equal_to<>> meta_;
  std::map<uint64_t, std::string> order_;  // access sequence -> key, oldest first
  uint64_t bytes_ = 0;
  uint64_t next_seq_ = 1;
  uint64_t evictions_ = 0;
  uint64_t corrupt_ = 0;

  // The write-failure state Write keeps. Acquired after mu_ where both are held.
  std::mutex write_mu_;
  std::atomic<bool> writes_failing_{false};
  std::atomic<uint64_t> write_errors_{0};
  uint64_t errors_at_failure_ = 0;
  std::chrono::steady_clock::time_point retry_at_;
  rocksdb::Status failure_;  // the write error that started the failure
};

}  // namespace

StatusOr<std::unique_ptr<RocksDbStore>> RocksDbStore::Open(const RocksDbOptions& options) {
  std::error_code ec;
  std::filesystem::create_directories(options.path, ec);
  if (ec) return Unavailable("cannot create cache directory " + options.path + ": " + ec.message());

  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.info_log = std::make_shared<RocksLogger>(options.path);
  db_options.info_log_level = rocksdb::InfoLogLevel::INFO_LEVEL;

  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  // Most lookups are for keys that were never compiled here; the filter should answer them
  // without touching a data block, so keep filters and indexes resident with the blocks.
  table.cache_index_and_filter_blocks = true;
  table.pin_l0_filter_and_index_blocks_in_cache = true;

  rocksdb::ColumnFamilyOptions cf_options;
  cf_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  cf_options.level_compaction_dynamic_level_bytes = true;
  ChooseCompression(cf_options);

  // A database written by a newer daemon may hold families this one does not know; RocksDB
  // refuses to open it unless all of them are named.
  std::vector<std::string> names = {rocksdb::kDefaultColumnFamilyName, kLruFamily, kCountersFamily,
                                    kRuntimesFamily};
  std::vector<std::string> existing;
  if (rocksdb::DB::ListColumnFamilies(db_options, options.path, &existing).ok()) {
    for (const std::string& n : existing) {
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    }
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  families.reserve(names.size());
  for (const std::string& n : names) families.emplace_back(n, cf_options);

  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(db_options, options.path, families, &handles, &raw);
  if (!s.ok()) {
    return Unavailable("cannot open the kernel cache at " + options.path + ": " + s.ToString());
  }
  auto store =
      std::make_unique<RocksDbStoreImpl>(options, std::unique_ptr<rocksdb::DB>(raw), handles,
                                         handles[0], handles[1], handles[2], handles[3]);
  const Status loaded = store->Load();
  if (!loaded.ok()) return loaded.WithContext("loading the kernel cache at " + options.path);
  return std::unique_ptr<RocksDbStore>(std::move(store));
}

}  // namespace stitch::cache
