// A real gRPC KernelService on a unix socket in a fresh temp directory, whose answers the
// test scripts, so the client's behaviour against slow, failing or odd daemons can be
// checked on demand. Handlers are set before Start() and must be thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "stitch/v1/kernel_service.grpc.pb.h"

namespace stitch::testing {

// Returns a new directory /tmp/stitch-test-XXXXXX (short: socket paths must fit 108 bytes).
inline std::string MakeTempDir() {
  char tmpl[] = "/tmp/stitch-test-XXXXXX";
  char* dir = ::mkdtemp(tmpl);
  EXPECT_NE(dir, nullptr);
  return dir == nullptr ? std::string("/tmp") : std::string(dir);
}

class ScriptedService final : public v1::KernelService::Service {
 public:
  using CompileFn = std::function<grpc::Status(const v1::CompileRequest&, v1::CompileResponse*)>;
  using UsageFn =
      std::function<grpc::Status(const v1::ReportUsageRequest&, v1::ReportUsageResponse*)>;

  CompileFn compile;
  CompileFn lookup;
  UsageFn report_usage;
  std::function<grpc::Status(v1::StatsResponse*)> stats;
  std::function<grpc::Status(const v1::ListEntriesRequest&, v1::ListEntriesResponse*)> list;
  std::function<grpc::Status(const v1::GetEntryRequest&, v1::CompileResponse*)> get;
  std::function<grpc::Status(const v1::ExtractRequest&, v1::ExtractResponse*)> extract;

  std::atomic<int> compile_calls{0};
  std::atomic<int> lookup_calls{0};
  std::atomic<int> usage_calls{0};
  std::atomic<int> admin_calls{0};
  std::atomic<int> extract_calls{0};

  // Every request the usage and compile handlers saw, in arrival order.
  std::vector<v1::ReportUsageRequest> UsageRequests() {
    std::lock_guard<std::mutex> lock(mu_);
    return usage_requests_;
  }
  std::vector<v1::CompileRequest> CompileRequests() {
    std::lock_guard<std::mutex> lock(mu_);
    return compile_requests_;
  }

  grpc::Status Compile(grpc::ServerContext*, const v1::CompileRequest* request,
                       v1::CompileResponse* response) override {
    ++compile_calls;
    {
      std::lock_guard<std::mutex> lock(mu_);
      compile_requests_.push_back(*request);
    }
    return compile ? compile(*request, response) : Unscripted();
  }
  grpc::Status Lookup(grpc::ServerContext*, const v1::CompileRequest* request,
                      v1::CompileResponse* response) override {
    ++lookup_calls;
    return lookup ? lookup(*request, response) : Unscripted();
  }
  grpc::Status ReportUsage(grpc::ServerContext*, const v1::ReportUsageRequest* request,
                           v1::ReportUsageResponse* response) override {
    ++usage_calls;
    {
      std::lock_guard<std::mutex> lock(mu_);
      usage_requests_.push_back(*request);
    }
    return report_usage ? report_usage(*request, response) : Unscripted();
  }
  grpc::Status Stats(grpc::ServerContext*, const v1::StatsRequest*,
                     v1::StatsResponse* response) override {
    ++admin_calls;
    return stats ? stats(response) : Unscripted();
  }
  grpc::Status ListEntries(grpc::ServerContext*, const v1::ListEntriesRequest* request,
                           v1::ListEntriesResponse* response) override {
    ++admin_calls;
    return list ? list(*request, response) : Unscripted();
  }
  grpc::Status GetEntry(grpc::ServerContext*, const v1::GetEntryRequest* request,
                        v1::CompileResponse* response) override {
    ++admin_calls;
    return get ? get(*request, response) : Unscripted();
  }
  grpc::Status Extract(grpc::ServerContext*, const v1::ExtractRequest* request,
                       v1::ExtractResponse* response) override {
    ++extract_calls;
    return extract ? extract(*request, response) : Unscripted();
  }

 private:
  static grpc::Status Unscripted() {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "not scripted in this test");
  }

  std::mutex mu_;
  std::vector<v1::ReportUsageRequest> usage_requests_;
  std::vector<v1::CompileRequest> compile_requests_;
};

// Serves `service` on <temp dir>/stitchd.sock until destroyed.
class ScriptedServer {
 public:
  explicit ScriptedServer(ScriptedService* service) : dir_(MakeTempDir()) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address(), grpc::InsecureServerCredentials());
    builder.SetMaxSendMessageSize(64 << 20);
    builder.SetMaxReceiveMessageSize(64 << 20);
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr) << "cannot serve on " << address();
  }
  ~ScriptedServer() {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      server_->Wait();
    }
    std::filesystem::remove_all(dir_);
  }
  ScriptedServer(const ScriptedServer&) = delete;
  ScriptedServer& operator=(const ScriptedServer&) = delete;

  std::string socket_path() const { return dir_ + "/stitchd.sock"; }
  std::string address() const { return "unix://" + socket_path(); }
  std::string dir() const { return dir_; }

 private:
  std::string dir_;
  std::unique_ptr<grpc::Server> server_;
};

