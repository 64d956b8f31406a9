// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_SDK_EXAMPLES_HTTP_UTIL_H_
#define SLUICE_CLIENT_SDK_EXAMPLES_HTTP_UTIL_H_

#include <httplib.h>

#include <string>

#include "nlohmann/json.hpp"

namespace sluice::examples {

// `body` as JSON text, keys in insertion order. Never throws: bytes that
// are not UTF-8 (a backend's error text, a request path) become U+FFFD.
std::string JsonText(const nlohmann::ordered_json& body);

// Blocks SIGINT and SIGTERM in every thread started after this call and
// starts a thread that stops `server` when one arrives. Call first in main.
void StopOnSignal(httplib::Server* server);

// Thread-per-connection pool for httplib (each keep-alive client connection
// holds a worker), with keep-alive connections that last.
void ConfigureServer(httplib::Server* server, int threads);

// httplib (Debian builds it with a listen backlog of 5) drops connection
// attempts beyond that, and a dropped SYN costs the client a 1 s retransmit.
// Finds this process's listening socket on `port` and widens its backlog.
void WidenListenBacklog(int port);

}  // namespace sluice::examples

#endif  // SLUICE_CLIENT_SDK_EXAMPLES_HTTP_UTIL_H_
