#pragma once

// SchedulingControl: a Worker's iterations and how it partitions tensors between them.
// It owns the current SchedulingChoice (partition size, credit or window gain, frame
// size), the iteration clock (StepBoundary: times, trace marks) and the FERRY_AUTOTUNE
// search over candidates. It starts the queue's window (FERRY_WINDOW=bdp) and applies
// every choice to the catalogs (partitions: the global set's and every process set's), the
// queue (credit or window) and WorkerContext::frame_bytes.
//
// A switch of the partition size happens only with none of the Worker's operations
// unfinished (Sequencer::WaitUntilIdle first): a tensor's partitions change between its
// operations, never under one. Every worker makes the same switches at the same point of
// its sequence of push_pulls, so their keys agree (worker.h, "Re-partitioning").
//
// Partitions sized by the link (FERRY_PARTITION_MS > 0, the default, not under p3; the default, not a set value, stands aside when every server is on loopback,
// NodeTable::ServersOnLoopback: a one-machine job whose measured rate is the CPU's): at the
// third boundary (two iterations measured) every worker sums every worker's measured rate
// (the window estimator's, queue.measured_rate_bytes_per_s) with a push_pull, and all switch
// to PartitionBytesForRate(mean rate, ms, 128 KiB, the configured size): a partition then
// takes about `ms` on the link, whatever the link. Why time and not bytes: a partition is
// the unit that a server sums and sends back only once every worker's copy is in, and the
// link time lost to that grows with its transfer time (docs/benchmarks.md, "Where the idle
// link time goes"). Every worker decides from the same sum at the same boundary, so their
// keys agree. A SetScheduling before that boundary cancels it (the program's choice
// stands); like every SetScheduling, the program makes it on every worker alike, or the
// others would wait in the decision's push_pull for the one that cancelled (until the
// operation's deadline).
//
// Trirace's frames on sends (FERRY_SCHEDULING_POLICY unset: Config::Scheduling::
// trirace_on_sends; where partitions are sized by the link, and not under elastic
// training): the same sum at the same boundary counts the workers that sent to another
// worker (p2p.sends); if any did, every worker switches to trirace's frames there, in one
// switch with the size, and reports the policy as trirace. A key's frame cut changes only
// between its rounds, and on every worker at the same point, so the servers see one cut
// per round. No push_pull is added for it.
//
// Partitions sized per link (FERRY_PARTITION_PER_LINK=1, where partitions are sized by the
// link, without FERRY_AUTOTUNE or backup workers;
// partition_scheduling/link_sizing.h): after the sizing boundary (the partitions, the
// servers' keys, as above), each worker cuts its pushes to each server in pieces sized by its
// own path (WorkerContext::link_frame_bytes); its credit stays in partitions (counted in its
// own pieces it measured 2-5% slower: the slow link's acknowledgements wait behind sums). It
// decides its pieces alone, again at any later boundary where a rate moved by more than
// FERRY_REPARTITION_THRESHOLD: the servers sum pieces cut differently by range arithmetic,
// so nothing waits for the other workers or for the worker's operations.
//
// Per-layer decomposition (FERRY_DECOMPOSE=per-layer; partition_scheduling/
// layer_decomposition.h): at every boundary the worker takes the iteration's ready time and
// bytes of each tensor (LayerTimes, recorded as its partitions are queued) and, once its
// window estimator has a rate, cuts each layer's pushes in the pieces DecomposeLayers
// chooses (WorkerContext::layer_frame_bytes; a link's piece, where smaller, wins), deciding
// again only when its rate or its backward span moved by more than
// FERRY_REPARTITION_THRESHOLD, or the partition size changed. Alone, like the pieces per link.
//
// FERRY_AUTOTUNE: its grid is centred on the partition size in force when it starts. With
// partitions sized by the link (and no FERRY_AUTOTUNE_PARTITION_BYTES) the search starts at
// the sizing boundary, around the time-sized partition, which is not applied by itself
// (the tuner switches to its first candidate at once); otherwise it starts at the first
// boundary, around the configured size. A SetScheduling before the sizing boundary starts
// it around the program's size.
//
// Locks: step_mu_ serializes StepBoundary and guards the clock and the tuner; the
// current choice, the catalog and the sequencer are under WorkerContext::mu, taken inside
// step_mu_ (never around it). The autotune decision sums the scores over the workers (the
// Worker's push_pull of a reserved tensor) with no lock of the Worker held but step_mu_.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/util/mutex.h"
#include "worker/sequencer.h"
#include "worker/worker_context.h"
#include "worker/partition_scheduling/autotune.h"
#include "worker/partition_scheduling/layer_decomposition.h"
#include "worker/partition_scheduling/link_sizing.h"
#include "worker/partition_scheduling/scheduled_queue.h"
#include "worker/process_sets.h"
#include "worker/tensor_catalog.h"

namespace ferry {

class SchedulingControl {
 public:
  // Replaces `values` by their sum over every worker (a push_pull; it blocks).
  using SumOverWorkers = std::function<void(std::vector<double>& values)>;
  // Every reference outlives this object.
  SchedulingControl(WorkerContext& ctx, TensorCatalog& catalog, ProcessSets& sets,
                    ScheduledQueue& queue,
                    SumOverWorkers sum_over_workers);

