#include "worker/scheduling/scheduled_queue.h"

#include <glog/logging.h>

#include <chrono>

namespace ferry {

ScheduledQueue::ScheduledQueue(int credit_partitions, int64_t credit_bytes)
    : credit_partitions_(credit_partitions), credit_bytes_(credit_bytes) {}

void ScheduledQueue::Push(PushTask task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    task.seq = next_seq_++;
    ready_.insert(task);
  }
  cv_.notify_all();
}

bool ScheduledQueue::CanRelease(const PushTask& t) const {
  if (in_flight_ == 0) return true;
  if (credit_bytes_ > 0) return in_flight_bytes_ + t.bytes <= static_cast<uint64_t>(credit_bytes_);
  return in_flight_ < credit_partitions_;
}

bool ScheduledQueue::Next(PushTask* out, int64_t timeout_ms, bool* timed_out) {
  std::unique_lock<std::mutex> lock(mu_);
  *timed_out = false;
  bool ready = cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] {
    return closed_ || (!ready_.empty() && CanRelease(*ready_.begin()));
  });
  if (closed_) return false;
  if (!ready) {
    *timed_out = true;
    return false;
  }
  *out = *ready_.begin();
  ready_.erase(ready_.begin());
  in_flight_++;
  in_flight_bytes_ += out->bytes;
  return true;
}

void ScheduledQueue::Done(uint64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    CHECK_GT(in_flight_, 0) << "credit returned twice";
    CHECK_GE(in_flight_bytes_, bytes);
    in_flight_--;
    in_flight_bytes_ -= bytes;
  }
  cv_.notify_all();
}

void ScheduledQueue::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

void ScheduledQueue::SetCredit(int credit_partitions, int64_t credit_bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    credit_partitions_ = credit_partitions;
    credit_bytes_ = credit_bytes;
  }
  cv_.notify_all();
}

int ScheduledQueue::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

uint64_t ScheduledQueue::in_flight_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_bytes_;
}

size_t ScheduledQueue::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ready_.size();
}

}  // namespace ferry
