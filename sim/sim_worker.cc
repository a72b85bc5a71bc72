#include "sim/sim_worker.h"

#include <glog/logging.h>

#include <algorithm>
#include <utility>

#include "common/util/error.h"
#include "common/util/strings.h"

namespace ferry::sim {

SimWorker::SimWorker(SimJob& job, int rank, std::vector<SimServer*> servers, double jitter,
                     uint64_t seed)
    : SimWorkerBase(job, rank, std::move(servers), jitter, seed), pieces_(job) {
  sender_.SetPartSummed([this](uint32_t layer) { PartSummed(layer); });
  layout_ = &job_.LayoutFor(partition_bytes_);
  parts_left_.assign(job_.workload.layers.size(), 0);
}

void SimWorker::Start(int warmup, int iterations) {
  warmup_ = warmup;
  total_ = warmup + iterations;
  job_.events.At(job_.events.now(), [this] { ForwardLayer(0); });
}

void SimWorker::ForwardLayer(size_t layer) {
  if (layer == job_.workload.layers.size()) {
    Boundary();
    return;
  }
  if (parts_left_[layer] > 0) {  // the gate: this layer's sums are not all back
    waiting_layer_ = static_cast<long>(layer);
    return;
  }
  if (layer == 0) starts_.push_back(job_.events.now());
  // A step sat out computes nothing: this forward pass is its second half (SitOut).
  const double us = runs_.sitting_out() ? 0.0 : Compute(job_.workload.layers[layer].fwd_ms, iteration_);
  job_.events.After(us, [this, layer] { ForwardLayer(layer + 1); });
}

void SimWorker::Boundary() {
  // Every sum of the last iteration was waited for: nothing is in flight.
  boundaries_++;
  sender_.core().Step(job_.events.now());
  const bool sizing = job_.SizesPartitionsByTime() && boundaries_ == SimJob::kTimedBoundary;
  if (sizing) {
    const uint64_t bytes = job_.TimedPartitionBytes(partition_bytes_);
    if (bytes != partition_bytes_) {
      SetPartitionBytes(bytes);
      layout_ = &job_.LayoutFor(bytes);
    }
  }
  pieces_.AtBoundary(sizing, partition_bytes_, sender_);
  if (iteration_ == total_) {
    finished_ = true;
    return;
  }
  if (SitsOut()) {
    SitOut();
    return;
  }
  const size_t last = job_.workload.layers.size() - 1;
  job_.events.After(Compute(job_.workload.layers[last].bwd_ms, iteration_),
                    [this, last] { BackwardLayer(last); });
}

void SimWorker::BackwardLayer(size_t layer) {
  PushLayer(layer);
  if (layer == 0) {
    iteration_++;
    ForwardLayer(0);
    return;
  }
  job_.events.After(Compute(job_.workload.layers[layer - 1].bwd_ms, iteration_),
                    [this, layer] { BackwardLayer(layer - 1); });
}

bool SimWorker::SitsOut() {
  const SimSender::StepSums sums = sender_.TakeStepSums();  // the last step's
  if (catch_up_ == CatchUp::kOff) return false;
  return runs_.SitOutNext([&] {
    // Late for every partition (ferry-train-sim's rule: a round leaves out at most b
    // workers, those sitting out included, so at most b sit out a step and every round
    // keeps a contributor), or for most layers (which worker is last for one partition is
    // chance when all are in step, and with b = 1 some worker is left out of every round).
    return catch_up_ == CatchUp::kMostLayers
               ? 2 * static_cast<size_t>(sums.late_layers) > job_.workload.layers.size()
               : sums.late_parts > 0 && sums.late_parts == sums.parts;
  });
}

void SimWorker::SitOut() {
  for (size_t layer = 0; layer < layout_->parts.size(); ++layer) {
    for (const SimPart& p : layout_->parts[layer]) {
      FERRY_ENFORCE(!p.compressed(), ErrorCode::kMismatch, "worker ", rank_, " sat out step ",
                    iteration_, " (catching up, --catch-up ", CatchUpName(catch_up_),
                    "), but layer ", layer, " (", job_.workload.layers[layer].name,
                    ") is compressed (FERRY_COMPRESSION): its rounds wait for every worker, so "
                    "the servers fail its push_pull, as on a real cluster; with compression, "
                    "--catch-up off");
    }
  }
  runs_.SatOut();
  for (size_t layer = job_.workload.layers.size(); layer-- > 0;) PushLayer(layer, true);
  iteration_++;
  ForwardLayer(0);
}

void SimWorker::PushLayer(size_t layer, bool sit_out) {
  const std::vector<SimPart>& parts = layout_->parts[layer];
  CHECK_EQ(parts_left_[layer], 0) << "layer " << layer << " pushed with its last push_pull open";
  parts_left_[layer] = static_cast<int>(parts.size());
  if (!sit_out) {
    pieces_.OnLayerReady(static_cast<uint32_t>(layer), job_.workload.layers[layer].bytes,
                         job_.events.now());
  }
  // Declaration order: the input side first.
  sender_.Push(static_cast<uint32_t>(layer), parts, -static_cast<int>(layer), iteration_,
               sit_out);
}

void SimWorker::PartSummed(uint32_t layer) {
  if (--parts_left_[layer] == 0 && waiting_layer_ == static_cast<long>(layer)) {
    waiting_layer_ = -1;
    ForwardLayer(layer);
  }
}

std::string SimWorker::Describe() const {
  return StrCat("worker ", rank_, ": iteration ", iteration_, " of ", total_,
                waiting_layer_ >= 0 ? StrCat(", forward waits for layer ", waiting_layer_) : "",
                ", ", sender_.Describe());
}

}  // namespace ferry::sim
