// Bundles, temporary directories and raw RocksDB access for the cache tests.
#pragma once

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "stitch/cache/entry.h"
#include "stitch/cache/kernel_store.h"

namespace stitch::cache::testing {

// Returns an unsealed bundle under `key` whose kernel carries `ptx_bytes` of PTX, so that
// tests can steer entry sizes.
inline v1::KernelBundle RawBundle(const std::string& key, size_t ptx_bytes = 64,
                                  const std::string& plan = "fuse 3 ops\ninto one loop") {
  v1::KernelBundle b;
  b.set_key(key);
  b.set_target("sm_90");
  b.set_plan(plan);
  b.set_compile_seconds(0.25);
  b.set_compiler_version("test");
  v1::Kernel* k = b.add_kernels();
  k->set_name("fusion_" + key);
  k->set_kind("loop");
  std::string ptx(ptx_bytes, 'x');
  for (size_t i = 0; i < ptx.size(); ++i)
    ptx[i] = static_cast<char>('a' + (i * 7 + key.size()) % 26);
  k->set_ptx(std::move(ptx));
  k->mutable_launch()->set_grid_x(4);
  k->mutable_launch()->set_block_x(128);
  b.mutable_cost()->set_stitched_kernels(1);
  return b;
}

// Returns a sealed, shareable bundle as a store accepts it.
inline BundlePtr Sealed(const std::string& key, size_t ptx_bytes = 64,
                        const std::string& plan = "fuse 3 ops\ninto one loop") {
  v1::KernelBundle b = RawBundle(key, ptx_bytes, plan);
  SealBundle(b);
  return std::make_shared<const v1::KernelBundle>(std::move(b));
}

// Returns the key of a hit, or "" for a miss; fails the test on an error.
inline std::string HitKey(KernelStore& store, const std::string& key) {
  StatusOr<std::optional<Hit>> got = store.Get(key);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  if (!got.ok() || !got->has_value()) return "";
  return (*got)->bundle->key();
}

// A fresh directory under the test temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "stitch_cache_XXXXXX";
    char* made = mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr) << "mkdtemp " << tmpl;
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes `value` under `key` in column family `family` (default: the entries) of the closed
// store at `path`, bypassing the store, the way a torn write or a stray tool would.
inline void WriteRawEntry(const std::string& path, const std::string& key, const std::string& value,
                          const std::string& family = rocksdb::kDefaultColumnFamilyName) {
  rocksdb::DBOptions options;
  std::vector<std::string> names;
  ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(options, path, &names).ok());
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  for (const std::string& n : names) families.emplace_back(n, rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(options, path, families, &handles, &raw);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::ColumnFamilyHandle* entries = nullptr;
  for (rocksdb::ColumnFamilyHandle* h : handles) {
    if (h->GetName() == family) entries = h;
  }
  ASSERT_NE(entries, nullptr);
  EXPECT_TRUE(db->Put(rocksdb::WriteOptions(), entries, key, value).ok());
  for (rocksdb::ColumnFamilyHandle* h : handles) EXPECT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
  EXPECT_TRUE(db->Close().ok());
}

// Returns the seed of a randomized test: STITCH_TEST_SEED when set, else a fresh one. The
// seed is printed and recorded so that a failure can be replayed.
inline uint64_t TestSeed() {
  uint64_t seed = 0;
  if (const char* env = std::getenv("STITCH_TEST_SEED"); env != nullptr && *env != '\0') {
    seed = std::strtoull(env, nullptr, 10);
  } else {
    seed = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  }
  std::printf("STITCH_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}

}  // namespace stitch::cache::testing
