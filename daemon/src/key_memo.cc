#include "key_memo.h"

#include <openssl/sha.h>

namespace stitch::daemon {

std::string KeyMemo::Digest(std::string_view request_bytes) {
  std::string digest(SHA256_DIGEST_LENGTH, '\0');
  SHA256(reinterpret_cast<const unsigned char*>(request_bytes.data()), request_bytes.size(),
         reinterpret_cast<unsigned char*>(digest.data()));
  return digest;
}

std::optional<std::string> KeyMemo::Find(const std::string& digest) const {
  std::lock_guard lock(mu_);
  auto it = keys_.find(digest);
  if (it == keys_.end()) return std::nullopt;
  return it->second;
}

void KeyMemo::Remember(const std::string& digest, const std::string& key) {
  std::lock_guard lock(mu_);
  if (keys_.size() >= capacity_) keys_.clear();
  keys_.insert_or_assign(digest, key);
}

}  // namespace stitch::daemon
