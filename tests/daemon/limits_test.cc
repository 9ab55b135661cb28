// The limits on every request's input, through a real stitchd: its config keys, and for each
// limit a request exactly at it (accepted) and one past it (refused with the message that
// names the limit). The daemon runs in this process on a temporary data dir, with small
// limits configured so that every request stays tiny.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../../daemon/src/daemon.h"
#include "stitch/daemon/config.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/graph.h"
#include "stitch/v1/kernel_service.grpc.pb.h"

namespace stitch::daemon {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

StatusOr<ParsedArgs> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "stitchd");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  Environment env;
  env.home = "/home/ada";
  return ParseCommandLine(static_cast<int>(argv.size()), argv.data(), env);
}

// Returns the message of parsing `flag value`, "" when it is accepted.
std::string FlagError(const std::string& flag, const std::string& value) {
  StatusOr<ParsedArgs> parsed = Parse({"--target", "sm_90", flag, value});
  return parsed.ok() ? "" : parsed.status().message();
}

TEST(LimitConfig, DefaultsAreTheCompilersAndArePrinted) {
  const DaemonConfig c;
  const GraphLimits compiler;
  EXPECT_EQ(c.max_graph_nodes, compiler.max_nodes);
  EXPECT_EQ(c.max_tensor_rank, static_cast<uint32_t>(compiler.max_rank));
  EXPECT_EQ(c.max_tensor_elements, static_cast<uint64_t>(compiler.max_elements_per_tensor));
  EXPECT_EQ(c.max_hlo_text_bytes, kMaxHloTextBytes);

  StatusOr<ParsedArgs> parsed = Parse({"--target", "sm_90", "--print-config"});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  for (const char* line : {"max_message_bytes: 64MiB\n", "max_graph_nodes: 20000\n",
                           "max_tensor_rank: 8\n", "max_tensor_elements: 17179869184\n",
                           "max_hlo_text_bytes: 256MiB\n", "max_usage_records: 100000\n",
                           "max_list_entries: 100000\n", "max_concurrent_streams: 100\n"}) {
    EXPECT_NE(parsed->exit_message.find(line), std::string::npos) << line;
  }
}

TEST(LimitConfig, EachKeyTakesItsBoundAndRefusesOnePast) {
  struct Case {
    const char* flag;
    const char* at;
    const char* past;
    const char* message;
  };
  const Case cases[] = {
      {"--max-graph-nodes", "1000000", "1000001",
       "--max-graph-nodes: expected an integer in 1..1000000, got '1000001'"},
      {"--max-tensor-rank", "8", "9", "--max-tensor-rank: expected an integer in 1..8, got '9'"},
      {"--max-tensor-elements", "17179869184", "17179869185",
       "--max-tensor-elements: expected an integer in 1..17179869184, got '17179869185'"},
      {"--max-hlo-text-bytes", "256MiB", "268435457",
       "--max-hlo-text-bytes: expected a size in 1..256MiB, got '268435457'"},
      {"--max-usage-records", "1000000", "1000001",
       "--max-usage-records: expected an integer in 1..1000000, got '1000001'"},
      {"--max-list-entries", "1000000", "1000001",
       "--max-list-entries: expected an integer in 1..1000000, got '1000001'"},
      {"--max-concurrent-streams", "65536", "65537",
       "--max-concurrent-streams: expected an integer in 1..65536, got '65537'"},
      {"--max-concurrent-streams", "1", "0",
       "--max-concurrent-streams: expected an integer in 1..65536, got '0'"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(FlagError(c.flag, c.at), "") << c.flag;
    EXPECT_EQ(FlagError(c.flag, c.past), c.message) << c.flag;
  }
  StatusOr<ParsedArgs> parsed =
      Parse({"--target", "sm_90", "--max-hlo-text-bytes", "4KiB", "--max-tensor-elements", "1000"});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->config.max_hlo_text_bytes, 4096u);
  EXPECT_EQ(parsed->config.max_tensor_elements, 1000u);
}

// ---- the daemon -----------------------------------------------------------------------

