// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the permit id of every report (rpc::ParsePermitId and
// PermitIssuer), then the engine's check of what parses. Properties checked:
// an error message is valid UTF-8 (a proto3 string); a parsed id formats
// back to an id that parses to the same; and no input settles the permit an
// engine holds (an input that did would have guessed its 64-bit MAC).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/core/clock.h"
#include "server/core/engine.h"
#include "server/rpc/decision_convert.h"

namespace {

using sluice::core::PermitId;

void Fail(const char* what, absl::string_view input) {
  std::fprintf(stderr, "permit_id_fuzzer: %s (input of %zu bytes)\n", what,
               input.size());
  std::abort();
}

// Whether `s` is well-formed UTF-8 (RFC 3629: no overlongs, surrogates or
// code points above U+10FFFF).
bool ValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;  // continuation bytes
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // cut short
    for (size_t k = 1; k <= n; ++k) {
      const unsigned char t = static_cast<unsigned char>(s[i + k]);
      if ((t & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (t & 0x3F);
    }
    const uint32_t least[] = {0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

// Time stands still, so the held permit never expires.
class StillClock final : public sluice::core::Clock {
 public:
  absl::Time Now() const override { return absl::FromUnixSeconds(1700000000); }
};

// One engine with one permit held, for the life of the process.
struct Held {
  Held() : engine(&clock, {}) {
    sluice::core::PolicyConfig policy;
    policy.name = "inventory";
    policy.call_timeout = absl::Seconds(1);
    sluice::core::ConcurrencyConfig concurrency;
    concurrency.max_in_flight = 1;
    policy.concurrency = concurrency;
    engine.PutPolicy(policy);
    absl::StatusOr<sluice::core::Decision> d =
        engine.Acquire("inventory", "", 1);
    if (!d.ok() || d->permit_id.empty()) Fail("no permit to hold", "");
  }
  uint32_t in_flight() {
    absl::StatusOr<sluice::core::LivePolicyStatus> s =
        engine.Inspect("inventory");
    return s.ok() && s->gates ? s->gates->in_flight : 0;
  }
  StillClock clock;
  sluice::core::Engine engine;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Held* held = new Held();
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  (void)sluice::rpc::PermitIssuer(text);
  absl::StatusOr<PermitId> id = sluice::rpc::ParsePermitId(text);
  if (!id.ok()) {
    if (!ValidUtf8(id.status().message())) {
      Fail("error message is not valid UTF-8", text);
    }
    return 0;
  }
  const std::string formatted = sluice::rpc::FormatPermitId(*id);
  absl::StatusOr<PermitId> again = sluice::rpc::ParsePermitId(formatted);
  if (!again.ok() || *again != *id) Fail("format/parse round trip", text);

  held->engine.Report("inventory", "", *id, sluice::core::Outcome::kFailure,
                      absl::Milliseconds(1));
  if (held->in_flight() != 1) Fail("a made-up id settled the held permit", text);
  return 0;
}
