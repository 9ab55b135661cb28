#include "daemon.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "cluster_tier.h"
#include "compile_pool.h"
#include "compile_worker.h"
#include "daemon_metrics.h"
#include "kernel_resolver.h"
#include "kernel_service.h"
#include "lock_file.h"
#include "runtime_ledger.h"
#include "stitch/cache/memory_store.h"
#include "stitch/cache/rocksdb_store.h"
#include "stitch/cache/tiered_store.h"
#include "stitch/ir/key.h"
#include "stitch/metrics/http_server.h"
#include "stitch/metrics/process_metrics.h"
#include "tls_credentials.h"

namespace stitch::daemon {
namespace {

// How often the persistent totals are written, so a crash loses at most this much.
constexpr std::chrono::seconds kSaveInterval{30};
// What requests that arrive while draining get before they are cancelled.
constexpr std::chrono::milliseconds kShutdownGrace{250};

StatusOr<metrics::HttpServerOptions> ParseHostPort(const std::string& listen) {
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("'" + listen + "' is not host:port");
  metrics::HttpServerOptions o;
  o.address = listen.substr(0, colon);
  if (o.address.size() >= 2 && o.address.front() == '[') {
    o.address = o.address.substr(1, o.address.size() - 2);
  }
  o.port = static_cast<uint16_t>(std::stoi(listen.substr(colon + 1)));
  return o;
}

class DaemonImpl : public Daemon {
 public:
  explicit DaemonImpl(DaemonConfig config) : config_(std::move(config)) {}
  ~DaemonImpl() override { Shutdown(); }

  Status Init();
  void Shutdown() override;
  int grpc_port() const override { return grpc_port_; }
  int metrics_port() const override { return http_ ? http_->port() : 0; }

 private:
  Status OpenStores();
  Status StartGrpc();
  Status StartMetrics();
  void RefreshCacheGauges();
  void LoadSaved();
  void SaveTotals();
  void SaveLoop();
  void WriteRuntimeInfo();

  DaemonConfig config_;
  std::optional<LockFile> data_lock_;
  std::optional<LockFile> socket_lock_;
  std::shared_ptr<cache::RocksDbStore> disk_;
  std::shared_ptr<cache::KernelStore> memory_;
  std::shared_ptr<cache::ClusterStore> cluster_;  // null without a cluster tier
  std::unique_ptr<cache::TieredStore> store_;
  metrics::Registry registry_;
  std::unique_ptr<DaemonMetrics> metrics_;
  std::unique_ptr<RuntimeLedger> runtimes_;
  // Declared before the pool, so that it outlives every compile task.
  std::unique_ptr<CompileWorkers> workers_;
  std::unique_ptr<CompilePool> pool_;
  std::unique_ptr<KernelResolver> resolver_;
  std::unique_ptr<KernelServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<metrics::HttpServer> http_;
  int grpc_port_ = 0;
  std::atomic<bool> serving_{false};
  bool shut_down_ = false;
  bool wrote_runtime_info_ = false;