constexpr uint32_t kMaxNodes = 10;
constexpr uint32_t kMaxRank = 3;
constexpr uint32_t kMaxElements = 1000;
constexpr size_t kMaxHloText = 4096;
constexpr int kMaxUsageRecords = 4;
constexpr uint32_t kMaxListEntries = 1;
constexpr size_t kMaxMessage = 64 << 10;
constexpr int kMaxStreams = 2;

class LimitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char pattern[] = "/tmp/stitchd-limits-XXXXXX";
    dir_ = ::mkdtemp(pattern);
    StatusOr<ParsedArgs> parsed = Parse({
        "--data-dir",
        dir_ + "/data",
        "--socket",
        dir_ + "/stitchd.sock",
        "--grpc-listen",
        "127.0.0.1:0",
        "--metrics-listen=",
        "--target",
        "sm_90",
        "--ptx-only",
        "--workers",
        "1",
        "--log-level",
        "warn",
        "--max-graph-nodes",
        std::to_string(kMaxNodes),
        "--max-tensor-rank",
        std::to_string(kMaxRank),
        "--max-tensor-elements",
        std::to_string(kMaxElements),
        "--max-hlo-text-bytes",
        "4KiB",
        "--max-usage-records",
        std::to_string(kMaxUsageRecords),
        "--max-list-entries",
        std::to_string(kMaxListEntries),
        "--max-message-bytes",
        "64KiB",
        "--max-concurrent-streams",
        std::to_string(kMaxStreams),
        // This test runs the daemon inside its own binary, which cannot serve as a worker.
        "--compile-isolation",
        "thread",
    });
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(parsed->config);
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    daemon_ = std::move(*daemon);
  }

  static void TearDownTestSuite() {
    // Every test's channels are gone by now, so the server stops without waiting for them.
    daemon_.reset();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  void SetUp() override { ASSERT_NE(daemon_, nullptr); }

  static std::string Address() { return "127.0.0.1:" + std::to_string(daemon_->grpc_port()); }

  // A channel of its own connection: gRPC otherwise shares one connection among channels
  // with the same address and arguments.
  static std::shared_ptr<grpc::Channel> OwnChannel() {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(Address(), grpc::InsecureChannelCredentials(), args);
  }

  static std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return context;
  }

  std::unique_ptr<v1::KernelService::Stub> stub_ = v1::KernelService::NewStub(OwnChannel());

  grpc::Status Lookup(const v1::CompileRequest& request) {
    v1::CompileResponse response;
    return stub_->Lookup(Context().get(), request, &response);
  }
  grpc::Status Compile(const v1::CompileRequest& request) {
    v1::CompileResponse response;
    return stub_->Compile(Context().get(), request, &response);
  }

  static std::unique_ptr<Daemon> daemon_;
  static std::string dir_;
};

std::unique_ptr<Daemon> LimitsTest::daemon_;
std::string LimitsTest::dir_;

// Expects `s` to be `code` with exactly `message`.
void ExpectRefused(const grpc::Status& s, grpc::StatusCode code, const std::string& message) {
  EXPECT_EQ(s.error_code(), code) << s.error_message();
  EXPECT_EQ(s.error_message(), message);
}

// A Lookup that gets NOT_FOUND passed every check on its input: only the cache missed.
void ExpectAccepted(const grpc::Status& s) {
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
}

v1::Node* AddNode(v1::Graph& g, v1::OpCode op, const std::vector<int64_t>& dims) {
  v1::Node* n = g.add_nodes();
  n->set_op(op);
  n->set_name(op == v1::PARAMETER ? "p" : "n" + std::to_string(g.nodes_size() - 1));
  n->mutable_shape()->set_dtype(v1::F32);
  for (int64_t d : dims) n->mutable_shape()->add_dims(d);
  if (op == v1::PARAMETER) {
    n->set_parameter_number(0);
  } else {
    n->add_operands(g.nodes_size() - 2);
  }
  return n;
}

