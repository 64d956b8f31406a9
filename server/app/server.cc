// SPDX-License-Identifier: Apache-2.0
#include "server/app/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/stats.h"
#include "server/app/policies_file.h"
#include "server/http/decision_api.h"
#include "server/app/unix_socket.h"
#include "server/rpc/message_bounds.h"
#include "spdlog/spdlog.h"
#include "wire/address.h"

namespace sluice::app {
namespace {

// The longest the housekeeping thread sleeps between two sweeps, even when
// the engine says nothing is due before.
constexpr absl::Duration kLongestSweepGap = absl::Seconds(1);
// The least time between two readiness checks of a server not ready yet
// (which checks every sweep_interval otherwise).
constexpr absl::Duration kReadinessPoll = absl::Milliseconds(50);

constexpr char kDecisionServiceName[] = "sluice.v1.DecisionService";
constexpr char kRateLimitServiceName[] =
    "envoy.service.ratelimit.v3.RateLimitService";
constexpr char kAuthorizationServiceName[] =
    "envoy.service.auth.v3.Authorization";
constexpr char kAccessLogServiceName[] =
    "envoy.service.accesslog.v3.AccessLogService";

}  // namespace

Server::Server(Options options) : Server(std::move(options), Dependencies()) {}

Server::Server(Options options, Dependencies dependencies)
    : options_(std::move(options)),
      clock_(dependencies.clock),
      replica_id_(EffectiveReplicaId(options_)),
      events_(rpc::EventHub::Options{/*queue_size=*/1024, replica_id_}),
      metrics_listener_(dependencies.metrics_listener),
      mode_(MakeMode(options_, clock_, std::move(dependencies.store_factory),
                     replica_id_, dependencies.sync_thread)),
      metrics_(&engine_),
      sink_({mode_.get(), &metrics_, &events_, &log_sink_}),
      engine_(clock_, EngineOptions(), &sink_),
      policies_(&engine_),
      decision_service_(&engine_, [m = &metrics_](absl::Duration d) {
        m->ObserveAcquire(d);
      }),
      rate_limit_service_(&engine_, &decision_service_),
      http_check_(&engine_, &decision_service_),
      ext_authz_service_(&http_check_),
      access_log_service_(&engine_, &decision_service_) {}

Server::~Server() { Shutdown(absl::Now()); }

core::Engine::Options Server::EngineOptions() const {
  core::Engine::Options engine_options;
  engine_options.unknown_dependency = options_.unknown_dependency;
  mode_->ConfigureEngine(&engine_options);
  return engine_options;
}

void Server::AddStatsSources() {
  std::vector<const base::StatsSource*> sources = {
      &events_, &decision_service_, &rate_limit_service_, &ext_authz_service_,
      &access_log_service_};
  for (const base::StatsSource* source : mode_->stats_sources()) {
    sources.push_back(source);
  }
  if (!options_.policies_path.empty()) sources.push_back(&policy_reloads_);
  if (tls_ != nullptr) sources.push_back(tls_.get());
  if (http_server_ != nullptr) sources.push_back(http_server_.get());
  if (admin_server_->token_file() != nullptr) {
    sources.push_back(admin_server_->token_file());
  }
  for (const base::StatsSource* source : sources) metrics_.AddSource(source);
}

absl::Status Server::BuildAndStart() {
  {
    absl::MutexLock lock(&mu_);
    if (started_)
      return absl::FailedPreconditionError("server already started");
    started_ = true;
    starting_ = true;  // a Shutdown from another thread waits for the end
  }
  const absl::Status status = Start();
  absl::MutexLock lock(&mu_);
  starting_ = false;
  return status;
}

absl::Status Server::Start() {
  // main.cc has checked them already; an embedder or a test may not have.
  if (absl::Status s = ValidateOptions(options_); !s.ok()) return s;
  LogConfiguration(options_, replica_id_);
  // Policies first: a bad file at startup is fatal and nothing is bound.
  absl::StatusOr<LoadedPolicies> file =
      InstallStartupPolicies(options_, &policies_);
  if (!file.ok()) return file.status();
  // Then the certificate files: as fatal, and checked before anything runs.
  if (absl::Status s = StartTls(); !s.ok()) return s;
  const ModeContext context{&engine_, &policies_, &events_, &decision_service_};
  if (absl::Status s = mode_->Start(context, file->policies); !s.ok()) {
    return s;
  }
  if (absl::Status s = StartDecisionService(); !s.ok()) return s;
  SetServing(false);
  absl::Status started = StartHttpApi();
  if (started.ok()) started = StartOperatorSurfaces();
  if (!started.ok()) {
    if (http_server_ != nullptr) http_server_->Stop(absl::Now());
    grpc_server_->Shutdown(absl::ToChronoTime(absl::Now()));
    return started;
  }
  watcher_ = WatchPoliciesFile(options_, file->contents, mode_.get(),
                               &policy_reloads_);
  housekeeping_ = std::thread([this] { Housekeeping(); });
  UpdateReadiness();
  spdlog::info(
      "serving DecisionService on {} (and Envoy's rate-limit, external "
      "authorization and access-log services)",
      target());
  return absl::OkStatus();
}

absl::StatusOr<std::optional<UnixSocketClaim>> Server::Listen(
    const std::string& address,
    const std::function<absl::Status()>& start) const {
  const wire::Endpoint endpoint = *wire::ParseEndpoint(address);  // validated
  if (!endpoint.is_unix()) {
    if (absl::Status s = start(); !s.ok()) return s;
    return std::optional<UnixSocketClaim>();
  }
  absl::StatusOr<UnixSocketClaim> claim =
      UnixSocketClaim::Take(endpoint.unix_path);
  if (!claim.ok()) return claim.status();
  if (absl::Status s = start(); !s.ok()) return s;
  if (absl::Status s = claim->SetMode(options_.socket_mode); !s.ok()) return s;
  return std::optional<UnixSocketClaim>(*std::move(claim));
}

absl::Status Server::StartTls() {
  const tls::ServerTlsFiles files = TlsFiles(options_);
  if (!files.enabled()) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<tls::TlsReloader>> reloader =
      tls::TlsReloader::Start(files, tls::kTlsReloadInterval);
  if (!reloader.ok()) return reloader.status();
  tls_ = *std::move(reloader);
  // gRPC's credentials only for a TCP gRPC listener: a Unix socket is
  // plaintext, guarded by its file mode.
  if (!absl::StartsWith(options_.listen, "unix:") ||
      !absl::StartsWith(options_.admin_listen, "unix:")) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
        tls_->GrpcCredentials();
    if (!credentials.ok()) return credentials.status();
    tls_credentials_ = *std::move(credentials);
  }
  spdlog::info(
      "TLS on for the TCP listeners of --listen, --admin-listen and "
      "--http-listen ({}); certificate files re-read every {}",
      files.mutual() ? "client certificates required" : "no client certificate",
      absl::FormatDuration(tls::kTlsReloadInterval));
  if (metrics_listener_) {
    spdlog::warn(
        "/metrics on {} stays plaintext (no TLS); keep it on a private "
        "network (docs/tls.md)",
        options_.metrics_listen);
  }
  for (const std::string* address :
       {&options_.listen, &options_.admin_listen}) {
    if (absl::StartsWith(*address, "unix:")) {
      spdlog::info("{} stays plaintext: a Unix socket, guarded by its mode {}",
                   *address, FormatSocketMode(options_.socket_mode));
    }
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::ServerCredentials> Server::ListenerCredentials(
    const std::string& address) const {
  if (tls_credentials_ == nullptr || absl::StartsWith(address, "unix:")) {
    return grpc::InsecureServerCredentials();
  }
  return tls_credentials_;
}

absl::Status Server::StartDecisionService() {
  absl::StatusOr<std::optional<UnixSocketClaim>> socket =
      Listen(options_.listen, [this] { return BindDecisionService(); });
  if (!socket.ok()) {
    if (grpc_server_ != nullptr) {
      grpc_server_->Shutdown(absl::ToChronoTime(absl::Now()));
    }
    return socket.status();
  }
  if (socket->has_value()) sockets_.push_back(**std::move(socket));
  return absl::OkStatus();
}

absl::Status Server::BindDecisionService() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // A connection that never finishes its (TLS) handshake is closed after
  // 10 s instead of gRPC's default of 120 s.
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, 10000);
  // The largest valid request of the data port (a full Decide message or
  // ReportResults batch), not gRPC's 4 MiB; each method then checks its own,
  // smaller budget on the raw bytes before parsing (rpc/message_bounds.h).
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(rpc::kMaxDataMessageBytes));
  // What a stream may send ahead of the handler: with gRPC's bandwidth
  // probe the window of a stream whose handler stopped reading (a Decide
  // client that does not read its answers) grows to megabytes of buffered
  // requests; without it, it stays at the 64 KiB lookahead.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.AddListeningPort(options_.listen, ListenerCredentials(options_.listen),
                           &port_);
  builder.RegisterService(&decision_service_);
  builder.RegisterService(&rate_limit_service_);
  builder.RegisterService(&ext_authz_service_);
  builder.RegisterService(&access_log_service_);
  // A central replica's lease service (a leaf's tick fits the data port's
  // limit; the service lets the leaves' keepalive pings through).
  mode_->AddDataServices(&builder);
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || port_ == 0) {
    grpc_server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options_.listen,
                     " (address in use or not available?)"));
  }
  return absl::OkStatus();
}

