#pragma once

// SchedulingCore: a worker's send order and credit, without threads, locks or a clock.
// A Policy (policy.h, policies.h) decides the order; the core owns the credit accounting
// and the window. Two users share it: ScheduledQueue (scheduled_queue.h), which adds the
// lock, the blocking waits and the clock for the worker's threads, and the simulator
// (sim/), which drives it from its event loop in simulated time. Time comes in as an
// argument (microseconds on the caller's clock).
//
//   SchedulingCore core(MakePolicy(options), /*credit_bytes=*/4 << 20);
//   core.Push(task, now);
//   Batch batch;
//   while (core.TryNext(now, &batch)) Send(batch);   // the policy's order, within the credit
//   ...
//   core.Done(task, /*acked=*/true, now);             // the push was acknowledged
//   if (core.WakeAtUs() <= now) ... TryNext again     // a policy's timer (fifo-bucket)
//
// Credit: a task holds credit from the moment TryNext() hands it out until Done() is
// called for it (ScheduledQueue's header says why the acknowledgement, not the sum, ends
// it). ReturnPart() returns part of it earlier (a frame acknowledged).
//
// Invariants (CHECKed on every hand-out, and by the tests):
//   - credit (policies with uses_credit()): bytes in flight <= the credit in force at the
//     moment of hand-out (Policy::LimitAt: the fixed credit or the window, or a profiled
//     policy's own limit), except that when nothing is in
//     flight one task goes whatever its size, so bytes in flight never exceed credit + one
//     partition, and no task waits forever for credit;
//   - window (per_server_window() > 0): tasks in flight to one server <= the window;
//   - every pushed task is handed out exactly once, in the policy's order (equal
//     priorities keep arrival order: Push numbers tasks in arrival order);
//   - every task handed out is Done() exactly once (a second Done is a CHECK failure),
//     and the credit it returns in all (ReturnPart, then Done) is exactly its bytes.
// Not thread-safe: one caller at a time (ScheduledQueue holds its lock around every call).

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "worker/partition_scheduling/policy.h"

namespace ferry {

class SchedulingCore {
 public:
  // `credit_bytes`: the credit, for policies that use one. REQUIRES: credit_bytes >= 1.
  SchedulingCore(std::unique_ptr<Policy> policy, uint64_t credit_bytes);

  // Numbers the task in arrival order and hands it to the policy.
  void Push(PushTask task, int64_t now_us);
  // The next batch the policy lets out within the credit, or false.
  bool TryNext(int64_t now_us, Batch* out);
  // Returns `bytes` of the credit of a task handed out before it is done (a frame
  // acknowledged: a window sample). REQUIRES: what is returned of a task in all stays
  // below its bytes.
  void ReturnPart(const PushTask& task, uint64_t bytes, int64_t now_us);
  // Returns the rest of the credit of a task handed out (pass it as handed out). `acked`:
  // the server acknowledged it (a window sample); false for a task that never went or
  // failed.
  void Done(const PushTask& task, bool acked, int64_t now_us);
  // When TryNext may have a batch without another event: the policy's timer, or
  // numeric_limits<int64_t>::max() for none.
  int64_t WakeAtUs() const { return policy_->WakeAtUs(); }
  // An iteration ended (the worker's StepBoundary): tells the policy (Policy::Step).
  void Step(int64_t now_us) { policy_->Step(now_us); }

  // Fixes the credit (the window, if any, keeps sampling but no longer applies).
  // REQUIRES: credit_bytes >= 1.
  void SetCredit(uint64_t credit_bytes);
  uint64_t credit_bytes() const { return credit_bytes_; }
  // Starts the window estimator; the credit follows it from now on. Call once, before
  // the first task.
  void UseWindow(const WindowOptions& options);
  // The credit follows the window again, with this gain. REQUIRES: UseWindow was called.
  void SetWindowGain(double gain);
  // The credit in force now: the fixed credit or the window (kUnlimited for policies
  // without credit).
  uint64_t limit_bytes() const { return credit_.limit_bytes; }
  bool window_on() const { return window_on_; }
  // The estimator's state for logs ("" without UseWindow).
  std::string DescribeWindow() const;
  // window.on, window.bytes, window.rate_bytes_per_s, window.min_rtt_us, window.samples;
  // empty without UseWindow.
  std::vector<std::pair<std::string, uint64_t>> WindowCounters() const;
  // The estimator's rate in bytes per second, or 0 before it measured or without UseWindow.
  double measured_rate_bytes_per_s() const;

  const Policy& policy() const { return *policy_; }
  int in_flight() const { return credit_.in_flight_tasks; }
  uint64_t in_flight_bytes() const { return credit_.in_flight_bytes; }
  int in_flight_to(int server) const { return credit_.InFlightTo(server); }
  size_t queued() const { return policy_->queued(); }
  // The most bytes that were ever in flight at once (a record of the credit invariant).
  uint64_t max_in_flight_bytes() const { return max_in_flight_bytes_; }

 private:
  // credit_.limit_bytes from the policy, the mode and the window; and RefreshEstimates.
  void UpdateLimit();
  // credit_'s rate and window from the estimator: after it changes (an ack, a hand-out),
  // not on every TryNext.
  void RefreshEstimates();
  void CheckInvariants(const Batch& batch, int64_t now_us) const;

  const std::unique_ptr<Policy> policy_;
  CreditState credit_;  // limit_bytes: the credit (kUnlimited if unused)
  uint64_t credit_bytes_ = 1;
  std::unique_ptr<WindowEstimator> window_;  // null: no UseWindow
  // Tasks in flight with part of their credit returned: cookie -> bytes returned.
  std::unordered_map<uint64_t, uint64_t> returned_;
  bool window_on_ = false;
  uint64_t next_seq_ = 0;
  uint64_t max_in_flight_bytes_ = 0;
};

}  // namespace ferry
