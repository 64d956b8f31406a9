// sluicectl: the operator CLI over sluice.v1.AdminService.
//
// Exit codes: 0 success; 1 the server refused the request (invalid policy,
// not found, version conflict, no breaker); 2 bad usage; 3 the server is
// unreachable or did not answer in time; 4 the admin token is missing or
// wrong.

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"
#include "server/policy/policy_file.h"
#include "sluice/v1/admin.grpc.pb.h"
#include "tools/sluicectl/policy_diff.h"

namespace sluice::ctl {
namespace {

enum ExitCode {
  kOk = 0,
  kRefused = 1,
  kUsage = 2,
  kUnreachable = 3,
  kUnauthenticated = 4,
};

constexpr char kGlobalHelp[] = R"(sluicectl: operate a running Sluice server over its admin API.

Usage: sluicectl [global flags] COMMAND [args] [flags]

Commands:
  list                      list the policies in force (table)
  get NAME                  show one policy (YAML; -o json)
  apply -f FILE [--dry-run] create or update the policies of a YAML file
                            (-f - reads stdin), showing a diff first;
                            --dry-run changes nothing
  delete NAME               delete a policy; its dependency then follows
                            --unknown-dependency
  breaker open|close|auto DEP [--note TEXT]
                            force a breaker open or closed cluster-wide, or
                            give it back to its rules (auto)
  state DEP [--key KEY]     live state: tokens, in-flight, share, breaker
  watch [DEP] [--count N]   stream events (breaker transitions, policy
                            changes, overrides, store up/down)
  help [COMMAND]            this text, or a command's own help

Global flags (also accepted after the command):
  --target HOST:PORT   admin listener (env SLUICE_ADMIN_TARGET,
                       default 127.0.0.1:50052)
  --token-file PATH    file holding the admin bearer token
                       (env SLUICE_ADMIN_TOKEN_FILE)
  -o, --output FORMAT  table (default) or json; get also takes yaml
  --timeout DURATION   per-RPC deadline, e.g. 5s (default 5s; watch has none)

Exit codes: 0 success, 1 the server refused the request (invalid policy,
not found, version conflict), 2 bad usage, 3 server unreachable or too slow,
4 admin token missing or wrong.
)";

const std::map<std::string, std::string>& CommandHelp() {
  static const auto* help = new std::map<std::string, std::string>{
      {"list",
       "Usage: sluicectl list [-o table|json]\n\n"
       "Lists every policy in force on the server, with its version and "
       "gates.\n"},
      {"get",
       "Usage: sluicectl get NAME [-o yaml|json]\n\n"
       "Shows one policy with every default written out (YAML by default, "
       "the same shape as the policies file).\n"},
      {"apply",
       "Usage: sluicectl apply -f FILE [--dry-run] [-o table|json]\n\n"
       "Validates every policy in FILE locally, shows what would change "
       "(a line diff per policy), then puts the changed ones, each with "
       "compare-and-set on the version it was compared with: if someone "
       "changed a policy in between, that policy fails with a version "
       "conflict and nothing of it is applied. Policies on the server but "
       "not in FILE are left alone (use delete). --dry-run stops after the "
       "diff.\n"},
      {"delete",
       "Usage: sluicectl delete NAME [--expected-version N]\n\n"
       "Deletes a policy. Gateways still calling the dependency then get "
       "the server's --unknown-dependency answer.\n"},
      {"breaker",
       "Usage: sluicectl breaker open|close|auto DEP [--note TEXT]\n\n"
       "open: FORCE_OPEN, every call is refused (degraded if the policy has "
       "a fallback for CIRCUIT_OPEN) until auto.\n"
       "close: FORCE_CLOSED, every call passes the breaker until auto.\n"
       "auto: clear the override; the breaker rules decide again.\n"
       "In cluster mode the override applies on every replica within one "
       "sync tick. --note is recorded in the event (e.g. an incident id).\n"},
      {"state",
       "Usage: sluicectl state DEP [--key KEY] [-o table|json]\n\n"
       "Live state of one dependency on the replica answering: tokens or "
       "window count, in-flight, this replica's share, breaker state, "
       "open-until, trip cause and generation, outcomes over the breaker "
       "window, decisions, policy version and store status.\n"},
      {"watch",
       "Usage: sluicectl watch [DEP] [--count N] [-o table|json]\n\n"
       "Streams events until interrupted (or N events): breaker "
       "transitions with their cause, policy changes with old and new "
       "versions, overrides, store up/down. A watcher that reads too slowly "
       "is sent an EVENTS_DROPPED event saying how many it missed.\n"},
      {"help", "Usage: sluicectl help [COMMAND]\n"},
  };
  return *help;
}

struct Flags {
  std::string target = "127.0.0.1:50052";
  std::string token_file;
  std::string output = "table";
  absl::Duration timeout = absl::Seconds(5);
  std::string file;
  bool dry_run = false;
  std::string note;
  std::string key;
  int64_t count = -1;
  uint64_t expected_version = 0;
  bool help = false;
  std::vector<std::string> args;
};

[[noreturn]] void UsageError(const std::string& message) {
  std::fprintf(stderr, "sluicectl: %s\nTry 'sluicectl --help'.\n",
               message.c_str());
  std::exit(kUsage);
}

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  if (const char* env = std::getenv("SLUICE_ADMIN_TARGET"); env && *env) {
    flags.target = env;
  }
  if (const char* env = std::getenv("SLUICE_ADMIN_TOKEN_FILE"); env && *env) {
    flags.token_file = env;
  }
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_value = false;
    if (absl::StartsWith(arg, "--") && arg.find('=') != std::string::npos) {
      value = arg.substr(arg.find('=') + 1);
      arg = arg.substr(0, arg.find('='));
      has_value = true;
    }
    auto next = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) UsageError(absl::StrCat(arg, " needs a value"));
      return argv[++i];
    };
    if (arg == "--target") {
      flags.target = next();
    } else if (arg == "--token-file") {
      flags.token_file = next();
    } else if (arg == "-o" || arg == "--output") {
      flags.output = next();
    } else if (arg == "--timeout") {
      if (!absl::ParseDuration(next(), &flags.timeout) ||
          flags.timeout <= absl::ZeroDuration()) {
        UsageError("--timeout must be a positive duration such as 5s");
      }
    } else if (arg == "-f" || arg == "--file" || arg == "--filename") {
      flags.file = next();
    } else if (arg == "--dry-run") {
      flags.dry_run = true;
    } else if (arg == "--note") {
      flags.note = next();
    } else if (arg == "--key") {
      flags.key = next();
    } else if (arg == "--count") {
      if (!absl::SimpleAtoi(next(), &flags.count) || flags.count <= 0) {
        UsageError("--count must be a positive number");
      }
    } else if (arg == "--expected-version") {
      if (!absl::SimpleAtoi(next(), &flags.expected_version)) {
        UsageError("--expected-version must be a number");
      }
    } else if (arg == "-h" || arg == "--help") {
      flags.help = true;
    } else if (absl::StartsWith(arg, "-") && arg != "-") {
      UsageError(absl::StrCat("unknown flag ", arg));
    } else {
      flags.args.push_back(arg);
    }
  }
  if (flags.output != "table" && flags.output != "json" &&
      flags.output != "yaml") {
    UsageError("-o must be table, json or yaml");
  }
  return flags;
}