  // What new operations use now. Takes mu.
  SchedulingChoice current() const EXCLUDES(ctx_.mu);
  // As Worker::SetScheduling: validates, waits for the worker's operations, switches.
  void Set(int64_t partition_bytes, int64_t credit_bytes) EXCLUDES(step_mu_, ctx_.mu);
  // As Worker::StepBoundary.
  void StepBoundary() EXCLUDES(step_mu_, ctx_.mu);
  // Whether the default policy took trirace's transport at the sizing boundary (above).
  bool trirace() const { return trirace_.load(std::memory_order_relaxed); }
  // For the start log: "; autotune over N candidates, K iterations each", "; partitions
  // sized by the link at iteration 3 (...)", why they are not, or "" when neither applies.
  std::string DescribePlan() const EXCLUDES(step_mu_);

 private:
  // REQUIRES: no operation of the worker unfinished. Switches new operations to
  // partitions of `choice.partition_bytes` and the queue to `choice.credit_bytes`.
  // `log`: say so in the log and the trace (not for the configured start).
  void Apply(const SchedulingChoice& choice, const std::string& why, bool log = true)
      REQUIRES(ctx_.mu);
  // The autotune candidates around `initial` (FERRY_AUTOTUNE_*; docs/configuration.md).
  std::vector<SchedulingChoice> AutotuneGrid(const SchedulingChoice& initial) const;
  void FinishAutotune() REQUIRES(step_mu_) EXCLUDES(ctx_.mu);
  // The decision at the sizing boundary (above): FERRY_PARTITION_MS's size and trirace's
  // frames on sends, as every worker agrees on them, with why in `why`; blocks in a
  // push_pull.
  SchedulingChoice DecideAtSizingStep(std::string* why) REQUIRES(step_mu_) EXCLUDES(ctx_.mu);
  // Switches to `decided` (waiting for the worker's operations) unless it is current.
  void ApplySizingStep(const SchedulingChoice& decided, const std::string& why)
      REQUIRES(step_mu_) EXCLUDES(ctx_.mu);
  // Partitions sized per link: this worker's pieces per server for the rates
  // measured now (logged with `why`).
  void DecidePieces(const std::string& why) REQUIRES(step_mu_) EXCLUDES(ctx_.mu);
  // FERRY_DECOMPOSE=per-layer, at every boundary: takes the iteration's layers and, once a
  // rate is measured, decides each layer's piece (first time, or when the rate or the
  // backward span moved by more than FERRY_REPARTITION_THRESHOLD, or the partition changed).
  void MaybeDecideLayers() REQUIRES(step_mu_) EXCLUDES(ctx_.mu);
  // Starts the autotune search around `centre` and switches to its first candidate.
  void StartAutotune(const SchedulingChoice& centre, const std::string& why)
      REQUIRES(step_mu_) EXCLUDES(ctx_.mu);

  static constexpr uint64_t kSizingStep = 3;                 // the boundary that decides

  WorkerContext& ctx_;
  TensorCatalog& catalog_;  // PT_GUARDED_BY(ctx_.mu)
  ProcessSets& sets_;       // PT_GUARDED_BY(ctx_.mu): cut in the global set's size
  ScheduledQueue& queue_;
  const SumOverWorkers sum_over_workers_;
  SchedulingChoice current_ GUARDED_BY(ctx_.mu);

  mutable Mutex step_mu_;  // serializes StepBoundary; guards the members below
  std::unique_ptr<Autotuner> tuner_ GUARDED_BY(step_mu_);  // FERRY_AUTOTUNE; null: off or done
  int64_t last_step_us_ GUARDED_BY(step_mu_) = 0;          // the previous boundary (0: none yet)
  uint64_t steps_ GUARDED_BY(step_mu_) = 0;                // boundaries so far
  bool size_by_time_ GUARDED_BY(step_mu_) = false;         // FERRY_PARTITION_MS still to apply
  bool loopback_keeps_size_ GUARDED_BY(step_mu_) = false;  // its default stood aside at start
  bool tune_after_sizing_ GUARDED_BY(step_mu_) = false;    // autotune waits for the size
  int64_t frames_on_sends_ GUARDED_BY(step_mu_) = 0;       // trirace's frames, still to decide
  std::atomic<bool> trirace_{false};                        // the default took trirace's frames
  bool per_link_ GUARDED_BY(step_mu_) = false;             // FERRY_PARTITION_PER_LINK applies
  bool per_layer_ GUARDED_BY(step_mu_) = false;            // FERRY_DECOMPOSE=per-layer applies
  std::unique_ptr<LinkSizing> link_sizing_ GUARDED_BY(step_mu_);  // set once pieces are decided
  LinkPieces pieces_ GUARDED_BY(step_mu_);                  // what they were decided from
  double mean_rate_ GUARDED_BY(step_mu_) = 0;  // the workers' mean at the sizing boundary
  std::unique_ptr<LayerSizing> layer_sizing_ GUARDED_BY(step_mu_);  // FERRY_DECOMPOSE=per-layer
};

}  // namespace ferry
