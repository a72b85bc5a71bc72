// Debian's glog 0.6 is built with custom-prefix support; its header needs this to show it
// (before logging.h, which includes it too).
#define GLOG_CUSTOM_PREFIX_SUPPORT 1
#include "common/util/logging.h"  // NOLINT(build/include_order): after the define above

#include <glog/logging.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <ostream>
#include <string>

#include "common/config/config.h"

namespace ferry {
namespace {

// The node's name in every log line: "I1129 15:40:01.123456 server 1] ...". It changes
// once the rank is known, while other threads log.
std::mutex* g_node_name_mu = new std::mutex;  // guards g_node_name
std::string* g_node_name = new std::string("ferry");

void LogPrefix(std::ostream& s, const google::LogMessageInfo& l, void*) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%c%02d%02d %02d:%02d:%02d.%06d", l.severity[0],
                1 + l.time.month(), l.time.day(), l.time.hour(), l.time.min(), l.time.sec(),
                static_cast<int>(l.time.usec()));
  std::string name;
  {
    std::lock_guard<std::mutex> lock(*g_node_name_mu);
    name = *g_node_name;
  }
  s << buf << ' ' << name << ' ' << l.filename << ':' << l.line_number << ']';
}

}  // namespace

void SetLogNodeName(const std::string& name) {
  std::lock_guard<std::mutex> lock(*g_node_name_mu);
  *g_node_name = name;
}

void InitLogging(const char* argv0, const Config& config, const std::string& node_name) {
  static bool initialized = false;
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = config.diagnostics.log_level;
  FLAGS_v = config.diagnostics.log_verbosity;
  SetLogNodeName(node_name);
  // Another library in the process (a framework) may have started glog already;
  // starting it twice aborts.
  if (!initialized && !google::IsGoogleLoggingInitialized()) {
    google::InitGoogleLogging(argv0, &LogPrefix, nullptr);
  }
  initialized = true;
  for (const auto& w : config.warnings) LOG(WARNING) << w;
}

LogRateLimiter::Ticket LogRateLimiter::Take() {
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  return TakeAt(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
}

LogRateLimiter::Ticket LogRateLimiter::TakeAt(int64_t now_ns) {
  Ticket t;
  // Of threads that come at once when the interval is over, the one that wins the
  // compare-exchange logs; the others count as suppressed.
  int64_t next = next_ns_.load(std::memory_order_relaxed);
  if (now_ns < next ||
      !next_ns_.compare_exchange_strong(next, now_ns + interval_ns_, std::memory_order_relaxed)) {
    suppressed_.fetch_add(1, std::memory_order_relaxed);
    return t;
  }
  t.allowed = true;
  t.suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
  return t;
}

RateLimitedLogLine::~RateLimitedLogLine() {
  if (suppressed_ > 0) message_.stream() << " (" << suppressed_ << " similar suppressed)";
}

}  // namespace ferry
