// SPDX-License-Identifier: Apache-2.0
#include "tools/sluice-bench/http_load.h"

#include <httplib.h>

#include <random>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "sluice/v1/decision.pb.h"
#include "wire/address.h"

namespace sluice::bench {
namespace {

constexpr char kJson[] = "application/json";

// Appends `text` as a JSON string literal. Names and keys come from the
// command line and the workload, so only the escapes JSON requires.
void AppendJsonString(std::string* out, absl::string_view text) {
  out->push_back('"');
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(out, "\\u%04x", static_cast<unsigned char>(c));
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

// The string value of "field" in sluiced's compact JSON (it prints no
// spaces, and these values have no escapes); nullopt when absent.
std::optional<absl::string_view> StringField(absl::string_view json,
                                             absl::string_view field) {
  const std::string key = absl::StrCat("\"", field, "\":\"");
  const size_t start = json.find(key);
  if (start == absl::string_view::npos) return std::nullopt;
  const size_t from = start + key.size();
  const size_t end = json.find('"', from);
  if (end == absl::string_view::npos) return std::nullopt;
  return json.substr(from, end - from);
}

int VerdictIndex(absl::string_view verdict) {
  if (verdict == "ALLOW") return v1::ALLOW;
  if (verdict == "REJECT") return v1::REJECT;
  if (verdict == "DEGRADE") return v1::DEGRADE;
  return v1::VERDICT_UNSPECIFIED;
}

// Counts a failed request in `result`: its status, or no answer at all.
void Failed(const httplib::Result& answer, PhaseResult* result) {
  if (!answer) {
    ++result->errors["CONNECTION"];
    if (result->first_error.empty()) {
      result->first_error =
          absl::StrCat("CONNECTION: ", httplib::to_string(answer.error()));
    }
    return;
  }
  const std::string code = absl::StrCat("HTTP_", answer->status);
  ++result->errors[code];
  if (result->first_error.empty()) {
    result->first_error = absl::StrCat(code, ": ", answer->body);
  }
}

}  // namespace

struct HttpConnections::Connection {
  Connection(const std::string& host, int port, absl::Duration deadline)
      : client(host, port) {
    client.set_keep_alive(true);
    client.set_tcp_nodelay(true);
    const auto timeout = absl::ToChronoMicroseconds(deadline);
    client.set_connection_timeout(timeout);
    client.set_read_timeout(timeout);
    client.set_write_timeout(timeout);
  }
  httplib::Client client;
};

HttpConnections::HttpConnections(const BenchOptions& options)
    : options_(options) {}

HttpConnections::~HttpConnections() = default;

absl::StatusOr<std::unique_ptr<HttpConnections>> HttpConnections::Open(
    const BenchOptions& options) {
  absl::StatusOr<wire::HostPort> address =
      wire::ParseHostPort(options.http_target);
  if (!address.ok()) return address.status();
  const std::string host(
      absl::StripSuffix(absl::StripPrefix(address->host, "["), "]"));
  std::unique_ptr<HttpConnections> connections(new HttpConnections(options));
  for (int i = 0; i < options.connections; ++i) {
    auto connection =
        std::make_unique<Connection>(host, address->port, options.deadline);
    const httplib::Result health = connection->client.Get("/v1/health");
    if (!health) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to ", options.http_target, ": ",
                       httplib::to_string(health.error())));
    }
    connections->connections_.push_back(std::move(connection));
  }
  return connections;
}

PhaseResult HttpConnections::RunDecisions(const Workload& workload,
                                          PhaseLength length, uint64_t seed) {
  Budget budget(length);
  std::vector<PhaseResult> results(connections_.size());
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (size_t c = 0; c < connections_.size(); ++c) {
    threads.emplace_back([&, c] {
      httplib::Client& client = connections_[c]->client;
      PhaseResult& result = results[c];
      std::mt19937_64 rng(seed + c);
      const std::string latency =
          absl::StrFormat("\"%.9fs\"", absl::ToDoubleSeconds(options_.latency));
      std::string body;
      while (budget.Take()) {
        const CallShape call = workload.Next(rng);
        body = "{\"dependency\":";
        AppendJsonString(&body, workload.dependency(call.dependency));
        body += ",\"key\":";
        AppendJsonString(&body, workload.key(call.key));
        body += ",\"caller\":";
        AppendJsonString(&body, options_.caller);
        body += "}";
        const absl::Time started = absl::Now();
        const httplib::Result acquired =
            client.Post("/v1/acquire", body, kJson);
        if (!acquired || acquired->status != 200) {
          Failed(acquired, &result);
          continue;
        }
        const absl::string_view json = acquired->body;
        const int verdict = VerdictIndex(
            StringField(json, "verdict").value_or(absl::string_view()));
        result.first.Record(absl::Now() - started);
        ++result.verdicts[verdict];
        if (verdict != v1::ALLOW) {
          ++result.completed;
          continue;
        }
        if (options_.hold && options_.latency > absl::ZeroDuration()) {
          absl::SleepFor(options_.latency);  // the downstream call
        }
        body = "{\"dependency\":";
        AppendJsonString(&body, workload.dependency(call.dependency));
        body += ",\"key\":";
        AppendJsonString(&body, workload.key(call.key));
        body += ",\"permitId\":";
        AppendJsonString(&body, StringField(json, "permitId").value_or(""));
        absl::StrAppend(&body, ",\"outcome\":\"",
                        call.failure ? "FAILURE" : "SUCCESS",
                        "\",\"latency\":", latency, "}");
        const httplib::Result reported = client.Post("/v1/report", body, kJson);
        if (!reported || reported->status != 200) {
          Failed(reported, &result);
          continue;
        }
        ++result.completed;
        result.pair.Record(absl::Now() - started);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  PhaseResult total;
  total.elapsed = absl::Now() - start;
  for (const PhaseResult& r : results) total.Merge(r);
  return total;
}

PhaseResult HttpConnections::RunHealthChecks(PhaseLength length) {
  Budget budget(length);
  std::vector<PhaseResult> results(connections_.size());
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (size_t c = 0; c < connections_.size(); ++c) {
    threads.emplace_back([&, c] {
      httplib::Client& client = connections_[c]->client;
      PhaseResult& result = results[c];
      while (budget.Take()) {
        const absl::Time started = absl::Now();
        const httplib::Result health = client.Get("/v1/health");
        if (!health || health->status != 200) {
          Failed(health, &result);
          continue;
        }
        result.first.Record(absl::Now() - started);
        ++result.completed;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  PhaseResult total;
  total.elapsed = absl::Now() - start;
  for (const PhaseResult& r : results) total.Merge(r);
  return total;
}

}  // namespace sluice::bench
