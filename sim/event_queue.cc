#include "sim/event_queue.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstring>

namespace ferry::sim {
namespace {

uint64_t TimeBits(SimTime time) {
  const SimTime t = time + 0.0;  // -0.0 -> +0.0
  uint64_t bits;
  std::memcpy(&bits, &t, sizeof bits);
  return bits;
}

}  // namespace

void EventQueue::At(SimTime time, Action action) {
  CHECK_GE(time, now_) << "an event scheduled in the past";
  uint32_t slot;
  if (free_.empty()) {
    slot = static_cast<uint32_t>(actions_.size());
    actions_.push_back(std::move(action));
  } else {
    slot = free_.back();
    free_.pop_back();
    actions_[slot] = std::move(action);
  }
  heap_.push_back(Event{TimeBits(time), next_seq_++, slot});
  std::push_heap(heap_.begin(), heap_.end(), Later());
}

uint64_t EventQueue::Run(const std::function<bool()>& stop) {
  uint64_t ran = 0;
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), Later());
    const Event event = heap_.back();
    heap_.pop_back();
    // Out of its slot first: the action may schedule events, which may take the slot.
    Action action = std::move(actions_[event.slot]);
    free_.push_back(event.slot);
    std::memcpy(&now_, &event.time_bits, sizeof now_);
    action();
    ++ran;
    ++events_run_;
    if (stop && stop()) break;
  }
  return ran;
}

}  // namespace ferry::sim