  std::mutex save_mu_;
  std::condition_variable save_cv_;
  bool stop_saving_ = false;
  std::thread saver_;
};

Status DaemonImpl::Init() {
  // The config's target is checked where it is parsed; a config built in code is checked here.
  StatusOr<Target> target = Target::Parse(config_.target);
  if (!target.ok()) return target.status().WithContext("config target");
  std::error_code ec;
  std::filesystem::create_directories(config_.data_dir, ec);
  if (ec) return Unavailable("cannot create data dir " + config_.data_dir + ": " + ec.message());
  STITCH_ASSIGN_OR_RETURN(LockFile data_lock, LockFile::Acquire(config_.data_dir + "/stitchd.lock",
                                                                "data dir " + config_.data_dir));
  data_lock_.emplace(std::move(data_lock));
  if (!config_.socket_path.empty()) {
    STITCH_RETURN_IF_ERROR(PrepareSocketDirectory(config_.socket_path));
    STITCH_ASSIGN_OR_RETURN(
        LockFile socket_lock,
        LockFile::Acquire(config_.socket_path + ".lock", "socket " + config_.socket_path));
    socket_lock_.emplace(std::move(socket_lock));
    // Only now, holding the lock, is a socket file left at the path known to be stale.
    STITCH_RETURN_IF_ERROR(RemoveStaleSocket(config_.socket_path));
  }
  metrics_ =
      std::make_unique<DaemonMetrics>(registry_, STITCH_VERSION, CompilerVersion(), config_.target);
  STITCH_RETURN_IF_ERROR(OpenStores());
  metrics::AddProcessMetrics(registry_);
  registry_.AddCollectHook([this] { RefreshCacheGauges(); });
  LoadSaved();

  if (config_.compile_isolation == "process") {
    if (config_.compile_worker_executable.empty()) {
      return FailedPrecondition(
          "compile_isolation process needs the stitchd executable to run workers of; set "
          "compile_isolation: thread to compile in this process");
    }
    CompileWorkerLimits limits;
    limits.cpu_seconds = config_.compile_cpu_seconds;
    limits.memory_bytes = config_.compile_memory_bytes;
    limits.wall_seconds = config_.compile_timeout_seconds;
    limits.fault_injection = config_.compile_fault_injection;
    if (limits.fault_injection) {
      spdlog::warn(
          "compile_fault_injection is on: graphs named stitch.fault.* crash their "
          "compile worker (a test setting)");
    }
    workers_ = std::make_unique<CompileWorkers>(config_.compile_worker_executable, limits,
                                                config_.workers);
  } else if (config_.compile_isolation != "thread") {
    return InvalidArgument("compile_isolation: expected process or thread, got " +
                           config_.compile_isolation);
  }
  pool_ = std::make_unique<CompilePool>(config_.workers, config_.max_queue);
  ResolverOptions ro;
  ro.default_target = *target;
  ro.salt = config_.salt;
  ro.ptx_only = config_.ptx_only;
  // A holder that keeps renewing for this long is stuck; its waiters compile themselves.
  ro.cluster_wait = std::chrono::milliseconds(config_.cluster_lease_ms) * 20;
  ro.limits.max_nodes = config_.max_graph_nodes;
  ro.limits.max_rank = static_cast<int>(config_.max_tensor_rank);
  ro.limits.max_elements_per_tensor = static_cast<int64_t>(config_.max_tensor_elements);
  ro.max_hlo_text_bytes = config_.max_hlo_text_bytes;
  ro.workers = workers_.get();
  ro.negative_ttl = std::chrono::seconds(config_.negative_cache_seconds);
  resolver_ = std::make_unique<KernelResolver>(ro, *store_, *pool_, *metrics_, cluster_.get());
  ServiceInfo info;
  info.version = STITCH_VERSION;
  info.target = config_.target;
  info.limits.max_usage_records = config_.max_usage_records;
  info.limits.max_list_entries = config_.max_list_entries;
  service_ = std::make_unique<KernelServiceImpl>(*resolver_, *store_, *pool_, *metrics_, *runtimes_,
                                                 std::move(info));
  STITCH_RETURN_IF_ERROR(StartGrpc());
  STITCH_RETURN_IF_ERROR(StartMetrics());
  serving_ = true;
  saver_ = std::thread([this] { SaveLoop(); });
  WriteRuntimeInfo();
  spdlog::info("serving socket={} grpc_port={} metrics_port={} target={} workers={} data_dir={}",
               config_.socket_path, grpc_port_, metrics_port(), config_.target, config_.workers,
               config_.data_dir);
  return Status::Ok();
}

Status DaemonImpl::OpenStores() {
  cache::RocksDbOptions ro;
  ro.path = config_.data_dir + "/cache";
  ro.capacity_bytes = config_.disk_cache_bytes;
  STITCH_ASSIGN_OR_RETURN(std::unique_ptr<cache::RocksDbStore> disk, cache::RocksDbStore::Open(ro));
  disk_ = std::move(disk);
  memory_ = cache::NewMemoryStore(config_.memory_cache_bytes);
  std::vector<std::shared_ptr<cache::KernelStore>> tiers = {memory_, disk_};
  if (!config_.cluster_nodes.empty()) {
    STITCH_ASSIGN_OR_RETURN(cluster_, OpenClusterTier(config_, metrics_.get()));
    tiers.push_back(cluster_);
    spdlog::info("cluster tier: seeds={} user={} ttl={}s lease={}ms", config_.cluster_nodes,
                 config_.cluster_user.empty() ? "default" : config_.cluster_user,
                 config_.cluster_ttl_seconds, config_.cluster_lease_ms);
  }
  store_ = std::make_unique<cache::TieredStore>(std::move(tiers));
  return Status::Ok();
}

Status DaemonImpl::StartGrpc() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (!config_.socket_path.empty()) {
    builder.AddListeningPort("unix:" + config_.socket_path, grpc::InsecureServerCredentials());
  }
  if (!config_.grpc_listen.empty()) {
    // The unix socket above stays plaintext: it is local, guarded by its mode. TCP gets TLS
    // (and client certificates) when configured; the files are checked before binding.
    STITCH_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> tcp_credentials,
                            TcpServerCredentials(config_));
    builder.AddListeningPort(config_.grpc_listen, tcp_credentials, &grpc_port_);
    spdlog::info("grpc tcp {}: {}", config_.grpc_listen, TcpSecurityName(TcpSecurityOf(config_)));
  }
  int max_bytes = static_cast<int>(std::min<uint64_t>(config_.max_message_bytes, INT32_MAX));
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(max_bytes);
  // Advertised in HTTP/2 SETTINGS, so a client queues its calls past it on that connection
  // until one finishes, rather than having them refused.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(config_.max_concurrent_streams));
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_) {
    return Unavailable("cannot start the gRPC server on socket '" + config_.socket_path +
                       "' and '" + config_.grpc_listen + "' (address in use?)");
  }
  if (!config_.grpc_listen.empty() && grpc_port_ == 0) {
    return Unavailable("cannot bind gRPC address " + config_.grpc_listen);
  }
  if (!config_.socket_path.empty()) {
    STITCH_RETURN_IF_ERROR(SetSocketMode(config_.socket_path, config_.socket_mode));
  }
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health != nullptr) health->SetServingStatus(true);
  return Status::Ok();
}

