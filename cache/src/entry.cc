#include "stitch/cache/entry.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <openssl/evp.h>

#include <array>
#include <cstring>

#include "little_endian.h"

namespace stitch::cache {
namespace {

// Envelope layout; see the file comment of entry.h.
constexpr std::string_view kMagic = "STK";
constexpr char kEnvelopeFormat = 1;
constexpr size_t kDigestBytes = 32;
constexpr size_t kHeaderBytes = kMagic.size() + 1 + 4 + kDigestBytes;

using Digest = std::array<unsigned char, kDigestBytes>;

Digest Sha256(std::string_view bytes) {
  Digest out{};
  unsigned int len = 0;
  // EVP_Digest fails only on allocation failure or an unknown algorithm; neither leaves a
  // usable cache, and an all-zero digest never matches a real one, so the entry reads as
  // corrupt rather than silently valid.
  if (EVP_Digest(bytes.data(), bytes.size(), out.data(), &len, EVP_sha256(), nullptr) != 1 ||
      len != kDigestBytes) {
    out.fill(0);
  }
  return out;
}

std::string_view AsView(const Digest& d) {
  return {reinterpret_cast<const char*>(d.data()), d.size()};
}

// Default protobuf serialization may order map entries and unknown fields arbitrarily;
// the digest must not depend on that.
std::string SerializeDeterministic(const v1::KernelBundle& bundle) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    if (!bundle.SerializeToCodedStream(&coded)) out.clear();
  }
  return out;
}

// Returns the digest `bundle` should carry: SHA-256 of its serialization with digest empty.
Digest ContentDigest(const v1::KernelBundle& bundle) {
  if (bundle.digest().empty()) return Sha256(SerializeDeterministic(bundle));
  v1::KernelBundle copy = bundle;
  copy.clear_digest();
  return Sha256(SerializeDeterministic(copy));
}

Status VersionMismatch(uint32_t found) {
  return FailedPrecondition("bundle format version " + std::to_string(found) +
                            " is not this daemon's version " +
                            std::to_string(kBundleFormatVersion));
}

}  // namespace

void SealBundle(v1::KernelBundle& bundle) {
  bundle.set_format_version(kBundleFormatVersion);
  bundle.clear_digest();
  const Digest d = ContentDigest(bundle);
  bundle.set_digest(d.data(), d.size());
}

Status CheckSealed(const v1::KernelBundle& bundle) {
  if (bundle.format_version() != kBundleFormatVersion) {
    return VersionMismatch(bundle.format_version());
  }
  if (bundle.digest().size() != kDigestBytes) {
    return DataLoss("bundle digest is " + std::to_string(bundle.digest().size()) +
                    " bytes, expected " + std::to_string(kDigestBytes));
  }
  if (AsView(ContentDigest(bundle)) != bundle.digest()) {
    return DataLoss("bundle digest does not match its contents");
  }
  return Status::Ok();
}

std::string EncodeEntry(const v1::KernelBundle& bundle) {
  const std::string payload = SerializeDeterministic(bundle);
  std::string out;
  out.reserve(kHeaderBytes + payload.size());
  out.append(kMagic);
  out.push_back(kEnvelopeFormat);
  // The header carries the bundle's own version so that a reader can reject a newer entry
  // before trusting anything else in it.
  AppendLittleEndian(out, bundle.format_version(), 4);
  out.append(AsView(Sha256(payload)));
  out.append(payload);
  return out;
}

StatusOr<v1::KernelBundle> DecodeEntry(std::string_view bytes) {
  if (bytes.size() < kHeaderBytes) {
    return DataLoss("entry is " + std::to_string(bytes.size()) + " bytes, shorter than its " +
                    std::to_string(kHeaderBytes) + "-byte header");
  }
  if (bytes.substr(0, kMagic.size()) != kMagic || bytes[kMagic.size()] != kEnvelopeFormat) {
    return DataLoss("entry does not start with the STK envelope magic");
  }
  const uint32_t version =
      static_cast<uint32_t>(ReadLittleEndian(bytes.substr(kMagic.size() + 1, 4)));
  const std::string_view digest = bytes.substr(kMagic.size() + 5, kDigestBytes);
  const std::string_view payload = bytes.substr(kHeaderBytes);
  if (AsView(Sha256(payload)) != digest) {
    return DataLoss("entry payload does not match its SHA-256");
  }
  v1::KernelBundle bundle;
  const bool parsed = payload.size() <= static_cast<size_t>(INT32_MAX) &&
                      bundle.ParseFromArray(payload.data(), static_cast<int>(payload.size()));
  if (version != kBundleFormatVersion) {
    // The payload digest does not cover the header, so a version that disagrees with the
    // bundle inside is a damaged header, not an entry from another daemon. A payload this
    // version cannot parse may well be a newer layout, so it is reported as a version skew.
    if (parsed && bundle.format_version() != version) {
      return DataLoss("entry header says format version " + std::to_string(version) +
                      " but its bundle says " + std::to_string(bundle.format_version()));
    }
    return VersionMismatch(version);
  }
  if (!parsed) return DataLoss("entry payload is not a KernelBundle");
  if (bundle.format_version() != version) {
    return DataLoss("entry header says format version " + std::to_string(version) +
                    " but its bundle says " + std::to_string(bundle.format_version()));
  }
  return bundle;
}

}  // namespace stitch::cache
