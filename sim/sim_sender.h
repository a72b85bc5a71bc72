#pragma once

// SimSender: a simulated worker's push_pull path, the worker's own scheduling code on the
// simulated fabric. The workers of ferry-sim (SimWorker: data parallel; PipelineWorker:
// pipeline stages) compute; this sends their partitions and takes their sums back.
//
//   SimSender sender(job, rank, servers);
//   sender.SetPartSummed([&](uint32_t layer) { ... });   // one partition's sum is back
//   sender.Push(layer, layout.parts[layer], /*priority=*/-layer, iteration);
//
// Each partition becomes a PushTask in a SchedulingCore with the configured policy and
// credit (and the window estimator, which samples under every policy, as in the worker);
// batches are packed per server as DensePushPull packs them (fused up to the batch's
// fuse_bytes and kMaxFusedPushes; a partition larger than FERRY_FRAME_BYTES as frames,
// each its own message; a compressed one whole, once compressed; a sit-out alone, header
// only); an acknowledged frame
// returns its credit (ReturnPart), the last one the task's (Done); a frame's sum counts as
// its acknowledgement. The core is pumped after every event that may let a batch out, and
// at the policy's timer.
//
// Pieces (docs/simulation.md, "Uneven links"): a partition to server s is cut in frames of
// the worker's piece for s where SetLinkPieces set one (FERRY_PARTITION_PER_LINK), else in
// FERRY_FRAME_BYTES; a layer's piece (SetLayerPieces, FERRY_DECOMPOSE=per-layer), where
// smaller, wins (DensePushPull::CutFrames). Each frame's acknowledgement is a sample of its
// path's rate (LinkRates; not for fused packs), and a sum may cover a range of its own
// frames or a part of one (OnSumRange: the server's grid is another worker's cut).
//
// Invariant: a partition is reported summed exactly once, after its task was erased and the
// core pumped (the caller may push again from the callback). Not thread-safe (one event loop).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sim/job.h"
#include "sim/sim_server.h"
#include "worker/partition_scheduling/link_sizing.h"
#include "worker/partition_scheduling/scheduling_core.h"

namespace ferry::sim {

class SimSender {
 public:
  using PartSummed = std::function<void(uint32_t layer)>;

  // `servers`: by rank. The core starts with the configured policy, and the credit of the
  // configured first partition size (Config::Scheduling::InitialPartitionBytes).
  SimSender(SimJob& job, int rank, std::vector<SimServer*> servers);

  // Called once per partition whose every sum is back.
  void SetPartSummed(PartSummed f) { part_summed_ = std::move(f); }
  // Hands every partition of `parts` (of `layer`, which the callback names) to the core at
  // `priority`, then pumps. `iteration`: the rounds' (and the records'). `sit_out` (backup
  // workers): each partition goes as a header-only push that sits its round out and takes
  // its sum (Worker::PullAverageAsync). REQUIRES: `parts` outlives their sums.
  void Push(uint32_t layer, const std::vector<SimPart>& parts, int priority, int iteration,
            bool sit_out = false);
  // Lets out what the core allows now; sets the policy's timer.
  void Pump();
  // `sent`: when the server sent the acknowledgement.
  void OnAck(uint64_t cookie, uint32_t frame, SimTime sent);
  // `late`: the sum leaves this worker out, its push came late (backup workers).
  void OnSum(uint64_t cookie, uint32_t frame, bool late = false);
  // The sum of bytes [offset, offset + length) of the task's partition (a grid frame): it
  // completes each of the task's frames whose every byte's sum came.
  void OnSumRange(uint64_t cookie, uint64_t offset, uint64_t length);
  // By server rank, the piece of pushes sent from now on (empty: FERRY_FRAME_BYTES for
  // every server); by layer, the layer's piece (0 or beyond the vector: none).
  void SetLinkPieces(std::vector<uint64_t> by_server) { link_pieces_ = std::move(by_server); }
  void SetLayerPieces(std::vector<uint64_t> by_layer) { layer_pieces_ = std::move(by_layer); }
  // The paths' rates measured at the acknowledgements (link_sizing.h).
  LinkRates& link_rates() { return link_rates_; }
  // Since the last call (a step's, called at its boundary): the partitions whose sums came,
  // those of them whose sum left this worker out because its push came late, and the
  // layers with such a partition (what Worker::Contributors(name) of each layer says then).
  struct StepSums {
    int parts = 0;
    int late_parts = 0;
    int late_layers = 0;
  };
  StepSums TakeStepSums();

