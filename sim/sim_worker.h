#pragma once

// SimWorker: one Ferry worker replaying a training workload, as ferry-train-sim does
// (bench/training_emulator/train_sim.h), in simulated time:
//   forward:  for l = 0..L-1: wait for layer l's sum of the previous iteration, then
//             compute fwd_ms;
//   boundary: StepBoundary (FERRY_PARTITION_MS sizes partitions at the third);
//   backward: for l = L-1..0: compute bwd_ms, then push_pull layer l.
// Iteration i lasts from the start of its first forward layer to iteration i+1's; one
// more forward pass after the last marks its end.
//
// The send path is the worker's own scheduling code (SimSender).

#include <cstdint>
#include <string>
#include <vector>

#include "sim/job.h"
#include "sim/sim_server.h"
#include "sim/sim_worker_base.h"

namespace ferry::sim {

class SimWorker : public SimWorkerBase {
 public:
  // `servers`: by rank. `jitter`, `seed`: SimWorkerBase's.
  SimWorker(SimJob& job, int rank, std::vector<SimServer*> servers, double jitter, uint64_t seed);

  // Schedules the first iteration; runs `warmup + iterations` iterations.
  void Start(int warmup, int iterations);

  int node() const { return job_.WorkerNode(rank_); }
  // Where the worker is, for a deadlock's message.
  std::string Describe() const;

 private:
  void ForwardLayer(size_t layer);
  void Boundary();
  void BackwardLayer(size_t layer);
  void PushLayer(size_t layer);
  // One partition of `layer` has its sums back: the forward pass may go on.
  void PartSummed(uint32_t layer);

  const Layout* layout_ = nullptr;
  std::vector<int> parts_left_;    // by layer: partitions of its push_pull still without a sum
  int iteration_ = 0;
  int boundaries_ = 0;
  long waiting_layer_ = -1;  // the layer whose forward waits for its sums, or -1
  // starts_ (SimWorkerBase): when each iteration's first forward layer started.
};

}  // namespace ferry::sim