absl::Status Server::StartHttpApi() {
  if (options_.http_listen.empty()) return absl::OkStatus();
  http::HttpServerOptions http_options;
  http_options.listen = options_.http_listen;
  http_options.io_threads = options_.http_threads;
  http_options.max_connections = options_.http_max_connections;
  if (tls_ != nullptr) {
    http_options.tls_context = [tls = tls_.get()] { return tls->context(); };
  }
  absl::StatusOr<std::unique_ptr<http::HttpServer>> server =
      http::HttpServer::Start(http_options, &decision_service_, &http_check_);
  if (!server.ok()) return server.status();
  http_server_ = *std::move(server);
  spdlog::info("serving HTTP API on {}{}", http_target(),
               tls_ != nullptr ? " (TLS)" : "");
  return absl::OkStatus();
}

absl::Status Server::StartOperatorSurfaces() {
  rpc::AdminServer::Options admin_options;
  admin_options.listen = options_.admin_listen;
  admin_options.token_file = options_.admin_token_file;
  admin_options.credentials = ListenerCredentials(options_.admin_listen);
  absl::StatusOr<std::optional<UnixSocketClaim>> admin_socket =
      Listen(options_.admin_listen, [&]() -> absl::Status {
        absl::StatusOr<std::unique_ptr<rpc::AdminServer>> admin =
            rpc::AdminServer::Start(admin_options, &engine_,
                                    mode_->admin_backend(), &events_);
        if (!admin.ok()) return admin.status();
        admin_server_ = *std::move(admin);
        return absl::OkStatus();
      });
  if (!admin_socket.ok()) return admin_socket.status();
  if (admin_socket->has_value()) sockets_.push_back(**std::move(admin_socket));
  AddStatsSources();
  if (metrics_listener_) {
    absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> metrics =
        metrics::MetricsServer::Start(options_.metrics_listen, &metrics_);
    if (!metrics.ok()) return metrics.status();
    metrics_server_ = *std::move(metrics);
  }
  spdlog::info(
      "serving AdminService on {} ({}{})", admin_target(),
      admin_server_->has_token() ? "bearer token required" : "no token",
      mode_->admin_note());
  if (metrics_server_ != nullptr) {
    spdlog::info("serving metrics on {}/metrics",
                 BoundAddress(options_.metrics_listen, metrics_port()));
  }
  return absl::OkStatus();
}

