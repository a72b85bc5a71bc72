#pragma once

// Logging set-up: glog's level and verbosity from the Config, and the node's name in
// every line ("I1129 15:40:01.123456 server 1 file.cc:42] ..."), so that the interleaved
// logs of a local cluster say which process wrote each line.

#include <glog/logging.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>

namespace ferry {

struct Config;

// Applies config.diagnostics.log_level and config.diagnostics.log_verbosity to glog, names the node
// in every line and logs config.warnings. InitGoogleLogging may run once per process (a framework
// in the same process may have run it already); later calls only update level and name.
void InitLogging(const char* argv0, const Config& config, const std::string& node_name);
// Renames the node in log lines (e.g. "worker ?" -> "worker 1" once the rank is known).
// Thread-safe: other threads keep logging meanwhile.
void SetLogNodeName(const std::string& name);

// --- Rate-limited logging -------------------------------------------------------------
//
// FERRY_LOG_EVERY_T(severity, seconds) << ...: logs like LOG(severity), but at most once
// per `seconds` from this call site (every thread together); the next line it lets
// through ends with "(N similar suppressed)" when it held lines back meanwhile. For
// warnings a peer can trigger once per message (a flood of bad requests must not turn
// into a flood of log lines). `seconds` must be a constant (it sizes a static).
//
// glog's LOG_EVERY_T would do the limiting but says nothing of the lines it dropped (and
// expands to several statements), so this is the same idea with the count added.
#define FERRY_LOG_EVERY_T(severity, seconds)                                 \
  for (::ferry::LogRateLimiter::Ticket ferry_log_ticket_ =                   \
           [] {                                                              \
             static ::ferry::LogRateLimiter limiter(seconds);                \
             return &limiter;                                                \
           }()                                                               \
               ->Take();                                                     \
       ferry_log_ticket_.allowed; ferry_log_ticket_.allowed = false)         \
  ::ferry::RateLimitedLogLine(__FILE__, __LINE__, ::google::GLOG_##severity, \
                              ferry_log_ticket_.suppressed)                  \
      .stream()

// One call site's limit: at most one line per interval. Thread-safe (atomics, no lock).
class LogRateLimiter {
 public:
  struct Ticket {
    bool allowed = false;     // log this line
    uint64_t suppressed = 0;  // allowed: lines held back since the last one let through
  };

  explicit LogRateLimiter(double seconds) : interval_ns_(static_cast<int64_t>(seconds * 1e9)) {}

  // Whether a line may go now (the steady clock), counting it as suppressed if not.
  Ticket Take();
  // The same at `now_ns` (any monotonic nanosecond count; for tests). The first line
  // always goes.
  Ticket TakeAt(int64_t now_ns);

 private:
  const int64_t interval_ns_;
  // The earliest time the next line may go (at first: any time).
  std::atomic<int64_t> next_ns_{std::numeric_limits<int64_t>::min()};
  std::atomic<uint64_t> suppressed_{0};
};

// A glog line that ends with " (N similar suppressed)" when N > 0. The text is added
// in the destructor, before the glog message it holds is flushed.
class RateLimitedLogLine {
 public:
  RateLimitedLogLine(const char* file, int line, google::LogSeverity severity, uint64_t suppressed)
      : message_(file, line, severity), suppressed_(suppressed) {}
  ~RateLimitedLogLine();
  std::ostream& stream() { return message_.stream(); }

 private:
  google::LogMessage message_;
  const uint64_t suppressed_;
};

}  // namespace ferry
