#include "sim/pipeline_worker.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstdint>

#include "common/util/strings.h"
#include "worker/tensor_catalog.h"

namespace ferry::sim {

PipelineWorker::PipelineWorker(SimJob& job, const PipelineSpec& spec, int rank, int set,
                               std::vector<SimServer*> servers,
                               const std::vector<PipelineWorker*>& peers, double jitter,
                               uint64_t seed, bool step_boundary)
    : job_(job),
      spec_(spec),
      rank_(rank),
      stage_(rank / (job.num_workers / spec.num_stages())),
      replicas_(job.num_workers / spec.num_stages()),
      set_(set),
      layout_(*job.set_layouts.at(static_cast<size_t>(set))),
      step_boundary_(step_boundary),
      peers_(peers),
      jitter_(jitter),
      rng_(seed * 1000003 + static_cast<uint64_t>(rank)),
      sender_(job, rank, std::move(servers)),
      ops_(Schedule1F1B(stage_, spec.num_stages(), spec.micro_batches)),
      partition_bytes_(static_cast<uint64_t>(job.config.scheduling.InitialPartitionBytes())) {
  CHECK_EQ(job.num_workers % spec.num_stages(), 0);
  CHECK_EQ(layout_.parts.size(), 2 * spec.stages[stage_].tensors.size()) << "two versions";
  sender_.SetPartSummed([this](uint32_t tensor) { PartSummed(tensor); });
  const size_t tensors = layout_.parts.size();
  parts_left_.assign(tensors, 0);
  pushing_iteration_.assign(tensors, -1);
  deferred_.assign(tensors, -1);
}

double PipelineWorker::Compute(double ms) {
  double us = ms * 1000.0;
  if (jitter_ > 0) {
    std::normal_distribution<double> noise(1.0, jitter_);
    us *= std::max(0.0, noise(rng_));
  }
  return us;
}

void PipelineWorker::Start(int warmup, int iterations) {
  warmup_ = warmup;
  total_ = warmup + iterations;
  job_.events.At(job_.events.now(), [this] {
    StartIteration();
    Advance();
  });
}

void PipelineWorker::StartIteration() {
  starts_.push_back(job_.events.now());
  next_op_ = 0;
  pushed_ = false;
  if (iteration_ == total_) finished_ = true;  // its start marks the last one's end
}

void PipelineWorker::Advance() {
  while (!finished_ && !computing_) {
    if (next_op_ == ops_.size()) {
      if (!EndIteration()) return;
      continue;
    }
    const PipelineOp op = ops_[next_op_];
    if (!Ready(op)) return;  // an arrival calls again
    computing_ = true;
    const PipelineStage& stage = spec_.stages[stage_];
    job_.events.After(Compute(op.forward ? stage.forward_ms : stage.backward_ms), [this, op] {
      computing_ = false;
      next_op_++;
      Finished(op);
      Advance();
    });
  }
}

bool PipelineWorker::Ready(const PipelineOp& op) const {
  const int64_t index = static_cast<int64_t>(iteration_) * spec_.micro_batches + op.micro_batch;
  if (op.forward) return stage_ == 0 || activations_ > index;
  return stage_ + 1 == spec_.num_stages() || gradients_ > index;
}

void PipelineWorker::Finished(const PipelineOp& op) {
  if (op.forward && stage_ + 1 < spec_.num_stages()) Send(true, op.micro_batch);
  if (!op.forward && stage_ > 0) Send(false, op.micro_batch);
  if (next_op_ == ops_.size()) PushStage();  // after B(M-1)
}

bool PipelineWorker::EndIteration() {
  CHECK(pushed_);
  if (unacked_ > 0) return false;
  const int waits_for = spec_.stash ? iteration_ - 1 : iteration_;
  if (open_push_pulls_.count(waits_for) > 0) return false;  // a sum calls again
  if (step_boundary_) {
    if (!SizeCreditByTime()) return false;
    boundaries_++;
    sender_.core().Step(job_.events.now());
  }
  iteration_++;
  StartIteration();
  return true;
}

bool PipelineWorker::SizeCreditByTime() {
  if (!job_.SizesPartitionsByTime() || boundaries_ + 1 != SimJob::kTimedBoundary) return true;
  const uint64_t bytes = job_.TimedPartitionBytes(partition_bytes_);
  if (bytes == partition_bytes_) return true;
  if (!open_push_pulls_.empty()) return false;  // WaitUntilIdleOrThrow; a sum calls again
  partition_bytes_ = bytes;
  if (!sender_.core().window_on()) {
    sender_.core().SetCredit(
        static_cast<uint64_t>(job_.config.scheduling.CreditBytesFor(static_cast<int64_t>(bytes))));
  }
  return true;
}

void PipelineWorker::Send(bool activation, int micro_batch) {
  PipelineWorker* peer =
      peers_.at(static_cast<size_t>(rank_ + (activation ? replicas_ : -replicas_)));
  const SimTime now = job_.events.now();
  const size_t record = sends_.size();
  sends_.push_back(SendRecord{rank_, peer->rank_, iteration_, micro_batch, activation, now, 0, 0});
  unacked_++;
  const int from = job_.WorkerNode(rank_);
  const int to = job_.WorkerNode(peer->rank_);
  job_.fabric->SendPointToPoint(from, to, spec_.activation_bytes, -micro_batch,
                                [this, peer, record, activation, from, to] {
                                  sends_[record].arrived_us = job_.events.now();
                                  peer->OnArrival(activation);
                                  // The receiver's P2P_ACK ("arrived"), on its connection back.
                                  job_.fabric->SendControl(to, from, [this, record] {
                                    sends_[record].acked_us = job_.events.now();
                                    unacked_--;
                                    Advance();
                                  });
                                });
}

void PipelineWorker::OnArrival(bool activation) {
  (activation ? activations_ : gradients_)++;
  Advance();
}

void PipelineWorker::PushStage() {
  pushed_ = true;
  const size_t tensors = layout_.parts.size() / 2;
  if (tensors == 0) return;
  open_push_pulls_[iteration_] = static_cast<int>(tensors);
  const size_t first = static_cast<size_t>(iteration_ % 2) * tensors;  // this version's
  for (size_t i = first; i < first + tensors; ++i) {
    if (pushing_iteration_[i] < 0) {
      PushTensor(i, iteration_);
      continue;
    }
    // Its previous push_pull is still out: the Sequencer starts this one after it.
    CHECK_EQ(deferred_[i], -1) << "worker " << rank_ << ": tensor " << i << " three deep";
    deferred_[i] = iteration_;
  }
}

void PipelineWorker::PushTensor(size_t tensor, int iteration) {
  const std::vector<SimPart>& parts = layout_.parts[tensor];
  parts_left_[tensor] = static_cast<int>(parts.size());
  pushing_iteration_[tensor] = iteration;
  // The catalog's default priority: -id (declaration order), ids from the set's first.
  const uint64_t id = ProcessSetFirstId(set_) + tensor;
  const int priority = -static_cast<int>(std::min<uint64_t>(id, INT32_MAX));
  sender_.Push(static_cast<uint32_t>(tensor), parts, priority, iteration);
}

void PipelineWorker::PartSummed(uint32_t tensor) {
  if (--parts_left_[tensor] > 0) return;
  const int iteration = pushing_iteration_[tensor];
  pushing_iteration_[tensor] = -1;
  if (--open_push_pulls_[iteration] == 0) open_push_pulls_.erase(iteration);
  if (deferred_[tensor] >= 0) {
    const int next = deferred_[tensor];
    deferred_[tensor] = -1;
    PushTensor(tensor, next);
  }
  Advance();
}

std::vector<double> PipelineWorker::IterationMs() const {
  std::vector<double> ms;
  for (int it = warmup_; it < total_ && it + 1 < static_cast<int>(starts_.size()); ++it) {
    ms.push_back((starts_[it + 1] - starts_[it]) / 1000.0);
  }
  return ms;
}

std::string PipelineWorker::Describe() const {
  std::string step = "at the iteration's end";
  if (next_op_ < ops_.size()) {
    const PipelineOp& op = ops_[next_op_];
    step = StrCat(op.forward ? "F(" : "B(", op.micro_batch, ")",
                  computing_ ? " computing" : " waiting for its input");
  }
  return StrCat("worker ", rank_, " (stage ", stage_, "): iteration ", iteration_, " of ", total_,
                ", ", step, ", ", unacked_, " sends unacknowledged, ", open_push_pulls_.size(),
                " iterations' push_pulls open, ", sender_.Describe());
}

}  // namespace ferry::sim
