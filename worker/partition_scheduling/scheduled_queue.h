#pragma once

// ScheduledQueue: the worker's send queue: a SchedulingCore (scheduling_core.h: the
// policy's order, the credit accounting, the window and their invariants) behind a lock,
// with blocking waits and a clock, for the worker's threads.
//
// Credit: a task holds credit from the moment Next() hands it out until Done() is
// called for it: when the server acknowledged the push (or answered it with the sum
// or an error). The credit bounds this worker's own bytes on the way to the servers,
// and so how long a newly ready urgent partition can wait behind data already handed
// to the transport: at most about one credit (ZeroMQ's queues and the socket buffers
// hold only what is in flight, and that is within the credit).
// It deliberately does not last until the sum is back: a sum waits for every worker's
// push, and workers release partitions in different orders (gradients become ready at
// different times), so a credit held until the sum can deadlock: worker A's credit is
// all in partitions B has not sent yet, and B's in partitions A has not sent.
//
// The window (UseWindow, FERRY_WINDOW=bdp): the credit of a policy with uses_credit()
// follows a WindowEstimator (window_estimator.h) fed by this queue: each task handed out
// carries the estimator's Snapshot (PushTask::handout), and Done(task, acked = true) is its
// sample. SetCredit() fixes the credit again; SetWindowGain() returns to the window. With
// UseWindow the estimator samples in both modes (a fixed credit's log shows what the
// window would be). A shrinking window holds new tasks back until the bytes in flight
// drop below it; it never takes back what was handed out.
//
// Invariants: SchedulingCore's (checked on every hand-out); and every change that may let
// a batch out (Push, ReturnPart, Done, Close, Wake, Step, SetCredit, UseWindow,
// SetWindowGain) is counted, so a WaitForChange never misses one.
// Thread-safe: any number of producers (Push), senders (Next) and acknowledgers (Done).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/util/mutex.h"
#include "worker/partition_scheduling/scheduling_core.h"

namespace ferry {

class ScheduledQueue {
 public:
  // Microseconds on a monotonic clock; tests pass a fake one.
  using NowFn = std::function<int64_t()>;

  // `credit_bytes`: the credit, for policies that use one. REQUIRES: credit_bytes >= 1.
  ScheduledQueue(std::unique_ptr<Policy> policy, uint64_t credit_bytes, NowFn now = nullptr);

  // `notify`: wake the threads blocked in Next and WaitForChange. false for a pusher that
  // takes what it let out itself (TryNext) right after; Push, ReturnPart and Done count the
  // change either way, so a waiter that wakes for another reason still sees it, and they
  // wake the waiters anyway when the change brought the policy's timer (WakeAtUs) earlier:
  // a waiter sleeps until the timer it saw when it began to wait, and only a waiter can
  // act on a timer (fifo-bucket's timeout: the pusher's own TryNext comes before it is
  // due). Before 2026-12-04 they did not, and fifo-bucket's buckets never went on their
  // timeout in a worker, only when full or when something else woke the sender.
  void Push(PushTask task, bool notify = true) EXCLUDES(mu_);
  // Blocks until the policy hands out a batch (returns true), the queue is closed
  // (false), or `timeout_ms` passed (false with *timed_out). `out` is overwritten only
  // on success.
  bool Next(Batch* out, int64_t timeout_ms, bool* timed_out) EXCLUDES(mu_);
  // Next() that does not block.
  bool TryNext(Batch* out) EXCLUDES(mu_);
  // For a sender that takes batches with TryNext (worker/dense_push_pull.h, SendReady):
  // blocks until a notified change (a Push, credit returned, a new credit or window,
  // Wake, Close: anything that may let a batch out), the policy's timer (WakeAtUs), or
  // `timeout_ms`, whichever comes first. Returns kClosed once the queue is closed, kChanged
  // if the queue changed since `*version` (quietly or not) or the policy's timer is due
  // (a batch may be out: try TryNext), else kTimedOut; sets `*version` to the current
  // change count.
  enum class WaitResult { kClosed, kChanged, kTimedOut };
  WaitResult WaitForChange(uint64_t* version, int64_t timeout_ms) EXCLUDES(mu_);
  // Returns `bytes` of the credit of a task handed out by Next() before it is done: a
  // frame of it was acknowledged (a window sample). The task stays in flight (it still
  // counts against a per-server window) until Done. REQUIRES: what is returned of a task
  // in all stays below its bytes.
  void ReturnPart(const PushTask& task, uint64_t bytes, bool notify = true) EXCLUDES(mu_);
  // Returns the rest of the credit of a task handed out by Next() (pass the task as
  // handed out). `acked`: the server acknowledged it (a window sample); false for a task
  // that never went or failed.
  void Done(const PushTask& task, bool acked = true, bool notify = true) EXCLUDES(mu_);
  // Wakes every waiter; Next() returns false from now on.
  void Close() EXCLUDES(mu_);
  // Re-evaluates blocked Next() calls: for fake clocks, after moving time.
  void Wake() EXCLUDES(mu_);
  // An iteration ended (Worker::StepBoundary): SchedulingCore::Step; counts as a change.
  void Step() EXCLUDES(mu_);

