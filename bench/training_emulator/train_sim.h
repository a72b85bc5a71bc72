#pragma once

// TrainSim: replays a training workload's communication against a Ferry worker, as a
// data-parallel training step would issue it.
//
//   TrainSim sim(*worker, ScaleWorkload(LoadWorkload(path), 0.25, 0.05), /*check=*/true);
//   std::vector<double> ms = sim.Run(/*warmup=*/2, /*iterations=*/10);
//
// Each layer (forward order) is one float32 tensor, declared in forward order, so
// Ferry's default priority favours the input side. One iteration:
//   forward:  for l = 0..L-1: wait for layer l's sum of the previous iteration (the
//             push_pull handle of that layer), then compute fwd_ms;
//   backward: for l = L-1..0: compute bwd_ms, then PushPullAsync layer l's gradient.
// Compute is a sleep on a nominal clock (as a GPU's stream runs on while the CPU posts):
// a layer's compute starts when the previous one's ends, or when its gate opened if it
// had to wait, so oversleeping never accumulates. Each layer's forward and backward
// compute goes to the worker's trace as a compute span of these nominal intervals
// (Worker::TraceCompute; with FERRY_TRACE_DIR), so ferry-sim can read the run back.
//
// Iteration i lasts from the start of its first forward layer to the start of iteration
// i+1's; after the last iteration one more forward pass runs to mark its end (and to
// wait for, and check, every sum). Worker::StepBoundary() is called after each forward
// pass, when every sum has been waited for (so FERRY_AUTOTUNE and SetScheduling can
// switch there).
//
// Values: with `check`, the gradient of layer l in iteration t is refilled every
// iteration with small integers (depending on rank, layer, iteration and position) and
// every sum is compared exactly; without it the gradients are filled once.
// Not thread-safe: one caller thread.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "sim/sit_out_runs.h"
#include "sim/workload.h"
#include "common/util/clock.h"
#include "worker/worker.h"

namespace ferry {

class TrainSim {
 public:
  // Borrows `worker` for its lifetime.
  TrainSim(Worker& worker, Workload workload, bool check);

  // Declares the tensors, meets the other workers at a barrier, runs warmup + iterations
  // iterations and returns the durations (ms) of the last `iterations`.
  // REQUIRES: warmup >= 0, iterations >= 1. Throws FerryError from the worker.
  std::vector<double> Run(int warmup, int iterations);

  // From iteration `iteration` on (0: the first warm-up iteration), every compute time is
  // `scale` times the workload's: a workload whose compute changes mid-run (the drift
  // tests of the profiled policies). Call before Run.
  void ChangeComputeAt(int iteration, double scale) {
    change_at_ = iteration;
    change_scale_ = scale;
  }
  // This worker's compute times are `scale` times the workload's throughout (one slow GPU
  // among others), on top of ChangeComputeAt's. Call before Run.
  void ScaleOwnCompute(double scale) { own_scale_ = scale; }
  // A straggler that moves: in iteration i the worker of rank i mod size() computes `scale`
  // times longer (a noisy neighbour, a slow batch, now here, now there). Call before Run.
  void RotateStraggler(double scale) { rotating_scale_ = scale; }
  // Push averaged gradients (a training step's push_pull) instead of sums: what backup
  // workers (FERRY_BACKUP_WORKERS) close early. Not with `check` (it compares exact sums of
  // every worker). With `catch_up`, a worker that the last step's sums left out for every
  // layer (its pushes came late) sits out the steps that follow: no compute in its
  // backward pass nor in the forward pass after it, the step's averages taken without
  // contributing (Worker::PullAverageAsync), as a training loop skipping steps whose
  // gradients would come late again. Then it computes a step; a run of steps sat out is
  // one step longer each time the step computed after it is still late (at most
  // SitOutRuns::kMaxRun), one shorter each time a computed step is in time. Call before Run.
  void Average(bool catch_up) {
    average_ = true;
    catch_up_ = catch_up;
  }
  // Backward passes sat out (Average's catch_up), after Run.
  int sat_out() const { return runs_.count(); }
  // The timed iterations' starts, ms since the Unix epoch (system clock), after Run: to
  // set the iterations beside an outside event (a link's rate changed).
  const std::vector<double>& start_unix_ms() const { return start_unix_ms_; }

  uint64_t checked_values() const { return checked_; }
  uint64_t wrong_values() const { return wrong_; }

 private:
  Clock::time_point Forward(int iteration);  // returns when layer 0's compute started
  void Backward(int iteration);
  // Average's catch_up: the last step's sums left this worker out.
  bool LeftOut();
  void SitOut();
  void Fill(size_t layer, int iteration);
  void Check(size_t layer, int iteration);
  float Value(int rank, size_t layer, int iteration, uint64_t block) const;
  double ComputeScale(int iteration) const;

  Worker& worker_;
  const Workload workload_;
  const bool check_;
  std::vector<std::string> names_;              // by layer
  std::vector<std::vector<float>> gradients_;   // inputs of push_pull, by layer
  std::vector<std::vector<float>> sums_;        // outputs, by layer
  std::vector<std::optional<Handle>> handles_;  // the layer's push_pull in flight
  Clock::time_point clock_;                     // when the emulated compute is free
  uint64_t checked_ = 0;
  uint64_t wrong_ = 0;
  int change_at_ = std::numeric_limits<int>::max();
  double change_scale_ = 1.0;
  double own_scale_ = 1.0;
  double rotating_scale_ = 1.0;
  bool average_ = false;
  bool catch_up_ = false;
  sim::SitOutRuns runs_;  // Average's catch_up
  std::vector<double> start_unix_ms_;
};

}  // namespace ferry