std::string Json(const google::protobuf::Message& m, bool pretty = true) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.add_whitespace = pretty;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  if (!pretty) return out;
  return out;
}

std::string FormatTime(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  const absl::Time time =
      absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone());
}

std::string FormatDuration(const google::protobuf::Duration& d) {
  return absl::FormatDuration(absl::Seconds(d.seconds()) +
                              absl::Nanoseconds(d.nanos()));
}

// Prints rows as aligned columns.
void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&line, row[i]);
      if (i + 1 < row.size()) {
        line.append(widths[i] - row[i].size() + 2, ' ');
      }
    }
    std::printf("%s\n", line.c_str());
  }
}

class Ctl {
 public:
  explicit Ctl(Flags flags) : flags_(std::move(flags)) {}

  int Run() {
    if (flags_.args.empty()) {
      std::printf("%s", kGlobalHelp);
      return flags_.help ? kOk : kUsage;
    }
    const std::string command = flags_.args[0];
    if (command == "help") {
      if (flags_.args.size() > 1 && CommandHelp().count(flags_.args[1])) {
        std::printf("%s", CommandHelp().at(flags_.args[1]).c_str());
      } else {
        std::printf("%s", kGlobalHelp);
      }
      return kOk;
    }
    if (!CommandHelp().count(command)) {
      UsageError(absl::StrCat("unknown command \"", command, "\""));
    }
    if (flags_.help) {
      std::printf("%s", CommandHelp().at(command).c_str());
      return kOk;
    }
    if (int rc = Connect(); rc != kOk) return rc;
    if (command == "list") return List();
    if (command == "get") return Get();
    if (command == "apply") return Apply();
    if (command == "delete") return Delete();
    if (command == "breaker") return Breaker();
    if (command == "state") return State();
    if (command == "watch") return Watch();
    return kUsage;
  }

