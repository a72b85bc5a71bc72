#pragma once

// PieceSizing: one simulated worker's own decisions on how to cut its pushes, made at its
// step boundaries as SchedulingControl::StepBoundary makes them (docs/simulation.md,
// "Uneven links"), with the worker's own code (worker/partition_scheduling/link_sizing.h,
// layer_decomposition.h):
//   - partitions sized per link (SimJob::per_link): at the sizing boundary, and again at a
//     later one where LinkSizing::Moved says a rate moved by more than
//     FERRY_REPARTITION_THRESHOLD, its pieces by server (LinkSizing::Decide on its
//     estimator's rate and its paths' LinkRates), a set FERRY_FRAME_BYTES the largest;
//   - FERRY_DECOMPOSE=per-layer (SimJob::per_layer): at every boundary once its estimator
//     has a rate, from the iteration's ready times (LayerTimes), DecomposeLayers' pieces by
//     layer (LayerSizing), again only where its rate or its backward span moved by more than
//     the threshold, or the partition size changed.
// Each worker decides alone (no other worker's state is read). The keys never change here.
//
//   PieceSizing sizing(job);
//   sizing.OnLayerReady(layer, bytes, now);          // as each layer's push_pull is queued
//   sizing.AtBoundary(sizing_boundary, partition, sender);  // sets the sender's pieces

#include <cstdint>
#include <memory>
#include <vector>

#include "sim/job.h"
#include "sim/sim_sender.h"
#include "worker/partition_scheduling/layer_decomposition.h"
#include "worker/partition_scheduling/link_sizing.h"

namespace ferry::sim {

class PieceSizing {
 public:
  explicit PieceSizing(const SimJob& job) : job_(job) {}

  // Layer `layer`'s push_pull (of `bytes`) was queued now (per layer only).
  void OnLayerReady(uint32_t layer, uint64_t bytes, SimTime now);
  // At a step boundary, after the partitions' size was decided (`sizing_boundary`: the
  // boundary FERRY_PARTITION_MS sizes them at); `partition_bytes`: the size in force.
  void AtBoundary(bool sizing_boundary, uint64_t partition_bytes, SimSender& sender);

  // Per link: the pieces by server last decided (empty before), and the decisions.
  const std::vector<uint64_t>& link_pieces() const { return link_pieces_; }
  int link_decisions() const { return link_decisions_; }
  // Per layer: the decisions, and the layers the last one cut in pieces.
  int layer_decisions() const { return layer_decisions_; }
  int layers_cut() const { return layers_cut_; }

 private:
  void DecidePieces(uint64_t partition_bytes, SimSender& sender);
  void MaybeDecideLayers(uint64_t partition_bytes, SimSender& sender);

  const SimJob& job_;
  std::unique_ptr<LinkSizing> link_sizing_;  // once pieces were decided
  LinkPieces decided_;                       // what they were decided from
  std::vector<uint64_t> link_pieces_;
  int link_decisions_ = 0;
  LayerTimes layer_times_;
  std::unique_ptr<LayerSizing> layer_sizing_;  // per layer
  int layer_decisions_ = 0;
  int layers_cut_ = 0;
};

}  // namespace ferry::sim
