#pragma once

// DensePushPull: the dense push_pull of a tensor. Its partitions go through the
// scheduled queue (the policy's order and credit) and out as PUSH, or several to one server
// fused into one PUSH_FUSED; each server answers PUSH_ACK (the credit comes back) and
// PUSH_RESULT (the sum, copied into the output).
//
// Who sends (SendReady): the thread that made a batch releasable sends it, with no hand-off
// to another thread: the caller right after its push_pull started (Worker::StartPushPull),
// van-io right after a reply returned credit (Worker::OnMessage; the Van transmits inline on
// its own thread), and the Worker's "sender" thread for everything else (the policy's
// timers, a new credit, an operation started by a completion) and for resends. Every
// hand-out (ScheduledQueue::TryNext) and its sends happen under send_mu_, so batches reach
// the Van in the order the queue handed them out, whichever thread sends them. Lock order:
// send_mu_, then mu, then the queue's and the Van's own locks; nothing that holds mu takes
// send_mu_. So that the sender thread does not wake for what another thread sends, Start's
// pushes and the credit the reply handlers return wake nobody (ScheduledQueue's notify =
// false): every thread that calls Start (through the Sequencer) or a reply handler calls
// SendReady once it let go of mu: callers (Worker::StartPushPull), van-io (Worker::OnMessage),
// the table's callback thread (the release drain; the Worker's completion callbacks). Were
// one missed, the sender thread would still send it at its next wake-up (at most 1 s: quiet
// changes are counted; see Sender).
//
// Buffers: a partition's payload borrows the caller's input (zero copy) until ZeroMQ's
// release hook; the operation completes only after every sum arrived AND every payload
// was released (Operation::releases_left). Copies into outputs and into fused pushes run
// outside the lock under a hold of their operation (OperationTable::Hold).
//
// Compression (push_compression.h): a compressed partition counts its wire bytes in the
// queue, goes whole and alone, and is compressed once per round when it is first sent
// (under mu), its bytes kept in InFlight::wire for resends.
//
// Frames (FERRY_FRAME_BYTES, wire protocol 3): a partition larger than the frame size goes
// as frames, each its own PUSH with the partition's request id and priority, so the Van's
// order queue can put an urgent partition's frames before the rest of a big one, and the
// server streams each frame's sum back as soon as every worker's frame is in. A frame's
// sum is copied into the output at once; the partition is answered when every frame's sum
// is in. Frames are never fused (fusion packs small whole partitions).
//
// Credit: a partition holds its credit from the queue's Next until every frame is
// acknowledged, or its sum or its error, whichever comes first (ReturnCredit, exactly
// once); each frame acknowledged before the last returns its own bytes at once
// (ScheduledQueue::ReturnPart), so the window counts frames, not whole partitions. A
// frame's sum counts as its acknowledgement (the ack may be late or lost).
//
// Resends (request_tracker.h), one timer per partition: its timer starts when ZeroMQ let
// go of the last frame sent; when it fires, the frames not yet acknowledged go again, or,
// once every frame is, a RESEND_SUM asks for the sums still missing (the server answers
// with every frame's sum it has; sums that come twice are dropped as late).
//
// Threads: Start (callers, under mu), SendReady (above), resends (the Worker's "sender"
// thread), replies (van-io), release hooks (ZeroMQ's IO thread). See worker_context.h for the lock.
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
#include "worker/push_compression.h"
#include "worker/sequencer.h"
#include "worker/worker_context.h"
#include "worker/request_tracker.h"
#include "worker/partition_scheduling/scheduled_queue.h"

namespace ferry {

class DensePushPull : public OperationKind {
 public:
  DensePushPull(WorkerContext& ctx, ScheduledQueue& queue);

  // Sends every batch the queue releases now (see "Who sends"). Any thread that does not
  // hold mu; a thread of a Van handler only for that Van's replies (van-io). Returns the
  // number of batches sent.
  int SendReady() EXCLUDES(ctx_.mu, send_mu_);

