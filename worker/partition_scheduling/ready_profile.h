#pragma once

// ReadyProfile: when a worker's gradients become ready within an iteration, learned from
// the worker's own iterations: the profile that the `usbyte` and `prophet` policies
// (policies.h) schedule by.
//
// Iterations. An iteration runs from one OnStep() (the worker's StepBoundary) to the next
// and holds one backward pass: its Ready()s. Offsets are taken from the iteration's first
// Ready of a profiled priority, so where in the iteration the program calls StepBoundary
// does not matter. A priority (a tensor; all its partitions share it) is recorded once
// per iteration, at its first Ready.
//
// Phases:
//   skipping    the first `skip` iterations (start-up: connections, the first
//               allocations, FERRY_PARTITION_MS's switch at the third boundary);
//   profiling   the next `iterations` iterations: the profile is, per priority seen in
//               every one of them, the median offset; the reference iteration time is
//               their median;
//   predicting  until drift: Predicting() is true and NextBurstUs() etc. answer.
// Drift, checked at every OnStep() while predicting: an iteration counts a strike when a
// profiled priority became ready further than the tolerance (`tolerance` x the profiled
// backward span, at least `min_tolerance_us`) from its prediction, or was missing, or when
// the iteration took more than `slowdown` x the reference. `strikes` strikes in a row:
// profiling starts again (the policies run `credit` meanwhile). A profile abandoned for
// slowness alone within its first `strikes` predicted iterations (the gradients came as
// predicted, yet the iterations were slower than under `credit`: the predictions did not
// help) doubles the iterations of the next profiling phase (up to 64), so a job that a
// profiled policy slows down runs `credit` almost all of the time.
// Within an iteration, Predicting() turns false at the first Ready found off its prediction
// (or when a predicted burst is late beyond the tolerance): the rest of that iteration
// runs `credit`.
//
// Bursts: profiled priorities whose predicted offsets lie within `burst_gap_us` of the
// previous one form one burst (a run of layers whose gradients come together). Bursts
// start in order: the next burst is the one after the latest that started.
// An iteration without a Ready of a profiled priority (no backward: an evaluation step)
// neither strikes nor clears a strike.
//
// Not thread-safe (its policy's SchedulingCore is called under one lock). Time in
// microseconds on the caller's clock.

#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

namespace ferry {

struct ReadyProfileOptions {
  int skip = 1;
  int iterations = 2;
  double tolerance = 0.2;
  int64_t min_tolerance_us = 2000;
  double slowdown = 1.05;
  int strikes = 2;
  int64_t burst_gap_us = 500;
};

class ReadyProfile {
 public:
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

  explicit ReadyProfile(ReadyProfileOptions options = {})
      : options_(options), phase_left_(options.skip) {}

  void OnReady(int priority, int64_t now_us);
  void OnStep(int64_t now_us);

  // Whether a profile applies to the rest of this iteration (see the header comment).
  bool Predicting(int64_t now_us) const;
  // REQUIRES Predicting(). Whether backward is over: every profiled priority was ready in
  // this iteration (true before this iteration's first Ready: the previous one's is over).
  bool BackwardOver() const;
  // REQUIRES Predicting(). When the next burst none of whose priorities is ready yet is
  // predicted to begin (kNever when backward is over).
  int64_t NextBurstUs() const;
  // When Predicting() turns false without another event (a burst late beyond the
  // tolerance), or kNever.
  int64_t EndsPredictingUs() const;
  // REQUIRES Predicting(). The profiled backward compute of the layers more urgent than
  // `priority` (the time from its Ready to the last Ready), 0 for an unprofiled priority.
  int64_t BackwardAfterUs(int priority) const;

  // Counters for logs and the stats file: profiles built, profiles dropped for drift.
  uint64_t profiles() const { return profiles_; }
  uint64_t drifts() const { return drifts_; }
  // "profiling (1 of 2)", "predicting: 16 priorities in 5 bursts over 120 ms", ...
  std::string Describe() const;

 private:
  struct Entry {
    int priority = 0;
    int64_t offset_us = 0;  // from the iteration's first Ready
    int burst = 0;          // index of its burst
  };
  enum class Phase { kSkipping, kProfiling, kPredicting };

  // The iteration that ends now took `period_us`.
  void EndIteration(int64_t period_us);
  void StartProfiling();
  void BuildProfile();
  // Marks this iteration off its prediction.
  void Drift() { iteration_drifted_ = true; }
  int64_t Tolerance() const;

  const ReadyProfileOptions options_;
  Phase phase_ = Phase::kSkipping;
  int phase_left_ = 0;  // iterations left in the phase (skipping, profiling)
  int profile_iterations_ = 0;  // of the current profiling phase

  // This iteration.
  int64_t step_us_ = -1;                       // its OnStep, or -1 before the first
  int64_t first_ready_us_ = -1;                // its first Ready of a profiled priority
  std::unordered_map<int, int64_t> seen_;      // priority -> first Ready (absolute)
  size_t profiled_seen_ = 0;                   // profiled priorities among seen_
  int last_burst_ = -1;                        // the latest burst started, or -1
  bool iteration_drifted_ = false;

  // Profiling: per iteration, priority -> offset from that iteration's first Ready.
  std::vector<std::unordered_map<int, int64_t>> observed_;
  std::vector<int64_t> periods_us_;

  // The profile.
  std::vector<Entry> entries_;                 // by offset
  std::unordered_map<int, size_t> index_;      // priority -> entries_ index
  std::vector<int64_t> burst_offset_us_;       // by burst: its first offset
  int64_t span_us_ = 0;                        // last offset
  int64_t reference_period_us_ = 0;
  int strikes_ = 0;
  int predicted_iterations_ = 0;
  int backoff_ = 1;
  uint64_t profiles_ = 0;
  uint64_t drifts_ = 0;
};

}  // namespace ferry
