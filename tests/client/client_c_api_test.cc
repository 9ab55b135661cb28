// The C ABI of stitch_client.h, used the way a ctypes caller would: handles, outcome,
// bundle bytes, kernel accessors, the admin calls' JSON, NULL arguments and fail-open on a
// dead socket.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "client/scripted_server.h"
#include "stitch_client.h"

namespace {

using stitch::testing::Answer;
using stitch::testing::MakeBundle;
using stitch::testing::MakeTempDir;
using stitch::testing::ScriptedServer;
using stitch::testing::ScriptedService;
namespace v1 = stitch::v1;

const char kHlo[] = "HloModule m\nENTRY e { ROOT p = f32[4] parameter(0) }\n";

TEST(ClientCApi, CompileHloAndReadTheBundle) {
  ScriptedService service;
  service.compile = [](const v1::CompileRequest& req, v1::CompileResponse* resp) {
    resp->set_source(v1::CompileResponse::COMPILED);
    resp->set_key(std::string(64, 'a'));
    *resp->mutable_bundle() = MakeBundle(std::string(64, 'a'), 2, 100);
    resp->mutable_bundle()->mutable_kernels(1)->clear_cubin();
    resp->mutable_bundle()->set_target(req.target());
    return grpc::Status::OK;
  };
  ScriptedServer server(&service);
  stitch_client* client = stitch_client_create(server.address().c_str(), 0, 0);
  ASSERT_NE(client, nullptr);

  stitch_result* r = stitch_client_compile_hlo(client, kHlo, std::strlen(kHlo), "sm_80");
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(stitch_result_outcome(r), STITCH_COMPILED) << stitch_result_reason(r);
  EXPECT_STREQ(stitch_result_key(r), std::string(64, 'a').c_str());
  EXPECT_STREQ(stitch_result_reason(r), "");

  // The text and target went through as given.
  std::vector<v1::CompileRequest> seen = service.CompileRequests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].hlo_text(), kHlo);
  EXPECT_EQ(seen[0].target(), "sm_80");

  size_t len = 0;
  const void* bytes = stitch_result_bundle(r, &len);
  ASSERT_NE(bytes, nullptr);
  v1::KernelBundle bundle;
  ASSERT_TRUE(bundle.ParseFromArray(bytes, static_cast<int>(len)));
  EXPECT_EQ(bundle.kernels_size(), 2);
  EXPECT_EQ(bundle.target(), "sm_80");
  EXPECT_EQ(stitch_result_bundle(r, nullptr), bytes) << "the bytes are made once";

  ASSERT_EQ(stitch_result_kernel_count(r), 2u);
  EXPECT_STREQ(stitch_result_kernel_name(r, 0), "fusion_0");
  EXPECT_STREQ(stitch_result_kernel_name(r, 1), "fusion_1");
  EXPECT_EQ(std::strlen(stitch_result_kernel_ptx(r, 0)), 100u);
  size_t cubin_len = 0;
  const void* cubin = stitch_result_kernel_cubin(r, 0, &cubin_len);
  ASSERT_NE(cubin, nullptr);
  EXPECT_EQ(cubin_len, 16u);
  cubin_len = 99;
  EXPECT_EQ(stitch_result_kernel_cubin(r, 1, &cubin_len), nullptr);  // PTX only
  EXPECT_EQ(cubin_len, 0u);
  EXPECT_EQ(stitch_result_kernel_name(r, 2), nullptr);
  EXPECT_EQ(stitch_result_kernel_ptx(r, 2), nullptr);
  cubin_len = 99;
  EXPECT_EQ(stitch_result_kernel_cubin(r, 2, &cubin_len), nullptr);
  EXPECT_EQ(cubin_len, 0u);

  // The same request again: this process already has it.
  stitch_result* again = stitch_client_compile_hlo(client, kHlo, std::strlen(kHlo), "sm_80");
  EXPECT_EQ(stitch_result_outcome(again), STITCH_HIT_LOCAL);
  EXPECT_EQ(service.compile_calls.load(), 1);
  stitch_result_free(again);

  // Results outlive their client.
  stitch_client_destroy(client);
  EXPECT_STREQ(stitch_result_kernel_name(r, 1), "fusion_1");
  stitch_result_free(r);
}

