// SPDX-License-Identifier: Apache-2.0
// The smallest adoption of the SDK: the snippet in docs/sdk.md and the
// README, compiled so that it stays true. Usage:
//   sluice-example-quickstart SLUICE_TARGET DEPENDENCY
#include <cstdio>

#include "sluice/client/client.h"

namespace sc = sluice::client;

// Stands in for the gateway's real downstream call.
absl::StatusOr<sc::Response> FetchInventory(absl::Duration timeout) {
  sc::Response response;
  response.body = R"({"in_stock": 3})";
  response.content_type = "application/json";
  return response;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s SLUICE_TARGET DEPENDENCY\n", argv[0]);
    return 2;
  }
  // --- the dozen lines ---
  sc::ClientOptions options;
  options.target = argv[1];  // e.g. "127.0.0.1:50051"
  auto client = sc::Client::Create(options);  // once per process
  if (!client.ok()) return 1;

  sc::CallResult result = (*client)->Call(argv[2], [](const sc::CallContext& ctx) {
    return FetchInventory(ctx.timeout);  // the real downstream call
  });
  switch (result.kind) {
    case sc::CallResult::Kind::kBackend:   // the real answer (check outcome)
    case sc::CallResult::Kind::kDegraded:  // the fallback to serve instead
      std::printf("%s\n", result.response.body.c_str());
      return 0;
    case sc::CallResult::Kind::kRejected:  // answer http_status (429 / 503)
      std::printf("refused: %d\n", result.http_status);
      return 1;
  }
  // --- end ---
  return 0;
}
