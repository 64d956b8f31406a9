// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_FREE_PORT_H_
#define SLUICE_TESTS_TESTING_FREE_PORT_H_

// Free TCP ports for servers that cannot listen on port 0 and report their
// choice (redis-server, redis-sentinel, stunnel, nginx, the example
// backend): the one place a test gets such a port.
//
// A port the kernel hands out for bind(0) is free at that moment, but it is
// released before the server binds it, and tests run side by side (ctest
// -j): another test process could be handed the same port in between. So
// each port is also claimed for the life of this process with an exclusive
// lock on /tmp/sluice-test-ports/PORT; a port another process has claimed
// is passed over. The kernel drops a lock when its process ends, however it
// ends, so nothing has to be cleaned up. (Outgoing connections do not take
// these ports in between: Linux gives bind(0) odd ports and connect()
// even ones while both are left.)

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace sluice::testing {

// A TCP port on 127.0.0.1 that nothing listened on when it was chosen and
// that no other test process has claimed; aborts when none is found.
inline int FreePort() {
  static const char kDir[] = "/tmp/sluice-test-ports";
  mkdir(kDir, 01777);  // EEXIST is fine; sticky, like /tmp
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    const bool bound =
        fd >= 0 &&
        bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
    if (fd >= 0) close(fd);
    if (!bound) continue;
    const int port = ntohs(addr.sin_port);
    const std::string lock = std::string(kDir) + "/" + std::to_string(port);
    // Kept open (and locked) until this process ends.
    const int lock_fd =
        open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (lock_fd < 0) continue;
    if (flock(lock_fd, LOCK_EX | LOCK_NB) == 0) return port;
    close(lock_fd);  // another test process (or this one) has it
  }
  std::fprintf(stderr, "FreePort: no free port in 100 attempts (errno %d)\n",
               errno);
  std::abort();
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_FREE_PORT_H_