TEST(ClientCApi, GraphPayloadsAndLookups) {
  ScriptedService service;
  service.compile = Answer(v1::CompileResponse::COMPILED, 1);
  service.lookup = [](const v1::CompileRequest& req, v1::CompileResponse* resp) {
    if (req.graph().nodes_size() == 0) return grpc::Status(grpc::StatusCode::NOT_FOUND, "miss");
    return Answer(v1::CompileResponse::DISK, 1)(req, resp);
  };
  ScriptedServer server(&service);
  stitch_client* client = stitch_client_create(server.address().c_str(), 2000, 5000);
  ASSERT_NE(client, nullptr);

  v1::Graph graph;
  graph.set_name("g");
  graph.add_nodes()->set_name("p0");
  std::string pb = graph.SerializeAsString();

  stitch_result* r = stitch_client_compile_graph(client, pb.data(), pb.size(), nullptr);
  ASSERT_EQ(stitch_result_outcome(r), STITCH_COMPILED) << stitch_result_reason(r);
  std::vector<v1::CompileRequest> seen = service.CompileRequests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].graph().name(), "g");
  EXPECT_EQ(seen[0].target(), "") << "NULL target: the daemon's";
  stitch_result_free(r);

  // Bytes that are not a Graph: a fallback, and nothing sent.
  const char junk[] = "\xff\xff\xff\xff not a graph";
  r = stitch_client_compile_graph(client, junk, sizeof(junk), nullptr);
  EXPECT_EQ(stitch_result_outcome(r), STITCH_FALLBACK);
  EXPECT_EQ(std::string(stitch_result_reason(r)).rfind("INVALID_ARGUMENT", 0), 0u)
      << stitch_result_reason(r);
  EXPECT_EQ(stitch_result_bundle(r, nullptr), nullptr);
  EXPECT_EQ(stitch_result_kernel_count(r), 0u);
  EXPECT_EQ(service.compile_calls.load(), 1);
  stitch_result_free(r);

  v1::Graph other;
  other.set_name("other");
  other.add_nodes()->set_name("p0");
  other.add_nodes()->set_name("p1");
  std::string other_pb = other.SerializeAsString();
  r = stitch_client_lookup_graph(client, other_pb.data(), other_pb.size(), "sm_90");
  EXPECT_EQ(stitch_result_outcome(r), STITCH_HIT_DISK) << stitch_result_reason(r);
  stitch_result_free(r);

  v1::Graph empty;
  empty.set_name("empty");
  std::string empty_pb = empty.SerializeAsString();
  r = stitch_client_lookup_graph(client, empty_pb.data(), empty_pb.size(), nullptr);
  EXPECT_EQ(stitch_result_outcome(r), STITCH_FALLBACK);
  EXPECT_STREQ(stitch_result_reason(r), "NOT_FOUND: miss");
  stitch_result_free(r);

  r = stitch_client_lookup_hlo(client, kHlo, std::strlen(kHlo), nullptr);
  EXPECT_EQ(stitch_result_outcome(r), STITCH_FALLBACK);  // an HLO request has no graph nodes
  stitch_result_free(r);
  EXPECT_EQ(service.lookup_calls.load(), 3);
  stitch_client_destroy(client);
}

TEST(ClientCApi, UsageRecordAndFlush) {
  ScriptedService service;
  std::atomic<bool> fail{true};
  service.report_usage = [&](const v1::ReportUsageRequest& req, v1::ReportUsageResponse* resp) {
    if (fail) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "later");
    resp->set_accepted(static_cast<uint32_t>(req.records_size()));
    return grpc::Status::OK;
  };
  ScriptedServer server(&service);
  stitch_client* client = stitch_client_create(server.address().c_str(), 0, 0);
  EXPECT_EQ(stitch_client_record_invocations(client, "k1", 3), 0);
  EXPECT_EQ(stitch_client_record_invocations(client, "k1", 4), 0);
  EXPECT_EQ(stitch_client_flush_usage(client), 1);  // kept
  fail = false;
  EXPECT_EQ(stitch_client_flush_usage(client), 0);
  std::vector<v1::ReportUsageRequest> seen = service.UsageRequests();
  ASSERT_EQ(seen.size(), 2u);
  ASSERT_EQ(seen[1].records_size(), 1);
  EXPECT_EQ(seen[1].records(0).key(), "k1");
  EXPECT_EQ(seen[1].records(0).invocations(), 7u);
  EXPECT_EQ(seen[1].fallback(), v1::FALLBACK_UNSPECIFIED);
  // The job's fallback goes with its later reports; an unknown name changes nothing.
  EXPECT_EQ(stitch_client_set_fallback(client, "inductor"), 0);
  EXPECT_EQ(stitch_client_set_fallback(client, "tensorrt"), -1);
  EXPECT_EQ(stitch_client_set_fallback(client, "eager"), 0);
  EXPECT_EQ(stitch_client_set_fallback(client, "inductor"), 0);
  EXPECT_EQ(stitch_client_set_fallback(nullptr, "xla"), -1);
  EXPECT_EQ(stitch_client_record_invocations(client, "k2", 1), 0);
  EXPECT_EQ(stitch_client_flush_usage(client), 0);
  seen = service.UsageRequests();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[2].fallback(), v1::FALLBACK_INDUCTOR);
  EXPECT_EQ(stitch_client_set_fallback(client, nullptr), 0);
  EXPECT_EQ(stitch_client_record_invocations(client, "k3", 1), 0);
  EXPECT_EQ(stitch_client_flush_usage(client), 0);
  EXPECT_EQ(service.UsageRequests().back().fallback(), v1::FALLBACK_UNSPECIFIED);
  stitch_client_destroy(client);
}