 private:
  int Connect() {
    if (!flags_.token_file.empty()) {
      absl::StatusOr<std::string> token =
          policy::ReadTextFile(flags_.token_file);
      if (!token.ok()) {
        std::fprintf(stderr, "sluicectl: cannot read --token-file %s: %s\n",
                     flags_.token_file.c_str(),
                     std::string(token.status().message()).c_str());
        return kUsage;
      }
      token_ = std::string(absl::StripAsciiWhitespace(*token));
    }
    stub_ = v1::AdminService::NewStub(grpc::CreateChannel(
        flags_.target, grpc::InsecureChannelCredentials()));
    return kOk;
  }

  std::unique_ptr<grpc::ClientContext> Context(bool deadline = true) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (deadline) {
      ctx->set_deadline(absl::ToChronoTime(absl::Now() + flags_.timeout));
    }
    if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
    return ctx;
  }

  std::string Need(size_t index, const std::string& what) {
    if (flags_.args.size() <= index) {
      UsageError(absl::StrCat(flags_.args[0], " needs ", what));
    }
    return flags_.args[index];
  }

  // Prints a clear error for a failed RPC and returns the exit code.
  int Fail(const grpc::Status& status, const std::string& what) {
    switch (status.error_code()) {
      case grpc::StatusCode::UNAVAILABLE:
        std::fprintf(stderr,
                     "sluicectl: cannot reach the Sluice admin API at %s "
                     "(%s). Is sluiced running with --admin-listen there? "
                     "Set --target or SLUICE_ADMIN_TARGET.\n",
                     flags_.target.c_str(), status.error_message().c_str());
        return kUnreachable;
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        std::fprintf(stderr,
                     "sluicectl: %s: the server at %s did not answer within "
                     "%s.\n",
                     what.c_str(), flags_.target.c_str(),
                     absl::FormatDuration(flags_.timeout).c_str());
        return kUnreachable;
      case grpc::StatusCode::UNAUTHENTICATED:
        std::fprintf(stderr,
                     "sluicectl: %s: %s. Pass the admin token with "
                     "--token-file (or SLUICE_ADMIN_TOKEN_FILE).\n",
                     what.c_str(), status.error_message().c_str());
        return kUnauthenticated;
      case grpc::StatusCode::UNIMPLEMENTED:
        std::fprintf(stderr,
                     "sluicectl: %s: %s does not serve the admin API (is "
                     "it the data-plane port? use the --admin-listen "
                     "address).\n",
                     what.c_str(), flags_.target.c_str());
        return kUnreachable;
      default:
        std::fprintf(stderr, "sluicectl: %s: %s\n", what.c_str(),
                     status.error_message().c_str());
        return kRefused;
    }
  }

  static std::string Gates(const v1::Policy& p) {
    std::vector<std::string> parts;
    if (p.has_rate_limit()) {
      parts.push_back(absl::StrCat(
          "rate ", p.rate_limit().rate(), "/",
          FormatDuration(p.rate_limit().per()),
          p.rate_limit().scope() == v1::CLUSTER ? " cluster" : ""));
    }
    if (p.has_concurrency()) {
      parts.push_back(
          absl::StrCat("in-flight ", p.concurrency().max_in_flight(),
                       p.concurrency().scope() == v1::CLUSTER ? " cluster" : ""));
    }
    return parts.empty() ? "-" : absl::StrJoin(parts, ", ");
  }

  int List() {
    v1::ListPoliciesResponse resp;
    grpc::Status s = stub_->ListPolicies(Context().get(), {}, &resp);
    if (!s.ok()) return Fail(s, "list");
    if (flags_.output == "json") {
      std::printf("%s\n", Json(resp).c_str());
      return kOk;
    }
    std::vector<std::vector<std::string>> rows = {
        {"NAME", "VERSION", "LIMITS", "BREAKER", "FALLBACK", "FLAGS"}};
    for (const v1::Policy& p : resp.policies()) {
      std::vector<std::string> flags;
      if (p.shadow()) flags.push_back("shadow");
      if (p.per_key()) flags.push_back("per_key");
      rows.push_back(
          {p.name(), absl::StrCat(p.version()), Gates(p),
           p.has_breaker() ? "yes" : "-",
           p.has_fallback() ? v1::Fallback::Strategy_Name(p.fallback().strategy())
                            : "-",
           flags.empty() ? "-" : absl::StrJoin(flags, ",")});
    }
    PrintTable(rows);
    return kOk;
  }

  int Get() {
    v1::GetPolicyRequest req;
    req.set_name(Need(1, "a policy NAME"));
    v1::Policy policy;
    grpc::Status s = stub_->GetPolicy(Context().get(), req, &policy);
    if (!s.ok()) return Fail(s, absl::StrCat("get ", req.name()));
    if (flags_.output == "json") {
      std::printf("%s\n", Json(policy).c_str());
    } else {
      std::printf("%s", policy::PoliciesToYaml({policy}).c_str());
    }
    return kOk;
  }

  int Apply() {
    if (flags_.file.empty()) UsageError("apply needs -f FILE (or -f - for stdin)");
    absl::StatusOr<std::vector<v1::Policy>> file;
    if (flags_.file == "-") {
      // kubectl exec ... sluicectl apply -f - < policies.yaml
      std::string text((std::istreambuf_iterator<char>(std::cin)),
                       std::istreambuf_iterator<char>());
      file = policy::ParsePolicies(text, "(stdin)");
    } else {
      file = policy::LoadPolicyFile(flags_.file);
    }
    if (!file.ok()) {
      std::fprintf(stderr, "sluicectl: %s\n",
                   std::string(file.status().message()).c_str());
      return kRefused;
    }
    v1::ListPoliciesResponse current;
    grpc::Status s = stub_->ListPolicies(Context().get(), {}, &current);
    if (!s.ok()) return Fail(s, "apply");
    absl::StatusOr<std::vector<PlannedChange>> plan = PlanApply(
        *file, {current.policies().begin(), current.policies().end()});
    if (!plan.ok()) {
      std::fprintf(stderr, "sluicectl: %s: %s (nothing applied)\n",
                   flags_.file.c_str(),
                   std::string(plan.status().message()).c_str());
      return kRefused;
    }
    const bool json = flags_.output == "json";
    int rc = kOk;
    for (const PlannedChange& change : *plan) {
      const std::string& name = change.policy.name();
      std::string verb = change.kind == PlannedChange::Kind::kCreate
                             ? "create"
                             : change.kind == PlannedChange::Kind::kUpdate
                                   ? "update"
                                   : "unchanged";
      std::string result = flags_.dry_run ? "dry-run" : "ok";
      uint64_t version = change.server_version;
      if (!json) {
        std::printf("%s %s%s\n", verb.c_str(), name.c_str(),
                    change.server_version
                        ? absl::StrCat(" (version ", change.server_version, ")")
                              .c_str()
                        : "");
        std::printf("%s", change.diff.c_str());
      }
      if (change.kind != PlannedChange::Kind::kUnchanged && !flags_.dry_run) {
        v1::PutPolicyRequest req;
        *req.mutable_policy() = change.policy;
        req.set_expected_version(change.server_version);
        v1::PutPolicyResponse resp;
        grpc::Status put = stub_->PutPolicy(Context().get(), req, &resp);
        if (!put.ok()) {
          const int code = Fail(put, absl::StrCat("apply ", name));
          if (code != kRefused) return code;  // unreachable or unauthorized
          rc = kRefused;
          result = absl::StrCat("failed: ", put.error_message());
        } else {
          version = resp.version();
          if (!json) {
            std::printf("  -> version %llu\n",
                        static_cast<unsigned long long>(version));
          }
        }
      }
      if (json) {
        std::printf("{\"name\":\"%s\",\"action\":\"%s\",\"result\":\"%s\","
                    "\"version\":%llu}\n",
                    name.c_str(), verb.c_str(),
                    absl::StrReplaceAll(result, {{"\"", "'"}}).c_str(),
                    static_cast<unsigned long long>(version));
      }
    }
    if (flags_.dry_run && !json) std::printf("(dry run: nothing applied)\n");
    return rc;
  }

  int Delete() {
    v1::DeletePolicyRequest req;
    req.set_name(Need(1, "a policy NAME"));
    req.set_expected_version(flags_.expected_version);
    v1::DeletePolicyResponse resp;
    grpc::Status s = stub_->DeletePolicy(Context().get(), req, &resp);
    if (!s.ok()) return Fail(s, absl::StrCat("delete ", req.name()));
    std::printf("deleted %s\n", req.name().c_str());
    return kOk;
  }

  int Breaker() {
    const std::string action = Need(1, "open, close or auto");
    v1::SetBreakerOverrideRequest req;
    if (action == "open") {
      req.set_override(v1::FORCE_OPEN);
    } else if (action == "close") {
      req.set_override(v1::FORCE_CLOSED);
    } else if (action == "auto") {
      req.set_override(v1::AUTO);
    } else {
      UsageError("breaker takes open, close or auto");
    }
    req.set_dependency(Need(2, "a dependency DEP"));
    req.set_note(flags_.note);
    v1::SetBreakerOverrideResponse resp;
    grpc::Status s = stub_->SetBreakerOverride(Context().get(), req, &resp);
    if (!s.ok()) {
      return Fail(s, absl::StrCat("breaker ", action, " ", req.dependency()));
    }
    if (flags_.output == "json") {
      std::printf("%s\n", Json(resp).c_str());
    } else {
      std::printf("breaker %s: override %s, state now %s\n",
                  req.dependency().c_str(),
                  v1::BreakerOverride_Name(req.override()).c_str(),
                  v1::BreakerState_Name(resp.breaker_state()).c_str());
    }
    return kOk;
  }

  int State() {
    v1::GetStateRequest req;
    req.set_dependency(Need(1, "a dependency DEP"));
    req.set_key(flags_.key);
    v1::DependencyState st;
    grpc::Status s = stub_->GetState(Context().get(), req, &st);
    if (!s.ok()) return Fail(s, absl::StrCat("state ", req.dependency()));
    if (flags_.output == "json") {
      std::printf("%s\n", Json(st).c_str());
      return kOk;
    }
    const auto& d = st.decisions();
    const auto& w = st.window_outcomes();
    PrintTable({
        {"dependency", st.dependency()},
        {"replica", st.replica_id().empty() ? "-" : st.replica_id()},
        {"policy version", absl::StrCat(st.policy_version())},
        {"store", absl::StrCat(st.store_status(),
                               st.store_status() == "standalone"
                                   ? ""
                                   : absl::StrCat(", ", st.live_replicas(),
                                                  " live replicas"))},
        {"tokens available", st.tokens_available() < 0
                                 ? "- (no rate limit)"
                                 : absl::StrFormat("%.2f",
                                                   st.tokens_available())},
        {"window count", absl::StrCat(st.window_count())},
        {"in flight", absl::StrCat(st.in_flight())},
        {"share", st.store_status() == "standalone"
                      ? "- (standalone)"
                      : absl::StrFormat("%.3f", st.share())},
        {"in force here",
         absl::StrCat(absl::StrFormat("rate %.6g", st.effective_rate()),
                      st.effective_max_in_flight() > 0
                          ? absl::StrCat(", max in flight ",
                                         st.effective_max_in_flight())
                          : "",
                      st.store_status() == "standalone"
                          ? ""
                          : st.has_grant() ? " (granted by the store)"
                                           : " (no grant)")},
        {"breaker", st.breaker_state() == v1::BREAKER_STATE_UNSPECIFIED
                        ? "- (no breaker)"
                        : v1::BreakerState_Name(st.breaker_state())},
        {"override", st.override() == v1::BREAKER_OVERRIDE_UNSPECIFIED
                         ? "-"
                         : v1::BreakerOverride_Name(st.override())},
        {"open until", FormatTime(st.open_until())},
        {"trip cause", st.trip_cause().empty() ? "-" : st.trip_cause()},
        {"generation", absl::StrCat(st.breaker_generation())},
        {"open duration", FormatDuration(st.current_open_duration())},
        {"window outcomes",
         absl::StrCat(w.calls(), " calls: ", w.successes(), " ok, ",
                      w.failures(), " failed, ", w.timeouts(), " timed out, ",
                      w.slow(), " slow")},
        {"decisions",
         absl::StrCat(d.acquired(), " acquired: ", d.allowed(), " allowed, ",
                      d.rejected(), " rejected, ", d.degraded(), " degraded")},
        {"keys", absl::StrCat(st.keys())},
    });
    return kOk;
  }

  static std::string Describe(const v1::Event& e) {
    switch (e.kind()) {
      case v1::Event::BREAKER_TRANSITION:
        return absl::StrCat(v1::BreakerState_Name(e.from()), " -> ",
                            v1::BreakerState_Name(e.to()), " (", e.cause(),
                            "; generation ", e.breaker_generation(), ")");
      case v1::Event::POLICY_CHANGED:
        return absl::StrCat("version ", e.old_version(), " -> ",
                            e.new_version(), " (", e.cause(), ")");
      case v1::Event::OVERRIDE_SET:
        return absl::StrCat(v1::BreakerOverride_Name(e.override()), " (",
                            e.cause(), ")");
      case v1::Event::EVENTS_DROPPED:
        return absl::StrCat(e.missed(), " events missed");
      default:
        return e.cause();
    }
  }

  int Watch() {
    v1::WatchEventsRequest req;
    if (flags_.args.size() > 1) req.set_dependency(flags_.args[1]);
    auto ctx = Context(/*deadline=*/false);
    auto reader = stub_->WatchEvents(ctx.get(), req);
    const bool json = flags_.output == "json";
    if (!json) {
      std::fprintf(stderr, "watching %s on %s (Ctrl-C to stop)\n",
                   req.dependency().empty() ? "all dependencies"
                                            : req.dependency().c_str(),
                   flags_.target.c_str());
    }
    v1::Event e;
    int64_t seen = 0;
    while ((flags_.count < 0 || seen < flags_.count) && reader->Read(&e)) {
      ++seen;
      if (json) {
        std::printf("%s\n", Json(e, /*pretty=*/false).c_str());
      } else {
        std::printf("%s  %-18s  %-16s  %s  [%s]\n", FormatTime(e.time()).c_str(),
                    v1::Event::Kind_Name(e.kind()).c_str(),
                    e.dependency().empty() ? "-" : e.dependency().c_str(),
                    Describe(e).c_str(), e.replica_id().c_str());
      }
      std::fflush(stdout);
    }
    if (flags_.count > 0 && seen >= flags_.count) {
      ctx->TryCancel();
      reader->Finish();
      return kOk;
    }
    grpc::Status s = reader->Finish();
    if (!s.ok()) return Fail(s, "watch");
    return kOk;
  }

  const Flags flags_;
  std::string token_;
  std::unique_ptr<v1::AdminService::Stub> stub_;
};

}  // namespace
}  // namespace sluice::ctl

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  return sluice::ctl::Ctl(sluice::ctl::ParseFlags(argc, argv)).Run();
}
