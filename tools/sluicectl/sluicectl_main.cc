// SPDX-License-Identifier: Apache-2.0
// sluicectl: the operator CLI over sluice.v1.AdminService.
//
// Exit codes: 0 success; 1 the server refused the request (invalid policy,
// not found, version conflict, no breaker); 2 bad usage; 3 the server is
// unreachable or did not answer in time; 4 the admin token is missing or
// wrong.

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "base/command_line.h"
#include "server/policy/policy_file.h"
#include "sluice/v1/admin.grpc.pb.h"
#include "tools/sluicectl/admin_connection.h"
#include "tools/sluicectl/output_format.h"
#include "tools/sluicectl/policy_diff.h"
#include "tools/sluicectl/state_view.h"
#include "wire/time.h"

namespace sluice::ctl {
namespace {

constexpr char kGlobalHelp[] =
    R"(sluicectl: operate a running Sluice server over its admin API.

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
  state DEP [--key KEY]     live state: tokens, in-flight, share, adaptive
                            limit and throttle, breaker and its baseline
  watch [DEP] [--count N]   stream events (breaker transitions, adaptive
                            limit and throttle moves, policy changes,
                            overrides, store up/down)
  help [COMMAND]            this text, or a command's own help

Global flags (also accepted after the command):
  --target ADDRESS     admin listener, HOST:PORT or unix:PATH (env
                       SLUICE_ADMIN_TARGET, default 127.0.0.1:50052)
  --token-file PATH    file holding the admin bearer token; with several
                       (one a line) the last is sent (env
                       SLUICE_ADMIN_TOKEN_FILE)
  --tls-ca PATH        CA bundle of sluiced's certificate: connect with TLS
                       (env SLUICE_ADMIN_TLS_CA)
  --tls-cert PATH      client certificate, for sluiced with --tls-client-ca
  --tls-key PATH       its key (env SLUICE_ADMIN_TLS_CERT, SLUICE_ADMIN_TLS_KEY)
  --tls-server-name N  name the server certificate must carry when it is
                       not the target's host (env SLUICE_ADMIN_TLS_SERVER_NAME)
  -o, --output FORMAT  table (default) or json; get also takes yaml
  --timeout DURATION   per-RPC deadline, e.g. 5s (default 5s; watch has none)

Exit codes: 0 success, 1 the server refused the request (invalid policy,
not found, version conflict), 2 bad usage, 3 server unreachable or too slow,
4 admin token missing or wrong.
)";

constexpr char kListHelp[] =
    "Usage: sluicectl list [-o table|json]\n\n"
    "Lists every policy in force on the server, with its version and "
    "gates.\n";
constexpr char kGetHelp[] =
    "Usage: sluicectl get NAME [-o yaml|json]\n\n"
    "Shows one policy with every default written out (YAML by default, "
    "the same shape as the policies file).\n";
constexpr char kApplyHelp[] =
    "Usage: sluicectl apply -f FILE [--dry-run] [-o table|json]\n\n"
    "Validates every policy in FILE locally, shows what would change "
    "(a line diff per policy), then puts the changed ones, each with "
    "compare-and-set on the version it was compared with: if someone "
    "changed a policy in between, that policy fails with a version "
    "conflict and nothing of it is applied. Policies on the server but "
    "not in FILE are left alone (use delete). --dry-run stops after the "
    "diff.\n";
constexpr char kDeleteHelp[] =
    "Usage: sluicectl delete NAME [--expected-version N]\n\n"
    "Deletes a policy. Gateways still calling the dependency then get "
    "the server's --unknown-dependency answer.\n";
constexpr char kBreakerHelp[] =
    "Usage: sluicectl breaker open|close|auto DEP [--note TEXT]\n\n"
    "open: FORCE_OPEN, every call is refused (degraded if the policy has "
    "a fallback for CIRCUIT_OPEN) until auto.\n"
    "close: FORCE_CLOSED, every call passes the breaker until auto.\n"
    "auto: clear the override; the breaker rules decide again.\n"
    "In cluster mode the override applies on every replica within one "
    "sync tick. --note is recorded in the event (e.g. an incident id).\n";
constexpr char kStateHelp[] =
    "Usage: sluicectl state DEP [--key KEY] [-o table|json]\n\n"
    "Live state of one dependency on the replica answering: tokens or "
    "window count, in-flight, this replica's share, the adaptive limit "
    "(limit, in flight, steady limit, baseline latency) and throttle "
    "(refusal probability, requests and accepts), breaker state, "
    "open-until, trip cause and generation, the learned latency baseline, "
    "outcomes over the breaker window, decisions, policy version and store "
    "status.\n";
constexpr char kWatchHelp[] =
    "Usage: sluicectl watch [DEP] [--count N] [-o table|json]\n\n"
    "Streams events until interrupted (or N events): breaker "
    "transitions with their cause, adaptive limit moves (old -> new limit) "
    "and throttling started or stopped (with the refusal probability), "
    "policy changes with old and new versions, overrides, store up/down. "
    "A watcher that reads too slowly is sent an EVENTS_DROPPED event "
    "saying how many it missed.\n";
constexpr char kHelpHelp[] = "Usage: sluicectl help [COMMAND]\n";

int UsageError(const std::string& message) {
  std::fprintf(stderr, "sluicectl: %s\nTry 'sluicectl --help'.\n",
               message.c_str());
  return kUsage;
}

std::string Gates(const v1::Policy& p) {
  std::vector<std::string> parts;
  if (p.has_rate_limit()) {
    parts.push_back(
        absl::StrCat("rate ", p.rate_limit().rate(), "/",
                     wire::FormatDurationProto(p.rate_limit().per()),
                     p.rate_limit().scope() == v1::CLUSTER ? " cluster" : ""));
  }
  if (p.has_concurrency()) {
    parts.push_back(
        absl::StrCat("in-flight ", p.concurrency().max_in_flight(),
                     p.concurrency().scope() == v1::CLUSTER ? " cluster" : ""));
  }
  if (p.has_adaptive_concurrency()) {
    parts.push_back(absl::StrCat("adaptive in-flight ",
                                 p.adaptive_concurrency().min_limit(), "-",
                                 p.adaptive_concurrency().max_limit()));
  }
  if (p.has_adaptive_throttle()) {
    parts.push_back(absl::StrCat("throttle k ", p.adaptive_throttle().k()));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ", ");
}

int List(AdminConnection& admin) {
  v1::ListPoliciesResponse resp;
  grpc::Status s = admin.stub().ListPolicies(admin.Context().get(), {}, &resp);
  if (!s.ok()) return admin.Fail(s, "list");
  if (admin.options().json()) {
    std::printf("%s\n", MessageJson(resp).c_str());
    return kOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "VERSION", "LIMITS", "BREAKER", "FALLBACK", "FLAGS"}};
  for (const v1::Policy& p : resp.policies()) {
    std::vector<std::string> flags;
    if (p.shadow()) flags.push_back("shadow");
    if (p.per_key()) flags.push_back("per_key");
    rows.push_back({p.name(), absl::StrCat(p.version()), Gates(p),
                    p.has_breaker() ? "yes" : "-",
                    p.has_fallback()
                        ? v1::Fallback::Strategy_Name(p.fallback().strategy())
                        : "-",
                    flags.empty() ? "-" : absl::StrJoin(flags, ",")});
  }
  std::printf("%s", FormatTable(rows).c_str());
  return kOk;
}

