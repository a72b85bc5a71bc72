#include "sim/event_queue.h"

#include <glog/logging.h>

namespace ferry::sim {

void EventQueue::At(SimTime time, Action action) {
  CHECK_GE(time, now_) << "an event scheduled in the past";
  heap_.push(Event{time, next_seq_++, std::move(action)});
}

uint64_t EventQueue::Run(const std::function<bool()>& stop) {
  uint64_t ran = 0;
  while (!heap_.empty()) {
    // priority_queue::top is const: move the action out through a copy of the event.
    Event event = std::move(const_cast<Event&>(heap_.top()));
    heap_.pop();
    now_ = event.time;
    event.action();
    ++ran;
    ++events_run_;
    if (stop && stop()) break;
  }
  return ran;
}

}  // namespace ferry::sim
