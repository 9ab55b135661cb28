#include "response_bytes.h"

namespace stitch::daemon {
namespace {

void AppendVarint(std::string& out, uint64_t n) {
  while (n >= 0x80) {
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
}

void ReleaseShared(void* holder) {
  delete static_cast<std::shared_ptr<const std::string>*>(holder);
}

}  // namespace

std::shared_ptr<const std::string> ResponseBytes::Serialized(const cache::BundlePtr& bundle) {
  {
    std::lock_guard lock(mu_);
    auto it = serialized_.find(bundle.get());
    if (it != serialized_.end()) return it->second.second;
  }
  auto bytes = std::make_shared<const std::string>(bundle->SerializeAsString());
  std::lock_guard lock(mu_);
  if (bytes_ + bytes->size() > max_bytes_) {
    serialized_.clear();
    bytes_ = 0;
  }
  auto [it, inserted] = serialized_.try_emplace(bundle.get(), bundle, bytes);
  if (inserted) bytes_ += bytes->size();
  return it->second.second;
}

grpc::ByteBuffer ResponseBytes::Response(v1::CompileResponse::Source source, const std::string& key,
                                         const cache::BundlePtr& bundle,
                                         const v1::KernelRuntimes* runtimes) {
  std::shared_ptr<const std::string> body = Serialized(bundle);
  v1::CompileResponse head;
  head.set_source(source);
  head.set_key(key);
  if (runtimes != nullptr) *head.mutable_runtimes() = *runtimes;
  std::string prefix = head.SerializeAsString();
  // Field 3 (bundle), length-delimited: protobuf parses concatenated fields as one message.
  prefix.push_back(static_cast<char>((3 << 3) | 2));
  AppendVarint(prefix, body->size());
  grpc::Slice slices[2] = {
      grpc::Slice(prefix),
      grpc::Slice(const_cast<char*>(body->data()), body->size(), &ReleaseShared,
                  new std::shared_ptr<const std::string>(body)),
  };
  return grpc::ByteBuffer(slices, 2);
}

}  // namespace stitch::daemon
