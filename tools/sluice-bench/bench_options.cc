// SPDX-License-Identifier: Apache-2.0
#include "tools/sluice-bench/bench_options.h"

#include <CLI/CLI.hpp>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/command_line.h"
#include "wire/address.h"
#include "wire/time.h"

namespace sluice::bench {

const char kBenchUsage[] =
    "Usage: sluice-bench [flags]\n"
    "\n"
    "Drives Acquire + ReportResult pairs against a running sluiced and, in\n"
    "the same run, grpc.health.v1.Health/Check (with --api http: GET\n"
    "/v1/health) with the same connections and concurrency, then prints both\n"
    "and their ratio.\n"
    "\n"
    "Where and how:\n"
    "  --target ADDRESS        HOST:PORT or unix:PATH (default "
    "$SLUICE_TARGET,\n"
    "                          else 127.0.0.1:50051)\n"
    "  --tls-ca PATH           TLS to --target, trusting this CA (gRPC only);\n"
    "  --tls-cert/--tls-key    with a client certificate (docs/tls.md)\n"
    "  --api grpc|http         grpc: DecisionService on --target; http: the\n"
    "                          HTTP/JSON API on --http-target, POST\n"
    "                          /v1/acquire then /v1/report on keep-alive\n"
    "                          connections, one thread and one request in\n"
    "                          flight each (default grpc)\n"
    "  --http-target HOST:PORT sluiced's --http-listen address (default\n"
    "                          $SLUICE_HTTP_TARGET)\n"
    "  --mode unary|stream|rls unary: Acquire then ReportResult RPCs; stream:\n"
    "                          both as calls on DecisionService.Decide "
    "streams;\n"
    "                          rls: Envoy's RateLimitService/ShouldRateLimit\n"
    "                          in domain sluice-bench with the descriptor\n"
    "                          [dependency=DEP] (plus key=KEY with --keys),\n"
    "                          which the policies must claim in their\n"
    "                          envoy_descriptors; nothing is reported\n"
    "                          (default unary)\n"
    "  --connections N         separate gRPC channels, one connection each\n"
    "                          (default 4)\n"
    "  --concurrency M         decisions in flight per connection (default "
    "16)\n"
    "  --batch B               stream mode: at most B calls per message; "
    "calls\n"
    "                          that queue while a write is under way go out\n"
    "                          together (default 1)\n"
    "  --deadline DURATION     deadline of each unary RPC and of connecting\n"
    "                          (default 5s)\n"
    "\n"
    "What the calls look like:\n"
    "  --dependencies LIST     a,b or weighted a:3,b:1 (default bench)\n"
    "  --keys N                keys k0..k{N-1} per dependency; 0 sends no key\n"
    "                          (default 0)\n"
    "  --key-distribution uniform|zipf\n"
    "                          zipf draws key k in proportion to 1/(k+1)\n"
    "                          (default uniform)\n"
    "  --failure-rate F        share of reports that say FAILURE, in [0, 1]\n"
    "                          (default 0)\n"
    "  --latency DURATION      the latency each report carries (default 5ms)\n"
    "  --hold                  hold each allowed permit that long before\n"
    "                          reporting it (default: report at once)\n"
    "  --caller NAME           AcquireRequest.caller (default sluice-bench)\n"
    "  --seed N                seed of the mix (default 1)\n"
    "\n"
    "How long:\n"
    "  --count N               make N decisions (and N health checks)\n"
    "  --duration DURATION     or run this long each (default 10s)\n"
    "  --warmup DURATION       unmeasured run before each (default 1s)\n"
    "  --baseline=false        skip the health-check baseline\n"
    "  --json FILE             also write the result as JSON\n"
    "\n"
    "A decision is one Acquire plus, when it is allowed, its report.\n"
    "Exit codes: 0 no call failed, 1 some calls failed or the target could\n"
    "not be reached (counts by gRPC code printed), 2 usage error.\n";

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kUnary:
      return "unary";
    case Mode::kStream:
      return "stream";
    case Mode::kRls:
      return "rls";
  }
  return "?";
}

