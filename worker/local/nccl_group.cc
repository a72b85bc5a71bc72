// NcclGroup's book of rounds and its thread's loop: see nccl_group.h and local_nccl.h.

#include "worker/local/nccl_group.h"

#include <glog/logging.h>
#include <pthread.h>
#include <unistd.h>

#include "common/util/clock.h"
#include "common/util/status.h"
#include "worker/local/nccl_calls.h"

namespace ferry {

NcclGroup::NcclGroup(int local_rank, int local_size, int64_t op_timeout_ms, int average_over,
                     MachinePushPull push_pull, SendStep send_step, OnFailure on_failure)
    : local_rank_(local_rank),
      local_size_(local_size),
      op_timeout_ms_(op_timeout_ms),
      average_over_(average_over),
      push_pull_(std::move(push_pull)),
      send_step_(std::move(send_step)),
      on_failure_(std::move(on_failure)) {
  thread_ = std::thread([this] { Loop(); });
}

NcclGroup::~NcclGroup() {
  Stop();
  // The thread is gone and the owner stopped the machine push_pulls (local_nccl.h):
  // the communicator and buffers are ours. Abort, not destroy: it never waits for the
  // other ranks.
  if (comm_ != nullptr) ncclCommAbort(comm_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  for (const Pinned& b : pinned_) cudaFreeHost(b.data);
  for (auto& [ticket, item] : items_) {
    if (item.ready != nullptr) cudaEventDestroy(item.ready);
  }
}

void NcclGroup::Stop() {
  {
    MutexLock lock(mu_);
    if (!stopping_) FailLocked(StrCat(Me(), ": the group shut down"));
    stopping_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

uint64_t NcclGroup::Submit(const DeviceTensor& t) {
  const int device = CheckTensor(t, Me());
  cudaEvent_t ready = RecordReady(t, device, Me());
  MutexLock lock(mu_);
  if (!failure_.empty()) {
    cudaEventDestroy(ready);
    throw FerryError(ErrorCode::kPeerFailed, failure_);
  }
  if (device_ < 0) device_ = device;
  if (device != device_) {
    cudaEventDestroy(ready);
    throw FerryError(ErrorCode::kInvalidArgument,
                     StrCat(Me(), ": push_pull of '", t.name, "' on GPU ", device,
                            ", but this process's earlier device tensors were on GPU ", device_,
                            " (one GPU per local rank)"));
  }
  const uint64_t ticket = next_ticket_++;
  Item& item = items_[ticket];
  item.t = t;
  item.ready = ready;
  item.progress_ms = NowMs();
  queued_[t.name].push_back(ticket);
  return ticket;
}

void NcclGroup::Go(const std::string& name) {
  MutexLock lock(mu_);
  const uint64_t ticket = TakeLocked(queued_, name, "GO");
  if (ticket == 0) return;
  runnable_.push_back(ticket);
  cv_.NotifyAll();
}

void NcclGroup::RunStep(Step step, const std::string& name, uint64_t seq,
                        const std::string& unique_id) {
  MutexLock lock(mu_);
  if (!failure_.empty()) return;  // every tensor failed with it
  if (step == Step::kReduce) {
    if (seq != reduces_ + 1) {
      FailLocked(StrCat(Me(), ": REDUCE number ", seq, " of device tensor '", name,
                        "' after REDUCE ", reduces_, ": a step message was lost"));
      return;
    }
    const uint64_t ticket = TakeLocked(queued_, name, "REDUCE");
    if (ticket == 0) return;
    reduces_ = seq;
    items_[ticket].reduce_seq = seq;
    reducing_[seq] = ticket;
    Work& w = steps_.emplace_back();
    w.ticket = ticket;
    w.unique_id = unique_id;
  } else {
    auto it = reducing_.find(seq);
    if (it == reducing_.end() || items_[it->second].t.name != name) {
      FailLocked(
          StrCat(Me(), ": BROADCAST of device tensor '", name, "' for REDUCE ", seq, ", which ",
                 it == reducing_.end() ? "this process did not run" : "was another tensor's"));
      return;
    }
    steps_.emplace_back().ticket = it->second;
    steps_.back().step = Step::kBroadcast;
    reducing_.erase(it);
  }
  cv_.NotifyAll();
}

void NcclGroup::Wait(uint64_t ticket) {
  MutexLock lock(mu_);
  auto it = items_.find(ticket);
  FERRY_ENFORCE(it != items_.end(), ErrorCode::kInvalidArgument, "unknown device ticket ", ticket);
  Item& item = it->second;
  // The thread's own deadlines (each step, FERRY_OP_TIMEOUT_MS; the Worker's for the
  // machine's push_pull) end a started round first; this one ends a round without a GO
  // (a local rank that does not call), or one the thread does not get to.
  while (item.stage != Stage::kDone) {
    const int64_t deadline = item.progress_ms + (item.go ? 3 : 1) * op_timeout_ms_;
    if (NowMs() >= deadline) {
      const std::string why = TimeOutLocked(it);
      lock.Unlock();
      on_failure_(why);  // without mu_: the owner's Fail calls ours
      throw FerryError(ErrorCode::kTimeout, why);
    }
    cv_.WaitForOnce(mu_, Millis(deadline - NowMs()));
  }
  const std::string error = item.error;
  Erase(it);
  if (!error.empty()) throw FerryError(ErrorCode::kPeerFailed, error);
}

// Wait's deadline passed: fails the backend with what the round waited for, and returns
// that once the thread is done with the round.
std::string NcclGroup::TimeOutLocked(std::map<uint64_t, Item>::iterator it) {
  const Item& item = it->second;
  const std::string why =
      !item.go ? StrCat(Me(), ": push_pull of device tensor '", item.t.name,
                        "' did not start within ", op_timeout_ms_,
                        " ms (FERRY_OP_TIMEOUT_MS): the local root starts a round once "
                        "every local rank has called it")
               : StrCat(Me(), ": push_pull of device tensor '", item.t.name,
                        "' made no progress within ", 3 * op_timeout_ms_,
                        " ms (3 x FERRY_OP_TIMEOUT_MS), ", StateOf(item));
  FailLocked(why);
  // The step the thread runs ends at its next poll of failure_: wait for it, so that
  // no CUDA work on this caller's buffers or event comes after the return.
  cv_.Wait(mu_, [&]() REQUIRES(mu_) { return it->second.stage == Stage::kDone; });
  Erase(it);
  return why;
}

void NcclGroup::Fail(const std::string& reason) {
  MutexLock lock(mu_);
  FailLocked(reason);
}

std::string NcclGroup::Me() const {
  return StrCat("NCCL backend of local rank ", local_rank_, " (pid ", getpid(), ")");
}

// The oldest ticket of `name` in `from`, marked started; 0 (and the backend failed,
// naming it) when there is none.
uint64_t NcclGroup::TakeLocked(Queues& from, const std::string& name, const char* what) {
  if (!failure_.empty()) return 0;  // every tensor failed with it
  auto it = from.find(name);
  if (it == from.end() || it->second.empty()) {
    FailLocked(StrCat(Me(), ": ", what, " for device tensor '", name,
                      "', which this process has no round of to run"));
    return 0;
  }
  const uint64_t ticket = it->second.front();
  it->second.pop_front();
  if (it->second.empty()) from.erase(it);
  Item& item = items_[ticket];
  item.progress_ms = NowMs();
  item.go = true;
  return ticket;
}

void NcclGroup::Erase(std::map<uint64_t, Item>::iterator it) {
  if (it->second.ready != nullptr) cudaEventDestroy(it->second.ready);
  items_.erase(it);
}

// The running step notices failure_ at its next poll and aborts; its round ends when the
// thread is done with it (Loop).
void NcclGroup::FailLocked(const std::string& reason) {
  if (!failure_.empty()) return;
  failure_ = reason;
  for (auto& [ticket, item] : items_) {
    if (item.stage != Stage::kDone && ticket != running_) {
      item.stage = Stage::kDone;
      item.error = reason;
    }
  }
  queued_.clear();
  reducing_.clear();
  runnable_.clear();
  summed_.clear();
  steps_.clear();
  cv_.NotifyAll();
}

// The Worker's completion thread: the machine's sum of `ticket` is in its host buffer.
void NcclGroup::OnSummed(uint64_t ticket, const std::string& error) {
  MutexLock lock(mu_);
  auto it = items_.find(ticket);
  if (stopping_ || it == items_.end() || it->second.stage == Stage::kDone) return;
  it->second.sum_error = error;
  it->second.progress_ms = NowMs();
  summed_.push_back(ticket);
  cv_.NotifyAll();
}

// Where a started round is, for a timeout's message.
std::string NcclGroup::StateOf(const Item& item) const {
  if (item.stage == Stage::kQueued) return "queued behind earlier rounds";
  if (local_rank_ != 0) return "reduced, waiting for the local root's BROADCAST";
  return "reduced, waiting for the machine's push_pull through the servers";
}

// Throws the backend's failure, if any: before a step queues CUDA work.
void NcclGroup::ThrowIfFailed() {
  MutexLock lock(mu_);
  if (!failure_.empty()) throw FerryError(ErrorCode::kPeerFailed, failure_);
}

// The root: a summed round's BROADCAST first (it frees a caller), else the next GO's
// REDUCE; a peer: the root's next step.
bool NcclGroup::HasWorkLocked() const {
  return local_rank_ == 0 ? !summed_.empty() || !runnable_.empty() : !steps_.empty();
}

NcclGroup::Work NcclGroup::TakeWorkLocked() {
  Work w;
  if (local_rank_ != 0) {
    w = std::move(steps_.front());
    steps_.pop_front();
  } else if (!summed_.empty()) {
    w.step = Step::kBroadcast;
    w.ticket = summed_.front();
    summed_.pop_front();
  } else {
    w.step = Step::kReduce;
    w.ticket = runnable_.front();
    runnable_.pop_front();
  }
  running_ = w.ticket;
  w.item = items_.at(w.ticket);
  return w;
}

// The "ferry-nccl" thread: runs the steps (local_nccl.h, step 3).
void NcclGroup::Loop() {
  pthread_setname_np(pthread_self(), "ferry-nccl");
  for (;;) {
    Work w;
    {
      MutexLock lock(mu_);
      cv_.Wait(mu_, [&]() REQUIRES(mu_) { return stopping_ || HasWorkLocked(); });
      if (stopping_) return;
      w = TakeWorkLocked();
    }
    std::string error = RunWork(w);
    // Before the round ends (its Wait returns and the caller may reuse its buffers), the
    // step's CUDA work must be over: a failed step may have left a kernel waiting for
    // another rank and copies queued behind it.
    if (!error.empty()) AbortAndDrain();
    const bool first = FinishWork(w, &error);
    if (error.empty()) continue;
    AbortAndDrain();  // a step that ran into the failure: the communicator goes too
    if (first) {
      LOG(ERROR) << error;
      on_failure_(error);
    }
    MutexLock lock(mu_);
    cv_.Wait(mu_, [&]() REQUIRES(mu_) { return stopping_; });  // every later round fails at once
    return;
  }
}

// One step; "" or its error.
std::string NcclGroup::RunWork(const Work& w) {
  try {
    if (w.step == Step::kReduce) {
      Reduce(w);
    } else {
      Broadcast(w);
    }
  } catch (const FerryError& e) {
    return e.what();
  }
  return "";
}

// The step of `w` ended with `error` (""): its round moves on, or fails and with it the
// backend (`error` becomes the backend's failure if the step ran into one). Returns
// whether this failure is the backend's first: the owner must hear of it.
bool NcclGroup::FinishWork(const Work& w, std::string* error) {
  MutexLock lock(mu_);
  running_ = 0;
  const bool first = !error->empty() && failure_.empty();
  if (error->empty() && !failure_.empty()) *error = failure_;  // it ran into the failure
  auto it = items_.find(w.ticket);
  if (it != items_.end() && it->second.stage != Stage::kDone) {
    it->second.stage =
        !error->empty() || w.step == Step::kBroadcast ? Stage::kDone : Stage::kReduced;
    it->second.error = *error;
  }
  if (!error->empty()) FailLocked(*error);
  cv_.NotifyAll();
  return first;
}

// A step of a round is done: the deadlines of the started rounds move on, and on a peer
// those of the queued ones too (their REDUCE may wait behind the root's other steps).
void NcclGroup::Touch() {
  MutexLock lock(mu_);
  for (auto& [ticket, item] : items_) {
    if ((item.go || local_rank_ != 0) && item.stage != Stage::kDone) {
      item.progress_ms = NowMs();
    }
  }
}

void NcclGroup::CheckDeadline(int64_t deadline, const std::string& what) {
  {
    MutexLock lock(mu_);
    if (!failure_.empty()) throw FerryError(ErrorCode::kPeerFailed, failure_);
  }
  if (NowMs() < deadline) return;
  throw FerryError(ErrorCode::kTimeout,
                   StrCat(Me(), ": ", what, " did not finish by its deadline (FERRY_OP_TIMEOUT_MS=",
                          op_timeout_ms_, " ms); is every local rank alive and calling?"));
}

}  // namespace ferry
