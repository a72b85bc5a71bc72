#pragma once

// EventQueue: the simulator's clock and agenda. Events run in time order; events at the
// same time run in the order they were scheduled, so a run is a function of its inputs
// alone (determinism: tests/sim/cluster_sim_test.cc).
//
//   EventQueue events;
//   events.At(10.0, [&] { ... events.After(5.0, ...); });
//   events.RunUntil([&] { return done; });   // or events.Run()
//
// Time is simulated microseconds (a double: sums of layer times in ms stay exact to far
// below a nanosecond over any run this simulator makes). Not thread-safe.
//
// The agenda is a binary heap of small keys (time, order, slot); the actions wait in
// slots reused as events run, so the heap moves 24 bytes per step and a closure is moved
// twice (in and out of its slot), not at every step.

#include <cstdint>
#include <functional>
#include <vector>

#include "sim/action.h"

namespace ferry::sim {

using SimTime = double;  // microseconds

class EventQueue {
 public:
  using Action = sim::Action;

  SimTime now() const { return now_; }
  // REQUIRES: time >= now().
  void At(SimTime time, Action action);
  void After(SimTime delay, Action action) { At(now_ + delay, std::move(action)); }
  // Runs events until none is left or `stop` returns true (checked after each event).
  // Returns the number of events run.
  uint64_t Run(const std::function<bool()>& stop = nullptr);
  bool empty() const { return heap_.empty(); }
  uint64_t events_run() const { return events_run_; }

 private:
  struct Event {
    // The time's bits: for times >= 0 (+0.0: At adds 0.0 to turn -0.0 into +0.0) they
    // order as the times do, and integers compare without a branch on equal times.
    uint64_t time_bits;
    uint64_t seq;
    uint32_t slot;  // its action in actions_
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      // Bitwise, not ||: no branch to mispredict (the heap compares in every step).
      return (a.time_bits > b.time_bits) | ((a.time_bits == b.time_bits) & (a.seq > b.seq));
    }
  };
  std::vector<Event> heap_;      // std::push_heap / pop_heap with Later: the soonest first
  std::vector<Action> actions_;  // by slot; a slot is free (in free_) once its event ran
  std::vector<uint32_t> free_;
  SimTime now_ = 0;
  uint64_t next_seq_ = 0;
  uint64_t events_run_ = 0;
};

}  // namespace ferry::sim