int Get(AdminConnection& admin, const std::string& name) {
  if (name.empty()) return UsageError("get needs a policy NAME");
  v1::GetPolicyRequest req;
  req.set_name(name);
  v1::Policy policy;
  grpc::Status s = admin.stub().GetPolicy(admin.Context().get(), req, &policy);
  if (!s.ok()) return admin.Fail(s, absl::StrCat("get ", name));
  if (admin.options().json()) {
    std::printf("%s\n", MessageJson(policy).c_str());
  } else {
    std::printf("%s", policy::PoliciesToYaml({policy}).c_str());
  }
  return kOk;
}

struct ApplyArgs {
  std::string file;  // "-" for stdin
  bool dry_run = false;
};

int Apply(AdminConnection& admin, const ApplyArgs& args) {
  if (args.file.empty()) {
    return UsageError("apply needs -f FILE (or -f - for stdin)");
  }
  absl::StatusOr<std::vector<v1::Policy>> file;
  if (args.file == "-") {
    // kubectl exec ... sluicectl apply -f - < policies.yaml
    std::string text((std::istreambuf_iterator<char>(std::cin)),
                     std::istreambuf_iterator<char>());
    file = policy::ParsePolicies(text, "(stdin)");
  } else {
    file = policy::ParsePoliciesFile(args.file);
  }
  if (!file.ok()) {
    std::fprintf(stderr, "sluicectl: %s\n",
                 std::string(file.status().message()).c_str());
    return kRefused;
  }
  v1::ListPoliciesResponse current;
  grpc::Status s =
      admin.stub().ListPolicies(admin.Context().get(), {}, &current);
  if (!s.ok()) return admin.Fail(s, "apply");
  absl::StatusOr<std::vector<PlannedChange>> plan =
      PlanApply(*file, {current.policies().begin(), current.policies().end()});
  if (!plan.ok()) {
    std::fprintf(stderr, "sluicectl: %s: %s (nothing applied)\n",
                 args.file.c_str(),
                 std::string(plan.status().message()).c_str());
    return kRefused;
  }
  const bool json = admin.options().json();
  int rc = kOk;
  for (const PlannedChange& change : *plan) {
    ApplyResult result;
    result.name = change.policy.name();
    result.action = change.kind == PlannedChange::Kind::kCreate   ? "create"
                    : change.kind == PlannedChange::Kind::kUpdate ? "update"
                                                                  : "unchanged";
    result.result = args.dry_run ? "dry-run" : "ok";
    result.version = change.server_version;
    if (!json) {
      std::printf(
          "%s %s%s\n", result.action.c_str(), result.name.c_str(),
          change.server_version
              ? absl::StrCat(" (version ", change.server_version, ")").c_str()
              : "");
      std::printf("%s", change.diff.c_str());
    }
    if (change.kind != PlannedChange::Kind::kUnchanged && !args.dry_run) {
      v1::PutPolicyRequest req;
      *req.mutable_policy() = change.policy;
      req.set_expected_version(change.server_version);
      v1::PutPolicyResponse resp;
      grpc::Status put =
          admin.stub().PutPolicy(admin.Context().get(), req, &resp);
      if (!put.ok()) {
        const int code = admin.Fail(put, absl::StrCat("apply ", result.name));
        if (code != kRefused) return code;  // unreachable or unauthorized
        rc = kRefused;
        result.result = absl::StrCat("failed: ", put.error_message());
      } else {
        result.version = resp.version();
        if (!json) {
          std::printf("  -> version %llu\n",
                      static_cast<unsigned long long>(result.version));
        }
      }
    }
    if (json) std::printf("%s\n", ApplyResultJson(result).c_str());
  }
  if (args.dry_run && !json) std::printf("(dry run: nothing applied)\n");
  return rc;
}

