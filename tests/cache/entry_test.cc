#include "stitch/cache/entry.h"

#include <gtest/gtest.h>

#include <string>

#include "cache/cache_test_util.h"

namespace stitch::cache {
namespace {

using testing::RawBundle;

v1::KernelBundle SealedBundle() {
  v1::KernelBundle b = RawBundle("k1", 300);
  SealBundle(b);
  return b;
}

TEST(SealTest, SetsVersionAndA32ByteDigest) {
  v1::KernelBundle b = RawBundle("k1");
  EXPECT_FALSE(CheckSealed(b).ok());
  SealBundle(b);
  EXPECT_EQ(b.format_version(), kBundleFormatVersion);
  EXPECT_EQ(b.digest().size(), 32u);
  EXPECT_TRUE(CheckSealed(b).ok()) << CheckSealed(b).ToString();
}

TEST(SealTest, SealingTwiceGivesTheSameDigest) {
  v1::KernelBundle b = RawBundle("k1");
  SealBundle(b);
  const std::string first = b.digest();
  SealBundle(b);
  EXPECT_EQ(b.digest(), first);
}

TEST(SealTest, DigestDoesNotDependOnTheOrderFieldsWereSet) {
  v1::KernelBundle a;
  a.set_key("k");
  a.set_target("sm_90");
  a.set_plan("p");
  a.add_kernels()->set_name("n");
  a.set_compile_seconds(1.5);
  v1::KernelBundle b;
  b.set_compile_seconds(1.5);
  b.add_kernels()->set_name("n");
  b.set_plan("p");
  b.set_target("sm_90");
  b.set_key("k");
  SealBundle(a);
  SealBundle(b);
  EXPECT_EQ(a.digest(), b.digest());
}

TEST(SealTest, DigestCoversEveryField) {
  v1::KernelBundle a = SealedBundle();
  v1::KernelBundle b = a;
  b.mutable_kernels(0)->mutable_launch()->set_block_x(256);
  SealBundle(b);
  EXPECT_NE(a.digest(), b.digest());
}

TEST(CheckSealedTest, ChangedContentIsDataLoss) {
  v1::KernelBundle b = SealedBundle();
  b.set_plan("another plan");
  EXPECT_EQ(CheckSealed(b).code(), StatusCode::kDataLoss);
}

TEST(CheckSealedTest, ChangedDigestIsDataLoss) {
  v1::KernelBundle b = SealedBundle();
  std::string d = b.digest();
  d[5] = static_cast<char>(d[5] ^ 0x01);
  b.set_digest(d);
  EXPECT_EQ(CheckSealed(b).code(), StatusCode::kDataLoss);
  b.set_digest(d.substr(0, 31));
  EXPECT_EQ(CheckSealed(b).code(), StatusCode::kDataLoss);
}

TEST(CheckSealedTest, OtherVersionIsFailedPreconditionNamingBoth) {
  v1::KernelBundle b = SealedBundle();
  b.set_format_version(kBundleFormatVersion + 6);
  const Status s = CheckSealed(b);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find(std::to_string(kBundleFormatVersion + 6)), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find(std::to_string(kBundleFormatVersion)), std::string::npos)
      << s.message();
}

TEST(EnvelopeTest, RoundTrip) {
  const v1::KernelBundle b = SealedBundle();
  const std::string bytes = EncodeEntry(b);
  ASSERT_EQ(bytes.substr(0, 3), "STK");
  StatusOr<v1::KernelBundle> back = DecodeEntry(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->SerializeAsString(), b.SerializeAsString());
  EXPECT_TRUE(CheckSealed(*back).ok());
}

TEST(EnvelopeTest, EncodingIsDeterministic) {
  EXPECT_EQ(EncodeEntry(SealedBundle()), EncodeEntry(SealedBundle()));
}

TEST(EnvelopeTest, EveryFlippedByteIsDataLoss) {
  const std::string bytes = EncodeEntry(SealedBundle());
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (const unsigned mask : {0x01u, 0x80u}) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(static_cast<unsigned char>(bad[i]) ^ mask);
      const StatusOr<v1::KernelBundle> got = DecodeEntry(bad);
      ASSERT_FALSE(got.ok()) << "byte " << i << " mask " << mask;
      EXPECT_EQ(got.status().code(), StatusCode::kDataLoss)
          << "byte " << i << ": " << got.status().ToString();
    }
  }
}

TEST(EnvelopeTest, EveryTruncationIsDataLoss) {
  const std::string bytes = EncodeEntry(SealedBundle());
  for (size_t n = 0; n < bytes.size(); ++n) {
    const StatusOr<v1::KernelBundle> got = DecodeEntry(std::string_view(bytes).substr(0, n));
    ASSERT_FALSE(got.ok()) << "length " << n;
    EXPECT_EQ(got.status().code(), StatusCode::kDataLoss) << "length " << n;
  }
}

TEST(EnvelopeTest, TrailingBytesAreDataLoss) {
  const std::string bytes = EncodeEntry(SealedBundle()) + "junk";
  EXPECT_EQ(DecodeEntry(bytes).status().code(), StatusCode::kDataLoss);
}

TEST(EnvelopeTest, GarbageIsDataLoss) {
  EXPECT_EQ(DecodeEntry("").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(DecodeEntry(std::string(100, 'S')).status().code(), StatusCode::kDataLoss);
}

TEST(EnvelopeTest, NewerVersionIsFailedPreconditionNamingBoth) {
  // An entry as a later daemon would write it: its own version in header and payload.
  v1::KernelBundle b = SealedBundle();
  b.set_format_version(kBundleFormatVersion + 1);
  const StatusOr<v1::KernelBundle> got = DecodeEntry(EncodeEntry(b));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition) << got.status().ToString();
  const std::string& m = got.status().message();
  EXPECT_NE(m.find(std::to_string(kBundleFormatVersion + 1)), std::string::npos) << m;
  EXPECT_NE(m.find(std::to_string(kBundleFormatVersion)), std::string::npos) << m;
}

TEST(EnvelopeTest, HeaderVersionDisagreeingWithPayloadIsDataLoss) {
  std::string bytes = EncodeEntry(SealedBundle());
  bytes[4] = static_cast<char>(kBundleFormatVersion + 1);
  EXPECT_EQ(DecodeEntry(bytes).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace stitch::cache
