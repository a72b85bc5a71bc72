#pragma once

// SimWorker: one Ferry worker replaying a training workload, as ferry-train-sim does
// (bench/training_emulator/train_sim.h), in simulated time:
//   forward:  for l = 0..L-1: wait for layer l's sum of the previous iteration, then
//             compute fwd_ms;
//   boundary: StepBoundary (FERRY_PARTITION_MS sizes partitions at the third; the worker's
//             pieces are decided: PieceSizing);
//   backward: for l = L-1..0: compute bwd_ms, then push_pull layer l.
// Iteration i lasts from the start of its first forward layer to iteration i+1's; one
// more forward pass after the last marks its end.
//
// Catching up (backup workers; CatchUp), as ferry-train-sim's --catch_up: at a step
// boundary, if the last step's sums left this worker out (for most layers, or for every
// partition), it sits out: no compute in this backward pass nor in the next forward pass,
// and every layer's push_pull a sit-out, at once (Worker::PullAverageAsync); the forward
// pass still waits for each layer's sums. Then it computes a step (its lateness is not
// looked at after a run sat out). A run of steps sat out is one longer each time the step
// computed after it is still late (at most SitOutRuns::kMaxRun), one shorter each time a computed
// step is in time.
//
// The send path is the worker's own scheduling code (SimSender).

#include <cstdint>
#include <string>
#include <vector>

#include "sim/job.h"
#include "sim/piece_sizing.h"
#include "sim/sit_out_runs.h"
#include "sim/sim_server.h"
#include "sim/sim_worker_base.h"

namespace ferry::sim {

class SimWorker : public SimWorkerBase {
 public:
  // `servers`: by rank. `jitter`, `seed`: SimWorkerBase's.
  SimWorker(SimJob& job, int rank, std::vector<SimServer*> servers, double jitter, uint64_t seed);

  // Schedules the first iteration; runs `warmup + iterations` iterations.
  void Start(int warmup, int iterations);
  // Catches up as above (kMostLayers by default; it matters only with FERRY_BACKUP_WORKERS,
  // where a push can come late). Call before Start.
  void SetCatchUp(CatchUp c) { catch_up_ = c; }
  // Backward passes sat out, warm-up included.
  int sat_out() const { return runs_.count(); }

  int node() const { return job_.WorkerNode(rank_); }
  // Its own decisions on pieces (per link, per layer).
  const PieceSizing& pieces() const { return pieces_; }
  // Where the worker is, for a deadlock's message.
  std::string Describe() const;

 private:
  void ForwardLayer(size_t layer);
  void Boundary();
  void BackwardLayer(size_t layer);
  void PushLayer(size_t layer, bool sit_out = false);
  // Catching up: whether to sit this step out (takes the sender's step sums), and doing so
  // (throws FerryError(kMismatch) where a layer is compressed: the servers refuse that).
  bool SitsOut();
  void SitOut();
  // One partition of `layer` has its sums back: the forward pass may go on.
  void PartSummed(uint32_t layer);

  const Layout* layout_ = nullptr;
  PieceSizing pieces_;
  std::vector<int> parts_left_;    // by layer: partitions of its push_pull still without a sum
  int iteration_ = 0;
  int boundaries_ = 0;
  long waiting_layer_ = -1;  // the layer whose forward waits for its sums, or -1
  CatchUp catch_up_ = CatchUp::kMostLayers;
  SitOutRuns runs_;  // catching up (catch_up_)
  // starts_ (SimWorkerBase): when each iteration's first forward layer started.
};

}  // namespace ferry::sim
