// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_APP_IN_PROCESS_SERVER_H_
#define SLUICE_TESTS_APP_IN_PROCESS_SERVER_H_

// What the tests of app::Server in process (server_test, tree_options_test)
// give every server they start.

#include <memory>

#include "server/app/options.h"
#include "server/app/server.h"
#include "server/cluster/store.h"
#include "server/core/clock.h"
#include "tests/testing/forwarding_store.h"

namespace sluice::testing {

// Options of a server whose three listeners take free ports on loopback.
inline app::ServerOptions LoopbackServerOptions() {
  app::ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.admin_listen = "127.0.0.1:0";
  options.metrics_listen = "127.0.0.1:0";
  return options;
}

// A server on `clock` whose sync ticks the test drives (SyncNow; no sync
// thread) and with no metrics listener. With `store` (which must outlive
// the server), its cluster store passes every call to it, so that servers
// share one store; ServerOptions::redis selects cluster mode.
inline app::Server::Dependencies DrivenServerDependencies(
    core::Clock* clock, cluster::Store* store = nullptr) {
  app::Server::Dependencies deps;
  deps.clock = clock;
  if (store != nullptr) {
    deps.store_factory = [store] {
      return std::make_unique<ForwardingStore>(store);
    };
  }
  deps.sync_thread = false;
  deps.metrics_listener = false;
  return deps;
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_APP_IN_PROCESS_SERVER_H_
