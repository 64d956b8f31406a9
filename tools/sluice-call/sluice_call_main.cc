// sluice-call: a small DecisionService client for operators and examples.
//
//   sluice-call [--target HOST:PORT] acquire DEP [--key K] [--permits N]
//   sluice-call [--target HOST:PORT] report DEP PERMIT_ID OUTCOME
//               [--latency 120ms] [--key K] [--status-code N]
//   sluice-call [--target HOST:PORT] health [SERVICE]
//
// Exit codes: 0 ok, 1 RPC error (or health not SERVING), 2 usage error.

#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "sluice/v1/decision.grpc.pb.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitRpcError = 1;
constexpr int kExitUsage = 2;

constexpr char kUsage[] =
    "Usage:\n"
    "  sluice-call [--target HOST:PORT] [--deadline 5s] acquire DEPENDENCY\n"
    "              [--key KEY] [--permits N] [--caller NAME]\n"
    "  sluice-call [--target HOST:PORT] [--deadline 5s] report DEPENDENCY\n"
    "              PERMIT_ID success|failure|timeout|cancelled\n"
    "              [--latency 120ms] [--key KEY] [--status-code N]\n"
    "  sluice-call [--target HOST:PORT] [--deadline 5s] health [SERVICE]\n"
    "\n"
    "--target defaults to $SLUICE_TARGET, else 127.0.0.1:50051.\n"
    "PERMIT_ID is the permit_id printed by acquire (\"\" for none).\n"
    "Exit codes: 0 ok, 1 RPC error or health not SERVING, 2 usage error.\n";

[[noreturn]] void Usage(const std::string& message) {
  if (!message.empty())
    std::fprintf(stderr, "sluice-call: %s\n", message.c_str());
  std::fputs(kUsage, stderr);
  std::exit(kExitUsage);
}

struct Args {
  std::string target = "127.0.0.1:50051";
  absl::Duration deadline = absl::Seconds(5);
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;  // --key etc., by name
};

// Flags may appear anywhere; "--name value" and "--name=value" both work.
Args ParseArgs(int argc, char** argv) {
  Args args;
  if (const char* target = std::getenv("SLUICE_TARGET"); target && *target) {
    args.target = target;
  }
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help" || arg == "help") {
      std::fputs(kUsage, stdout);
      std::exit(kExitOk);
    }
    if (!absl::StartsWith(arg, "--")) {
      args.positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      Usage(absl::StrCat("missing value for --", name));
    }
    if (name == "target") {
      args.target = value;
    } else if (name == "deadline") {
      if (!absl::ParseDuration(value, &args.deadline) ||
          args.deadline <= absl::ZeroDuration()) {
        Usage(
            absl::StrCat("--deadline wants a positive duration like 2s, got \"",
                         value, "\""));
      }
    } else {
      args.options[name] = value;
    }
  }
  return args;
}

// Takes option `name` (for `command`) out of `args`, or `fallback`.
std::string TakeOption(Args* args, const std::string& name,
                       const std::string& fallback = "") {
  auto it = args->options.find(name);
  if (it == args->options.end()) return fallback;
  std::string value = it->second;
  args->options.erase(it);
  return value;
}

void RejectLeftovers(const Args& args, const std::string& command,
                     size_t positional) {
  if (!args.options.empty()) {
    Usage(absl::StrCat("unknown option --", args.options.begin()->first,
                       " for ", command));
  }
  if (args.positional.size() > positional) {
    Usage(absl::StrCat("unexpected argument \"", args.positional[positional],
                       "\" for ", command));
  }
}

std::string FormatDuration(const google::protobuf::Duration& d) {
  return absl::FormatDuration(absl::Seconds(d.seconds()) +
                              absl::Nanoseconds(d.nanos()));
}

void SetDuration(absl::Duration d, google::protobuf::Duration* out) {
  absl::Duration rem;
  out->set_seconds(absl::IDivDuration(d, absl::Seconds(1), &rem));
  out->set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(rem)));
}

const char* StatusCodeName(grpc::StatusCode code) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? kNames[i] : "UNKNOWN";
}

int RpcError(const grpc::Status& status) {
  std::fprintf(stderr, "error: %s: %s\n", StatusCodeName(status.error_code()),
               status.error_message().c_str());
  return kExitRpcError;
}

void PrintRow(const char* name, const std::string& value) {
  std::printf("%-15s %s\n", name, value.c_str());
}

