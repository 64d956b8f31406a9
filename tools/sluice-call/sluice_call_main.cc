// SPDX-License-Identifier: Apache-2.0
// sluice-call: a small DecisionService client for operators and examples.
//
//   sluice-call [--target ADDRESS] acquire DEP [--key K] [--permits N]
//   sluice-call [--target ADDRESS] report DEP PERMIT_ID OUTCOME
//               [--latency 120ms] [--key K] [--status-code N]
//   sluice-call [--target ADDRESS] health [SERVICE]
//
// Exit codes: 0 ok, 1 RPC error (or health not SERVING), 2 usage error.

#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/command_line.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "wire/status.h"
#include "wire/time.h"
#include "wire/tls.h"

namespace sluice::call {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitRpcError = 1;
constexpr int kExitUsage = 2;

constexpr char kUsage[] =
    "Usage:\n"
    "  sluice-call [--target ADDRESS] [--deadline 5s] acquire DEPENDENCY\n"
    "              [--key KEY] [--permits N] [--caller NAME]\n"
    "  sluice-call [--target ADDRESS] [--deadline 5s] report DEPENDENCY\n"
    "              PERMIT_ID success|failure|timeout|cancelled\n"
    "              [--latency 120ms] [--key KEY] [--status-code N]\n"
    "  sluice-call [--target ADDRESS] [--deadline 5s] health [SERVICE]\n"
    "\n"
    "ADDRESS is HOST:PORT, or unix:PATH for a sidecar's socket; --target\n"
    "defaults to $SLUICE_TARGET, else 127.0.0.1:50051.\n"
    "TLS (sluiced with --tls-cert): --tls-ca PATH (the CA of sluiced's\n"
    "certificate), and for --tls-client-ca also --tls-cert PATH and\n"
    "--tls-key PATH; --tls-server-name NAME when the certificate does not\n"
    "name the target's host. Env: SLUICE_TARGET_TLS_CA, _CERT, _KEY,\n"
    "_SERVER_NAME.\n"
    "PERMIT_ID is the permit_id printed by acquire (\"\" for none).\n"
    "Exit codes: 0 ok, 1 RPC error or health not SERVING, 2 usage error.\n";

int Usage(const std::string& message) {
  std::fprintf(stderr, "sluice-call: %s\n", message.c_str());
  std::fputs(kUsage, stderr);
  return kExitUsage;
}

// The global flags, with their defaults.
struct Options {
  std::string target = "127.0.0.1:50051";
  absl::Duration deadline = absl::Seconds(5);
  wire::ClientTlsFiles tls;  // no files: plaintext
};

std::unique_ptr<grpc::ClientContext> Context(const Options& options) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + options.deadline));
  return context;
}

int RpcError(const grpc::Status& status) {
  const absl::Status s = wire::FromGrpcStatus(status);
  std::string code = absl::StatusCodeToString(s.code());
  if (code.empty()) code = "UNKNOWN";
  std::fprintf(stderr, "error: %s: %s\n", code.c_str(),
               std::string(s.message()).c_str());
  return kExitRpcError;
}

void PrintRow(const char* name, const std::string& value) {
  std::printf("%-15s %s\n", name, value.c_str());
}

std::string DurationOrNone(bool has, const google::protobuf::Duration& d) {
  return has ? wire::FormatDurationProto(d) : "(none)";
}

// An integer flag; `--flag wants a number, got "x"` otherwise.
template <typename Int>
absl::Status ParseInt(const std::string& flag, const std::string& text,
                      Int* out) {
  if (!absl::SimpleAtoi(text, out)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " wants a number, got \"", text, "\""));
  }
  return absl::OkStatus();
}

absl::Status ParseDeadline(const std::string& text, absl::Duration* deadline) {
  absl::StatusOr<absl::Duration> d = wire::ParseDurationFlag(text);
  if (!d.ok() || *d <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--deadline wants a positive duration like 2s, got \"", text, "\""));
  }
  *deadline = *d;
  return absl::OkStatus();
}

