#pragma once

// Policy: decides which ready partitions a worker pushes next, and how they travel.
//
// A policy sees three events, all from a SchedulingCore (scheduling_core.h; the worker's
// ScheduledQueue calls it under its lock, so a policy needs no locking of its own):
//   Ready(task)   a partition's gradient is ready to push;
//   Next(credit)  the sender may send: return the next batch that may go now, given
//                 the credit the queue accounts for (bytes and tasks in flight, in
//                 total and per server), or nothing;
//   Done(task)    a task handed out earlier no longer holds credit (its push was
//                 acknowledged, answered, or failed);
//   Step()        an iteration ended (the worker's StepBoundary): for policies that
//                 learn the iteration's timing (usbyte, prophet).
// Time comes in as an argument (microseconds on the queue's clock), so tests drive
// policies with a fake clock.
//
// The policies (policies.h): fifo, priority, credit (ByteScheduler, the default), p3,
// fifo-bucket, mercury, usbyte and prophet. Their order and credit invariants are stated there.

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/config/scheduling_policy.h"
#include "worker/partition_scheduling/window_estimator.h"

namespace ferry {

struct PushTask {
  int priority = 0;  // larger is more urgent (BytePS's convention)
  uint64_t seq = 0;  // arrival order; set by SchedulingCore::Push
  uint64_t bytes = 0;
  int server = 0;       // the server rank the partition goes to
  uint64_t cookie = 0;  // the caller's reference to the task
  // Set by the queue at hand-out (the window's sample); give the handed-out task back
  // to SchedulingCore::Done (ScheduledQueue::Done).
  WindowEstimator::Snapshot handout;
};

// The queue's credit accounting, as a policy sees it in Next().
struct CreditState {
  static constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();
  uint64_t limit_bytes = kUnlimited;  // the credit (kUnlimited for policies without one)
  uint64_t in_flight_bytes = 0;
  int in_flight_tasks = 0;
  std::vector<int> in_flight_per_server;  // by server rank (shorter: 0 beyond its end)
  // The worker's delivery rate as its window estimator measures it (bytes per us), or 0
  // before it measured.
  double rate_bytes_per_us = 0;
  // The estimator's bandwidth-delay window (WindowEstimator::window_bytes: what keeps the
  // link busy), applied or not; 0 without an estimator.
  uint64_t window_bytes = 0;

  bool idle() const { return in_flight_tasks == 0; }
  // Whether `bytes` more may go within the credit.
  bool Admits(uint64_t bytes) const { return AdmitsWithin(limit_bytes, bytes); }
  // Whether `bytes` more may go within `limit` (a policy's own: Policy::LimitAt).
  bool AdmitsWithin(uint64_t limit, uint64_t bytes) const {
    return limit == kUnlimited || in_flight_bytes + bytes <= limit;
  }
  int InFlightTo(int server) const {
    return server < static_cast<int>(in_flight_per_server.size()) ? in_flight_per_server[server]
                                                                  : 0;
  }
};

// Tasks handed out together. The sender packs a batch's tasks for one server, in batch
// order, into PUSH_FUSED messages of at most `fuse_bytes` (and kMaxFusedPushes pushes);
// a task that ends up alone goes as a zero-copy PUSH. 0: every task alone.
struct Batch {
  std::vector<PushTask> tasks;
  uint64_t fuse_bytes = 0;

  uint64_t bytes() const {
    uint64_t b = 0;
    for (const PushTask& t : tasks) b += t.bytes;
    return b;
  }
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual SchedulingPolicy kind() const = 0;
  // kind()'s name, for logs and CHECK messages.
  std::string name() const { return SchedulingPolicyName(kind()); }
  // Whether the queue's byte credit applies (the queue then refuses a batch that does
  // not fit, unless nothing is in flight and the batch is one task).
  virtual bool uses_credit() const { return false; }
  // For policies with uses_credit(): the credit in force now for a batch whose first task
  // has `priority`. The default: the queue's (credit.limit_bytes, the fixed credit or the
  // window). A policy whose limit moves with time (usbyte, prophet) says when it may grow
  // through WakeAtUs(). Must be a function of its arguments and the policy's state, so the
  // core's check of a batch agrees with the policy's.
  virtual uint64_t LimitAt(const CreditState& credit, int /*priority*/,
                           int64_t /*now_us*/) const {
    return credit.limit_bytes;
  }
  // > 0: at most this many tasks in flight to one server (p3's one slice per connection).
  virtual int per_server_window() const { return 0; }

  virtual void Ready(const PushTask& task, int64_t now_us) = 0;
  // Fills `out` (cleared by the caller) and returns true, or returns false if nothing
  // may go now.
  virtual bool Next(const CreditState& credit, int64_t now_us, Batch* out) = 0;
  virtual void Done(const PushTask& /*task*/) {}
  virtual void Step(int64_t /*now_us*/) {}
  // When Next() may have a batch without another Ready() or Done(): a timer. The
  // default: never.
  virtual int64_t WakeAtUs() const { return std::numeric_limits<int64_t>::max(); }
  // Tasks ready and not yet handed out.
  virtual size_t queued() const = 0;
};

}  // namespace ferry
