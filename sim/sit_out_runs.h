#pragma once

// SitOutRuns: when a worker that backup workers left out sits steps out (server/stragglers.h;
// ferry-train-sim --catch_up, ferry-sim --catch-up). After a late step it sits out a run of
// steps, then computes one; each time the step computed after a run is still late, the next
// run is one step longer (at most kMaxRun), and each step computed in time makes it one
// shorter. The caller says at each step boundary whether the last step computed was late.
// Not thread-safe: one caller.

#include <algorithm>
#include <utility>

namespace ferry::sim {

class SitOutRuns {
 public:
  static constexpr int kMaxRun = 8;

  // Whether to sit the coming step out. `late()` tells whether the last step's sums left
  // the worker out; it is asked only after a step the worker computed.
  template <typename Late>
  bool SitOutNext(Late&& late) {
    if (left_ > 0) {  // within a run of steps sat out
      left_--;
      return true;
    }
    if (std::exchange(sitting_out_, false)) return false;  // the run is over: compute
    if (!late()) {
      run_ = std::max(1, run_ - 1);
      computed_after_run_ = false;
      return false;
    }
    // Still late after sitting out: slower than one step in run_ + 1 allows.
    if (std::exchange(computed_after_run_, false)) run_ = std::min(kMaxRun, run_ + 1);
    left_ = run_ - 1;
    return true;
  }
  // The worker sits the coming step out (after SitOutNext said so).
  void SatOut() {
    count_++;
    sitting_out_ = true;
    computed_after_run_ = true;  // read at the next step it computes
  }
  // Whether the last step was sat out (its forward pass computes nothing either).
  bool sitting_out() const { return sitting_out_; }
  int count() const { return count_; }  // steps sat out

 private:
  bool sitting_out_ = false;
  bool computed_after_run_ = false;  // the last step computed followed a run sat out
  int run_ = 1;                      // steps sat out after a late one
  int left_ = 0;                     // of the current run
  int count_ = 0;
};

}  // namespace ferry::sim