const char* ApiName(Api api) { return api == Api::kGrpc ? "grpc" : "http"; }

namespace {

absl::Status Bad(absl::string_view flag, absl::string_view want,
                 absl::string_view got) {
  return absl::InvalidArgumentError(
      absl::StrCat(flag, " wants ", want, ", got \"", got, "\""));
}

// A whole number in [min, max].
template <typename Int>
std::function<absl::Status(const std::string&)> IntIn(const char* flag, Int min,
                                                      Int max, Int* out) {
  return [=](const std::string& text) {
    Int value;
    if (!absl::SimpleAtoi(text, &value) || value < min || value > max) {
      return Bad(flag, absl::StrCat("a whole number in [", min, ", ", max, "]"),
                 text);
    }
    *out = value;
    return absl::OkStatus();
  };
}

std::function<absl::Status(const std::string&)> DurationAtLeast(
    const char* flag, bool zero_ok, absl::Duration* out) {
  return [=](const std::string& text) {
    absl::StatusOr<absl::Duration> d = wire::ParseDurationFlag(text);
    if (!d.ok() || *d < absl::ZeroDuration() ||
        (!zero_ok && *d == absl::ZeroDuration())) {
      return Bad(flag,
                 zero_ok ? "a duration like 5ms (0 allowed)"
                         : "a positive duration like 10s",
                 text);
    }
    *out = *d;
    return absl::OkStatus();
  };
}

}  // namespace

