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

void ScheduledQueue::Push(PushTask task) {
  {
    MutexLock lock(mu_);
    task.seq = next_seq_++;
    policy_->Ready(task, now_());
  }
  cv_.NotifyAll();
}

bool ScheduledQueue::TryNext(Batch* out) {
  MutexLock lock(mu_);
  return !closed_ && TryNextLocked(out);
}

bool ScheduledQueue::TryNextLocked(Batch* out) {
  Batch batch;
  if (!policy_->Next(credit_, now_(), &batch)) return false;
  CheckInvariants(batch);
  for (const PushTask& t : batch.tasks) {
    credit_.in_flight_tasks++;
    credit_.in_flight_bytes += t.bytes;
    if (t.server >= static_cast<int>(credit_.in_flight_per_server.size())) {
      credit_.in_flight_per_server.resize(t.server + 1, 0);
    }
    credit_.in_flight_per_server[t.server]++;
  }
  max_in_flight_bytes_ = std::max(max_in_flight_bytes_, credit_.in_flight_bytes);
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

void ScheduledQueue::Done(const PushTask& task) {
  {
    MutexLock lock(mu_);
    CHECK_GT(credit_.in_flight_tasks, 0) << "credit returned twice";
    CHECK_GE(credit_.in_flight_bytes, task.bytes);
    CHECK(task.server < static_cast<int>(credit_.in_flight_per_server.size()) &&
          credit_.in_flight_per_server[task.server] > 0)
        << "credit returned twice for server " << task.server;
    credit_.in_flight_tasks--;
    credit_.in_flight_bytes -= task.bytes;
    credit_.in_flight_per_server[task.server]--;
    policy_->Done(task);
  }
  cv_.NotifyAll();
}

void ScheduledQueue::Close() {
  {
    MutexLock lock(mu_);
    closed_ = true;
  }
  cv_.NotifyAll();
}

void ScheduledQueue::Wake() { cv_.NotifyAll(); }

void ScheduledQueue::SetCredit(uint64_t credit_bytes) {
  CHECK_GE(credit_bytes, 1u);
  {
    MutexLock lock(mu_);
    credit_bytes_ = credit_bytes;
    credit_.limit_bytes = policy_->uses_credit() ? credit_bytes : CreditState::kUnlimited;
  }
  cv_.NotifyAll();
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