  // Fixes the credit (the window, if any, keeps sampling but no longer applies).
  void SetCredit(uint64_t credit_bytes) EXCLUDES(mu_);
  uint64_t credit_bytes() const EXCLUDES(mu_);
  // Starts the window estimator; the credit follows it from now on. Call once, before
  // the first task.
  void UseWindow(const WindowOptions& options) EXCLUDES(mu_);
  // The credit follows the window again, with this gain. REQUIRES: UseWindow was called.
  void SetWindowGain(double gain) EXCLUDES(mu_);
  // The credit in force now: the fixed credit or the window (kUnlimited for policies
  // without credit).
  uint64_t limit_bytes() const EXCLUDES(mu_);
  // Whether the credit follows the window now.
  bool window_on() const EXCLUDES(mu_);
  // The estimator's state for logs ("" without UseWindow).
  std::string DescribeWindow() const EXCLUDES(mu_);
  // For the stats file: window.on, window.bytes (what the window is, applied or not),
  // window.rate_bytes_per_s, window.min_rtt_us, window.samples; empty without UseWindow.
  std::vector<std::pair<std::string, uint64_t>> WindowCounters() const EXCLUDES(mu_);
  // The estimator's rate in bytes per second, or 0 before it measured (WindowEstimator::
  // measured) or without UseWindow.
  double measured_rate_bytes_per_s() const EXCLUDES(mu_);
  SchedulingPolicy policy() const EXCLUDES(mu_);
  // policy()'s name, for logs.
  std::string policy_name() const EXCLUDES(mu_);
  int in_flight() const EXCLUDES(mu_);
  uint64_t in_flight_bytes() const EXCLUDES(mu_);
  int in_flight_to(int server) const EXCLUDES(mu_);
  size_t queued() const EXCLUDES(mu_);
  // Bytes of the tasks waiting to be handed out: those of priority >= `urgent_from`, and
  // the others (the live metrics' ferry_queued_bytes).
  std::pair<uint64_t, uint64_t> QueuedBytes(int urgent_from) const EXCLUDES(mu_);
  // The most bytes that were ever in flight at once (a record of the credit invariant).
  uint64_t max_in_flight_bytes() const EXCLUDES(mu_);

 private:
  const NowFn now_;
  // Guards core_ and closed_, and counts changes.
  mutable Mutex mu_;
  CondVar cv_;  // signalled on every change_ below
  // Counts what may let a batch out: Push, ReturnPart, Done, Close, Wake, Step, SetCredit,
  // UseWindow, SetWindowGain (WaitForChange).
  uint64_t changes_ GUARDED_BY(mu_) = 0;
  SchedulingCore core_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
  // Bytes of the tasks pushed and not yet handed out, by priority (Push adds, TakeNext
  // takes away; a priority's entry goes at 0).
  std::map<int, uint64_t> queued_bytes_ GUARDED_BY(mu_);

  // core_.TryNext, keeping queued_bytes_.
  bool TakeNext(int64_t now_us, Batch* out) REQUIRES(mu_);
};

}  // namespace ferry
