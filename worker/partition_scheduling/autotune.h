#pragma once

// Autotuner: a grid search over partition size, credit or window gain, and frame size,
// scored by measured iteration time (FERRY_AUTOTUNE=1).
//
// The worker calls OnStep() at every iteration boundary (Worker::StepBoundary) with the
// duration of the iteration that just ended. The tuner tries each candidate of the grid
// in turn for `steps` iterations: the first iteration after a switch is not scored
// (new keys, first rounds), the others are summed into the candidate's score. After
// the last candidate it asks for a decision (kDecide): the worker sums every worker's
// scores (a push_pull) and calls Decide() with the sums, which picks the least total
// time, ties to the lower index.
//
// Agreement: every worker runs the same state machine on the same count of boundaries
// (measured times do not change the transitions), so all switch at the same iteration;
// and all decide from the same summed scores, so all pick the same candidate.
// Not thread-safe: one caller (the worker serializes StepBoundary).

#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

struct SchedulingChoice {
  int64_t partition_bytes = 0;
  int64_t credit_bytes = 0;  // the fixed credit; with a window, the window's start
  double window_gain = 0;    // > 0: the credit follows the window with this gain
  int64_t frame_bytes = 0;   // frames of this size (0: whole partitions)

  bool operator==(const SchedulingChoice& o) const {
    return partition_bytes == o.partition_bytes && credit_bytes == o.credit_bytes &&
           window_gain == o.window_gain && frame_bytes == o.frame_bytes;
  }
};
// FERRY_PARTITION_MS: the partition size for a link that moves `bytes_per_s`: the largest
// floor x 2^k that it sends within `ms` milliseconds, or `ceiling` if it sends that much
// (also when bytes_per_s <= 0 or NaN: nothing measured); `floor` if it sends less than
// `floor`. REQUIRES: 0 < floor <= ceiling.
int64_t PartitionBytesForRate(double bytes_per_s, double ms, int64_t floor, int64_t ceiling);
// The smallest partition FERRY_PARTITION_MS picks (its `floor`).
constexpr int64_t kMinTimedPartitionBytes = 131072;

// "partition 4194304 bytes, credit 16777216 bytes" (fixed), "partition 1048576 bytes, window
// gain 2" (window), with ", frames 262144 bytes" when cut in frames.
std::string Describe(const SchedulingChoice& c);

class Autotuner {
 public:
  struct Action {
    enum Kind { kNone, kSwitch, kDecide } kind = kNone;
    SchedulingChoice choice;  // kSwitch: what to use from now on
  };

  // REQUIRES: grid not empty, steps >= 2.
  Autotuner(std::vector<SchedulingChoice> grid, int steps);

  // The grid around a configuration: partition sizes `partitions` (empty: P/4, P, 4P,
  // within [min_partition, max_partition]) times credits `credits` in partitions of
  // that size (empty: C/2, C, 2C, at least 1), without duplicates, in that order.
  static std::vector<SchedulingChoice> Grid(int64_t partition, int credit,
                                            std::vector<int64_t> partitions,
                                            std::vector<int64_t> credits, int64_t min_partition,
                                            int64_t max_partition);
  // Each choice of `grid` times window gains `gains` (empty: the choice's own window_gain)
  // times frame sizes `frames` (empty: the choice's own frame_bytes), without duplicates,
  // in that order. A frame size that would cut a partition into more than 65536 frames is
  // raised to the least that does not.
  static std::vector<SchedulingChoice> Expand(const std::vector<SchedulingChoice>& grid,
                                              const std::vector<double>& gains,
                                              const std::vector<int64_t>& frames);

  // At an iteration boundary; `ms` is the iteration that just ended (< 0 at the first
  // boundary, which ends no measured iteration).
  Action OnStep(double ms);
  // This worker's score per candidate (ms summed over its scored iterations).
  const std::vector<double>& scores() const { return scores_; }
  // After kDecide: the candidate with the least `summed` score (ties: lower index);
  // the search is over. REQUIRES: summed.size() == grid().size().
  size_t Decide(const std::vector<double>& summed);

  const std::vector<SchedulingChoice>& grid() const { return grid_; }
  bool done() const { return done_; }
  int steps() const { return steps_; }

 private:
  const std::vector<SchedulingChoice> grid_;
  const int steps_;
  std::vector<double> scores_;
  size_t current_ = 0;        // the candidate being measured
  int step_in_current_ = -1;  // iterations ended under it; -1 before the first boundary
  bool deciding_ = false;
  bool done_ = false;
};

}  // namespace ferry
