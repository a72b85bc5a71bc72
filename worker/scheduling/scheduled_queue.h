#pragma once

// ScheduledQueue: decides which ready partition the worker pushes next.
//
// Order: highest priority first (larger = more urgent, as in BytePS: the default is
// -(declaration index), so layers near the input go first); equal priorities keep
// their arrival order.
//
// Credit: a task holds credit from the moment Next() hands it out until Done() is
// called for it: when the server acknowledged the push (or answered it with the sum
// or an error). The credit bounds this worker's own bytes on the way to the servers.
// It deliberately does not last until the sum is back: a sum waits for every worker's
// push, and workers release partitions in different orders (gradients become ready at
// different times), so a credit held until the sum can deadlock: worker A's credit is
// all in partitions B has not sent yet, and B's in partitions A has not sent. Invariants, with credit counted
// in partitions (C = FERRY_SCHEDULING_CREDIT) or bytes (B = FERRY_SCHEDULING_CREDIT_BYTES):
//   - partitions in flight <= C (partition mode);
//   - bytes in flight <= B + one partition (byte mode: a task larger than the credit
//     left is released only when nothing is in flight, so no task waits forever);
//   - every pushed task is eventually handed out (no starvation: whenever nothing is
//     in flight the most urgent task goes, whatever its size).
// Thread-safe.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>

namespace ferry {

struct PushTask {
  int priority = 0;
  uint64_t seq = 0;      // arrival order; set by Push
  uint64_t bytes = 0;
  uint64_t cookie = 0;   // the caller's reference to the task
};

class ScheduledQueue {
 public:
  // credit_bytes > 0 selects byte mode, else at most credit_partitions in flight.
  ScheduledQueue(int credit_partitions, int64_t credit_bytes);

  void Push(PushTask task);
  // Blocks until a task may go under the credit, or the queue is closed (returns
  // false). `timeout_ms` bounds one wait; returns false with *timed_out on expiry.
  bool Next(PushTask* out, int64_t timeout_ms, bool* timed_out);
  // Returns the credit of a task handed out by Next().
  void Done(uint64_t bytes);
  // Wakes every waiter; Next() returns false from now on.
  void Close();

  void SetCredit(int credit_partitions, int64_t credit_bytes);
  int in_flight() const;
  uint64_t in_flight_bytes() const;
  size_t queued() const;

 private:
  struct Order {
    bool operator()(const PushTask& a, const PushTask& b) const {
      if (a.priority != b.priority) return a.priority > b.priority;
      return a.seq < b.seq;
    }
  };
  bool CanRelease(const PushTask& t) const;  // REQUIRES: mu_ held

  mutable std::mutex mu_;        // guards everything below
  std::condition_variable cv_;   // signalled on Push, Done, Close, SetCredit
  std::set<PushTask, Order> ready_;
  uint64_t next_seq_ = 0;
  int credit_partitions_;
  int64_t credit_bytes_;
  int in_flight_ = 0;
  uint64_t in_flight_bytes_ = 0;
  bool closed_ = false;
};

}  // namespace ferry
