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
#include <random>
#include <string>
#include <vector>

#include "sim/job.h"
#include "sim/sim_sender.h"
#include "sim/sim_server.h"

namespace ferry::sim {

class SimWorker {
 public:
  // `servers`: by rank. `jitter`: the coefficient of variation of every compute time
  // (normal, clipped at 0), drawn from `seed`.
  SimWorker(SimJob& job, int rank, std::vector<SimServer*> servers, double jitter, uint64_t seed);

  // Schedules the first iteration; runs `warmup + iterations` iterations.
  void Start(int warmup, int iterations);

  int rank() const { return rank_; }
  int node() const { return job_.WorkerNode(rank_); }
  bool finished() const { return finished_; }
  // The timed iterations' durations, ms.
  std::vector<double> IterationMs() const;
  // Where the worker is, for a deadlock's message.
  std::string Describe() const;
  uint64_t partition_bytes() const { return partition_bytes_; }
  SimSender& sender() { return sender_; }
  const SimSender& sender() const { return sender_; }

 private:
  void ForwardLayer(size_t layer);
  void Boundary();
  void BackwardLayer(size_t layer);
  void PushLayer(size_t layer);
  // One partition of `layer` has its sums back: the forward pass may go on.
  void PartSummed(uint32_t layer);
  double Compute(double ms);  // us, with jitter

  SimJob& job_;
  const int rank_;
  const double jitter_;
  std::mt19937_64 rng_;
  SimSender sender_;
  uint64_t partition_bytes_;
  const Layout* layout_ = nullptr;
  std::vector<int> parts_left_;    // by layer: partitions of its push_pull still without a sum
  int iteration_ = 0;
  int total_ = 0;
  int warmup_ = 0;
  int boundaries_ = 0;
  long waiting_layer_ = -1;  // the layer whose forward waits for its sums, or -1
  std::vector<SimTime> starts_;  // by iteration: when its first forward layer started
  bool finished_ = false;
};

}  // namespace ferry::sim
