#include "stitch/cache/cluster_store.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <array>
#include <atomic>

#include "circuit_breaker.h"
#include "little_endian.h"
#include "stitch/cache/entry.h"
#include "store_util.h"

namespace stitch::cache {
namespace {

using Clock = std::chrono::steady_clock;

// Value framing; see the file comment of cluster_store.h. The envelope length makes a torn
// or cut value recognisable as such before any digest is computed.
constexpr std::string_view kMagic = "STC";
constexpr char kValueFormat = 1;
constexpr size_t kMacBytes = 32;
constexpr size_t kHeaderBytes = kMagic.size() + 1 + 4 + kMacBytes;
// Offset of the bundle format version inside an envelope ("STK" + format byte, then u32).
constexpr size_t kEnvelopeVersionOffset = 4;
constexpr size_t kMinSecretBytes = 16;

// HMAC-SHA256 under `secret` of the Redis key's length, the key and the envelope, so that no
// two (key, envelope) pairs share their MAC input. Returns 32 zero bytes if OpenSSL fails,
// which never verifies against a real MAC.
std::array<unsigned char, kMacBytes> Mac(std::string_view secret, std::string_view redis_key,
                                         std::string_view envelope) {
  std::array<unsigned char, kMacBytes> out{};
  std::string length;
  AppendLittleEndian(length, static_cast<uint32_t>(redis_key.size()), 4);
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = mac != nullptr ? EVP_MAC_CTX_new(mac) : nullptr;
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  size_t written = 0;
  const auto bytes = [](std::string_view s) {
    return reinterpret_cast<const unsigned char*>(s.data());
  };
  const bool ok = ctx != nullptr && EVP_MAC_init(ctx, bytes(secret), secret.size(), params) == 1 &&
                  EVP_MAC_update(ctx, bytes(length), length.size()) == 1 &&
                  EVP_MAC_update(ctx, bytes(redis_key), redis_key.size()) == 1 &&
                  EVP_MAC_update(ctx, bytes(envelope), envelope.size()) == 1 &&
                  EVP_MAC_final(ctx, out.data(), &written, out.size()) == 1 && written == kMacBytes;
  if (!ok) out.fill(0);
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  return out;
}

ClusterError ErrorKind(const Status& s) {
  switch (s.code()) {
    case StatusCode::kDeadlineExceeded:
      return ClusterError::kTimeout;
    case StatusCode::kFailedPrecondition:
      return ClusterError::kAuth;
    default:
      return ClusterError::kUnavailable;
  }
}

ClusterError ReplyErrorKind(const redis::Reply& reply) {
  const std::string_view t = reply.text;
  if (t.rfind("NOPERM", 0) == 0 || t.rfind("NOAUTH", 0) == 0 || t.rfind("WRONGPASS", 0) == 0) {
    return ClusterError::kAuth;
  }
  return ClusterError::kReply;
}

struct Rejected {
  Rejection reason;
  std::string message;
};

class ClusterStoreImpl : public ClusterStore {
 public:
  ClusterStoreImpl(ClusterStoreOptions options, std::unique_ptr<redis::ClusterClient> client,
                   ClusterObserver* observer)
      : options_(std::move(options)),
        client_(std::move(client)),
        observer_(observer),
        breaker_(options_.breaker_failures, options_.breaker_open_for),
        ttl_ms_(std::to_string(std::chrono::milliseconds(options_.ttl).count())),
        lease_ms_(std::to_string(options_.lease_time.count())) {}

  Tier tier() const override { return Tier::kCluster; }
  StatusOr<std::optional<Hit>> Get(std::string_view key) override;
  Status Put(std::string_view key, const BundlePtr& bundle) override;
  Status Erase(std::string_view key) override;
  std::vector<EntryInfo> List(size_t) const override { return {}; }
  StoreStats Stats() const override;

  LeaseResult TryLease(std::string_view key) override;
  void ReleaseLease(std::string_view key) override;
  void RenewLease(std::string_view key) override;
  std::chrono::milliseconds lease_time() const override { return options_.lease_time; }
  LeaseProbe Probe(std::string_view key) override;
  ClusterStoreStats ClusterStats() const override;

  std::string EntryKey(std::string_view key) const override {
    return options_.key_prefix + ":v" + std::to_string(kBundleFormatVersion) + ":{" +
           std::string(key) + "}";
  }
  std::string EncodeValue(std::string_view key, const v1::KernelBundle& bundle) const override;

 private:
  std::string LeaseKey(std::string_view key) const { return EntryKey(key) + ":lease"; }

