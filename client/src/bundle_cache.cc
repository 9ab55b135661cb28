#include "bundle_cache.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <openssl/evp.h>

namespace stitch::client::internal {

std::string RequestDigest(const v1::CompileRequest& request) {
  // Deterministic, so that equal requests land on the same entry even once the schema
  // gains map fields (which otherwise serialize in hash order).
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    request.SerializeToCodedStream(&coded);
  }
  // Fetched once: a fetch takes OpenSSL's method-store lock, which a child after fork()
  // could inherit held by a thread of its parent.
  static EVP_MD* const sha256 = EVP_MD_fetch(nullptr, "SHA2-256", nullptr);
  if (sha256 == nullptr) return {};  // the caller treats "" as uncacheable
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr) return {};
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  bool ok = EVP_DigestInit_ex(ctx, sha256, nullptr) == 1 &&
            EVP_DigestUpdate(ctx, bytes.data(), bytes.size()) == 1 &&
            EVP_DigestFinal_ex(ctx, md, &md_len) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok) return {};
  return std::string(reinterpret_cast<const char*>(md), md_len);
}

std::optional<BundleCache::Entry> BundleCache::Find(const std::string& digest) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slots_.find(digest);
  if (it == slots_.end()) return std::nullopt;
  order_.splice(order_.begin(), order_, it->second.position);
  return it->second.entry;
}

void BundleCache::Insert(const std::string& digest, Entry entry) {
  if (capacity_ == 0 || digest.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slots_.find(digest);
  if (it != slots_.end()) {
    it->second.entry = std::move(entry);
    order_.splice(order_.begin(), order_, it->second.position);
    return;
  }
  order_.push_front(digest);
  slots_.emplace(digest, Slot{std::move(entry), order_.begin()});
  while (slots_.size() > capacity_) {
    slots_.erase(order_.back());
    order_.pop_back();
  }
}

size_t BundleCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_.size();
}

}  // namespace stitch::client::internal
