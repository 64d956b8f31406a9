# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Sourced by the demo scripts (bash). claim_ports N fills the array `ports`
# with N free loopback ports for servers that cannot report a port 0
# choice. Each is one the kernel handed out for bind(0), then claimed with
# an exclusive lock on /tmp/sluice-test-ports/PORT that this shell holds on
# an open file descriptor until it exits: tests that run side by side
# (ctest -j) never pick the same port. tests/testing/free_port.h follows
# the same protocol.

claim_ports() {  # N
  local want=$1 port fd tries=0
  local dir=/tmp/sluice-test-ports
  mkdir -p "${dir}"
  ports=()
  while (( ${#ports[@]} < want )); do
    if (( ++tries > 100 )); then
      echo "claim_ports: no free port in 100 attempts" >&2
      return 1
    fi
    port="$(/usr/bin/python3 -c '
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')"
    exec {fd}>>"${dir}/${port}"
    if flock -n "${fd}"; then
      ports+=("${port}")
    else
      exec {fd}>&-
    fi
  done
}