TEST(ClientCApi, MeasuredTimesGoWithTheUsageReport) {
  ScriptedService service;
  service.report_usage = [](const v1::ReportUsageRequest&, v1::ReportUsageResponse*) {
    return grpc::Status::OK;
  };
  ScriptedServer server(&service);
  stitch_client* client = stitch_client_create(server.address().c_str(), 0, 0);
  EXPECT_EQ(stitch_client_record_time(client, "k1", STITCH_TIMED_STITCHED, 2e-5, 2), 0);
  EXPECT_EQ(stitch_client_record_time(client, "k1", STITCH_TIMED_FALLBACK, 9e-5, 3), 0);
  EXPECT_EQ(stitch_client_record_time(client, "k1", STITCH_TIMED_FALLBACK, -1, 3), -1);
  EXPECT_EQ(stitch_client_record_time(client, "k1", STITCH_TIMED_FALLBACK, 1e-5, 0), -1);
  EXPECT_EQ(stitch_client_record_time(client, "k1", static_cast<stitch_timed_kernels>(7), 1e-5, 1),
            -1);
  EXPECT_EQ(stitch_client_record_time(client, nullptr, STITCH_TIMED_STITCHED, 1e-5, 1), -1);
  EXPECT_EQ(stitch_client_record_time(nullptr, "k1", STITCH_TIMED_STITCHED, 1e-5, 1), -1);
  EXPECT_EQ(stitch_client_flush_usage(client), 0);
  std::vector<v1::ReportUsageRequest> seen = service.UsageRequests();
  ASSERT_EQ(seen.size(), 1u);
  ASSERT_EQ(seen[0].records_size(), 1);
  EXPECT_EQ(seen[0].records(0).stitched().samples(), 2u);
  EXPECT_DOUBLE_EQ(seen[0].records(0).stitched().seconds(), 2e-5);
  EXPECT_EQ(seen[0].records(0).fallback().samples(), 3u);
  // One step in 100 times its fallback.
  int picked = 0;
  for (int i = 0; i < 300; ++i) picked += stitch_client_should_time_fallback(client);
  EXPECT_EQ(picked, 3);
  EXPECT_EQ(stitch_client_should_time_fallback(nullptr), 0);
  stitch_client_destroy(client);
}

TEST(ClientCApi, DeadSocketFallsBackWithinTheLookupDeadline) {
  std::string dir = MakeTempDir();
  std::string path = dir + "/nobody.sock";  // a bare path names a unix socket
  stitch_client* client = stitch_client_create(path.c_str(), 50, 0);
  ASSERT_NE(client, nullptr);
  auto start = std::chrono::steady_clock::now();
  stitch_result* r = stitch_client_lookup_hlo(client, kHlo, std::strlen(kHlo), nullptr);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                  start)
                .count();
  EXPECT_LT(ms, 50 + 1000);  // the deadline plus slack, not gRPC's reconnect backoff
  EXPECT_EQ(stitch_result_outcome(r), STITCH_FALLBACK);
  std::string reason = stitch_result_reason(r);
  EXPECT_TRUE(reason.rfind("UNAVAILABLE", 0) == 0 || reason.rfind("DEADLINE_EXCEEDED", 0) == 0)
      << reason;
  EXPECT_STREQ(stitch_result_key(r), "");
  size_t len = 123;
  EXPECT_EQ(stitch_result_bundle(r, &len), nullptr);
  EXPECT_EQ(len, 0u);
  stitch_result_free(r);
  EXPECT_EQ(stitch_client_flush_usage(client), 0) << "nothing pending: nothing to send";
  EXPECT_EQ(stitch_client_record_invocations(client, "k", 1), 0);
  EXPECT_EQ(stitch_client_flush_usage(client), 1);
  stitch_client_destroy(client);
  std::filesystem::remove_all(dir);
}

