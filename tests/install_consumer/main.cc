// SPDX-License-Identifier: Apache-2.0
// Links the installed SDK and checks the promise a gateway relies on most:
// with Sluice unreachable, Acquire fails open, decided locally.
#include <cstdio>

#include "absl/time/time.h"
#include "sluice/client/client.h"

namespace sc = sluice::client;

int main() {
  if (sc::Client::Create(sc::ClientOptions()).ok()) {
    std::fprintf(stderr, "Create without a target succeeded\n");
    return 1;
  }

  sc::ClientOptions options;
  options.target = "127.0.0.1:1";  // Nothing listens there.
  options.acquire_timeout = absl::Milliseconds(500);
  absl::StatusOr<std::unique_ptr<sc::Client>> client =
      sc::Client::Create(options);
  if (!client.ok()) {
    std::fprintf(stderr, "Create: %s\n", client.status().ToString().c_str());
    return 1;
  }
  sc::Permit permit = (*client)->Acquire("inventory");
  if (!permit.allowed() || !permit.decided_locally() ||
      permit.reason() != sc::Reason::kSluiceUnavailable) {
    std::fprintf(stderr,
                 "Acquire with Sluice down: allowed=%d decided_locally=%d\n",
                 permit.allowed(), permit.decided_locally());
    return 1;
  }
  std::printf("install_consumer: Acquire failed open with Sluice down\n");
  return 0;
}
