// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TOOLS_SLUICECTL_ADMIN_CONNECTION_H_
#define SLUICE_TOOLS_SLUICECTL_ADMIN_CONNECTION_H_

// sluicectl's side of the admin API: the connection its global flags
// describe, and what a failed RPC tells the operator and the shell.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "sluice/v1/admin.grpc.pb.h"
#include "wire/tls.h"

namespace sluice::ctl {

// sluicectl's exit codes.
enum ExitCode {
  kOk = 0,
  kRefused = 1,  // invalid policy, not found, version conflict, no breaker
  kUsage = 2,
  kUnreachable = 3,  // no server, too slow, or not the admin listener
  kUnauthenticated = 4,
};

// The global flags, with their defaults.
struct Options {
  std::string target = "127.0.0.1:50052";
  std::string token_file;                     // "" sends no token
  wire::ClientTlsFiles tls;                   // no files: plaintext
  std::string output = "table";               // table, json or yaml
  absl::Duration timeout = absl::Seconds(5);  // per RPC; watch has none

  bool json() const { return output == "json"; }
};

// The stub, a context carrying the deadline and token, and a failed RPC
// turned into a message and an exit code. Not thread-safe.
class AdminConnection {
 public:
  explicit AdminConnection(Options options) : options_(std::move(options)) {}

  // Reads the token file and opens the channel; kUsage (with a message on
  // stderr) when the token file cannot be read.
  int Connect();

  const Options& options() const { return options_; }
  v1::AdminService::Stub& stub() { return *stub_; }

  std::unique_ptr<grpc::ClientContext> Context(bool deadline = true) const;

  // Prints a clear error for a failed RPC (`what` names the command) and
  // returns the exit code.
  int Fail(const grpc::Status& status, const std::string& what) const;

 private:
  const Options options_;
  std::string token_;
  std::unique_ptr<v1::AdminService::Stub> stub_;
};

}  // namespace sluice::ctl

#endif  // SLUICE_TOOLS_SLUICECTL_ADMIN_CONNECTION_H_