// "--latency=" sends none.
absl::Status ParseLatency(const std::string& text,
                          std::optional<absl::Duration>* latency) {
  if (text.empty()) return absl::OkStatus();
  absl::StatusOr<absl::Duration> d = wire::ParseDurationFlag(text);
  if (!d.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--latency wants a duration like 120ms, got \"", text, "\""));
  }
  *latency = *d;
  return absl::OkStatus();
}

struct AcquireArgs {
  std::string dependency;
  std::string key;
  std::string caller = "sluice-call";
  uint32_t permits = 1;
};

int Acquire(const std::shared_ptr<grpc::Channel>& channel,
            const Options& options, const AcquireArgs& args) {
  if (args.dependency.empty()) return Usage("acquire needs a DEPENDENCY");
  v1::AcquireRequest request;
  request.set_dependency(args.dependency);
  request.set_key(args.key);
  request.set_caller(args.caller);
  request.set_permits(args.permits);
  v1::AcquireResponse response;
  grpc::Status status = v1::DecisionService::NewStub(channel)->Acquire(
      Context(options).get(), request, &response);
  if (!status.ok()) return RpcError(status);

  PrintRow("verdict:", v1::Verdict_Name(response.verdict()));
  PrintRow("reason:", response.reason() == v1::REASON_UNSPECIFIED
                          ? "(none)"
                          : v1::Reason_Name(response.reason()));
  PrintRow("permit_id:",
           response.permit_id().empty() ? "(none)" : response.permit_id());
  PrintRow("call_timeout:", DurationOrNone(response.has_call_timeout(),
                                           response.call_timeout()));
  PrintRow("retry_after:",
           DurationOrNone(response.has_retry_after(), response.retry_after()));
  PrintRow("http_status:", absl::StrCat(response.http_status()));
  PrintRow("remaining:", response.remaining() < 0
                             ? "(no rate limit)"
                             : absl::StrCat(response.remaining()));
  PrintRow("breaker_state:", v1::BreakerState_Name(response.breaker_state()));
  PrintRow("policy_version:", absl::StrCat(response.policy_version()));
  if (response.has_fallback()) {
    const v1::Fallback& fallback = response.fallback();
    std::vector<std::string> on;
    for (int reason : fallback.on()) {
      on.push_back(v1::Reason_Name(static_cast<v1::Reason>(reason)));
    }
    PrintRow("fallback:",
             absl::StrCat(
                 v1::Fallback::Strategy_Name(fallback.strategy()),
                 " (on: ", on.empty() ? "every reason" : absl::StrJoin(on, ","),
                 fallback.serve_on_failure() ? ", serve_on_failure" : "",
                 fallback.has_cache_ttl()
                     ? absl::StrCat(", cache_ttl ", wire::FormatDurationProto(
                                                        fallback.cache_ttl()))
                     : "",
                 ")"));
    PrintRow("content_type:", fallback.content_type());
    PrintRow("payload:", fallback.payload());
  }
  return kExitOk;
}

struct ReportArgs {
  bool complete = false;  // DEPENDENCY, PERMIT_ID and OUTCOME all given
  std::string dependency;
  std::string permit_id;  // may be "" (no permit)
  std::string outcome;
  std::optional<absl::Duration> latency;
  std::string key;
  int32_t status_code = 0;
};

int Report(const std::shared_ptr<grpc::Channel>& channel,
           const Options& options, const ReportArgs& args) {
  if (!args.complete) {
    return Usage("report needs DEPENDENCY PERMIT_ID OUTCOME");
  }
  v1::Outcome outcome;
  if (!v1::Outcome_Parse(absl::AsciiStrToUpper(args.outcome), &outcome) ||
      outcome == v1::OUTCOME_UNSPECIFIED) {
    return Usage(absl::StrCat(
        "OUTCOME must be success, failure, timeout or cancelled, got \"",
        args.outcome, "\""));
  }
  v1::ReportResultRequest request;
  request.set_dependency(args.dependency);
  request.set_permit_id(args.permit_id);
  request.set_outcome(outcome);
  request.set_key(args.key);
  if (args.latency) {
    wire::DurationToProto(*args.latency, request.mutable_latency());
  }
  request.set_status_code(args.status_code);
  v1::ReportResultResponse response;
  grpc::Status status = v1::DecisionService::NewStub(channel)->ReportResult(
      Context(options).get(), request, &response);
  if (!status.ok()) return RpcError(status);
  PrintRow("breaker_state:", v1::BreakerState_Name(response.breaker_state()));
  return kExitOk;
}

