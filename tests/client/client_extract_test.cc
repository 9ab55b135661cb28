// Extraction through the client, against a scripted daemon: the C ABI's stitch_extraction as a
// ctypes caller reads it (names, graph bytes, summaries, errors, NULL arguments), and the
// deadline Extract runs under.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "client/scripted_server.h"
#include "stitch/client/client.h"
#include "stitch_client.h"

namespace {

using stitch::testing::MakeTempDir;
using stitch::testing::ScriptedServer;
using stitch::testing::ScriptedService;
namespace v1 = stitch::v1;

const char kTwoModules[] =
    "HloModule a\nENTRY e { p = f32[4] parameter(0)\n ROOT n = f32[4] negate(p) }\n"
    "// -----\n"
    "HloModule b\nENTRY e { p = f32[4] parameter(0)\n ROOT n = f32[4] exponential(p) }\n";

// Returns a graph named `name` with `parameters` f32[4] parameters, one node adding them up
// (a negation for one parameter), and `outputs` references to that node.
v1::Graph MakeGraph(const std::string& name, int parameters, int outputs) {
  v1::Graph g;
  g.set_name(name);
  for (int i = 0; i < parameters; ++i) {
    v1::Node* p = g.add_nodes();
    p->set_op(v1::PARAMETER);
    p->set_parameter_number(i);
    p->mutable_shape()->set_dtype(v1::F32);
    p->mutable_shape()->add_dims(4);
  }
  v1::Node* n = g.add_nodes();
  n->set_op(parameters == 1 ? v1::NEG : v1::ADD);
  for (int i = 0; i < parameters; ++i) n->add_operands(i);
  n->mutable_shape()->set_dtype(v1::F32);
  n->mutable_shape()->add_dims(4);
  for (int i = 0; i < outputs; ++i) g.add_outputs(parameters);
  return g;
}

std::string ErrorOf(const stitch_extraction* e) { return stitch_extraction_error(e); }

TEST(ClientExtract, CApiReturnsTheDaemonsGraphsInOrder) {
  ScriptedService service;
  std::string seen_text;
  service.extract = [&seen_text](const v1::ExtractRequest& req, v1::ExtractResponse* resp) {
    seen_text = req.hlo_text();
    *resp->add_graphs() = MakeGraph("a.sg0", 1, 1);
    *resp->add_graphs() = MakeGraph("b.sg0", 2, 3);
    return grpc::Status::OK;
  };
  ScriptedServer server(&service);
  stitch_client* client = stitch_client_create(server.address().c_str(), 0, 0);
  ASSERT_NE(client, nullptr);

  // `len` bounds the text: the trailing byte is not sent.
  const std::string text = std::string(kTwoModules) + "#";
  stitch_extraction* e = stitch_client_extract_hlo(client, text.data(), text.size() - 1);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(ErrorOf(e), "");
  EXPECT_EQ(seen_text, kTwoModules);
  EXPECT_EQ(service.extract_calls.load(), 1);

  ASSERT_EQ(stitch_extraction_count(e), 2u);
  EXPECT_STREQ(stitch_extraction_name(e, 0), "a.sg0");
  EXPECT_STREQ(stitch_extraction_name(e, 1), "b.sg0");
  for (size_t i = 0; i < 2; ++i) {
    size_t len = 0;
    const void* bytes = stitch_extraction_graph(e, i, &len);
    ASSERT_NE(bytes, nullptr);
    v1::Graph g;
    ASSERT_TRUE(g.ParseFromArray(bytes, static_cast<int>(len)));
    EXPECT_EQ(g.SerializeAsString(),
              (i == 0 ? MakeGraph("a.sg0", 1, 1) : MakeGraph("b.sg0", 2, 3)).SerializeAsString());
  }
  EXPECT_EQ(stitch_extraction_node_count(e, 0), 2u);
  EXPECT_EQ(stitch_extraction_parameter_count(e, 0), 1u);
  EXPECT_EQ(stitch_extraction_output_count(e, 0), 1u);
  EXPECT_EQ(stitch_extraction_node_count(e, 1), 3u);
  EXPECT_EQ(stitch_extraction_parameter_count(e, 1), 2u);
  EXPECT_EQ(stitch_extraction_output_count(e, 1), 3u);

  // Out of range.
  EXPECT_EQ(stitch_extraction_name(e, 2), nullptr);
  size_t len = 7;
  EXPECT_EQ(stitch_extraction_graph(e, 2, &len), nullptr);
  EXPECT_EQ(len, 0u);
  EXPECT_EQ(stitch_extraction_node_count(e, 2), 0u);
  EXPECT_EQ(stitch_extraction_parameter_count(e, 2), 0u);
  EXPECT_EQ(stitch_extraction_output_count(e, 2), 0u);

  // The extraction outlives its client.
  stitch_client_destroy(client);
  EXPECT_STREQ(stitch_extraction_name(e, 1), "b.sg0");
  stitch_extraction_free(e);
}

TEST(ClientExtract, CApiTextWithoutSubgraphsIsAnEmptySuccess) {
  ScriptedService service;
  service.extract = [](const v1::ExtractRequest&, v1::ExtractResponse*) {
    return grpc::Status::OK;
  };
  ScriptedServer server(&service);
  stitch_client* client = stitch_client_create(server.address().c_str(), 0, 0);
  stitch_extraction* e = stitch_client_extract_hlo(client, kTwoModules, std::strlen(kTwoModules));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(ErrorOf(e), "");
  EXPECT_EQ(stitch_extraction_count(e), 0u);
  stitch_extraction_free(e);
  stitch_client_destroy(client);
}

TEST(ClientExtract, CApiDaemonRefusalIsTheError) {
  ScriptedService service;
  service.extract = [](const v1::ExtractRequest&, v1::ExtractResponse* resp) {
    // A refusal carries no graphs, whatever the handler left in the response.
    *resp->add_graphs() = MakeGraph("x.sg0", 1, 1);
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "request:3: operand 'c' is not defined");
  };
  ScriptedServer server(&service);
  stitch_client* client = stitch_client_create(server.address().c_str(), 0, 0);
  stitch_extraction* e = stitch_client_extract_hlo(client, kTwoModules, std::strlen(kTwoModules));
  ASSERT_NE(e, nullptr);
  const std::string error = ErrorOf(e);
  EXPECT_EQ(error.rfind("INVALID_ARGUMENT: Extract at ", 0), 0u) << error;
  EXPECT_NE(error.find("request:3: operand 'c' is not defined"), std::string::npos) << error;
  EXPECT_EQ(stitch_extraction_count(e), 0u);
  EXPECT_EQ(stitch_extraction_name(e, 0), nullptr);
  stitch_extraction_free(e);
  stitch_client_destroy(client);
}

