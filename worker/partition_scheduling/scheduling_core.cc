#include "worker/partition_scheduling/scheduling_core.h"

#include <glog/logging.h>

#include <algorithm>

namespace ferry {

SchedulingCore::SchedulingCore(std::unique_ptr<Policy> policy, uint64_t credit_bytes)
    : policy_(std::move(policy)) {
  CHECK(policy_);
  SetCredit(credit_bytes);
}

void SchedulingCore::Push(PushTask task, int64_t now_us) {
  task.seq = next_seq_++;
  policy_->Ready(task, now_us);
}

bool SchedulingCore::TryNext(int64_t now_us, Batch* out) {
  Batch batch;
  if (!policy_->Next(credit_, now_us, &batch)) return false;
  CheckInvariants(batch, now_us);
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
      batch.tasks[i].handout =
          window_->OnSend(now_us, batch.tasks[i].bytes, idle && i == 0, app_limited);
    }
    RefreshEstimates();  // a hand-out may widen the estimator's quantum
  }
  *out = std::move(batch);
  return true;
}

void SchedulingCore::CheckInvariants(const Batch& batch, int64_t now_us) const {
  CHECK(!batch.tasks.empty()) << policy_->name() << " handed out an empty batch";
  if (policy_->uses_credit()) {
    const bool alone = credit_.idle() && batch.tasks.size() == 1;
    const uint64_t limit = policy_->LimitAt(credit_, batch.tasks.front().priority, now_us);
    CHECK(alone || credit_.AdmitsWithin(limit, batch.bytes()))
        << policy_->name() << " exceeded the credit: " << credit_.in_flight_bytes << " + "
        << batch.bytes() << " > " << limit;
  }
  if (int window = policy_->per_server_window(); window > 0) {
    std::vector<int> per_server = credit_.in_flight_per_server;
    for (const PushTask& t : batch.tasks) {
      if (t.server >= static_cast<int>(per_server.size())) per_server.resize(t.server + 1, 0);
      CHECK_LE(++per_server[t.server], window) << policy_->name() << ": server " << t.server;
    }
  }
}

void SchedulingCore::ReturnPart(const PushTask& task, uint64_t bytes, int64_t now_us) {
  uint64_t& returned = returned_[task.cookie];
  CHECK_LT(returned + bytes, task.bytes) << "a task's parts returned all of its credit";
  CHECK_GE(credit_.in_flight_bytes, bytes) << "credit returned twice";
  returned += bytes;
  credit_.in_flight_bytes -= bytes;
  if (window_ && task.handout.sent_us > 0) {
    window_->OnAck(task.handout, bytes, now_us);
    UpdateLimit();
  }
}

void SchedulingCore::Done(const PushTask& task, bool acked, int64_t now_us) {
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
    window_->OnAck(task.handout, rest, now_us);
    UpdateLimit();
  }
}

void SchedulingCore::SetCredit(uint64_t credit_bytes) {
  CHECK_GE(credit_bytes, 1u);
  credit_bytes_ = credit_bytes;
  window_on_ = false;
  UpdateLimit();
}

void SchedulingCore::RefreshEstimates() {
  credit_.rate_bytes_per_us = window_ && window_->measured() ? window_->rate_bytes_per_us() : 0;
  credit_.window_bytes = window_ ? window_->window_bytes() : 0;
}

void SchedulingCore::UpdateLimit() {
  RefreshEstimates();
  if (!policy_->uses_credit()) {
    credit_.limit_bytes = CreditState::kUnlimited;
  } else {
    credit_.limit_bytes = window_on_ ? window_->window_bytes() : credit_bytes_;
  }
}

void SchedulingCore::UseWindow(const WindowOptions& options) {
  CHECK(!window_) << "UseWindow called twice";
  window_ = std::make_unique<WindowEstimator>(options);
  window_on_ = true;
  UpdateLimit();
}

void SchedulingCore::SetWindowGain(double gain) {
  CHECK(window_) << "SetWindowGain without UseWindow";
  window_->set_gain(gain);
  window_on_ = true;
  UpdateLimit();
}

std::vector<std::pair<std::string, uint64_t>> SchedulingCore::WindowCounters() const {
  if (!window_) return {};
  return {{"window.on", window_on_ ? 1 : 0},
          {"window.bytes", window_->window_bytes()},
          {"window.rate_bytes_per_s", static_cast<uint64_t>(window_->rate_bytes_per_us() * 1e6)},
          {"window.min_rtt_us", static_cast<uint64_t>(window_->min_rtt_us())},
          {"window.samples", window_->samples()}};
}

double SchedulingCore::measured_rate_bytes_per_s() const {
  return window_ && window_->measured() ? window_->rate_bytes_per_us() * 1e6 : 0.0;
}

std::string SchedulingCore::DescribeWindow() const {
  return window_ ? window_->Describe() : std::string();
}

}  // namespace ferry
