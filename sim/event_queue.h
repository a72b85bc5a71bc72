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

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

namespace ferry::sim {

using SimTime = double;  // microseconds

class EventQueue {
 public:
  using Action = std::function<void()>;

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
    SimTime time;
    uint64_t seq;
    Action action;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.time != b.time ? a.time > b.time : a.seq > b.seq;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  SimTime now_ = 0;
  uint64_t next_seq_ = 0;
  uint64_t events_run_ = 0;
};

}  // namespace ferry::sim
