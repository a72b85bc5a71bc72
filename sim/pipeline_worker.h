#pragma once

// PipelineWorker: one worker of a hybrid pipeline + data-parallel job (PipelineSpec) in
// simulated time, as bench/hybrid_bench.py runs it on the emulated cluster. Rank r is
// replica r % R of stage s = r / R; it takes activations from rank r - R and gradients from
// rank r + R. Each iteration it runs its stage's 1F1B schedule (Schedule1F1B):
//   F(k): (s > 0) wait for activation k; compute forward_ms; (s < S-1) send A bytes to
//         r + R at priority -k and go on (the send is asynchronous);
//   B(k): (s < S-1) wait for gradient k; compute backward_ms; (s > 0) send A bytes to
//         r - R at priority -k;
// after B(M-1) the worker calls push_pull_rows of every table of the job (PipelineRows:
// its own stage's with its rows, the others' with none), then push_pulls every tensor of
// the stage in the stage's process set. As hybrid_bench.py does, each stage keeps two
// versions of its gradients, iteration t using version t % 2: each version's tensors are
// tensors of their own in the set's catalog (declared in iterations 0 and 1, so version
// 1's are placed after version 0's and, with the catalog's default priority -id, are less
// urgent than every version-0 tensor). A
// tensor's push_pull (a table's push_pull_rows) waits for its previous one, as the worker's
// Sequencer runs a tensor's operations one at a time. Iteration t ends once every send of t
// was received (the receiver's acknowledgement is back) and the push_pulls and
// push_pull_rows of t - 1 (stash: weights one iteration late) or of t (no stash) have their
// sums; then iteration t + 1 starts.
// Iteration t lasts from its start to t + 1's.
//
// With `step_boundary` each iteration ends with StepBoundary, as a program that steps
// DistributedOptimizer does (hybrid_bench.py does not): the policy's step, and at the
// boundary where FERRY_PARTITION_MS sizes partitions, SchedulingControl cuts every set's
// tensors in the new size from then on (the global set's, the tables: their rows may change
// servers; the stage's set's, each version in a layout of that size: fresh keys, its own
// placement) and sets the credit for it, after waiting for every push_pull (the sequencer
// idle).
//
// The push_pulls go through SimSender (the worker's own scheduling code); the sends are
// the fabric's point-to-point messages (critical flows under link scheduling: Fabric).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sim/job.h"
#include "sim/pipeline_rows.h"
#include "sim/pipeline_spec.h"
#include "sim/sim_worker_base.h"

namespace ferry::sim {

// One point-to-point send, for the results.
struct SendRecord {
  int from = 0;  // ranks
  int to = 0;
  int iteration = 0;
  int micro_batch = 0;
  bool activation = true;  // forward's (else a gradient)
  double sent_us = 0;      // handed to the fabric
  double arrived_us = 0;   // at the receiver
  double acked_us = 0;     // its acknowledgement back at the sender
};

class PipelineWorker : public SimWorkerBase {
 public:
  // `peers`: every worker of the job by rank (this one included), filled before Start.
  // `set`: the stage's process set, whose layouts hold both versions of the stage's tensors
  // (version 0's, then version 1's). `rows`: the job's tables. `jitter`, `seed`: as
  // SimWorker's.
  PipelineWorker(SimJob& job, const PipelineSpec& spec, int rank, int set,
                 std::vector<SimServer*> servers, const std::vector<PipelineWorker*>& peers,
                 PipelineRows& rows, double jitter, uint64_t seed, bool step_boundary);

  // Schedules the first iteration; runs `warmup + iterations` iterations.
  void Start(int warmup, int iterations);

  int stage() const { return stage_; }
  // When every iteration started (the last entry: when the last one ended), us.
  const std::vector<SimTime>& starts() const { return starts_; }
  // Every send this worker made.
  const std::vector<SendRecord>& sends() const { return sends_; }
  // Where the worker is, for a deadlock's message.
  std::string Describe() const;

 private:
  // Runs the schedule as far as it can go now.
  void Advance();
  // The end of an iteration: true once its conditions hold (then the next one started).
  bool EndIteration();
  // The timed boundary's partition size and credit (above): false while it waits for the
  // push_pulls.
  bool SizePartitionsByTime();
  void StartIteration();
  bool Ready(const PipelineOp& op) const;
  void Finished(const PipelineOp& op);
  void Send(bool activation, int micro_batch);
  void OnArrival(bool activation);
  void PushStage();
  // Starts this iteration's collective `index` now, or once its previous one is done (the
  // Sequencer).
  void StartOrDefer(size_t index);
  // Collectives by index: a tensor's push_pull (its index in the set's catalog, version x
  // tensors + i), then, from 2 x tensors on, each table's push_pull_rows.
  void Push(size_t index, int iteration);
  // A partition's sum (a server's answer to push_pull_rows) of collective `index` is back.
  void PartSummed(uint32_t index);

  const PipelineSpec& spec_;
  const int stage_;
  const int replicas_;
  const int set_;
  const Layout* layout_;  // the set's, in partition_bytes_: what new push_pulls are cut in
  const size_t tensors_;  // the set's (both versions), in every layout
  const bool step_boundary_;
  const std::vector<PipelineWorker*>& peers_;
  PipelineRows& rows_;
  const std::vector<PipelineOp> ops_;
  size_t next_op_ = 0;
  bool computing_ = false;
  bool pushed_ = false;  // this iteration's push_pulls started (or deferred)
  int iteration_ = 0;
  int boundaries_ = 0;  // StepBoundary calls so far
  // partition_bytes_ (SimWorkerBase): every set's, which the credit is for.
  // Sends that arrived here, counted over the run: micro-batch k of iteration t is the
  // (t * M + k)-th (a connection delivers in order, and a sender starts iteration t + 1
  // only once every send of t arrived).
  int64_t activations_ = 0;
  int64_t gradients_ = 0;
  int unacked_ = 0;  // this iteration's sends without their acknowledgement
  // Collectives: of each iteration, those still without every sum; by index (Push), its
  // partitions (servers) without a sum, the iteration it is of, and the iteration whose
  // collective waits for it (-1: none).
  std::map<int, int> open_push_pulls_;
  std::vector<int> parts_left_;
  std::vector<int> pushing_iteration_;
  std::vector<int> deferred_;
  std::vector<SendRecord> sends_;
};

}  // namespace ferry::sim
