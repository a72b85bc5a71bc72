#pragma once

// SimWorkerBase: what ferry-sim's two kinds of worker share (SimWorker: data parallel;
// PipelineWorker: one replica of a pipeline stage): the rank, the send path (SimSender),
// compute times with jitter, when each iteration started, and the partition size the
// scheduling credit is for.

#include <cstdint>
#include <random>
#include <vector>

#include "sim/job.h"
#include "sim/sim_sender.h"
#include "sim/sim_server.h"

namespace ferry::sim {

class SimWorkerBase {
 public:
  int rank() const { return rank_; }
  bool finished() const { return finished_; }
  uint64_t partition_bytes() const { return partition_bytes_; }
  // Every compute time of this worker is `factor` times the workload's (one slow GPU:
  // ferry-sim --worker-compute-scale); 1 by default.
  void ScaleCompute(double factor) { compute_scale_ = factor; }
  // A straggler that moves (ferry-sim --rotating-slow-factor): in iteration i, the worker of
  // rank i mod workers computes `factor` times longer. 1 by default.
  void RotateStraggler(double factor) { rotating_scale_ = factor; }
  SimSender& sender() { return sender_; }
  const SimSender& sender() const { return sender_; }
  // The timed iterations' durations, ms: from each timed iteration's start to the next's.
  std::vector<double> IterationMs() const;

 protected:
  // `servers`: by rank. `jitter`: the coefficient of variation of every compute time
  // (normal, clipped at 0), drawn from `seed` and the rank. The partition size starts as
  // the configured first one (Config::Scheduling::InitialPartitionBytes).
  SimWorkerBase(SimJob& job, int rank, std::vector<SimServer*> servers, double jitter,
                uint64_t seed);

  // `ms` of compute, in us, with the jitter and this worker's scale; in `iteration` (>= 0),
  // the rotating straggler's factor too when it is this worker's turn.
  double Compute(double ms, int iteration = -1);
  // Partitions of `bytes` from now on: the credit follows, unless the window sets it.
  void SetPartitionBytes(uint64_t bytes);

  SimJob& job_;
  const int rank_;
  SimSender sender_;
  uint64_t partition_bytes_;
  int warmup_ = 0;
  int total_ = 0;  // iterations, warm-up included
  bool finished_ = false;
  std::vector<SimTime> starts_;  // by iteration

 private:
  const double jitter_;
  std::mt19937_64 rng_;
  double compute_scale_ = 1;
  double rotating_scale_ = 1;
};

}  // namespace ferry::sim