// Takes the JSON or reason an admin call stored, and frees it as a caller must.
std::string TakeString(char* s) {
  std::string out = s == nullptr ? "" : s;
  stitch_free(s);
  return out;
}

TEST(ClientCApi, AdminCallsAnswerJson) {
  ScriptedService service;
  service.stats = [](v1::StatsResponse* s) {
    s->set_version("0.1.0");
    s->set_compiles(3);
    s->set_hits_memory(1);
    s->set_invocations_reported(uint64_t{1} << 40);  // past what a double holds exactly
    s->set_uptime_seconds(1.5);
    return grpc::Status::OK;
  };
  std::atomic<uint32_t> limit_seen{0};
  service.list = [&](const v1::ListEntriesRequest& req, v1::ListEntriesResponse* resp) {
    limit_seen = req.limit();
    v1::EntrySummary* e = resp->add_entries();
    e->set_key(std::string(64, 'a'));
    e->set_kernels(2);
    e->set_plan("plan \xc3\xa9");  // UTF-8 text goes through as it is
    resp->add_entries()->set_key(std::string(64, 'b'));
    return grpc::Status::OK;
  };
  service.get = [](const v1::GetEntryRequest& req, v1::CompileResponse* resp) {
    if (req.key() != std::string(64, 'a')) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no entry for key " + req.key());
    }
    resp->set_source(v1::CompileResponse::DISK);
    resp->set_key(req.key());
    *resp->mutable_bundle() = MakeBundle(req.key(), 3);
    return grpc::Status::OK;
  };
  ScriptedServer server(&service);
  stitch_client* client = stitch_client_create(server.address().c_str(), 0, 0);
  ASSERT_NE(client, nullptr);

  char* json = nullptr;
  ASSERT_EQ(stitch_client_stats(client, &json), 0);
  nlohmann::json stats = nlohmann::json::parse(TakeString(json));
  EXPECT_EQ(stats["version"], "0.1.0");
  EXPECT_EQ(stats["compiles"], 3);
  EXPECT_EQ(stats["hits_memory"], 1);
  EXPECT_EQ(stats["invocations_reported"].get<uint64_t>(), uint64_t{1} << 40);
  EXPECT_TRUE(stats["invocations_reported"].is_number_unsigned()) << "a number, not a string";
  EXPECT_EQ(stats["uptime_seconds"], 1.5);
  EXPECT_EQ(stats["runtime_keys"], 0) << "defaults are present";
  EXPECT_EQ(stats.size(), static_cast<size_t>(v1::StatsResponse::descriptor()->field_count()));

  ASSERT_EQ(stitch_client_list_entries(client, 5, &json), 0);
  nlohmann::json list = nlohmann::json::parse(TakeString(json));
  EXPECT_EQ(limit_seen.load(), 5u);
  ASSERT_EQ(list["entries"].size(), 2u);
  EXPECT_EQ(list["entries"][0]["key"], std::string(64, 'a'));
  EXPECT_EQ(list["entries"][0]["kernels"], 2);
  EXPECT_EQ(list["entries"][0]["plan"], "plan \xc3\xa9");
  EXPECT_EQ(list["entries"][1]["kernels"], 0);

  // The scripted service has no ListRuntimes: the daemon's refusal is the reason.
  ASSERT_EQ(stitch_client_list_runtimes(client, 0, &json), 1);
  std::string reason = TakeString(json);
  EXPECT_EQ(reason.rfind("UNIMPLEMENTED", 0), 0u) << reason;
  EXPECT_NE(reason.find("ListRuntimes"), std::string::npos) << reason;

  stitch_result* r = stitch_client_get_entry(client, std::string(64, 'a').c_str());
  ASSERT_EQ(stitch_result_outcome(r), STITCH_HIT_DISK) << stitch_result_reason(r);
  EXPECT_STREQ(stitch_result_key(r), std::string(64, 'a').c_str());
  EXPECT_EQ(stitch_result_kernel_count(r), 3u);
  stitch_result_free(r);
  r = stitch_client_get_entry(client, std::string(64, 'c').c_str());
  EXPECT_EQ(stitch_result_outcome(r), STITCH_FALLBACK);
  EXPECT_EQ(std::string(stitch_result_reason(r)).rfind("NOT_FOUND", 0), 0u)
      << stitch_result_reason(r);
  stitch_result_free(r);
  EXPECT_EQ(service.admin_calls.load(), 4);
  stitch_client_destroy(client);
}

