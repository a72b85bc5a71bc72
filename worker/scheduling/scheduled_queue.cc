#include "worker/scheduling/scheduled_queue.h"

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "common/util/clock.h"

namespace ferry {

ScheduledQueue::ScheduledQueue(std::unique_ptr<Policy> policy, uint64_t credit_bytes, NowFn now)
    : now_(now ? std::move(now) : NowFn(NowUs)), policy_(std::move(policy)) {
  CHECK(policy_);
  SetCredit(credit_bytes);
}

void ScheduledQueue::Push(PushTask task, bool notify) {
  {
    MutexLock lock(mu_);
    task.seq = next_seq_++;
    policy_->Ready(task, now_());
    changes_++;
  }
  if (notify) cv_.NotifyAll();
}

bool ScheduledQueue::TryNext(Batch* out) {
  MutexLock lock(mu_);
  return !closed_ && TryNextLocked(out);
}

bool ScheduledQueue::TryNextLocked(Batch* out) {
  Batch batch;
  const int64_t now = now_();
  if (!policy_->Next(credit_, now, &batch)) return false;
  CheckInvariants(batch);
  const bool idle = credit_.idle();
  for (const PushTask& t : batch.tasks) {
    credit_.in_flight_tasks++;
    credit_.in_flight_bytes += t.bytes;
    if (t.server >= static_cast<int>(credit_.in_flight_per_server.size())) {
      credit_.in_flight_per_server.resize(t.server + 1, 0);
    }
    credit_.in_flight_per_server[t.server]++;
  }
  max_in_flight_bytes_ = std::max(max_in_flight_bytes_, credit_.in_flight_bytes);
  if (window_) {
    // App-limited: nothing else waits and the credit is not used up, so the sender (not
    // the network) limits what these tasks' samples see.
    const bool app_limited = policy_->queued() == 0 && credit_.Admits(1);
    for (size_t i = 0; i < batch.tasks.size(); ++i) {
      batch.tasks[i].handout = window_->OnSend(now, batch.tasks[i].bytes, idle && i == 0, app_limited);
    }
  }
  *out = std::move(batch);
  return true;
}

void ScheduledQueue::CheckInvariants(const Batch& batch) const {
  CHECK(!batch.tasks.empty()) << policy_->name() << " handed out an empty batch";
  if (policy_->uses_credit()) {
    bool alone = credit_.idle() && batch.tasks.size() == 1;
    CHECK(alone || credit_.Admits(batch.bytes()))
        << policy_->name() << " exceeded the credit: " << credit_.in_flight_bytes << " + "
        << batch.bytes() << " > " << credit_.limit_bytes;
  }
  if (int window = policy_->per_server_window(); window > 0) {
    std::vector<int> per_server = credit_.in_flight_per_server;
    for (const PushTask& t : batch.tasks) {
      if (t.server >= static_cast<int>(per_server.size())) per_server.resize(t.server + 1, 0);
      CHECK_LE(++per_server[t.server], window) << policy_->name() << ": server " << t.server;
    }
  }
}

bool ScheduledQueue::Next(Batch* out, int64_t timeout_ms, bool* timed_out) {
  MutexLock lock(mu_);
  *timed_out = false;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    if (closed_) return false;
    if (TryNextLocked(out)) return true;
    auto now = Clock::now();
    if (now >= deadline) {
      *timed_out = true;
      return false;
    }
    auto until = deadline;
    int64_t wake_us = policy_->WakeAtUs();
    if (wake_us != std::numeric_limits<int64_t>::max()) {
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
  const int64_t wake_us = policy_->WakeAtUs();
  const bool timer = wake_us != std::numeric_limits<int64_t>::max();
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
  const int64_t due_us = policy_->WakeAtUs();
  const bool changed = changes_ != *version ||
                       (due_us != std::numeric_limits<int64_t>::max() && due_us <= now_());
  *version = changes_;
  return changed ? WaitResult::kChanged : WaitResult::kTimedOut;
}

void ScheduledQueue::ReturnPart(const PushTask& task, uint64_t bytes, bool notify) {
  {
    MutexLock lock(mu_);
    uint64_t& returned = returned_[task.cookie];
    CHECK_LT(returned + bytes, task.bytes) << "a task's parts returned all of its credit";
    CHECK_GE(credit_.in_flight_bytes, bytes) << "credit returned twice";
    returned += bytes;
    credit_.in_flight_bytes -= bytes;
    if (window_ && task.handout.sent_us > 0) {
      window_->OnAck(task.handout, bytes, now_());
      UpdateLimit();
    }
    changes_++;
  }
  if (notify) cv_.NotifyAll();
}

void ScheduledQueue::Done(const PushTask& task, bool acked, bool notify) {
  {
    MutexLock lock(mu_);
    uint64_t rest = task.bytes;
    if (auto it = returned_.find(task.cookie); it != returned_.end()) {
      rest -= it->second;
      returned_.erase(it);
    }
    CHECK_GT(credit_.in_flight_tasks, 0) << "credit returned twice";
    CHECK_GE(credit_.in_flight_bytes, rest);
    CHECK(task.server < static_cast<int>(credit_.in_flight_per_server.size()) &&
          credit_.in_flight_per_server[task.server] > 0)
        << "credit returned twice for server " << task.server;
    credit_.in_flight_tasks--;
    credit_.in_flight_bytes -= rest;
    credit_.in_flight_per_server[task.server]--;
    policy_->Done(task);
    if (window_ && acked && task.handout.sent_us > 0) {
      window_->OnAck(task.handout, rest, now_());
      UpdateLimit();
    }
    changes_++;
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

void ScheduledQueue::SetCredit(uint64_t credit_bytes) {
  CHECK_GE(credit_bytes, 1u);
  {
    MutexLock lock(mu_);
    credit_bytes_ = credit_bytes;
    window_on_ = false;
    UpdateLimit();
    changes_++;
  }
  cv_.NotifyAll();
}

void ScheduledQueue::UpdateLimit() {
  if (!policy_->uses_credit()) {
    credit_.limit_bytes = CreditState::kUnlimited;
  } else {
    credit_.limit_bytes = window_on_ ? window_->window_bytes() : credit_bytes_;
  }
}

void ScheduledQueue::UseWindow(const WindowOptions& options) {
  {
    MutexLock lock(mu_);
    CHECK(!window_) << "UseWindow called twice";
    window_ = std::make_unique<WindowEstimator>(options);
    window_on_ = true;
    UpdateLimit();
    changes_++;
  }
  cv_.NotifyAll();
}

void ScheduledQueue::SetWindowGain(double gain) {
  {
    MutexLock lock(mu_);
    CHECK(window_) << "SetWindowGain without UseWindow";
    window_->set_gain(gain);
    window_on_ = true;
    UpdateLimit();
    changes_++;
  }
  cv_.NotifyAll();
}

uint64_t ScheduledQueue::limit_bytes() const {
  MutexLock lock(mu_);
  return credit_.limit_bytes;
}

std::vector<std::pair<std::string, uint64_t>> ScheduledQueue::WindowCounters() const {
  MutexLock lock(mu_);
  if (!window_) return {};
  return {{"window.on", window_on_ ? 1 : 0},
          {"window.bytes", window_->window_bytes()},
          {"window.rate_bytes_per_s", static_cast<uint64_t>(window_->rate_bytes_per_us() * 1e6)},
          {"window.min_rtt_us", static_cast<uint64_t>(window_->min_rtt_us())},
          {"window.samples", window_->samples()}};
}

double ScheduledQueue::measured_rate_bytes_per_s() const {
  MutexLock lock(mu_);
  return window_ && window_->measured() ? window_->rate_bytes_per_us() * 1e6 : 0.0;
}

bool ScheduledQueue::window_on() const {
  MutexLock lock(mu_);
  return window_on_;
}

std::string ScheduledQueue::DescribeWindow() const {
  MutexLock lock(mu_);
  return window_ ? window_->Describe() : std::string();
}

uint64_t ScheduledQueue::credit_bytes() const {
  MutexLock lock(mu_);
  return credit_bytes_;
}

SchedulingPolicy ScheduledQueue::policy() const {
  MutexLock lock(mu_);
  return policy_->kind();
}

std::string ScheduledQueue::policy_name() const {
  MutexLock lock(mu_);
  return policy_->name();
}

int ScheduledQueue::in_flight() const {
  MutexLock lock(mu_);
  return credit_.in_flight_tasks;
}

uint64_t ScheduledQueue::in_flight_bytes() const {
  MutexLock lock(mu_);
  return credit_.in_flight_bytes;
}

int ScheduledQueue::in_flight_to(int server) const {
  MutexLock lock(mu_);
  return credit_.InFlightTo(server);
}

size_t ScheduledQueue::queued() const {
  MutexLock lock(mu_);
  return policy_->queued();
}

uint64_t ScheduledQueue::max_in_flight_bytes() const {
  MutexLock lock(mu_);
  return max_in_flight_bytes_;
}

}  // namespace ferry
