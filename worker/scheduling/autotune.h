#pragma once

// Autotuner: a grid search over partition size and credit, scored by measured
// iteration time (FERRY_AUTOTUNE=1).
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
  int64_t credit_bytes = 0;

  bool operator==(const SchedulingChoice& o) const {
    return partition_bytes == o.partition_bytes && credit_bytes == o.credit_bytes;
  }
};
// "partition 4194304 bytes, credit 16777216 bytes"
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
