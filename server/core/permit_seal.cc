// SPDX-License-Identifier: Apache-2.0
#include "server/core/permit_seal.h"

#include <sys/random.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <random>

#include "server/core/siphash.h"

namespace sluice::core {
namespace {

// Fills `out` from getrandom(2); false if the kernel has no such call.
bool KernelRandom(unsigned char* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = getrandom(out + done, size - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

PermitKey RandomPermitKey() {
  PermitKey key;
  while (key.empty()) {
    unsigned char bytes[16];
    if (!KernelRandom(bytes, sizeof(bytes))) {
      std::random_device device;  // reads /dev/urandom on Linux
      for (unsigned char& b : bytes) b = static_cast<unsigned char>(device());
    }
    std::memcpy(&key.k0, bytes, 8);
    std::memcpy(&key.k1, bytes + 8, 8);
  }
  return key;
}

uint64_t PermitSeal::Mac(uint64_t serial, absl::string_view dependency,
                         absl::string_view key) const {
  // The dependency's length first, so that no other split of the same bytes
  // into dependency and key has the same MAC.
  return SipHasher(key_.k0, key_.k1)
      .UpdateU64(serial)
      .UpdateU64(dependency.size())
      .Update(dependency)
      .Update(key)
      .Finish();
}

bool PermitSeal::Verify(const PermitId& id, absl::string_view dependency,
                        absl::string_view key) const {
  if (id.serial == 0) return false;  // never sealed
  return Mac(id.serial, dependency, key) == id.mac;
}

}  // namespace sluice::core
