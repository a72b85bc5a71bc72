#pragma once

// DensePushPull: the dense push_pull of a tensor. Its partitions go through the
// scheduled queue (the policy's order and credit), out of the sender thread as PUSH, or
// several to one server fused into one PUSH_FUSED; each server answers PUSH_ACK (the
// credit comes back) and PUSH_RESULT (the sum, copied into the output).
//
// Buffers: a partition's payload borrows the caller's input (zero copy) until ZeroMQ's
// release hook; the operation completes only after every sum arrived AND every payload
// was released (Operation::releases_left). Copies into outputs and into fused pushes run
// outside the lock under a hold of their operation (OperationTable::Hold).
//
// Credit: a partition holds its credit from the queue's Next until its acknowledgement,
// its sum or its error, whichever comes first (ReturnCredit, exactly once).
//
// Threads: Start (callers, under mu), SendBatch and resends (the Worker's "sender" thread), replies
// (van-io), release hooks (ZeroMQ's IO thread). See operation_kind.h for the lock.
//
// Release hooks take no lock of the Worker: ZeroMQ's IO thread moves every socket's bytes
// and must never wait for a caller or a reply handler. A hook only notes its release in
// the inbox (releases_, under its own leaf lock release_mu_) and, when the inbox was
// empty, posts a drain to the table's callback thread. The drain applies the releases
// under mu (the resend timer starts: RequestTracker::OnWire; releases_left goes down;
// the operation may complete). The reply handlers drain first too, so an operation whose
// payloads were released before its last sum arrived completes in that handler.

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "worker/operation_kind.h"
#include "worker/request_tracker.h"
#include "worker/scheduling/scheduled_queue.h"

namespace ferry {

class DensePushPull : public OperationKind {
 public:
  DensePushPull(WorkerContext& ctx, ScheduledQueue& queue);

  // Sender thread: sends a batch from the queue, each task as a PUSH or, per the
  // batch's fusion limit, several to one server as one PUSH_FUSED. Takes mu.
  void SendBatch(const Batch& batch) EXCLUDES(ctx_.mu);

  void Start(const std::shared_ptr<Operation>& op) override;
  void ResendOverdue(int64_t now_ms, std::vector<std::pair<int, Message>>* out) override;
  std::string Describe(const Operation& op) const override;

 private:
  bool OnAck(const Message& m) override EXCLUDES(ctx_.mu);
  bool OnResult(Message&& m) override EXCLUDES(ctx_.mu);
  bool OnError(const Message& m) override EXCLUDES(ctx_.mu);
  // A partition between the queue and its reply.
  struct InFlight : TrackedRequest {
    std::shared_ptr<Operation> op;
    uint32_t part = 0;
    PushTask task;                 // as queued: its credit is returned with it
    uint32_t round = 0;            // the key's round this push belongs to
    bool credit_returned = false;  // the server acknowledged the push (or answered it)
    bool fused = false;            // first sent inside a PUSH_FUSED
    int64_t ready_us = 0, sent_us = 0, acked_us = 0;  // for the trace
  };

  // REQUIRES: mu held. The PUSH of `f` as request `request`; counts its payload in the
  // operation's releases_left (ZeroMQ holds it until the hook fires).
  Message BuildPush(const InFlight& f, uint64_t request) REQUIRES(ctx_.mu);
  const PartitionSpec& PartOf(const InFlight& f) const;
  uint64_t KeyOf(const InFlight& f) const;
  void ReturnCredit(InFlight& f) REQUIRES(ctx_.mu);
  // Copies a sum into the output (outside the lock, under a hold of the operation).
  void Deliver(const InFlight& f, const PartitionSpec& p, const Message& m);

  // A payload ZeroMQ let go of: a partition's borrowed input (`op` set: it counts in
  // releases_left) or a fused copy (`requests`: the parts it carried).
  struct Release {
    std::shared_ptr<Operation> op;
    uint64_t request = 0;
    std::vector<uint64_t> requests;
  };
  // ZeroMQ's IO thread (or whichever thread drops a payload): notes `r`. Takes release_mu_.
  void NoteRelease(Release r) EXCLUDES(release_mu_);
  // Applies the releases noted so far. REQUIRES: mu.
  void DrainReleases() REQUIRES(ctx_.mu) EXCLUDES(release_mu_);

  WorkerContext& ctx_;
  ScheduledQueue& queue_;
  Mutex release_mu_;  // a leaf: guards releases_ only; nothing is taken inside it
  std::vector<Release> releases_ GUARDED_BY(release_mu_);
  RequestTracker<InFlight> in_flight_ GUARDED_BY(ctx_.mu);  // request id -> partition
  std::unordered_map<uint64_t, InFlight> queued_ GUARDED_BY(ctx_.mu);  // task cookie -> partition
  uint64_t next_cookie_ GUARDED_BY(ctx_.mu) = 1;
};

}  // namespace ferry