Status DaemonImpl::StartMetrics() {
  if (config_.metrics_listen.empty()) return Status::Ok();
  STITCH_ASSIGN_OR_RETURN(metrics::HttpServerOptions o, ParseHostPort(config_.metrics_listen));
  STITCH_ASSIGN_OR_RETURN(
      http_, metrics::HttpServer::Start(o, registry_, [this] { return serving_.load(); }));
  return Status::Ok();
}

void DaemonImpl::RefreshCacheGauges() {
  for (const auto& [tier, s] : store_->TierStats()) {
    // The cluster's occupancy is the engine's to report; its own counters follow.
    if (tier == cache::Tier::kCluster) continue;
    metrics_->SetCacheStats(std::string(cache::TierName(tier)), static_cast<double>(s.entries),
                            static_cast<double>(s.bytes), static_cast<double>(s.capacity_bytes),
                            static_cast<double>(s.evictions), static_cast<double>(s.corrupt));
    metrics_->SetCacheWriteErrors(std::string(cache::TierName(tier)),
                                  static_cast<double>(s.write_errors));
  }
  if (cluster_) metrics_->SetClusterStats(cluster_->ClusterStats());
  metrics_->SetRuntimeRecords(runtimes_->Top(config_.metrics_top_keys), runtimes_->size(),
                              runtimes_->dropped());
  metrics_->queue_depth().Set(pool_->queued());
  metrics_->compiles_in_flight().Set(pool_->running());
}

