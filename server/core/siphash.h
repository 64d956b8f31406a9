// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_SIPHASH_H_
#define SLUICE_SERVER_CORE_SIPHASH_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace sluice::core {

// SipHash-2-4, the keyed 64-bit pseudo-random function of Aumasson and
// Bernstein ("SipHash: a fast short-input PRF", 2012), written from that
// paper: 2 compression rounds per 8-byte word, 4 finalisation rounds, words
// read little-endian, the message length mod 256 in the last byte. Without
// the 128-bit key its output cannot be predicted, which is what makes it a
// MAC for short messages (permit ids, see PermitSeal).
// Fed incrementally, so a message made of several pieces is hashed without
// being copied into one buffer. Not thread-safe; one hasher per message.
class SipHasher {
 public:
  SipHasher(uint64_t k0, uint64_t k1);

  SipHasher& Update(absl::string_view bytes);
  SipHasher& UpdateU64(uint64_t value);  // as 8 bytes, little-endian
  // The hash of everything fed so far. Call once.
  uint64_t Finish();

 private:
  void Round();
  void Compress(uint64_t word);

  uint64_t v0_, v1_, v2_, v3_;
  uint64_t tail_ = 0;       // the bytes of an unfinished word, little-endian
  size_t tail_bytes_ = 0;   // how many (0-7)
  uint64_t length_ = 0;     // bytes fed, mod 2^64 (only the low 8 bits count)
};

// SipHash-2-4 of one string.
uint64_t SipHash24(uint64_t k0, uint64_t k1, absl::string_view bytes);

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_SIPHASH_H_
