#pragma once

// UrgencyThreshold: which of a worker's partitions are urgent for the live metrics
// (ferry_urgent_queue_delay_seconds, ferry_queued_bytes{priority="urgent"}): the most
// urgent 10% of its partitions by priority (larger is more urgent), as bench/trace_summary.py
// defines them for a trace. It learns the priorities from the partitions started (every
// partition of every operation so far) and recomputes the threshold at each operation (a
// walk over the distinct priorities, about one per tensor: a microsecond for hundreds):
// urgent = priority >= the highest priority p such that partitions of priority >= p make at
// least kShare of all. Ties at the threshold count as urgent, so with one priority for
// everything every partition is urgent.
//
// Thread-safe: Observe takes mu_; Urgent and threshold read an atomic.

#include <atomic>
#include <climits>
#include <cstdint>
#include <map>

#include "common/util/mutex.h"

namespace ferry {

class UrgencyThreshold {
 public:
  static constexpr double kShare = 0.1;

  // `n` partitions of `priority` started.
  void Observe(int priority, uint64_t n = 1) EXCLUDES(mu_);
  bool Urgent(int priority) const { return priority >= threshold(); }
  // INT_MIN before the first partition (everything urgent).
  int threshold() const { return threshold_.load(std::memory_order_relaxed); }

 private:
  void Recompute() REQUIRES(mu_);

  Mutex mu_;
  std::map<int, uint64_t> counts_ GUARDED_BY(mu_);  // partitions by priority
  uint64_t total_ GUARDED_BY(mu_) = 0;
  std::atomic<int> threshold_{INT_MIN};
};

}  // namespace ferry