// Serves a ScriptedService from a child process, for the fork tests: gRPC state does not
// survive fork(), so a server in the test process would make every process it forks a
// child of a gRPC user, and its polling threads would share their epoll set with the
// children. Start it before this process uses gRPC. The service's Stats answers the call
// counts: compiles = Compile calls, misses = Lookup calls, invocations_reported = the sum
// of ReportUsage invocations.
class ForkedServer {
 public:
  explicit ForkedServer(const std::function<void(ScriptedService&)>& script) : dir_(MakeTempDir()) {
    int ready[2];
    if (::pipe(ready) != 0) return;
    pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      // Never outlive the test process, even when it dies without cleaning up.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(0);
      ::close(ready[0]);
      ScriptedService service;
      script(service);
      std::atomic<uint64_t> invocations{0};
      auto usage = service.report_usage;
      service.report_usage = [&, usage](const v1::ReportUsageRequest& req,
                                        v1::ReportUsageResponse* resp) {
        for (const v1::UsageRecord& r : req.records()) invocations += r.invocations();
        if (usage) return usage(req, resp);
        resp->set_accepted(static_cast<uint32_t>(req.records_size()));
        return grpc::Status::OK;
      };
      service.stats = [&](v1::StatsResponse* s) {
        s->set_compiles(static_cast<uint64_t>(service.compile_calls.load()));
        s->set_misses(static_cast<uint64_t>(service.lookup_calls.load()));
        s->set_invocations_reported(invocations.load());
        return grpc::Status::OK;
      };
      {
        grpc::ServerBuilder builder;
        builder.AddListeningPort("unix://" + dir_ + "/stitchd.sock",
                                 grpc::InsecureServerCredentials());
        builder.RegisterService(&service);
        std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
        char byte = server ? 1 : 0;
        if (::write(ready[1], &byte, 1) != 1 || !server) ::_exit(1);
        while (true) ::pause();  // until the test process kills it
      }
    }
    ::close(ready[1]);
    pollfd p{ready[0], POLLIN, 0};
    char byte = 0;
    ready_ = pid_ > 0 && ::poll(&p, 1, 10000) == 1 && ::read(ready[0], &byte, 1) == 1 && byte == 1;
    ::close(ready[0]);
  }
  ~ForkedServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove_all(dir_);
  }
  ForkedServer(const ForkedServer&) = delete;
  ForkedServer& operator=(const ForkedServer&) = delete;

  bool ready() const { return ready_; }
  std::string address() const { return "unix://" + dir_ + "/stitchd.sock"; }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  bool ready_ = false;
};

// A bundle of `kernels` kernels whose PTX is `ptx_bytes` long.
inline v1::KernelBundle MakeBundle(const std::string& key, int kernels, size_t ptx_bytes = 64) {
  v1::KernelBundle b;
  b.set_format_version(2);
  b.set_key(key);
  b.set_target("sm_90");
  b.set_plan("stitched");
  for (int i = 0; i < kernels; ++i) {
    v1::Kernel* k = b.add_kernels();
    k->set_name("fusion_" + std::to_string(i));
    k->set_ptx(std::string(ptx_bytes, 'p'));
    k->set_cubin(std::string(16, static_cast<char>(i)));
    k->set_kind("loop");
    k->mutable_launch()->set_grid_x(8 + i);
    k->mutable_launch()->set_grid_y(1);
    k->mutable_launch()->set_grid_z(1);
    k->mutable_launch()->set_block_x(256);
    k->mutable_launch()->set_block_y(1);
    k->mutable_launch()->set_block_z(1);
  }
  return b;
}

// A handler answering every request with `source`, a key derived from the request, and a
// bundle of `kernels` kernels.
inline ScriptedService::CompileFn Answer(v1::CompileResponse::Source source, int kernels = 2) {
  return [source, kernels](const v1::CompileRequest& request, v1::CompileResponse* response) {
    std::string key =
        "k" + std::to_string(std::hash<std::string>()(request.SerializeAsString()) % 100000);
    response->set_source(source);
    response->set_key(key);
    *response->mutable_bundle() = MakeBundle(key, kernels);
    return grpc::Status::OK;
  };
}

inline v1::CompileRequest HloRequest(const std::string& name, const std::string& target = "") {
  v1::CompileRequest r;
  r.set_hlo_text("HloModule " + name + "\nENTRY e { ROOT p = f32[4] parameter(0) }\n");
  r.set_target(target);
  return r;
}

}  // namespace stitch::testing