TEST(ClientCApi, AdminCallsToADeadSocketGiveTheReason) {
  std::string dir = MakeTempDir();
  stitch_client* client = stitch_client_create((dir + "/nobody.sock").c_str(), 0, 0);
  ASSERT_NE(client, nullptr);
  char* json = nullptr;
  auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(stitch_client_stats(client, &json), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2500));
  std::string reason = TakeString(json);
  EXPECT_EQ(reason.rfind("UNAVAILABLE: Stats at ", 0), 0u) << reason;
  stitch_result* r = stitch_client_get_entry(client, std::string(64, 'a').c_str());
  EXPECT_EQ(stitch_result_outcome(r), STITCH_FALLBACK);
  EXPECT_EQ(std::string(stitch_result_reason(r)).rfind("UNAVAILABLE", 0), 0u)
      << stitch_result_reason(r);
  stitch_result_free(r);
  stitch_client_destroy(client);
  std::filesystem::remove_all(dir);
}

// A daemon that answers a bucket's bundle for requests naming outer parameters and an exact
// one otherwise, each under its own key, so a test sees which request reached it.
grpc::Status AnswerByOuterParameters(const v1::CompileRequest& req, v1::CompileResponse* resp) {
  const bool generic = req.outer_parameters_size() > 0;
  const std::string key(64, generic ? 'b' : 'e');
  resp->set_source(v1::CompileResponse::COMPILED);
  resp->set_key(key);
  *resp->mutable_bundle() = MakeBundle(key, 1);
  if (generic) {
    v1::OuterExtent* served = resp->mutable_bundle()->mutable_outer_extent();
    served->set_lo(33);
    served->set_hi(64);
    served->mutable_parameters()->CopyFrom(req.outer_parameters());
  }
  return grpc::Status::OK;
}