TEST(ClientExtract, RunsUnderTheCompileDeadlineNotTheAdminOne) {
  ScriptedService service;
  // Longer than the admin calls' 2000 ms.
  service.extract = [](const v1::ExtractRequest&, v1::ExtractResponse* resp) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    *resp->add_graphs() = MakeGraph("a.sg0", 1, 1);
    return grpc::Status::OK;
  };
  ScriptedServer server(&service);

  stitch_client* patient = stitch_client_create(server.address().c_str(), 0, 10000);
  stitch_extraction* e = stitch_client_extract_hlo(patient, kTwoModules, std::strlen(kTwoModules));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(ErrorOf(e), "");
  EXPECT_EQ(stitch_extraction_count(e), 1u);
  stitch_extraction_free(e);
  stitch_client_destroy(patient);

  stitch::client::ClientOptions o;
  o.address = server.address();
  o.compile_deadline = std::chrono::milliseconds(500);
  stitch::client::Client hasty(o);
  const auto start = std::chrono::steady_clock::now();
  stitch::StatusOr<std::vector<v1::Graph>> graphs = hasty.Extract(kTwoModules);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2000));
  ASSERT_FALSE(graphs.ok());
  EXPECT_NE(graphs.status().ToString().find("DEADLINE_EXCEEDED"), std::string::npos)
      << graphs.status().ToString();
}

TEST(ClientExtract, DeadSocketIsUnavailable) {
  std::string dir = MakeTempDir();
  stitch_client* client = stitch_client_create((dir + "/nobody.sock").c_str(), 0, 0);
  stitch_extraction* e = stitch_client_extract_hlo(client, kTwoModules, std::strlen(kTwoModules));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(ErrorOf(e).rfind("UNAVAILABLE: Extract at ", 0), 0u) << ErrorOf(e);
  EXPECT_EQ(stitch_extraction_count(e), 0u);
  stitch_extraction_free(e);
  stitch_client_destroy(client);
  std::filesystem::remove_all(dir);
}

TEST(ClientExtract, CApiNullArgumentsNeverCrash) {
  ScriptedService service;
  ScriptedServer server(&service);
  stitch_client* client = stitch_client_create(server.address().c_str(), 0, 0);
  for (stitch_extraction* e : {stitch_client_extract_hlo(nullptr, kTwoModules, 4),
                               stitch_client_extract_hlo(client, nullptr, 4),
                               stitch_client_extract_hlo(client, kTwoModules, 0)}) {
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(ErrorOf(e).rfind("INVALID_ARGUMENT", 0), 0u) << ErrorOf(e);
    EXPECT_EQ(stitch_extraction_count(e), 0u);
    stitch_extraction_free(e);
  }
  EXPECT_EQ(service.extract_calls.load(), 0) << "refused before any RPC";

  EXPECT_EQ(std::string(stitch_extraction_error(nullptr)).rfind("INVALID_ARGUMENT", 0), 0u);
  EXPECT_EQ(stitch_extraction_count(nullptr), 0u);
  EXPECT_EQ(stitch_extraction_name(nullptr, 0), nullptr);
  size_t len = 7;
  EXPECT_EQ(stitch_extraction_graph(nullptr, 0, &len), nullptr);
  EXPECT_EQ(len, 0u);
  EXPECT_EQ(stitch_extraction_graph(nullptr, 0, nullptr), nullptr);
  EXPECT_EQ(stitch_extraction_node_count(nullptr, 0), 0u);
  EXPECT_EQ(stitch_extraction_parameter_count(nullptr, 0), 0u);
  EXPECT_EQ(stitch_extraction_output_count(nullptr, 0), 0u);
  stitch_extraction_free(nullptr);
  stitch_client_destroy(client);
}

}  // namespace