// A parameter of `dims` followed by `ops` negations in a chain: ops + 1 nodes.
v1::CompileRequest ChainRequest(int ops, const std::vector<int64_t>& dims = {4}) {
  v1::CompileRequest r;
  v1::Graph& g = *r.mutable_graph();
  g.set_name("chain");
  AddNode(g, v1::PARAMETER, dims);
  for (int i = 0; i < ops; ++i) AddNode(g, v1::NEG, dims);
  g.add_outputs(ops);
  return r;
}

TEST_F(LimitsTest, GraphNodes) {
  ExpectAccepted(Lookup(ChainRequest(kMaxNodes - 1)));
  ExpectRefused(Lookup(ChainRequest(kMaxNodes)), grpc::StatusCode::INVALID_ARGUMENT,
                "graph has 11 nodes, over the limit of 10 (max_graph_nodes)");

  v1::CompileRequest outputs = ChainRequest(1);
  for (uint32_t i = 1; i < kMaxNodes; ++i) outputs.mutable_graph()->add_outputs(1);
  ExpectAccepted(Lookup(outputs));
  outputs.mutable_graph()->add_outputs(1);
  ExpectRefused(Lookup(outputs), grpc::StatusCode::INVALID_ARGUMENT,
                "graph has 11 outputs, over the limit of 10 (max_graph_nodes)");
}

// A module of a parameter and `ops` negations.
std::string ChainHlo(int ops) {
  std::string text = "HloModule chain\nENTRY main {\n  n0 = f32[4] parameter(0)\n";
  for (int i = 1; i <= ops; ++i) {
    text += std::string(i == ops ? "  ROOT" : " ") + " n" + std::to_string(i) +
            " = f32[4] negate(n" + std::to_string(i - 1) + ")\n";
  }
  return text + "}\n";
}

TEST_F(LimitsTest, GraphNodesOfHloText) {
  v1::CompileRequest at;
  at.set_hlo_text(ChainHlo(kMaxNodes - 1));
  ExpectAccepted(Lookup(at));
  v1::CompileRequest past;
  past.set_hlo_text(ChainHlo(kMaxNodes));
  ExpectRefused(Lookup(past), grpc::StatusCode::INVALID_ARGUMENT,
                "request: graph 'chain' has 11 nodes, over the limit of 10 (max_graph_nodes)");
}

TEST_F(LimitsTest, TensorRank) {
  ExpectAccepted(Lookup(ChainRequest(1, {1, 2, 3})));
  ExpectRefused(Lookup(ChainRequest(1, {1, 2, 3, 1})), grpc::StatusCode::INVALID_ARGUMENT,
                "node 0 'p' (parameter): rank 4 is over the limit of 3 (max_tensor_rank)");
}

TEST_F(LimitsTest, TensorElements) {
  ExpectAccepted(Lookup(ChainRequest(1, {10, 100})));
  ExpectRefused(Lookup(ChainRequest(1, {7, 11, 13})), grpc::StatusCode::INVALID_ARGUMENT,
                "node 0 'p' (parameter): f32[7,11,13] has 1001 elements, over the limit of 1000 "
                "(max_tensor_elements)");
}

// ChainHlo(1) padded with blank lines to `bytes`.
std::string HloTextOf(size_t bytes) {
  std::string text = ChainHlo(1);
  text.resize(bytes, '\n');
  return text;
}

TEST_F(LimitsTest, HloTextBytes) {
  v1::CompileRequest at;
  at.set_hlo_text(HloTextOf(kMaxHloText));
  ExpectAccepted(Lookup(at));
  v1::CompileRequest past;
  past.set_hlo_text(HloTextOf(kMaxHloText + 1));
  const std::string message =
      "request: HLO text of 4097 bytes is over the limit of 4096 (max_hlo_text_bytes)";
  ExpectRefused(Lookup(past), grpc::StatusCode::INVALID_ARGUMENT, message);

  // Extract keeps RESOURCE_EXHAUSTED for limits: the job may split its program differently.
  v1::ExtractRequest extract;
  extract.set_hlo_text(HloTextOf(kMaxHloText));
  v1::ExtractResponse graphs;
  grpc::Status s = stub_->Extract(Context().get(), extract, &graphs);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(graphs.graphs_size(), 1);
  extract.set_hlo_text(HloTextOf(kMaxHloText + 1));
  ExpectRefused(stub_->Extract(Context().get(), extract, &graphs),
                grpc::StatusCode::RESOURCE_EXHAUSTED, message);
}