struct DeleteArgs {
  std::string name;
  uint64_t expected_version = 0;  // 0: whatever version is stored
};

int Delete(AdminConnection& admin, const DeleteArgs& args) {
  if (args.name.empty()) return UsageError("delete needs a policy NAME");
  v1::DeletePolicyRequest req;
  req.set_name(args.name);
  req.set_expected_version(args.expected_version);
  v1::DeletePolicyResponse resp;
  grpc::Status s = admin.stub().DeletePolicy(admin.Context().get(), req, &resp);
  if (!s.ok()) return admin.Fail(s, absl::StrCat("delete ", args.name));
  std::printf("deleted %s\n", args.name.c_str());
  return kOk;
}

struct BreakerArgs {
  std::string action;  // open, close or auto
  std::string dependency;
  std::string note;
};

int Breaker(AdminConnection& admin, const BreakerArgs& args) {
  if (args.action.empty())
    return UsageError("breaker needs open, close or auto");
  v1::SetBreakerOverrideRequest req;
  if (args.action == "open") {
    req.set_override(v1::FORCE_OPEN);
  } else if (args.action == "close") {
    req.set_override(v1::FORCE_CLOSED);
  } else if (args.action == "auto") {
    req.set_override(v1::AUTO);
  } else {
    return UsageError("breaker takes open, close or auto");
  }
  if (args.dependency.empty()) {
    return UsageError("breaker needs a dependency DEP");
  }
  req.set_dependency(args.dependency);
  req.set_note(args.note);
  v1::SetBreakerOverrideResponse resp;
  grpc::Status s =
      admin.stub().SetBreakerOverride(admin.Context().get(), req, &resp);
  if (!s.ok()) {
    return admin.Fail(
        s, absl::StrCat("breaker ", args.action, " ", args.dependency));
  }
  if (admin.options().json()) {
    std::printf("%s\n", MessageJson(resp).c_str());
  } else {
    std::printf("breaker %s: override %s, state now %s\n",
                args.dependency.c_str(),
                v1::BreakerOverride_Name(req.override()).c_str(),
                v1::BreakerState_Name(resp.breaker_state()).c_str());
  }
  return kOk;
}

