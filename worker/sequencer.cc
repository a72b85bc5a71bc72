#include "worker/sequencer.h"

#include <glog/logging.h>

#include "common/types/process_set.h"
#include "common/util/clock.h"
#include "common/util/status.h"
#include "common/util/strings.h"

namespace ferry {

void Sequencer::Submit(const std::shared_ptr<Operation>& op, OperationKind& kind) {
  ctx_.mu.AssertHeld();
  auto& q = pending_[op->tensor->id];
  q.push_back(Queued{op, &kind});
  if (q.size() == 1) {
    op->started = true;
    kind.Start(op);
  }
}

void Sequencer::Pop(const std::shared_ptr<Operation>& op) {
  auto it = pending_.find(op->tensor->id);
  if (it == pending_.end() || it->second.front().op != op) return;
  auto& q = it->second;
  q.pop_front();
  if (op->replies_left > 0 || op->releases_left > 0) op->tensor->requests_out = true;
  if (q.empty()) {
    pending_.erase(it);
    if (op->tensor->superseded) Retire(*op->tensor);
    return;
  }
  Queued& next = q.front();
  next.op->started = true;
  next.kind->Start(next.op);  // REQUIRES(ctx_.mu), asserted there
}

void Sequencer::FinishPartition(const std::shared_ptr<Operation>& op, const std::string& error) {
  MutexLock lock(ctx_.mu);
  op->replies_left--;
  if (!error.empty() && !op->done) {
    LOG(ERROR) << error;
    op->done = true;
    ctx_.table.Finish(op->handle, Verdict{ErrorCode::kMismatch, error});
    op->tensor->requests_out = true;  // refused: its keys failed there (sequencer.h)
    catalog_of_(op->tensor->id).Undeclare(*op->tensor);
    Pop(op);
    return;
  }
  MaybeComplete(op);
}

void Sequencer::MaybeComplete(const std::shared_ptr<Operation>& op) {
  ctx_.mu.AssertHeld();
  if (op->done || op->replies_left > 0 || op->releases_left > 0) return;
  op->done = true;
  auto it = pending_.find(op->tensor->id);
  CHECK(it != pending_.end() && it->second.front().op == op)
      << "operations of a tensor out of order";
  op->tensor->last_left_out = op->left_out;
  MergeMask(&ctx_.step_left_out, op->left_out);
  ctx_.table.Finish(op->handle, Verdict{});
  Pop(op);
}

void Sequencer::Abandon(const std::shared_ptr<Operation>& op) {
  ctx_.mu.AssertHeld();
  if (op->done) return;
  op->done = true;
  Pop(op);
}

void Sequencer::Superseded(const std::shared_ptr<TensorInfo>& t) {
  ctx_.mu.AssertHeld();
  if (!pending_.count(t->id)) Retire(*t);
}

void Sequencer::Retire(const TensorInfo& t) {
  const bool quiet = !t.requests_out;
  const uint32_t id = t.id;
  VLOG(1) << "tensor '" << t.name << "' id " << id << " retired"
          << (quiet ? "" : " (a request of it is still out: the servers keep its keys)");
  catalog_of_(id).Retire(id);  // `t` may be gone now
  if (quiet) tell_servers_(id);
}

void Sequencer::FailAll() {
  ctx_.mu.AssertHeld();
  for (auto& [id, q] : pending_) {
    for (Queued& e : q) e.op->done = true;
  }
}

void Sequencer::Reset() {
  ctx_.mu.AssertHeld();
  for (auto& [id, q] : pending_) {
    for (Queued& e : q) CHECK(e.op->done) << "Sequencer::Reset with an operation running";
  }
  pending_.clear();
}

std::string Sequencer::Describe(Handle handle) const {
  ctx_.mu.AssertHeld();
  for (const auto& [id, q] : pending_) {
    for (const Queued& e : q) {
      if (e.op->handle == handle) return e.kind->Describe(*e.op);
    }
  }
  return StrCat("operation ", handle, " (finished; a copy of its data is still running)");
}

bool Sequencer::AnyUnfinished() const {
  ctx_.mu.AssertHeld();
  for (const auto& [id, q] : pending_) {
    for (const Queued& e : q) {
      if (!e.op->done) return true;
    }
  }
  return false;
}

bool Sequencer::WaitUntilIdle() {
  ctx_.mu.AssertHeld();
  const int64_t deadline = NowMs() + ctx_.config.cluster.op_timeout_ms;
  while (ctx_.failure.empty() && AnyUnfinished()) {
    const int64_t left = deadline - NowMs();
    if (left <= 0) return false;
    MutexUnlock unlocked(ctx_.mu);  // the operations finish under mu
    ctx_.table.WaitAll(left);
  }
  ctx_.ThrowIfFailed();
  return true;
}

void Sequencer::WaitUntilIdleOrThrow(const char* what) {
  FERRY_ENFORCE(WaitUntilIdle(), ErrorCode::kTimeout, what, ": this worker's ",
                "push_pulls did not finish within ", ctx_.config.cluster.op_timeout_ms,
                " ms (FERRY_OP_TIMEOUT_MS)");
}

}  // namespace ferry