// A store that cannot be read starts the counters and runtime records from zero rather than
// keeping the node from serving.
void DaemonImpl::LoadSaved() {
  StatusOr<std::map<std::string, double>> totals = disk_->LoadCounters();
  if (totals.ok()) {
    metrics_->RestoreTotals(*totals);
  } else {
    spdlog::warn("could not load saved totals: {}", totals.status().ToString());
  }
  runtimes_ = std::make_unique<RuntimeLedger>(config_.runtime_records_max);
  StatusOr<std::vector<v1::KernelRuntimes>> runtimes = disk_->LoadRuntimes();
  if (runtimes.ok()) {
    runtimes_->Restore(std::move(*runtimes));
  } else {
    spdlog::warn("could not load measured runtimes: {}", runtimes.status().ToString());
  }
}

void DaemonImpl::SaveTotals() {
  Status s = disk_->SaveCounters(metrics_->PersistentTotals());
  if (!s.ok()) spdlog::warn("could not save totals: {}", s.ToString());
  std::vector<v1::KernelRuntimes> changed = runtimes_->TakeChanged();
  if (changed.empty()) return;
  s = disk_->SaveRuntimes(changed);
  if (!s.ok()) {
    spdlog::warn("could not save {} measured runtimes: {}", changed.size(), s.ToString());
    runtimes_->MarkChanged(changed);
  }
}

void DaemonImpl::SaveLoop() {
  std::unique_lock lock(save_mu_);
  while (!save_cv_.wait_for(lock, kSaveInterval, [this] { return stop_saving_; })) {
    SaveTotals();
  }
}

void DaemonImpl::WriteRuntimeInfo() {
  nlohmann::json info = {
      {"pid", ::getpid()},       {"version", STITCH_VERSION},      {"socket", config_.socket_path},
      {"grpc_port", grpc_port_}, {"metrics_port", metrics_port()}, {"target", config_.target}};
  // Written beside and renamed, so a reader never sees half a file.
  std::string path = RuntimeInfoPath(config_);
  std::ofstream(path + ".tmp") << info.dump() << "\n";
  std::error_code ec;
  std::filesystem::rename(path + ".tmp", path, ec);
  wrote_runtime_info_ = !ec;
}

void DaemonImpl::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  serving_ = false;
  if (server_) {
    spdlog::info("draining: up to {:.0f}s for in-flight requests", config_.drain_seconds);
    if (auto* health = server_->GetHealthCheckService()) health->SetServingStatus(false);
    // gRPC's own shutdown also waits out idle client connections, so the daemon waits for
    // its requests itself and then gives the server only a short grace.
    auto drain_end = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(config_.drain_seconds * 1e3));
    while (service_->pending() > 0 && std::chrono::steady_clock::now() < drain_end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    server_->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
    server_->Wait();
  }
  // Requests waiting on another node's compile fall back; compiles still queued or running
  // finish and land in the cache.
  if (resolver_) resolver_->StopWaiting();
  if (pool_) pool_->Drain();
  if (saver_.joinable()) {
    {
      std::lock_guard lock(save_mu_);
      stop_saving_ = true;
    }
    save_cv_.notify_all();
    saver_.join();
  }
  if (metrics_ && runtimes_ && disk_) SaveTotals();
  if (http_) http_->Stop();
  if (disk_) {
    Status closed = disk_->Close();
    if (!closed.ok()) spdlog::error("closing the cache: {}", closed.ToString());
  }
  std::error_code ec;
  if (wrote_runtime_info_) std::filesystem::remove(RuntimeInfoPath(config_), ec);
  if (server_) spdlog::info("stopped");
}

}  // namespace

std::string RuntimeInfoPath(const DaemonConfig& config) {
  return config.data_dir + "/stitchd.json";
}

StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const DaemonConfig& config) {
  auto daemon = std::make_unique<DaemonImpl>(config);
  Status s = daemon->Init();
  if (!s.ok()) return s;
  return std::unique_ptr<Daemon>(std::move(daemon));
}

}  // namespace stitch::daemon