int Health(const std::shared_ptr<grpc::Channel>& channel,
           const Options& options, const std::string& service) {
  using grpc::health::v1::HealthCheckResponse;
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  grpc::Status status = grpc::health::v1::Health::NewStub(channel)->Check(
      Context(options).get(), request, &response);
  if (!status.ok()) return RpcError(status);
  std::printf(
      "%s\n",
      HealthCheckResponse::ServingStatus_Name(response.status()).c_str());
  return response.status() == HealthCheckResponse::SERVING ? kExitOk
                                                           : kExitRpcError;
}

int Main(int argc, char** argv) {
  CLI::App app("", "sluice-call");
  base::ConfigureApp(app, kUsage);

  Options options;
  app.add_option("--target", options.target)->envname("SLUICE_TARGET");
  base::AddClientTlsFlags(app, "SLUICE_TARGET",
                          {&options.tls.ca_file, &options.tls.cert_file,
                           &options.tls.key_file, &options.tls.server_name});
  base::AddCheckedOption(&app, "--deadline", [&](const std::string& v) {
    return ParseDeadline(v, &options.deadline);
  });

  AcquireArgs acquire_args;
  CLI::App* acquire = base::AddCommand(app, "acquire", kUsage);
  acquire->add_option("DEPENDENCY", acquire_args.dependency);

  ReportArgs report_args;
  CLI::App* report = base::AddCommand(app, "report", kUsage);
  report->add_option("DEPENDENCY", report_args.dependency);
  report->add_option("PERMIT_ID", report_args.permit_id);
  CLI::Option* outcome = report->add_option("OUTCOME", report_args.outcome);

  std::string service;  // "" asks for the whole server
  CLI::App* health = base::AddCommand(app, "health", kUsage);
  health->add_option("SERVICE", service);

  CLI::App* help = base::AddCommand(app, "help", kUsage);

  base::CommandFlags flags;
  std::string key;
  flags.Add(app.add_option("--key", key), {acquire, report});
  flags.Add(app.add_option("--caller", acquire_args.caller), {acquire});
  flags.Add(base::AddCheckedOption(&app, "--permits",
                                   [&](const std::string& v) {
                                     return ParseInt("--permits", v,
                                                     &acquire_args.permits);
                                   }),
            {acquire});
  flags.Add(base::AddCheckedOption(&app, "--latency",
                                   [&](const std::string& v) {
                                     return ParseLatency(v,
                                                         &report_args.latency);
                                   }),
            {report});
  flags.Add(base::AddCheckedOption(&app, "--status-code",
                                   [&](const std::string& v) {
                                     return ParseInt("--status-code", v,
                                                     &report_args.status_code);
                                   }),
            {report});

  const base::CommandLine line = base::ParseCommandLine(app, flags, argc, argv);
  switch (line.outcome) {
    case base::CommandLine::Outcome::kHelp:
      std::fputs(line.text.c_str(), stdout);
      return kExitOk;
    case base::CommandLine::Outcome::kUsageError:
      return Usage(line.text);
    case base::CommandLine::Outcome::kRun:
      break;
  }
  if (help->parsed()) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  if (app.get_subcommands().empty()) return Usage("missing command");

  absl::StatusOr<std::shared_ptr<grpc::Channel>> made =
      wire::MakeChannel(options.target, options.tls);
  if (!made.ok()) return Usage(std::string(made.status().message()));
  const std::shared_ptr<grpc::Channel> channel = *std::move(made);
  if (acquire->parsed()) {
    acquire_args.key = key;
    return Acquire(channel, options, acquire_args);
  }
  if (report->parsed()) {
    report_args.key = key;
    report_args.complete = outcome->count() > 0;
    return Report(channel, options, report_args);
  }
  return Health(channel, options, service);
}

}  // namespace
}  // namespace sluice::call

int main(int argc, char** argv) { return sluice::call::Main(argc, argv); }
