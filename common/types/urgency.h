#pragma once

// Urgency: the one definition of which of two pieces of tensor data goes first, shared by
// the worker's scheduling policies (worker/partition_scheduling/policies.h, ByPriority) and the
// transport's order queues (common/transport/order_queue.h), so the partitions a worker
// lets out and the frames the Van hands to ZeroMQ follow the same order.
//
// A larger priority is more urgent (BytePS's convention: by default a tensor's priority
// is -(its declaration index), so the layers nearest the input, needed first by the next
// forward pass, go first); equal priorities go in arrival order.

#include <cstdint>

namespace ferry {

struct Urgency {
  int64_t priority = 0;  // larger is more urgent
  uint64_t arrival = 0;  // the order in which the pieces became ready
};

// True when `a` goes before `b`.
inline bool MoreUrgent(const Urgency& a, const Urgency& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  return a.arrival < b.arrival;
}

// MoreUrgent as an ordering (most urgent first), for ordered containers.
struct ByUrgency {
  bool operator()(const Urgency& a, const Urgency& b) const { return MoreUrgent(a, b); }
};

}  // namespace ferry
