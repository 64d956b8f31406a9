// SPDX-License-Identifier: Apache-2.0
#include "server/core/siphash.h"

namespace sluice::core {
namespace {

constexpr uint64_t Rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

}  // namespace

SipHasher::SipHasher(uint64_t k0, uint64_t k1)
    : v0_(k0 ^ 0x736f6d6570736575),  // "somepseu"
      v1_(k1 ^ 0x646f72616e646f6d),  // "dorandom"
      v2_(k0 ^ 0x6c7967656e657261),  // "lygenera"
      v3_(k1 ^ 0x7465646279746573) {}  // "tedbytes"

// The paper's SipRound: add-rotate-xor over the four state words.
void SipHasher::Round() {
  v0_ += v1_; v1_ = Rotl(v1_, 13); v1_ ^= v0_; v0_ = Rotl(v0_, 32);
  v2_ += v3_; v3_ = Rotl(v3_, 16); v3_ ^= v2_;
  v0_ += v3_; v3_ = Rotl(v3_, 21); v3_ ^= v0_;
  v2_ += v1_; v1_ = Rotl(v1_, 17); v1_ ^= v2_; v2_ = Rotl(v2_, 32);
}

void SipHasher::Compress(uint64_t word) {
  v3_ ^= word;
  Round();
  Round();
  v0_ ^= word;
}

SipHasher& SipHasher::Update(absl::string_view bytes) {
  length_ += bytes.size();
  const char* p = bytes.data();
  size_t n = bytes.size();
  // Whole words straight from the input once an unfinished one is done.
  while (n > 0 && (tail_bytes_ != 0 || n < 8)) {
    tail_ |= uint64_t{static_cast<unsigned char>(*p++)} << (8 * tail_bytes_);
    --n;
    if (++tail_bytes_ == 8) {
      Compress(tail_);
      tail_ = 0;
      tail_bytes_ = 0;
    }
  }
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word = 0;
    for (int i = 7; i >= 0; --i) {
      word = (word << 8) | static_cast<unsigned char>(p[i]);
    }
    Compress(word);
  }
  for (; n > 0; --n) {
    tail_ |= uint64_t{static_cast<unsigned char>(*p++)} << (8 * tail_bytes_);
    ++tail_bytes_;
  }
  return *this;
}

SipHasher& SipHasher::UpdateU64(uint64_t value) {
  if (tail_bytes_ == 0) {
    length_ += 8;
    Compress(value);
    return *this;
  }
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(value >> (8 * i));
  return Update(absl::string_view(bytes, sizeof(bytes)));
}

uint64_t SipHasher::Finish() {
  Compress(tail_ | (length_ << 56));
  v2_ ^= 0xff;
  for (int i = 0; i < 4; ++i) Round();
  return v0_ ^ v1_ ^ v2_ ^ v3_;
}

uint64_t SipHash24(uint64_t k0, uint64_t k1, absl::string_view bytes) {
  return SipHasher(k0, k1).Update(bytes).Finish();
}

}  // namespace sluice::core