// A Lookup request of exactly `bytes` serialized bytes, padded through the graph's name.
v1::CompileRequest RequestOfSize(size_t bytes) {
  v1::CompileRequest r = ChainRequest(1);
  const size_t base = r.ByteSizeLong();
  std::string name(bytes - base, 'x');
  r.mutable_graph()->set_name(name);
  // The name's length prefix grows with it; take the difference back off.
  name.resize(name.size() - (r.ByteSizeLong() - bytes));
  r.mutable_graph()->set_name(name);
  EXPECT_EQ(r.ByteSizeLong(), bytes);
  return r;
}

TEST_F(LimitsTest, MessageBytes) {
  ExpectAccepted(Lookup(RequestOfSize(kMaxMessage)));
  // gRPC refuses the message before the service sees it, with its own message.
  ExpectRefused(Lookup(RequestOfSize(kMaxMessage + 1)), grpc::StatusCode::RESOURCE_EXHAUSTED,
                "Received message larger than max (65537 vs. 65536)");
}

std::string HexKey(char digit) { return std::string(64, digit); }

TEST_F(LimitsTest, UsageRecordsAndKeyLength) {
  v1::ReportUsageRequest request;
  for (int i = 0; i < kMaxUsageRecords; ++i) {
    v1::UsageRecord* r = request.add_records();
    r->set_key(HexKey(static_cast<char>('a' + i)));
    r->set_invocations(1);
  }
  v1::ReportUsageResponse response;
  grpc::Status s = stub_->ReportUsage(Context().get(), request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.unknown_keys(), static_cast<uint32_t>(kMaxUsageRecords));

  *request.add_records() = request.records(0);
  ExpectRefused(stub_->ReportUsage(Context().get(), request, &response),
                grpc::StatusCode::INVALID_ARGUMENT,
                "usage batch has 5 records, over the limit of 4 (max_usage_records)");

  v1::ReportUsageRequest long_key;
  long_key.add_records()->set_key(HexKey('a') + "0");
  ExpectRefused(stub_->ReportUsage(Context().get(), long_key, &response),
                grpc::StatusCode::INVALID_ARGUMENT,
                "usage record for '" + HexKey('a') +
                    "0': keys are 64 lowercase hex digits and a record holds at most 2^40 "
                    "invocations");

  v1::GetEntryRequest get;
  v1::CompileResponse entry;
  get.set_key(HexKey('a'));
  ExpectRefused(stub_->GetEntry(Context().get(), get, &entry), grpc::StatusCode::NOT_FOUND,
                "no entry for key " + HexKey('a'));
  get.set_key(HexKey('a') + "0");
  ExpectRefused(stub_->GetEntry(Context().get(), get, &entry), grpc::StatusCode::INVALID_ARGUMENT,
                "a key is 64 lowercase hex digits, got '" + HexKey('a') + "0' (65 characters)");
}

TEST_F(LimitsTest, ListEntriesAndRuntimesAreCapped) {
  // Two entries, each with a measured runtime, against a cap of one.
  v1::ReportUsageRequest usage;
  for (int ops : {1, 2}) {
    v1::CompileResponse compiled;
    // Shapes no other test uses, so these entries are no other test's cache hits.
    grpc::Status s = stub_->Compile(Context().get(), ChainRequest(ops, {5}), &compiled);
    ASSERT_TRUE(s.ok()) << s.error_message();
    v1::UsageRecord* r = usage.add_records();
    r->set_key(compiled.key());
    r->set_invocations(1);
    r->mutable_stitched()->set_seconds(1e-5);
    r->mutable_stitched()->set_samples(1);
  }
  v1::ReportUsageResponse reported;
  ASSERT_TRUE(stub_->ReportUsage(Context().get(), usage, &reported).ok());
  ASSERT_EQ(reported.accepted(), 2u);

  for (uint32_t limit : {0u, kMaxListEntries, kMaxListEntries + 1, 0xffffffffu}) {
    v1::ListEntriesRequest list;
    list.set_limit(limit);
    v1::ListEntriesResponse entries;
    ASSERT_TRUE(stub_->ListEntries(Context().get(), list, &entries).ok());
    EXPECT_EQ(entries.entries_size(), 1) << "limit " << limit;
    v1::ListRuntimesRequest runtimes_request;
    runtimes_request.set_limit(limit);
    v1::ListRuntimesResponse runtimes;
    ASSERT_TRUE(stub_->ListRuntimes(Context().get(), runtimes_request, &runtimes).ok());
    EXPECT_EQ(runtimes.runtimes_size(), 1) << "limit " << limit;
  }
}

