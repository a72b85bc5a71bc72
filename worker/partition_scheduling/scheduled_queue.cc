#include "worker/partition_scheduling/scheduled_queue.h"

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "common/util/clock.h"

namespace ferry {
namespace {

constexpr int64_t kNoTimer = std::numeric_limits<int64_t>::max();

}  // namespace

ScheduledQueue::ScheduledQueue(std::unique_ptr<Policy> policy, uint64_t credit_bytes, NowFn now)
    : now_(now ? std::move(now) : NowFn(NowUs)), core_(std::move(policy), credit_bytes) {
  MutexLock lock(mu_);
  changes_ = 1;  // the initial credit, as a SetCredit
}

void ScheduledQueue::Push(PushTask task, bool notify) {
  {
    MutexLock lock(mu_);
    const int64_t timer = core_.WakeAtUs();
    queued_bytes_[task.priority] += task.bytes;
    core_.Push(std::move(task), now_());
    changes_++;
    notify = notify || core_.WakeAtUs() < timer;
  }
  if (notify) cv_.NotifyAll();
}

bool ScheduledQueue::TryNext(Batch* out) {
  MutexLock lock(mu_);
  return !closed_ && TakeNext(now_(), out);
}

bool ScheduledQueue::TakeNext(int64_t now_us, Batch* out) {
  if (!core_.TryNext(now_us, out)) return false;
  for (const PushTask& t : out->tasks) {
    auto it = queued_bytes_.find(t.priority);
    if (it == queued_bytes_.end()) continue;
    it->second -= std::min(it->second, t.bytes);
    if (it->second == 0) queued_bytes_.erase(it);
  }
  return true;
}

std::pair<uint64_t, uint64_t> ScheduledQueue::QueuedBytes(int urgent_from) const {
  MutexLock lock(mu_);
  std::pair<uint64_t, uint64_t> out{0, 0};
  for (const auto& [priority, bytes] : queued_bytes_) {
    (priority >= urgent_from ? out.first : out.second) += bytes;
  }
  return out;
}

bool ScheduledQueue::Next(Batch* out, int64_t timeout_ms, bool* timed_out) {
  MutexLock lock(mu_);
  *timed_out = false;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    if (closed_) return false;
    if (TakeNext(now_(), out)) return true;
    auto now = Clock::now();
    if (now >= deadline) {
      *timed_out = true;
      return false;
    }
    auto until = deadline;
    int64_t wake_us = core_.WakeAtUs();
    if (wake_us != kNoTimer) {
      // The policy's timer, at least 100 us away (a policy whose timer has passed
      // hands out at once; this only bounds a spin if one did not).
      until = std::min(until,
                       now + std::chrono::microseconds(std::max<int64_t>(100, wake_us - now_())));
    }
    cv_.WaitUntilOnce(mu_, until);
  }
}

ScheduledQueue::WaitResult ScheduledQueue::WaitForChange(uint64_t* version, int64_t timeout_ms) {
  MutexLock lock(mu_);
  const int64_t wake_us = core_.WakeAtUs();
  const bool timer = wake_us != kNoTimer;
  if (!closed_ && changes_ == *version && !(timer && wake_us <= now_())) {
    const auto now = Clock::now();
    auto until = now + std::chrono::milliseconds(timeout_ms);
    if (timer) {
      // As in Next: at least 100 us away, which bounds a spin on a timer that has passed.
      until = std::min(until,
                       now + std::chrono::microseconds(std::max<int64_t>(100, wake_us - now_())));
    }
    cv_.WaitUntilOnce(mu_, until);
  }
  if (closed_) return WaitResult::kClosed;
  const int64_t due_us = core_.WakeAtUs();
  const bool changed = changes_ != *version || (due_us != kNoTimer && due_us <= now_());
  *version = changes_;
  return changed ? WaitResult::kChanged : WaitResult::kTimedOut;
}

void ScheduledQueue::ReturnPart(const PushTask& task, uint64_t bytes, bool notify) {
  {
    MutexLock lock(mu_);
    const int64_t timer = core_.WakeAtUs();
    core_.ReturnPart(task, bytes, now_());
    changes_++;
    notify = notify || core_.WakeAtUs() < timer;
  }
  if (notify) cv_.NotifyAll();
}

void ScheduledQueue::Done(const PushTask& task, bool acked, bool notify) {
  {
    MutexLock lock(mu_);
    const int64_t timer = core_.WakeAtUs();
    core_.Done(task, acked, now_());
    changes_++;
    notify = notify || core_.WakeAtUs() < timer;
  }
  if (notify) cv_.NotifyAll();
}

void ScheduledQueue::Close() {
  {
    MutexLock lock(mu_);
    closed_ = true;
    changes_++;
  }
  cv_.NotifyAll();
}

void ScheduledQueue::Wake() {
  {
    MutexLock lock(mu_);
    changes_++;
  }
  cv_.NotifyAll();
}

void ScheduledQueue::Step() {
  {
    MutexLock lock(mu_);
    core_.Step(now_());
    changes_++;
  }
  cv_.NotifyAll();
}

void ScheduledQueue::SetCredit(uint64_t credit_bytes) {
  {
    MutexLock lock(mu_);
    core_.SetCredit(credit_bytes);
    changes_++;
  }
  cv_.NotifyAll();
}

void ScheduledQueue::UseWindow(const WindowOptions& options) {
  {
    MutexLock lock(mu_);
    core_.UseWindow(options);
    changes_++;
  }
  cv_.NotifyAll();
}

void ScheduledQueue::SetWindowGain(double gain) {
  {
    MutexLock lock(mu_);
    core_.SetWindowGain(gain);
    changes_++;
  }
  cv_.NotifyAll();
}

uint64_t ScheduledQueue::limit_bytes() const {
  MutexLock lock(mu_);
  return core_.limit_bytes();
}

std::vector<std::pair<std::string, uint64_t>> ScheduledQueue::WindowCounters() const {
  MutexLock lock(mu_);
  return core_.WindowCounters();
}

double ScheduledQueue::measured_rate_bytes_per_s() const {
  MutexLock lock(mu_);
  return core_.measured_rate_bytes_per_s();
}

bool ScheduledQueue::window_on() const {
  MutexLock lock(mu_);
  return core_.window_on();
}

std::string ScheduledQueue::DescribeWindow() const {
  MutexLock lock(mu_);
  return core_.DescribeWindow();
}

uint64_t ScheduledQueue::credit_bytes() const {
  MutexLock lock(mu_);
  return core_.credit_bytes();
}

SchedulingPolicy ScheduledQueue::policy() const {
  MutexLock lock(mu_);
  return core_.policy().kind();
}

std::string ScheduledQueue::policy_name() const {
  MutexLock lock(mu_);
  return core_.policy().name();
}

int ScheduledQueue::in_flight() const {
  MutexLock lock(mu_);
  return core_.in_flight();
}

uint64_t ScheduledQueue::in_flight_bytes() const {
  MutexLock lock(mu_);
  return core_.in_flight_bytes();
}

int ScheduledQueue::in_flight_to(int server) const {
  MutexLock lock(mu_);
  return core_.in_flight_to(server);
}

size_t ScheduledQueue::queued() const {
  MutexLock lock(mu_);
  return core_.queued();
}

uint64_t ScheduledQueue::max_in_flight_bytes() const {
  MutexLock lock(mu_);
  return core_.max_in_flight_bytes();
}

}  // namespace ferry