struct StateArgs {
  std::string dependency;
  std::string key;
};

int State(AdminConnection& admin, const StateArgs& args) {
  if (args.dependency.empty()) {
    return UsageError("state needs a dependency DEP");
  }
  v1::GetStateRequest req;
  req.set_dependency(args.dependency);
  req.set_key(args.key);
  v1::DependencyState st;
  grpc::Status s = admin.stub().GetState(admin.Context().get(), req, &st);
  if (!s.ok()) return admin.Fail(s, absl::StrCat("state ", args.dependency));
  if (admin.options().json()) {
    std::printf("%s\n", MessageJson(st).c_str());
    return kOk;
  }
  std::printf("%s", FormatTable(StateRows(st)).c_str());
  return kOk;
}

struct WatchArgs {
  std::string dependency;  // "" for all
  int64_t count = -1;      // -1: until interrupted
};

int Watch(AdminConnection& admin, const WatchArgs& args) {
  v1::WatchEventsRequest req;
  req.set_dependency(args.dependency);
  auto ctx = admin.Context(/*deadline=*/false);
  auto reader = admin.stub().WatchEvents(ctx.get(), req);
  const bool json = admin.options().json();
  if (!json) {
    std::fprintf(stderr, "watching %s on %s (Ctrl-C to stop)\n",
                 req.dependency().empty() ? "all dependencies"
                                          : req.dependency().c_str(),
                 admin.options().target.c_str());
  }
  v1::Event e;
  int64_t seen = 0;
  while ((args.count < 0 || seen < args.count) && reader->Read(&e)) {
    ++seen;
    if (json) {
      std::printf("%s\n", MessageJson(e, /*pretty=*/false).c_str());
    } else {
      std::printf("%s  %-18s  %-16s  %s  [%s]\n", FormatTime(e.time()).c_str(),
                  v1::Event::Kind_Name(e.kind()).c_str(),
                  e.dependency().empty() ? "-" : e.dependency().c_str(),
                  DescribeEvent(e).c_str(), e.replica_id().c_str());
    }
    std::fflush(stdout);
  }
  if (args.count > 0 && seen >= args.count) {
    ctx->TryCancel();
    reader->Finish();
    return kOk;
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return admin.Fail(s, "watch");
  return kOk;
}

// `help [COMMAND]`: the command's help, or the global help for none or an
// unknown one.
int Help(CLI::App& app, const std::string& topic) {
  for (const CLI::App* command : app.get_subcommands({})) {
    if (!topic.empty() && command->get_name() == topic) {
      std::printf("%s", command->help().c_str());
      return kOk;
    }
  }
  std::printf("%s", kGlobalHelp);
  return kOk;
}

absl::Status ParseOutput(const std::string& text, std::string* output) {
  if (text != "table" && text != "json" && text != "yaml") {
    return absl::InvalidArgumentError("-o must be table, json or yaml");
  }
  *output = text;
  return absl::OkStatus();
}

absl::Status ParseTimeout(const std::string& text, absl::Duration* timeout) {
  absl::StatusOr<absl::Duration> d = wire::ParseDurationFlag(text);
  if (!d.ok() || *d <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--timeout must be a positive duration such as 5s");
  }
  *timeout = *d;
  return absl::OkStatus();
}

absl::Status ParseExpectedVersion(const std::string& text, uint64_t* version) {
  if (!absl::SimpleAtoi(text, version)) {
    return absl::InvalidArgumentError("--expected-version must be a number");
  }
  return absl::OkStatus();
}

absl::Status ParseCount(const std::string& text, int64_t* count) {
  if (!absl::SimpleAtoi(text, count) || *count <= 0) {
    return absl::InvalidArgumentError("--count must be a positive number");
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  CLI::App app("", "sluicectl");
  base::ConfigureApp(app, kGlobalHelp);

  Options options;
  app.add_option("--target", options.target)->envname("SLUICE_ADMIN_TARGET");
  app.add_option("--token-file", options.token_file)
      ->envname("SLUICE_ADMIN_TOKEN_FILE");
  base::AddClientTlsFlags(app, "SLUICE_ADMIN",
                          {&options.tls.ca_file, &options.tls.cert_file,
                           &options.tls.key_file, &options.tls.server_name});
  base::AddCheckedOption(&app, "-o,--output", [&](const std::string& v) {
    return ParseOutput(v, &options.output);
  });
  base::AddCheckedOption(&app, "--timeout", [&](const std::string& v) {
    return ParseTimeout(v, &options.timeout);
  });

  CLI::App* list = base::AddCommand(app, "list", kListHelp);

  std::string get_name;
  CLI::App* get = base::AddCommand(app, "get", kGetHelp);
  get->add_option("NAME", get_name);

  ApplyArgs apply_args;
  CLI::App* apply = base::AddCommand(app, "apply", kApplyHelp);

  DeleteArgs delete_args;
  CLI::App* del = base::AddCommand(app, "delete", kDeleteHelp);
  del->add_option("NAME", delete_args.name);

  BreakerArgs breaker_args;
  CLI::App* breaker = base::AddCommand(app, "breaker", kBreakerHelp);
  breaker->add_option("ACTION", breaker_args.action);
  breaker->add_option("DEP", breaker_args.dependency);

  StateArgs state_args;
  CLI::App* state = base::AddCommand(app, "state", kStateHelp);
  state->add_option("DEP", state_args.dependency);

  WatchArgs watch_args;
  CLI::App* watch = base::AddCommand(app, "watch", kWatchHelp);
  watch->add_option("DEP", watch_args.dependency);

  std::string help_topic;
  CLI::App* help = base::AddCommand(app, "help", kHelpHelp);
  help->add_option("COMMAND", help_topic);

  // Flags of one command; like the global ones, they may come before it.
  base::CommandFlags flags;
  flags.Add(app.add_option("-f,--file,--filename", apply_args.file), {apply});
  flags.Add(app.add_flag("--dry-run", apply_args.dry_run), {apply});
  flags.Add(base::AddCheckedOption(&app, "--expected-version",
                                   [&](const std::string& v) {
                                     return ParseExpectedVersion(
                                         v, &delete_args.expected_version);
                                   }),
            {del});
  flags.Add(app.add_option("--note", breaker_args.note), {breaker});
  flags.Add(app.add_option("--key", state_args.key), {state});
  flags.Add(base::AddCheckedOption(&app, "--count",
                                   [&](const std::string& v) {
                                     return ParseCount(v, &watch_args.count);
                                   }),
            {watch});

  const base::CommandLine line = base::ParseCommandLine(app, flags, argc, argv);
  switch (line.outcome) {
    case base::CommandLine::Outcome::kHelp:
      std::printf("%s", line.text.c_str());
      return kOk;
    case base::CommandLine::Outcome::kUsageError:
      return UsageError(line.text);
    case base::CommandLine::Outcome::kRun:
      break;
  }
  if (help->parsed()) return Help(app, help_topic);
  if (app.get_subcommands().empty()) {
    std::printf("%s", kGlobalHelp);
    return kUsage;
  }

  AdminConnection admin(options);
  if (int rc = admin.Connect(); rc != kOk) return rc;
  if (list->parsed()) return List(admin);
  if (get->parsed()) return Get(admin, get_name);
  if (apply->parsed()) return Apply(admin, apply_args);
  if (del->parsed()) return Delete(admin, delete_args);
  if (breaker->parsed()) return Breaker(admin, breaker_args);
  if (state->parsed()) return State(admin, state_args);
  if (watch->parsed()) return Watch(admin, watch_args);
  return kUsage;
}

}  // namespace
}  // namespace sluice::ctl

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  return sluice::ctl::Main(argc, argv);
}