// A grpc.health.v1.Health/Watch call: the server keeps its stream open until the client
// cancels it, so each one holds one of its connection's concurrent streams.
class HeldStream {
 public:
  explicit HeldStream(const std::shared_ptr<grpc::Channel>& channel) : stub_(channel) {
    call_ = stub_.PrepareCall(&context_, "/grpc.health.v1.Health/Watch", &cq_);
    call_->StartCall(Tag(1));
    Await(1);
    // HealthCheckRequest{service: ""} serializes to no bytes.
    grpc::Slice empty;
    grpc::ByteBuffer request(&empty, 1);
    call_->Write(request, Tag(2));
    Await(2);
    call_->Read(&first_, Tag(3));
  }

  // Returns true once the server has sent its first status on the stream.
  bool Open() {
    if (!open_) open_ = Await(3);
    return open_;
  }

  void Cancel() { context_.TryCancel(); }

  ~HeldStream() {
    context_.TryCancel();
    if (!open_) Await(3);
    grpc::Status status;
    call_->Finish(&status, Tag(4));
    Await(4);
    cq_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) {
    }
  }

 private:
  static void* Tag(intptr_t n) { return reinterpret_cast<void*>(n); }
  // Waits up to 10 s for the event `n`; returns whether it came and succeeded.
  bool Await(intptr_t n) {
    const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(10);
    void* tag = nullptr;
    bool ok = false;
    while (cq_.AsyncNext(&tag, &ok, deadline) == grpc::CompletionQueue::GOT_EVENT) {
      if (tag == Tag(n)) return ok;
    }
    return false;
  }

  grpc::GenericStub stub_;
  grpc::ClientContext context_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  grpc::ByteBuffer first_;
  bool open_ = false;
};

TEST_F(LimitsTest, CallsPastTheConcurrentStreamsOfAConnectionWaitTheirTurn) {
  // Two channels with the same address and arguments: gRPC gives them one connection, as it
  // does to the Clients of one job.
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(Address(), grpc::InsecureChannelCredentials());
  std::shared_ptr<grpc::Channel> same_connection =
      grpc::CreateChannel(Address(), grpc::InsecureChannelCredentials());
  std::vector<std::unique_ptr<HeldStream>> held;
  for (int i = 0; i < kMaxStreams; ++i) {
    held.push_back(std::make_unique<HeldStream>(channel));
    ASSERT_TRUE(held.back()->Open()) << "stream " << i;
  }
  // A call past the limit on the same connection is queued by the client, not refused...
  std::atomic<bool> done{false};
  grpc::Status queued_status;
  std::thread queued([&] {
    auto stub = v1::KernelService::NewStub(same_connection);
    v1::StatsResponse stats;
    queued_status = stub->Stats(Context().get(), v1::StatsRequest(), &stats);
    done = true;
  });
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_FALSE(done) << queued_status.error_message();

  // ...while another connection is served at once...
  v1::StatsResponse stats;
  EXPECT_TRUE(stub_->Stats(Context().get(), v1::StatsRequest(), &stats).ok());
  EXPECT_FALSE(done);

  // ...and it runs as soon as a stream of its connection is free.
  const auto freed = steady_clock::now();
  held.front()->Cancel();
  queued.join();
  EXPECT_TRUE(queued_status.ok()) << queued_status.error_message();
  EXPECT_LT(steady_clock::now() - freed, std::chrono::seconds(10));
}

}  // namespace
}  // namespace stitch::daemon