void Server::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&stopped_));
}

void Server::Shutdown(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    // A start under way finishes first: then what it started is stopped.
    mu_.Await(absl::Condition(
        +[](bool* starting) { return !*starting; }, &starting_));
    if (stopping_) {
      mu_.Await(absl::Condition(&stopped_));
      return;
    }
    stopping_ = true;
  }
  engine_.sweep_alarm().Stop();  // ends the housekeeping thread's wait
  if (grpc_server_ != nullptr) {
    spdlog::info(
        "shutting down: NOT_SERVING, draining in-flight RPCs for up "
        "to {}",
        absl::FormatDuration(
            absl::Ceil(std::max(deadline - absl::Now(), absl::ZeroDuration()),
                       absl::Milliseconds(100))));
    // Health reports NOT_SERVING from here on, so load balancers move away.
    grpc_server_->GetHealthCheckService()->Shutdown();
    // The HTTP API drains alongside gRPC, each until the same deadline:
    // idle connections close at once, requests under way finish. One slow
    // HTTP client must not use up the time the gRPC drain has.
    std::thread http_stop;
    if (http_server_ != nullptr) {
      http_server_->SetServing(false);
      http_stop = std::thread([this, deadline] { http_server_->Stop(deadline); });
    }
    // Decide and access-log streams never end by themselves: they end now,
    // each after the calls or entries it already read.
    decision_service_.EndStreams();
    access_log_service_.EndStreams();
    grpc_server_->Shutdown(absl::ToChronoTime(deadline));
    if (http_stop.joinable()) http_stop.join();
  }
  // WatchEvents streams never end by themselves: cancel them at once.
  if (admin_server_ != nullptr) admin_server_->Shutdown(absl::Now());
  metrics_server_.reset();
  if (watcher_ != nullptr) watcher_->Stop();
  if (housekeeping_.joinable()) housekeeping_.join();
  // After the drain, so the last tick carries the final counts.
  mode_->Stop();
  // Nobody accepts on them any more: a client now fails at once, and the
  // next sluiced finds the paths free.
  sockets_.clear();
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