TEST(ClientCApi, GenericHloNamesOuterParametersAndReadsTheServedExtents) {
  ScriptedService service;
  service.compile = AnswerByOuterParameters;
  service.lookup = [](const v1::CompileRequest&, v1::CompileResponse*) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "miss");
  };
  ScriptedServer server(&service);
  stitch_client* client = stitch_client_create(server.address().c_str(), 2000, 5000);
  ASSERT_NE(client, nullptr);

  const int64_t outer[] = {0, 2};
  stitch_result* r =
      stitch_client_compile_hlo_generic(client, kHlo, std::strlen(kHlo), "sm_90", outer, 2);
  ASSERT_EQ(stitch_result_outcome(r), STITCH_COMPILED) << stitch_result_reason(r);
  int64_t lo = -1, hi = -1;
  EXPECT_EQ(stitch_result_outer_extent(r, &lo, &hi), 1);
  EXPECT_EQ(lo, 33);
  EXPECT_EQ(hi, 64);
  EXPECT_EQ(stitch_result_outer_extent(r, nullptr, nullptr), 1);
  std::vector<v1::CompileRequest> seen = service.CompileRequests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].hlo_text(), kHlo);
  EXPECT_EQ(seen[0].target(), "sm_90");
  ASSERT_EQ(seen[0].outer_parameters_size(), 2);
  EXPECT_EQ(seen[0].outer_parameters(0), 0);
  EXPECT_EQ(seen[0].outer_parameters(1), 2);
  stitch_result_free(r);

  // The same text without outer parameters is another request: the in-process cache must not
  // answer it with the bucket's bundle.
  r = stitch_client_compile_hlo(client, kHlo, std::strlen(kHlo), "sm_90");
  ASSERT_EQ(stitch_result_outcome(r), STITCH_COMPILED) << stitch_result_reason(r);
  EXPECT_STREQ(stitch_result_key(r), std::string(64, 'e').c_str());
  lo = hi = -1;
  EXPECT_EQ(stitch_result_outer_extent(r, &lo, &hi), 0) << "an exact bundle";
  EXPECT_EQ(lo, -1);
  EXPECT_EQ(hi, -1);
  stitch_result_free(r);
  // Other outer parameters are another request too; the same ones are this process's bundle.
  r = stitch_client_compile_hlo_generic(client, kHlo, std::strlen(kHlo), "sm_90", outer, 1);
  EXPECT_EQ(stitch_result_outcome(r), STITCH_COMPILED) << stitch_result_reason(r);
  stitch_result_free(r);
  r = stitch_client_compile_hlo_generic(client, kHlo, std::strlen(kHlo), "sm_90", outer, 2);
  EXPECT_EQ(stitch_result_outcome(r), STITCH_HIT_LOCAL) << stitch_result_reason(r);
  EXPECT_STREQ(stitch_result_key(r), std::string(64, 'b').c_str());
  EXPECT_EQ(stitch_result_outer_extent(r, &lo, &hi), 1);
  stitch_result_free(r);
  EXPECT_EQ(service.compile_calls.load(), 3);
  // No outer parameters (NULL, 0) is the plain call, answered from the cache.
  r = stitch_client_compile_hlo_generic(client, kHlo, std::strlen(kHlo), "sm_90", nullptr, 0);
  EXPECT_EQ(stitch_result_outcome(r), STITCH_HIT_LOCAL) << stitch_result_reason(r);
  EXPECT_STREQ(stitch_result_key(r), std::string(64, 'e').c_str());
  stitch_result_free(r);

  r = stitch_client_lookup_hlo_generic(client, kHlo, std::strlen(kHlo), nullptr, outer + 1, 1);
  EXPECT_EQ(stitch_result_outcome(r), STITCH_FALLBACK);
  EXPECT_STREQ(stitch_result_reason(r), "NOT_FOUND: miss");
  EXPECT_EQ(stitch_result_outer_extent(r, &lo, &hi), 0) << "a fallback";
  stitch_result_free(r);
  EXPECT_EQ(service.lookup_calls.load(), 1);

  // Outer parameters the daemon could never take are refused here, and nothing is sent.
  const int64_t negative[] = {1, -1};
  for (stitch_result* f :
       {stitch_client_compile_hlo_generic(client, kHlo, std::strlen(kHlo), nullptr, nullptr, 1),
        stitch_client_lookup_hlo_generic(client, kHlo, std::strlen(kHlo), nullptr, nullptr, 3),
        stitch_client_compile_hlo_generic(client, kHlo, std::strlen(kHlo), nullptr, negative, 2),
        stitch_client_lookup_hlo_generic(client, kHlo, std::strlen(kHlo), nullptr, negative, 2),
        stitch_client_compile_hlo_generic(nullptr, kHlo, std::strlen(kHlo), nullptr, outer, 1),
        stitch_client_compile_hlo_generic(client, nullptr, 4, nullptr, outer, 1)}) {
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(stitch_result_outcome(f), STITCH_FALLBACK);
    EXPECT_EQ(std::string(stitch_result_reason(f)).rfind("INVALID_ARGUMENT", 0), 0u)
        << stitch_result_reason(f);
    EXPECT_EQ(stitch_result_outer_extent(f, &lo, &hi), 0);
    stitch_result_free(f);
  }
  EXPECT_EQ(service.compile_calls.load(), 3);
  EXPECT_EQ(service.lookup_calls.load(), 1);
  EXPECT_EQ(stitch_result_outer_extent(nullptr, &lo, &hi), 0);
  stitch_client_destroy(client);
}

