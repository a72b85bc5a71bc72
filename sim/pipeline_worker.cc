#include "sim/pipeline_worker.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstdint>

#include "common/util/strings.h"
#include "worker/tensor_catalog.h"

namespace ferry::sim {

PipelineWorker::PipelineWorker(SimJob& job, const PipelineSpec& spec, int rank, int set,
                               std::vector<SimServer*> servers,
                               const std::vector<PipelineWorker*>& peers, PipelineRows& rows,
                               double jitter, uint64_t seed, bool step_boundary)
    : SimWorkerBase(job, rank, std::move(servers), jitter, seed),
      spec_(spec),
      stage_(rank / (job.num_workers / spec.num_stages())),
      replicas_(job.num_workers / spec.num_stages()),
      set_(set),
      layout_(&job.SetLayoutFor(set, partition_bytes_)),
      tensors_(layout_->parts.size()),
      step_boundary_(step_boundary),
      peers_(peers),
      rows_(rows),
      ops_(Schedule1F1B(stage_, spec.num_stages(), spec.micro_batches)) {
  CHECK_EQ(job.num_workers % spec.num_stages(), 0);
  CHECK_EQ(tensors_, 2 * spec.stages[stage_].tensors.size()) << "two versions";
  sender_.SetPartSummed([this](uint32_t tensor) { PartSummed(tensor); });
  rows_.SetAnswered(rank,
                    [this](size_t table) { PartSummed(static_cast<uint32_t>(tensors_ + table)); });
  const size_t collectives = tensors_ + rows_.tables();
  parts_left_.assign(collectives, 0);
  pushing_iteration_.assign(collectives, -1);
  deferred_.assign(collectives, -1);
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
    if (!SizePartitionsByTime()) return false;
    boundaries_++;
    sender_.core().Step(job_.events.now());
  }
  iteration_++;
  StartIteration();
  return true;
}

bool PipelineWorker::SizePartitionsByTime() {
  if (!job_.SizesPartitionsByTime() || boundaries_ + 1 != SimJob::kTimedBoundary) return true;
  const uint64_t bytes = job_.TimedPartitionBytes(partition_bytes_);
  if (bytes == partition_bytes_) return true;
  if (!open_push_pulls_.empty()) return false;  // WaitUntilIdleOrThrow; a sum calls again
  SetPartitionBytes(bytes);
  layout_ = &job_.SetLayoutFor(set_, bytes);
  return true;
}

void PipelineWorker::Send(bool activation, int micro_batch) {
  PipelineWorker* peer =
      peers_.at(static_cast<size_t>(rank_ + (activation ? replicas_ : -replicas_)));
  const SimTime now = job_.events.now();
  const size_t record = sends_.size();
  sends_.push_back(SendRecord{rank_, peer->rank(), iteration_, micro_batch, activation, now, 0, 0});
  unacked_++;
  const int from = job_.WorkerNode(rank_);
  const int to = job_.WorkerNode(peer->rank());
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
  const size_t tensors = tensors_ / 2;
  const size_t tables = rows_.tables();
  if (tensors + tables == 0) return;
  open_push_pulls_[iteration_] = static_cast<int>(tensors + tables);
  // The tables' rows first, as hybrid_bench.py calls them; each as urgent as its stage's
  // first tensor.
  for (size_t t = 0; t < tables; ++t) StartOrDefer(2 * tensors + t);
  const size_t first = static_cast<size_t>(iteration_ % 2) * tensors;  // this version's
  for (size_t i = first; i < first + tensors; ++i) StartOrDefer(i);
}

void PipelineWorker::StartOrDefer(size_t index) {
  if (pushing_iteration_[index] < 0) {
    Push(index, iteration_);
    return;
  }
  // Its previous one is still out: the Sequencer starts this one after it.
  CHECK_EQ(deferred_[index], -1) << "worker " << rank_ << ": collective " << index << " three deep";
  deferred_[index] = iteration_;
}

void PipelineWorker::Push(size_t index, int iteration) {
  pushing_iteration_[index] = iteration;
  if (index >= tensors_) {  // a table's rows: an answer from every server
    parts_left_[index] = job_.num_servers;
    rows_.Push(rank_, index - tensors_, partition_bytes_);
    return;
  }
  const std::vector<SimPart>& parts = layout_->parts[index];
  parts_left_[index] = static_cast<int>(parts.size());
  // The catalog's default priority: -id (declaration order), ids from the set's first.
  const uint64_t id = ProcessSetFirstId(set_) + index;
  const int priority = -static_cast<int>(std::min<uint64_t>(id, INT32_MAX));
  sender_.Push(static_cast<uint32_t>(index), parts, priority, iteration);
}

void PipelineWorker::PartSummed(uint32_t index) {
  if (--parts_left_[index] > 0) return;
  const int iteration = pushing_iteration_[index];
  pushing_iteration_[index] = -1;
  if (--open_push_pulls_[iteration] == 0) open_push_pulls_.erase(iteration);
  if (deferred_[index] >= 0) {
    const int next = deferred_[index];
    deferred_[index] = -1;
    Push(index, next);
  }
  Advance();
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
