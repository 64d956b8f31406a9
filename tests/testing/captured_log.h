// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_CAPTURED_LOG_H_
#define SLUICE_TESTS_TESTING_CAPTURED_LOG_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "spdlog/sinks/ringbuffer_sink.h"
#include "spdlog/spdlog.h"

namespace sluice::testing {

// Sends spdlog's default logger, every level, into a ring of the last
// `capacity` lines for the life of this object, then puts the previous
// logger back. Declare it before whatever logs (a server), so that it
// outlives its threads. Safe for concurrent logging.
class CapturedLog {
 public:
  explicit CapturedLog(size_t capacity = 256)
      : previous_(spdlog::default_logger()),
        ring_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(capacity)) {
    auto logger = std::make_shared<spdlog::logger>("test", ring_);
    logger->set_level(spdlog::level::trace);
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  // {level, message} of each line kept, oldest first.
  std::vector<std::pair<spdlog::level::level_enum, std::string>> lines() {
    std::vector<std::pair<spdlog::level::level_enum, std::string>> out;
    for (const auto& m : ring_->last_raw()) {
      out.emplace_back(m.level,
                       std::string(m.payload.data(), m.payload.size()));
    }
    return out;
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> ring_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_CAPTURED_LOG_H_