TEST(ClientCApi, NullArgumentsNeverCrash) {
  stitch_client* client = stitch_client_create(nullptr, -1, -1);  // all defaults
  ASSERT_NE(client, nullptr);

  stitch_result* r = stitch_client_compile_hlo(nullptr, kHlo, std::strlen(kHlo), nullptr);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(stitch_result_outcome(r), STITCH_FALLBACK);
  EXPECT_NE(std::string(stitch_result_reason(r)).find("null"), std::string::npos);
  stitch_result_free(r);

  for (stitch_result* f : {stitch_client_compile_hlo(client, nullptr, 10, nullptr),
                           stitch_client_compile_hlo(client, kHlo, 0, nullptr),
                           stitch_client_compile_graph(client, nullptr, 5, "sm_90"),
                           stitch_client_compile_graph(nullptr, nullptr, 0, nullptr),
                           stitch_client_lookup_hlo(nullptr, nullptr, 0, nullptr),
                           stitch_client_lookup_graph(client, nullptr, 1, nullptr)}) {
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(stitch_result_outcome(f), STITCH_FALLBACK);
    EXPECT_EQ(std::string(stitch_result_reason(f)).rfind("INVALID_ARGUMENT", 0), 0u)
        << stitch_result_reason(f);
    stitch_result_free(f);
  }

  EXPECT_EQ(stitch_result_outcome(nullptr), STITCH_FALLBACK);
  EXPECT_STREQ(stitch_result_key(nullptr), "");
  EXPECT_NE(stitch_result_reason(nullptr), nullptr);
  size_t len = 7;
  EXPECT_EQ(stitch_result_bundle(nullptr, &len), nullptr);
  EXPECT_EQ(len, 0u);
  EXPECT_EQ(stitch_result_kernel_count(nullptr), 0u);
  EXPECT_EQ(stitch_result_kernel_name(nullptr, 0), nullptr);
  EXPECT_EQ(stitch_result_kernel_ptx(nullptr, 0), nullptr);
  EXPECT_EQ(stitch_result_kernel_cubin(nullptr, 0, nullptr), nullptr);
  stitch_result_free(nullptr);

  EXPECT_EQ(stitch_client_record_invocations(nullptr, "k", 1), -1);
  EXPECT_EQ(stitch_client_record_invocations(client, nullptr, 1), -1);
  EXPECT_EQ(stitch_client_flush_usage(nullptr), -1);

  char* json = reinterpret_cast<char*>(&len);  // must be reset
  EXPECT_EQ(stitch_client_stats(nullptr, &json), -1);
  EXPECT_EQ(json, nullptr);
  EXPECT_EQ(stitch_client_stats(client, nullptr), -1);
  EXPECT_EQ(stitch_client_list_entries(nullptr, 0, &json), -1);
  EXPECT_EQ(stitch_client_list_runtimes(client, 0, nullptr), -1);
  for (stitch_result* f :
       {stitch_client_get_entry(nullptr, "k"), stitch_client_get_entry(client, nullptr)}) {
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(stitch_result_outcome(f), STITCH_FALLBACK);
    EXPECT_EQ(std::string(stitch_result_reason(f)).rfind("INVALID_ARGUMENT", 0), 0u)
        << stitch_result_reason(f);
    stitch_result_free(f);
  }
  stitch_free(nullptr);
  stitch_client_destroy(nullptr);
  stitch_client_destroy(client);
}

TEST(ClientCApi, OutcomeNames) {
  EXPECT_STREQ(stitch_outcome_name(STITCH_HIT_LOCAL), "hit_local");
  EXPECT_STREQ(stitch_outcome_name(STITCH_HIT_MEMORY), "hit_memory");
  EXPECT_STREQ(stitch_outcome_name(STITCH_HIT_DISK), "hit_disk");
  EXPECT_STREQ(stitch_outcome_name(STITCH_HIT_CLUSTER), "hit_cluster");
  EXPECT_STREQ(stitch_outcome_name(STITCH_COMPILED), "compiled");
  EXPECT_STREQ(stitch_outcome_name(STITCH_FALLBACK), "fallback");
  EXPECT_STREQ(stitch_outcome_name(static_cast<stitch_outcome>(42)), "fallback");
  // ctypes callers use the numbers.
  EXPECT_EQ(STITCH_HIT_LOCAL, 0);
  EXPECT_EQ(STITCH_FALLBACK, 4);
  EXPECT_EQ(STITCH_HIT_CLUSTER, 5);
}

}  // namespace

namespace {

// The header must stay plain C for ctypes and C callers.
TEST(ClientCApi, HeaderCompilesAsC) {
  if (std::system("command -v cc > /dev/null 2>&1") != 0) GTEST_SKIP() << "no C compiler";
  std::string cmd = "cc -std=c99 -Wall -Wextra -Werror -pedantic -fsyntax-only -x c " +
                    std::string(STITCH_SOURCE_DIR) + "/client/include/stitch_client.h";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