std::shared_ptr<grpc::Channel> Server::InProcessChannel() {
  return grpc_server_->InProcessChannel(grpc::ChannelArguments());
}

std::shared_ptr<grpc::Channel> Server::AdminInProcessChannel() {
  return admin_server_->InProcessChannel();
}

absl::Status Server::SyncNow() {
  const absl::Status status = mode_->SyncNow();
  UpdateReadiness();
  return status;
}

std::string Server::target() const {
  return BoundAddress(options_.listen, port_);
}

std::string Server::admin_target() const {
  return BoundAddress(options_.admin_listen, admin_port());
}

std::string Server::http_target() const {
  return http_server_ ? BoundAddress(options_.http_listen, http_port()) : "";
}

void Server::SetServing(bool serving) {
  grpc::HealthCheckServiceInterface* health =
      grpc_server_->GetHealthCheckService();
  health->SetServingStatus(serving);  // "" (the whole server)
  health->SetServingStatus(kDecisionServiceName, serving);
  health->SetServingStatus(kRateLimitServiceName, serving);
  health->SetServingStatus(kAuthorizationServiceName, serving);
  health->SetServingStatus(kAccessLogServiceName, serving);
  if (http_server_ != nullptr) http_server_->SetServing(serving);
}

bool Server::UpdateReadiness() {
  {
    // Decided once: a ready server asks the mode no more (a cluster mode
    // walks every policy, and at its bound logs why it is ready anyway).
    absl::MutexLock lock(&mu_);
    if (ready_ || stopping_) return ready_;
  }
  std::string waiting;
  const bool ready = mode_->Ready(&waiting);
  absl::MutexLock lock(&mu_);
  if (ready_ || stopping_) return ready_;
  const absl::Time now = absl::Now();
  if (!ready) {
    if (waiting != waiting_for_) {
      spdlog::info(
          "not ready yet (health NOT_SERVING; calls are still "
          "decided): {}",
          waiting);
      waiting_for_ = waiting;
      if (waiting_since_ == absl::InfinitePast()) waiting_since_ = now;
    }
    return false;
  }
  SetServing(true);
  ready_ = true;
  if (waiting_since_ != absl::InfinitePast()) {
    spdlog::info("ready: health SERVING, {} after the listeners came up",
                 absl::FormatDuration(
                     absl::Trunc(now - waiting_since_, absl::Milliseconds(1))));
  }
  return true;
}

void Server::Housekeeping() {
  core::SweepAlarm& alarm = engine_.sweep_alarm();
  while (true) {
    engine_.Sweep();
    // In the engine's clock, as the due times are. Another sweep comes no
    // sooner than sweep_interval, however busy the engine is, and no later
    // than kLongestSweepGap, whatever the alarm says (a guard: the alarm
    // should never need it).
    const absl::Time swept = clock_->Now();
    const absl::Time earliest = swept + options_.sweep_interval;
    // Until ready, the next readiness check comes within kReadinessPoll.
    const absl::Duration longest =
        UpdateReadiness() ? kLongestSweepGap : kReadinessPoll;
    const absl::Time latest =
        swept + std::max(options_.sweep_interval, longest);
    while (true) {
      const core::SweepPlan plan =
          core::PlanSweep(alarm.due(), earliest, latest);
      // The wait is real time; with a fake clock the sweeps still come, at
      // most kLongestSweepGap apart.
      const absl::Duration wait = plan.wake - clock_->Now();
      const core::SweepAlarm::Wake wake =
          alarm.Wait(plan.wake_if_below, absl::Now() + wait);
      if (wake == core::SweepAlarm::Wake::kStopped) return;
      if (wake == core::SweepAlarm::Wake::kDeadline) break;
      // kLowered: something became due sooner; plan again.
    }
  }
}

}  // namespace sluice::app