int Acquire(sluice::v1::DecisionService::Stub* stub, Args args) {
  if (args.positional.size() < 2) Usage("acquire needs a DEPENDENCY");
  sluice::v1::AcquireRequest request;
  request.set_dependency(args.positional[1]);
  request.set_key(TakeOption(&args, "key"));
  request.set_caller(TakeOption(&args, "caller", "sluice-call"));
  const std::string permits = TakeOption(&args, "permits", "1");
  uint32_t n = 0;
  if (!absl::SimpleAtoi(permits, &n)) {
    Usage(absl::StrCat("--permits wants a number, got \"", permits, "\""));
  }
  request.set_permits(n);
  RejectLeftovers(args, "acquire", 2);

  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + args.deadline));
  sluice::v1::AcquireResponse response;
  grpc::Status status = stub->Acquire(&context, request, &response);
  if (!status.ok()) return RpcError(status);

  PrintRow("verdict:", sluice::v1::Verdict_Name(response.verdict()));
  PrintRow("reason:", response.reason() == sluice::v1::REASON_UNSPECIFIED
                          ? "(none)"
                          : sluice::v1::Reason_Name(response.reason()));
  PrintRow("permit_id:",
           response.permit_id().empty() ? "(none)" : response.permit_id());
  PrintRow("call_timeout:", response.has_call_timeout()
                                ? FormatDuration(response.call_timeout())
                                : "(none)");
  PrintRow("retry_after:", response.has_retry_after()
                               ? FormatDuration(response.retry_after())
                               : "(none)");
  PrintRow("http_status:", absl::StrCat(response.http_status()));
  PrintRow("remaining:", response.remaining() < 0
                             ? "(no rate limit)"
                             : absl::StrCat(response.remaining()));
  PrintRow("breaker_state:",
           sluice::v1::BreakerState_Name(response.breaker_state()));
  PrintRow("policy_version:", absl::StrCat(response.policy_version()));
  if (response.has_fallback()) {
    const sluice::v1::Fallback& fallback = response.fallback();
    std::vector<std::string> on;
    for (int reason : fallback.on()) {
      on.push_back(
          sluice::v1::Reason_Name(static_cast<sluice::v1::Reason>(reason)));
    }
    PrintRow("fallback:",
             absl::StrCat(
                 sluice::v1::Fallback::Strategy_Name(fallback.strategy()),
                 " (on: ", on.empty() ? "every reason" : absl::StrJoin(on, ","),
                 fallback.serve_on_failure() ? ", serve_on_failure" : "",
                 fallback.has_cache_ttl()
                     ? absl::StrCat(", cache_ttl ",
                                    FormatDuration(fallback.cache_ttl()))
                     : "",
                 ")"));
    PrintRow("content_type:", fallback.content_type());
    PrintRow("payload:", fallback.payload());
  }
  return kExitOk;
}

int Report(sluice::v1::DecisionService::Stub* stub, Args args) {
  if (args.positional.size() < 4) {
    Usage("report needs DEPENDENCY PERMIT_ID OUTCOME");
  }
  sluice::v1::ReportResultRequest request;
  request.set_dependency(args.positional[1]);
  request.set_permit_id(args.positional[2]);
  const std::string outcome = absl::AsciiStrToUpper(args.positional[3]);
  sluice::v1::Outcome parsed;
  if (!sluice::v1::Outcome_Parse(outcome, &parsed) ||
      parsed == sluice::v1::OUTCOME_UNSPECIFIED) {
    Usage(
        absl::StrCat("OUTCOME must be success, failure, timeout or "
                     "cancelled, got \"",
                     args.positional[3], "\""));
  }
  request.set_outcome(parsed);
  request.set_key(TakeOption(&args, "key"));
  const std::string latency = TakeOption(&args, "latency");
  if (!latency.empty()) {
    absl::Duration d;
    if (!absl::ParseDuration(latency, &d)) {
      Usage(absl::StrCat("--latency wants a duration like 120ms, got \"",
                         latency, "\""));
    }
    SetDuration(d, request.mutable_latency());
  }
  const std::string status_code = TakeOption(&args, "status-code", "0");
  int32_t code = 0;
  if (!absl::SimpleAtoi(status_code, &code)) {
    Usage(absl::StrCat("--status-code wants a number, got \"", status_code,
                       "\""));
  }
  request.set_status_code(code);
  RejectLeftovers(args, "report", 4);

  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + args.deadline));
  sluice::v1::ReportResultResponse response;
  grpc::Status status = stub->ReportResult(&context, request, &response);
  if (!status.ok()) return RpcError(status);
  PrintRow("breaker_state:",
           sluice::v1::BreakerState_Name(response.breaker_state()));
  return kExitOk;
}

int Health(const std::shared_ptr<grpc::Channel>& channel, Args args) {
  RejectLeftovers(args, "health", 2);
  grpc::health::v1::HealthCheckRequest request;
  if (args.positional.size() > 1) request.set_service(args.positional[1]);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + args.deadline));
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = grpc::health::v1::Health::NewStub(channel)->Check(
      &context, request, &response);
  if (!status.ok()) return RpcError(status);
  std::printf("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                          response.status())
                          .c_str());
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING
             ? kExitOk
             : kExitRpcError;
}

}  // namespace

int main(int argc, char** argv) {
  Args args = ParseArgs(argc, argv);
  if (args.positional.empty()) Usage("missing command");
  const std::string command = args.positional[0];
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(args.target, grpc::InsecureChannelCredentials());
  if (command == "acquire") {
    auto stub = sluice::v1::DecisionService::NewStub(channel);
    return Acquire(stub.get(), std::move(args));
  }
  if (command == "report") {
    auto stub = sluice::v1::DecisionService::NewStub(channel);
    return Report(stub.get(), std::move(args));
  }
  if (command == "health") return Health(channel, std::move(args));
  Usage(absl::StrCat("unknown command \"", command, "\""));
}