  // Runs `commands` on `key`'s slot within `timeout`, through the breaker; reports the call
  // to the observer. Returns the replies, or the failure (UNAVAILABLE when the breaker is
  // open, with `skipped` set).
  StatusOr<std::vector<redis::Reply>> Call(std::string_view operation, std::string_view key,
                                           const std::vector<redis::Command>& commands,
                                           std::chrono::milliseconds timeout, bool* skipped);
  void CountError(ClusterError kind) {
    errors_[static_cast<int>(kind)].fetch_add(1, std::memory_order_relaxed);
  }
  // Checks a value read under `key`; returns the bundle or why it was rejected.
  std::variant<v1::KernelBundle, Rejected> DecodeValue(std::string_view key,
                                                       std::string_view value) const;
  // Turns a GET reply into a hit or a miss, counting rejected entries.
  std::optional<Hit> ToHit(std::string_view key, const redis::Reply& reply);

  const ClusterStoreOptions options_;
  const std::unique_ptr<redis::ClusterClient> client_;
  ClusterObserver* const observer_;
  CircuitBreaker breaker_;
  const std::string ttl_ms_;
  const std::string lease_ms_;

  std::atomic<uint64_t> hits_{0}, misses_{0}, writes_{0}, skipped_{0};
  std::array<std::atomic<uint64_t>, kClusterErrorKinds> errors_{};
  std::array<std::atomic<uint64_t>, kRejectionKinds> rejected_{};
};

StatusOr<std::vector<redis::Reply>> ClusterStoreImpl::Call(
    std::string_view operation, std::string_view key, const std::vector<redis::Command>& commands,
    std::chrono::milliseconds timeout, bool* skipped) {
  *skipped = !breaker_.Allow();
  if (*skipped) {
    skipped_.fetch_add(1, std::memory_order_relaxed);
    return Unavailable("the cluster tier's circuit breaker is open");
  }
  const auto start = Clock::now();
  StatusOr<std::vector<redis::Reply>> replies =
      client_->Pipeline(redis::KeySlot(EntryKey(key)), commands, start + timeout);
  Status status = replies.status();
  if (replies.ok()) {
    for (const redis::Reply& r : *replies) {
      if (!r.is_error()) continue;
      CountError(ReplyErrorKind(r));
      status = Unavailable("cluster " + std::string(operation) + " of " + std::string(key) + ": " +
                           r.text);
      break;
    }
  } else {
    CountError(ErrorKind(status));
  }
  const BreakerState before = breaker_.state();
  breaker_.Record(status.ok());
  const BreakerState after = breaker_.state();
  if (before != after && after == BreakerState::kOpen) {
    spdlog::warn("cluster tier: circuit breaker open for {} ms after: {}",
                 options_.breaker_open_for.count(), status.ToString());
  } else if (before != after && after == BreakerState::kClosed) {
    spdlog::info("cluster tier: circuit breaker closed; the cluster answers again");
  }
  if (observer_ != nullptr) {
    observer_->OnCall(operation, std::chrono::duration<double>(Clock::now() - start).count(),
                      status);
  }
  if (!status.ok()) return status;
  return replies;
}

std::string ClusterStoreImpl::EncodeValue(std::string_view key,
                                          const v1::KernelBundle& bundle) const {
  const std::string envelope = EncodeEntry(bundle);
  const auto mac = Mac(options_.secret, EntryKey(key), envelope);
  std::string out;
  out.reserve(kHeaderBytes + envelope.size());
  out.append(kMagic);
  out.push_back(kValueFormat);
  AppendLittleEndian(out, static_cast<uint32_t>(envelope.size()), 4);
  out.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  out.append(envelope);
  return out;
}

std::variant<v1::KernelBundle, Rejected> ClusterStoreImpl::DecodeValue(
    std::string_view key, std::string_view value) const {
  if (value.size() < kHeaderBytes || value.substr(0, kMagic.size()) != kMagic ||
      value[kMagic.size()] != kValueFormat) {
    return Rejected{Rejection::kTruncated, "the value is not a framed cluster entry (" +
                                               std::to_string(value.size()) + " bytes)"};
  }
  const uint32_t length =
      static_cast<uint32_t>(ReadLittleEndian(value.substr(kMagic.size() + 1, 4)));
  const std::string_view mac = value.substr(kMagic.size() + 5, kMacBytes);
  const std::string_view envelope = value.substr(kHeaderBytes);
  if (envelope.size() != length) {
    return Rejected{Rejection::kTruncated, "the entry holds " + std::to_string(envelope.size()) +
                                               " bytes of its " + std::to_string(length)};
  }
  // An entry of another format version is reported as such even when its MAC is fine: a
  // mixed-version cluster is an operations fact worth its own counter.
  if (envelope.size() >= kEnvelopeVersionOffset + 4) {
    const uint32_t version =
        static_cast<uint32_t>(ReadLittleEndian(envelope.substr(kEnvelopeVersionOffset, 4)));
    if (version != kBundleFormatVersion) {
      return Rejected{Rejection::kVersion, "bundle format version " + std::to_string(version) +
                                               ", not " + std::to_string(kBundleFormatVersion)};
    }
  }
  const auto expected = Mac(options_.secret, EntryKey(key), envelope);
  if (CRYPTO_memcmp(expected.data(), mac.data(), kMacBytes) != 0) {
    return Rejected{Rejection::kHmac, "its HMAC does not verify under this cluster's secret"};
  }
  StatusOr<v1::KernelBundle> bundle = DecodeEntry(envelope);
  if (!bundle.ok()) {
    const Rejection why = bundle.status().code() == StatusCode::kFailedPrecondition
                              ? Rejection::kVersion
                              : Rejection::kDigest;
    return Rejected{why, bundle.status().message()};
  }
  const Status sealed = CheckSealed(*bundle);
  if (!sealed.ok()) return Rejected{Rejection::kDigest, sealed.message()};
  if (bundle->key() != key) {
    return Rejected{Rejection::kKey, "it holds the bundle of key " + bundle->key()};
  }
  return std::move(*bundle);
}

std::optional<Hit> ClusterStoreImpl::ToHit(std::string_view key, const redis::Reply& reply) {
  if (reply.type != redis::Reply::Type::kString) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  auto decoded = DecodeValue(key, reply.text);
  if (auto* rejected = std::get_if<Rejected>(&decoded)) {
    rejected_[static_cast<int>(rejected->reason)].fetch_add(1, std::memory_order_relaxed);
    misses_.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("cluster tier: entry {} rejected ({}): {}", key, RejectionName(rejected->reason),
                 rejected->message);
    return std::nullopt;
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  auto bundle =
      std::make_shared<const v1::KernelBundle>(std::move(std::get<v1::KernelBundle>(decoded)));
  return Hit{std::move(bundle), Tier::kCluster};
}

StatusOr<std::optional<Hit>> ClusterStoreImpl::Get(std::string_view key) {
  const std::string entry = EntryKey(key);
  bool skipped = false;
  StatusOr<std::vector<redis::Reply>> replies = Call(
      "get", key, {{"GET", entry}, {"PEXPIRE", entry, ttl_ms_}}, options_.read_timeout, &skipped);
  if (skipped) return std::optional<Hit>();
  if (!replies.ok()) return replies.status();
  return ToHit(key, replies->front());
}

Status ClusterStoreImpl::Put(std::string_view key, const BundlePtr& bundle) {
  STITCH_RETURN_IF_ERROR(ValidateForPut(key, bundle));
  bool skipped = false;
  StatusOr<std::vector<redis::Reply>> replies =
      Call("put", key, {{"SET", EntryKey(key), EncodeValue(key, *bundle), "PX", ttl_ms_}},
           options_.write_timeout, &skipped);
  if (skipped) return Status::Ok();
  if (!replies.ok()) return replies.status();
  writes_.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

Status ClusterStoreImpl::Erase(std::string_view key) {
  bool skipped = false;
  StatusOr<std::vector<redis::Reply>> replies =
      Call("erase", key, {{"DEL", EntryKey(key)}}, options_.write_timeout, &skipped);
  if (skipped || replies.ok()) return Status::Ok();
  return replies.status();
}

LeaseResult ClusterStoreImpl::TryLease(std::string_view key) {
  const std::string lease = LeaseKey(key);
  bool skipped = false;
  StatusOr<std::vector<redis::Reply>> replies = Call(
      "lease", key, {{"SET", lease, options_.node_name, "NX", "PX", lease_ms_}, {"GET", lease}},
      options_.write_timeout, &skipped);
  LeaseResult out;
  if (!replies.ok()) return out;
  const redis::Reply& set = (*replies)[0];
  out.holder = (*replies)[1].text;
  out.state = set.type == redis::Reply::Type::kStatus ? LeaseResult::State::kAcquired
                                                      : LeaseResult::State::kHeldElsewhere;
  return out;
}

void ClusterStoreImpl::ReleaseLease(std::string_view key) {
  const std::string lease = LeaseKey(key);
  bool skipped = false;
  StatusOr<std::vector<redis::Reply>> holder =
      Call("lease", key, {{"GET", lease}}, options_.write_timeout, &skipped);
  // Between the GET and the DEL the lease may run out and pass to another node, whose lease
  // this DEL then removes; the cost is at most one extra compile, never a wrong entry.
  if (!holder.ok() || holder->front().text != options_.node_name) return;
  (void)Call("lease", key, {{"DEL", lease}}, options_.write_timeout, &skipped);
}

void ClusterStoreImpl::RenewLease(std::string_view key) {
  bool skipped = false;
  // PEXPIRE never creates a key, so a lease that ran out (and may be another node's now, if
  // this one took too long) is at worst extended for its new holder.
  (void)Call("lease", key, {{"PEXPIRE", LeaseKey(key), lease_ms_}}, options_.write_timeout,
             &skipped);
}

LeaseProbe ClusterStoreImpl::Probe(std::string_view key) {
  bool skipped = false;
  StatusOr<std::vector<redis::Reply>> replies =
      Call("probe", key, {{"GET", EntryKey(key)}, {"GET", LeaseKey(key)}}, options_.read_timeout,
           &skipped);
  LeaseProbe out;
  if (!replies.ok()) {
    out.status = replies.status();
    return out;
  }
  out.hit = ToHit(key, (*replies)[0]);
  out.lease_held = (*replies)[1].type == redis::Reply::Type::kString;
  return out;
}

StoreStats ClusterStoreImpl::Stats() const {
  StoreStats s;
  for (const auto& r : rejected_) s.corrupt += r.load();
  return s;
}

ClusterStoreStats ClusterStoreImpl::ClusterStats() const {
  ClusterStoreStats s;
  s.hits = hits_.load();
  s.misses = misses_.load();
  s.writes = writes_.load();
  for (int i = 0; i < kClusterErrorKinds; ++i) s.errors[i] = errors_[static_cast<size_t>(i)].load();
  for (int i = 0; i < kRejectionKinds; ++i) {
    s.rejected[i] = rejected_[static_cast<size_t>(i)].load();
  }
  s.skipped_by_breaker = skipped_.load();
  s.breaker_trips = breaker_.trips();
  s.breaker = breaker_.state();
  s.routing = client_->Stats();
  return s;
}

}  // namespace

std::string_view RejectionName(Rejection reason) {
  switch (reason) {
    case Rejection::kTruncated:
      return "truncated";
    case Rejection::kHmac:
      return "hmac";
    case Rejection::kVersion:
      return "version";
    case Rejection::kDigest:
      return "digest";
    case Rejection::kKey:
      return "key";
  }
  return "unknown";
}

std::string_view ClusterErrorName(ClusterError kind) {
  switch (kind) {
    case ClusterError::kTimeout:
      return "timeout";
    case ClusterError::kUnavailable:
      return "unavailable";
    case ClusterError::kAuth:
      return "auth";
    case ClusterError::kReply:
      return "reply";
  }
  return "unknown";
}

StatusOr<std::unique_ptr<ClusterStore>> ClusterStore::Create(ClusterStoreOptions options,
                                                             ClusterObserver* observer) {
  if (options.secret.size() < kMinSecretBytes) {
    return InvalidArgument("the cluster secret must be at least " +
                           std::to_string(kMinSecretBytes) + " bytes, not " +
                           std::to_string(options.secret.size()));
  }
  if (options.node_name.empty()) return InvalidArgument("the cluster tier needs a node name");
  if (options.key_prefix.empty() || options.key_prefix.find_first_of("{}") != std::string::npos) {
    return InvalidArgument("the cluster key prefix must be non-empty and free of braces");
  }
  if (options.read_timeout.count() <= 0 || options.write_timeout.count() <= 0 ||
      options.ttl.count() <= 0 || options.lease_time.count() <= 0 ||
      options.breaker_failures == 0 || options.breaker_open_for.count() <= 0) {
    return InvalidArgument(
        "the cluster timeouts, TTL, lease time and breaker settings must be positive");
  }
  STITCH_ASSIGN_OR_RETURN(std::unique_ptr<redis::ClusterClient> client,
                          redis::ClusterClient::Create(options.cluster));
  return std::unique_ptr<ClusterStore>(
      new ClusterStoreImpl(std::move(options), std::move(client), observer));
}

}  // namespace stitch::cache