ParsedCommandLine ParseBenchCommandLine(int argc, const char* const* argv) {
  ParsedCommandLine parsed;
  BenchOptions& o = parsed.options;
  CLI::App app("", "sluice-bench");
  base::ConfigureApp(app, kBenchUsage);

  app.add_option("--target", o.target)->envname("SLUICE_TARGET");
  app.add_option("--tls-ca", o.tls_ca);
  app.add_option("--tls-cert", o.tls_cert);
  app.add_option("--tls-key", o.tls_key);
  base::AddCheckedOption(&app, "--api", [&](const std::string& v) {
    const std::string api = absl::AsciiStrToLower(v);
    if (api == "grpc") {
      o.api = Api::kGrpc;
    } else if (api == "http") {
      o.api = Api::kHttp;
    } else {
      return Bad("--api", "grpc or http", v);
    }
    return absl::OkStatus();
  });
  base::AddCheckedOption(&app, "--http-target", [&](const std::string& v) {
    if (absl::Status s = wire::ParseHostPort(v).status(); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--http-target: ", s.message()));
    }
    o.http_target = v;
    return absl::OkStatus();
  })->envname("SLUICE_HTTP_TARGET");
  base::AddCheckedOption(&app, "--mode", [&](const std::string& v) {
    const std::string mode = absl::AsciiStrToLower(v);
    if (mode == "unary") {
      o.mode = Mode::kUnary;
    } else if (mode == "stream") {
      o.mode = Mode::kStream;
    } else if (mode == "rls") {
      o.mode = Mode::kRls;
    } else {
      return Bad("--mode", "unary, stream or rls", v);
    }
    return absl::OkStatus();
  });
  CLI::Option* mode_option = app.get_option("--mode");
  base::AddCheckedOption(&app, "--connections",
                         IntIn("--connections", 1, 1024, &o.connections));
  CLI::Option* concurrency = base::AddCheckedOption(
      &app, "--concurrency", IntIn("--concurrency", 1, 100000, &o.concurrency));
  CLI::Option* batch = base::AddCheckedOption(
      &app, "--batch", IntIn("--batch", 1, 1000, &o.batch));
  base::AddCheckedOption(&app, "--deadline",
                         DurationAtLeast("--deadline", false, &o.deadline));
  base::AddCheckedOption(&app, "--dependencies", [&](const std::string& v) {
    absl::StatusOr<std::vector<WeightedName>> list = ParseWeightedList(v);
    if (!list.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--dependencies: ", list.status().message()));
    }
    o.workload.dependencies = *std::move(list);
    return absl::OkStatus();
  });
  base::AddCheckedOption(&app, "--keys",
                         IntIn("--keys", 0, 10000000, &o.workload.keys));
  base::AddCheckedOption(&app, "--key-distribution", [&](const std::string& v) {
    const std::string d = absl::AsciiStrToLower(v);
    if (d == "uniform") {
      o.workload.key_distribution = KeyDistribution::kUniform;
    } else if (d == "zipf") {
      o.workload.key_distribution = KeyDistribution::kZipf;
    } else {
      return Bad("--key-distribution", "uniform or zipf", v);
    }
    return absl::OkStatus();
  });
  base::AddCheckedOption(&app, "--failure-rate", [&](const std::string& v) {
    double rate;
    if (!absl::SimpleAtod(v, &rate) || !(rate >= 0 && rate <= 1)) {
      return Bad("--failure-rate", "a number in [0, 1]", v);
    }
    o.workload.failure_rate = rate;
    return absl::OkStatus();
  });
  base::AddCheckedOption(&app, "--latency",
                         DurationAtLeast("--latency", true, &o.latency));
  app.add_flag("--hold", o.hold);
  app.add_option("--caller", o.caller);
  base::AddCheckedOption(&app, "--seed",
                         IntIn<uint64_t>("--seed", 0, UINT64_MAX, &o.seed));
  CLI::Option* count = base::AddCheckedOption(
      &app, "--count", IntIn<uint64_t>("--count", 1, UINT64_MAX, &o.count));
  CLI::Option* duration = base::AddCheckedOption(
      &app, "--duration", DurationAtLeast("--duration", false, &o.duration));
  base::AddCheckedOption(&app, "--warmup",
                         DurationAtLeast("--warmup", true, &o.warmup));
  app.add_flag("--baseline", o.baseline);
  app.add_option("--json", o.json_path);

  const base::CommandLine line =
      base::ParseCommandLine(app, base::CommandFlags(), argc, argv);
  switch (line.outcome) {
    case base::CommandLine::Outcome::kHelp:
      parsed.outcome = ParsedCommandLine::Outcome::kHelp;
      parsed.text = line.text;
      return parsed;
    case base::CommandLine::Outcome::kUsageError:
      parsed.outcome = ParsedCommandLine::Outcome::kUsageError;
      parsed.text = line.text;
      // A stray word is most often the value of a boolean flag.
      if (absl::StartsWith(parsed.text, "unexpected argument ")) {
        absl::StrAppend(&parsed.text,
                        ": sluice-bench takes only flags (--baseline=false, "
                        "not --baseline false)");
      }
      return parsed;
    case base::CommandLine::Outcome::kRun:
      break;
  }
  auto usage = [&](std::string text) {
    parsed.outcome = ParsedCommandLine::Outcome::kUsageError;
    parsed.text = std::move(text);
    return parsed;
  };
  if (count->count() > 0 && duration->count() > 0) {
    return usage("--count and --duration exclude each other");
  }
  if (batch->count() > 0 && o.batch > 1 && o.mode != Mode::kStream) {
    return usage("--batch applies to --mode stream only");
  }
  if (o.target.empty()) return usage("--target must not be empty");
  if (o.api == Api::kHttp) {
    if (o.http_target.empty()) {
      return usage("--api http needs --http-target HOST:PORT");
    }
    if (mode_option->count() > 0 && o.mode != Mode::kUnary) {
      if (o.mode == Mode::kRls) {
        return usage("--mode rls is Envoy's rate-limit service over gRPC; "
                     "it has no HTTP form");
      }
      return usage("--mode stream is gRPC's Decide stream; --api http makes "
                   "one request at a time per connection");
    }
    if (concurrency->count() > 0 && o.concurrency != 1) {
      return usage("--api http has one request in flight per connection "
                   "(HTTP/1.1); use --connections for more");
    }
    o.concurrency = 1;
  }
  return parsed;
}

}  // namespace sluice::bench
