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
// The send path is the worker's own scheduling code: each partition becomes a PushTask in
// a SchedulingCore with the configured policy and credit (and the window estimator, which
// samples under every policy, as in the worker); batches are packed per server as
// DensePushPull packs them (fused up to the batch's fuse_bytes and kMaxFusedPushes; a
// partition larger than FERRY_FRAME_BYTES as frames, each its own message); an
// acknowledged frame returns its credit (ReturnPart), the last one the task's (Done); a
// frame's sum counts as its acknowledgement. The core is pumped after every event that
// may let a batch out, and at the policy's timer.

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "sim/job.h"
#include "sim/sim_server.h"
#include "worker/partition_scheduling/scheduling_core.h"

namespace ferry::sim {

class SimWorker {
 public:
  // `servers`: by rank. `jitter`: the coefficient of variation of every compute time
  // (normal, clipped at 0), drawn from `seed`.
  SimWorker(SimJob& job, int rank, std::vector<SimServer*> servers, double jitter, uint64_t seed);

  // Schedules the first iteration; runs `warmup + iterations` iterations.
  void Start(int warmup, int iterations);
  // `sent`: when the server sent the acknowledgement.
  void OnAck(uint64_t cookie, uint32_t frame, SimTime sent);
  void OnSum(uint64_t cookie, uint32_t frame);

  int rank() const { return rank_; }
  int node() const { return job_.WorkerNode(rank_); }
  bool finished() const { return finished_; }
  // The timed iterations' durations, ms.
  std::vector<double> IterationMs() const;
  // Where the worker is, for a deadlock's message.
  std::string Describe() const;
  uint64_t partition_bytes() const { return partition_bytes_; }
  const SchedulingCore& core() const { return *core_; }
  // Microseconds from the server's sending of each acknowledgement to its arrival, as the
  // worker's ack_delay_us counter measures them (what acks wait behind on the way back).
  const std::vector<double>& ack_delays_us() const { return ack_delays_us_; }
  // Every partition's way, when recording (SimOptions::record_parts).
  void RecordParts() { record_parts_ = true; }
  const std::vector<PartRecord>& parts() const { return parts_log_; }

 private:
  struct Task {
    PushTask task;  // as handed out (once it was)
    uint32_t layer = 0;
    const SimPart* part = nullptr;
    uint64_t frame_bytes = 0;  // 0: whole
    uint32_t frames = 1;
    std::vector<bool> acked;  // by frame, when in frames (frames_acked says it for one)
    uint32_t frames_acked = 0;
    uint32_t frames_summed = 0;
    PartRecord record;  // filled when recording
  };
  void ForwardLayer(size_t layer);
  void Boundary();
  void BackwardLayer(size_t layer);
  void PushLayer(size_t layer);
  void Pump();
  void SendBatch(const Batch& batch);
  // A compressed partition (FERRY_COMPRESSION): sent whole once compressed.
  void Compressed(const Task& t, const PushTask& handed);
  void Acked(Task& t, uint32_t frame);
  double Compute(double ms);  // us, with jitter

  SimJob& job_;
  const int rank_;
  const std::vector<SimServer*> servers_;
  const double jitter_;
  std::mt19937_64 rng_;
  std::unique_ptr<SchedulingCore> core_;
  uint64_t partition_bytes_;
  uint64_t frame_bytes_;
  const Layout* layout_ = nullptr;
  // Tasks until their sum is back, in slots reused after: a cookie is (generation << 32) |
  // slot, so a late acknowledgement for a finished task never finds the slot's next task.
  Task* FindTask(uint64_t cookie);
  uint64_t AddTask(Task t);
  void EraseTask(uint64_t cookie);
  std::vector<Task> slots_;
  std::vector<uint32_t> generation_;  // by slot: the cookie's high half while in use
  std::vector<uint32_t> free_slots_;
  size_t live_tasks_ = 0;
  std::vector<int> parts_left_;    // by layer: partitions of its push_pull still without a sum
  int iteration_ = 0;
  int total_ = 0;
  int warmup_ = 0;
  int boundaries_ = 0;
  long waiting_layer_ = -1;  // the layer whose forward waits for its sums, or -1
  std::vector<SimTime> starts_;  // by iteration: when its first forward layer started
  SimTime timer_at_ = -1;        // the policy's timer event scheduled, or -1
  SimTime compress_until_ = 0;   // the compressing thread is busy until then
  bool finished_ = false;
  std::vector<double> ack_delays_us_;
  bool record_parts_ = false;
  std::vector<PartRecord> parts_log_;
  // SendBatch's table, by server: index + 1 of its open pack; all 0 between calls (kept
  // to spare an allocation per batch).
  std::vector<size_t> open_packs_;
};

}  // namespace ferry::sim