  void Start(const std::shared_ptr<Operation>& op) override;
  // A staged operation's partition `part` may go (Operation::released): queued now if the
  // operation started, else at its Start; nothing once it is done. REQUIRES: mu. The
  // caller then calls SendReady.
  void ReleasePart(const std::shared_ptr<Operation>& op, uint32_t part);
  void ResendOverdue(int64_t now_ms, std::vector<std::pair<int, Message>>* out) override;
  void AbandonInFlight() override;
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
    uint64_t frame_bytes = 0;      // the cut; 0: one message (frames == 1)
    uint32_t frames = 1;
    std::vector<bool> frame_acked;   // by frame: acknowledged (or summed)
    // The sums come in the server's cut of the round (its first frame's), which may differ
    // from this worker's (range arithmetic, server/key_state.h): `sum_cut` (0: no sum yet),
    // the pieces of it delivered, and by frame of this worker's cut the bytes of its sum in.
    uint64_t sum_cut = 0;
    std::vector<bool> sum_got;
    std::vector<uint64_t> frame_summed_bytes;
    uint32_t frames_acked = 0, frames_summed = 0;
    uint32_t unreleased = 0;       // frames of the latest send ZeroMQ holds; 0: timer runs
    Buffer wire;                   // compressed: the bytes sent (and resent); empty: raw
    int64_t ready_us = 0, sent_us = 0, acked_us = 0;  // for the trace
  };

  // Sends a batch from the queue, each task as a PUSH or, per the batch's fusion limit,
  // several to one server as one PUSH_FUSED. Takes mu.
  void SendBatch(const Batch& batch) REQUIRES(send_mu_) EXCLUDES(ctx_.mu);
  // REQUIRES: mu held. The PUSH of frame `frame` of `f` (the whole partition when it has one
  // frame) as request `request`; counts its payload in the operation's releases_left
  // (ZeroMQ holds it until the hook fires).
  Message BuildPush(const InFlight& f, uint64_t request, uint32_t frame = 0) REQUIRES(ctx_.mu);
  // The bytes of frame `frame` of `f` (the whole partition when it has one frame).
  uint64_t FrameLength(const InFlight& f, uint32_t frame) const;
  // Cuts `f` in frames per FERRY_FRAME_BYTES (sets frame_bytes, frames and the bitmaps).
  void CutFrames(InFlight& f) const REQUIRES(ctx_.mu);
  // Frame `frame` of `f` is acknowledged (its ack or its sum came); the last one returns
  // the credit and starts the wait for the sums (RequestTracker::Ack). REQUIRES: mu.
  // `by_sum`: its sum came first (no sample of the path's rate).
  void NoteFrameAcked(uint64_t request, InFlight& f, uint32_t frame, bool by_sum = false)
      REQUIRES(ctx_.mu);
  // The sum of the piece at `offset` of f's partition cut in `cut` bytes came (CheckResult
  // passed): marks the frames of f's own cut it completes (each counts as acknowledged).
  // False: that piece was delivered already (a resend's answer).
  bool NoteSum(uint64_t request, InFlight& f, uint64_t offset, uint64_t cut)
      REQUIRES(ctx_.mu);
  // Why reply `m` does not answer `f` (empty if it does): key, length, dtype, sender,
  // and a piece of a cut that nests with f's (CutsNest).
  std::string CheckResult(const InFlight& f, const Message& m) const REQUIRES(ctx_.mu);
  const PartitionSpec& PartOf(const InFlight& f) const;
  // Queues partition `part` of a started operation. REQUIRES: mu.
  void Enqueue(const std::shared_ptr<Operation>& op, uint32_t part, int64_t now_us)
      REQUIRES(ctx_.mu);
  uint64_t KeyOf(const InFlight& f) const;
  // `acked`: by the server's ack or sum (a window sample), not by an error.
  void ReturnCredit(InFlight& f, bool acked = true) REQUIRES(ctx_.mu);
  // Copies a sum (a frame of it) into op's output, averaged if asked (outside the lock,
  // under a hold of the operation). Returns why not if a compressed sum is corrupt.
  std::string Deliver(const Operation& op, const PartitionSpec& p, const Message& m);
  // What an average of `t` divides by: its process set's size, or every worker.
  int Divisor(const TensorInfo& t) const;

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
  // Held from a hand-out to its last Van::Send (see "Who sends"); taken before mu.
  Mutex send_mu_ ACQUIRED_BEFORE(ctx_.mu);
  Mutex release_mu_;  // a leaf: guards releases_ only; nothing is taken inside it
  std::vector<Release> releases_ GUARDED_BY(release_mu_);
  RequestTracker<InFlight> in_flight_ GUARDED_BY(ctx_.mu);  // request id -> partition
  std::unordered_map<uint64_t, InFlight> queued_ GUARDED_BY(ctx_.mu);  // task cookie -> partition
  uint64_t next_cookie_ GUARDED_BY(ctx_.mu) = 1;
  PushCompression compression_ GUARDED_BY(ctx_.mu);
};

}  // namespace ferry
