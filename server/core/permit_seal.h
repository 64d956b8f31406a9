// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_PERMIT_SEAL_H_
#define SLUICE_SERVER_CORE_PERMIT_SEAL_H_

#include <cstdint>
#include <ostream>

#include "absl/strings/string_view.h"

namespace sluice::core {

// A permit as the engine hands it out and takes it back: the ledger's
// serial (its epoch and sequence, see PermitLedger) and a MAC that binds
// the serial to the dependency and key it was issued for. The serial alone
// is predictable (consecutive permits have consecutive serials); the MAC is
// what a caller cannot make up, so a report must carry both.
struct PermitId {
  uint64_t serial = 0;  // 0: no permit
  uint64_t mac = 0;

  // True when there is no permit at all (not even a made-up one).
  bool empty() const { return serial == 0 && mac == 0; }
  friend bool operator==(const PermitId& a, const PermitId& b) {
    return a.serial == b.serial && a.mac == b.mac;
  }
  friend bool operator!=(const PermitId& a, const PermitId& b) {
    return !(a == b);
  }
  friend std::ostream& operator<<(std::ostream& out, const PermitId& id) {
    return out << id.serial << "/" << id.mac;
  }
};

// The 128-bit secret of a PermitSeal.
struct PermitKey {
  uint64_t k0 = 0;
  uint64_t k1 = 0;
  bool empty() const { return k0 == 0 && k1 == 0; }
};

// A key drawn from the kernel's random source (getrandom(2), falling back
// to std::random_device where the system call is missing); never empty.
PermitKey RandomPermitKey();

// Seals and checks permit ids with a keyed MAC: SipHash-2-4 over the serial,
// the dependency and the key. The key lives only in this process: a permit
// lives only in the ledger of the process that issued it (the state file and
// warm start keep no permits), so a restarted process needs no old key, and
// a permit of another process or of an earlier run of this one fails the
// check like a forged one. Immutable; safe for concurrent use.
class PermitSeal {
 public:
  explicit PermitSeal(PermitKey key) : key_(key) {}

  uint64_t Mac(uint64_t serial, absl::string_view dependency,
               absl::string_view key) const;
  PermitId Seal(uint64_t serial, absl::string_view dependency,
                absl::string_view key) const {
    return PermitId{serial, Mac(serial, dependency, key)};
  }
  // Whether `id` was sealed by this seal for this dependency and key. The
  // MAC is compared as one word, so timing does not tell how much of a
  // guess was right.
  bool Verify(const PermitId& id, absl::string_view dependency,
              absl::string_view key) const;

 private:
  const PermitKey key_;
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_PERMIT_SEAL_H_
