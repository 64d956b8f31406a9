// SPDX-License-Identifier: Apache-2.0
#include "sluice/client/options.h"

#include <string>

namespace sluice::client {

ClientOptions SidecarClientOptions(const std::string& socket_path) {
  ClientOptions options;
  options.target = "unix:" + socket_path;
  options.load_balancing_policy = "pick_first";
  options.acquire_timeout = absl::Milliseconds(5);
  options.on_failure = FailureMode::kFailOpen;
  options.backoff_initial = absl::Milliseconds(50);
  options.backoff_max = absl::Seconds(1);
  options.channel_int_args = {{"grpc.initial_reconnect_backoff_ms", 100},
                              {"grpc.min_reconnect_backoff_ms", 100},
                              {"grpc.max_reconnect_backoff_ms", 1000}};
  options.lease.enabled = true;
  return options;
}

}  // namespace sluice::client