  int rank() const { return rank_; }
  int node() const { return job_.WorkerNode(rank_); }
  SchedulingCore& core() { return *core_; }
  const SchedulingCore& core() const { return *core_; }
  // Microseconds from the server's sending of each acknowledgement to its arrival, as the
  // worker's ack_delay_us counter measures them (what acks wait behind on the way back).
  const std::vector<double>& ack_delays_us() const { return ack_delays_us_; }
  // Every partition's way, when recording (SimOptions::record_parts).
  void RecordParts() { record_parts_ = true; }
  const std::vector<PartRecord>& parts() const { return parts_log_; }
  // "N partitions without a sum, Q queued, F in flight", for a deadlock's message.
  std::string Describe() const;

 private:
  struct Task {
    PushTask task;  // as handed out (once it was)
    uint32_t layer = 0;
    const SimPart* part = nullptr;
    uint64_t frame_bytes = 0;  // 0: whole
    uint32_t frames = 1;
    std::vector<bool> acked;  // by frame, when in frames (frames_acked says it for one)
    std::vector<uint64_t> summed_bytes;  // by frame: the bytes whose sum came (OnSumRange)
    bool fused = false;                  // sent in a pack with others
    uint32_t frames_acked = 0;
    uint32_t frames_summed = 0;
    bool sit_out = false;  // Push's sit_out
    bool late = false;     // a sum of it left this worker out
    PartRecord record;     // filled when recording
  };
  void SendBatch(const Batch& batch);
  // The frame size `t` is cut in when sent now (0: whole).
  uint64_t FrameBytesOf(const Task& t) const;
  // A compressed partition (FERRY_COMPRESSION): sent whole once compressed.
  void Compressed(const Task& t, const PushTask& handed);
  void Acked(Task& t, uint32_t frame);
  // Tasks until their sum is back, in slots reused after: a cookie is (generation << 32) |
  // slot, so a late acknowledgement for a finished task never finds the slot's next task.
  Task* FindTask(uint64_t cookie);
  uint64_t AddTask(Task t);
  void EraseTask(uint64_t cookie);

  SimJob& job_;
  const int rank_;
  const std::vector<SimServer*> servers_;
  std::unique_ptr<SchedulingCore> core_;
  const uint64_t frame_bytes_;
  std::vector<uint64_t> link_pieces_;   // SetLinkPieces
  std::vector<uint64_t> layer_pieces_;  // SetLayerPieces
  LinkRates link_rates_;
  PartSummed part_summed_;
  std::vector<Task> slots_;
  std::vector<uint32_t> generation_;  // by slot: the cookie's high half while in use
  std::vector<uint32_t> free_slots_;
  size_t live_tasks_ = 0;
  SimTime timer_at_ = -1;       // the policy's timer event scheduled, or -1
  SimTime compress_until_ = 0;  // the compressing thread is busy until then
  std::vector<double> ack_delays_us_;
  StepSums step_sums_;             // since the last TakeStepSums
  std::vector<bool> late_layers_;  // by layer, the same
  bool record_parts_ = false;
  std::vector<PartRecord> parts_log_;
  // SendBatch's table, by server: index + 1 of its open pack; all 0 between calls (kept
  // to spare an allocation per batch).
  std::vector<size_t> open_packs_;
};

}  // namespace ferry::sim
