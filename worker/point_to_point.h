#pragma once

// PointToPoint: sends and receives between workers by rank and tag (the Worker's third
// kind of operation, operation_kind.h; compare MPI's synchronous send).
//
// Wire: a worker listens on DMLC_PORT (any free port when unset; NodeInfo.port). The
// sender's Van connects to the receiver's on first use, with the lanes it opens to a
// server (the control lane, the shared-memory lane on one host, CURVE with FERRY_SECRET).
// A send is one P2P_SEND carrying the tensor's bytes without a copy, numbered per
// (receiver, tag) from 0 (Envelope.round). The receiver answers P2P_ACK twice: `arrived`
// when it holds the bytes (the sender stops resending them), then `received` (or an error)
// once a receive took them.
//
// Matching: receives from (source, tag) are numbered in call order from 0, as are sends to
// (destination, tag); receive k takes send k. So delivery keeps the order of the calls per
// (source, destination, tag), whatever order the network or a resend brings them in. A
// send and its receive must agree on dtype and element count; otherwise both fail, each
// naming the other's.
//
// Completion: a send finishes once its receive took it and ZeroMQ released its bytes;
// then the caller may reuse them. A receive finishes once its buffer holds the bytes.
// Both fail at the deadline (FERRY_OP_TIMEOUT_MS) naming the peer and what never came;
// the stall check names a peer that never made the matching call (point_to_point_label.h).
//
// Resends: a send not yet `arrived` goes again with its bytes after FERRY_RESEND_TIMEOUT_MS
// (doubling; request_tracker.h); once arrived, a header-only probe asks again for its
// `received`. The receiver answers duplicates from what it keeps per (source, tag): the
// numbers it matched and why it refused any.
//
// Buffers: an arrived send's bytes wait at the receiver until its receive comes (copied
// off the shared-memory lane, whose slots must not be kept, unless its receive already
// waits: then the one copy is from the slot into the receive's buffer, in the handler);
// what bounds them is the sender's calls, as with any eager send.
//
// Learned order: a send without a declared priority (kLearnedPriority) takes the one its
// receiver taught: each receiver numbers the tags of each source in the order its first
// receive of each was made (its need order: the first tag it asked for is 0, the next -1,
// ...), and its `received` P2P_ACK carries that number (Envelope.priority). The sender
// keeps the last number per (destination, tag), so from the second send on a channel its
// sends to one peer that wait together go in the order the receiver asked for them; before
// that, priority 0.
//
// Membership epochs (elastic training): a new epoch fails every operation; everything
// here is forgotten (AbandonInFlight), and numbering starts over.
//
// Locking: WorkerContext::mu guards every field. Copies into a receive's buffer run
// outside it, under a hold of the receive's handle (OperationTable::Hold).

#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/transport/message.h"
#include "worker/operation_kind.h"
#include "worker/request_tracker.h"
#include "worker/worker_context.h"

namespace ferry {

class PointToPoint : public OperationKind {
 public:
  // Send's `priority` for "the order the receiver taught" (above).
  static constexpr int32_t kLearnedPriority = std::numeric_limits<int32_t>::min();

  explicit PointToPoint(WorkerContext& ctx);

  // Sends `count` elements of `dtype` at `data` to worker rank `dst` under `tag`, ordered
  // by `priority` among this worker's sends (Envelope.priority; the Van's order queues put
  // every send before tensor bytes on the links they share: van.h, Links), or by the
  // learned order with kLearnedPriority. Returns at
  // once; `data` must stay unchanged until the operation finished. Throws FerryError
  // (kInvalidArgument) for a rank that is not another worker's.
  Handle Send(const void* data, uint64_t count, DataType dtype, int dst, int tag,
              int32_t priority, CompletionCallback done) EXCLUDES(ctx_.mu);
  // Receives the next send from worker rank `src` under `tag` into `data` (`count`
  // elements of `dtype`). Returns at once; `data` must live until the operation finished.
  Handle Recv(void* data, uint64_t count, DataType dtype, int src, int tag,
              CompletionCallback done) EXCLUDES(ctx_.mu);
  // A P2P_SEND that arrived on this worker's inbound socket (van-io thread).
  void OnSend(Message&& m, const Origin& origin) EXCLUDES(ctx_.mu);
  // What operation `h` waits for, if it is one of this kind's; else empty. REQUIRES:
  // ctx_.mu held (asserted: the caller names the lock through its own context).
  std::string DescribeHandle(Handle h) const;

  // Point-to-point operations are not sequenced per tensor: the Sequencer never starts
  // one, and none is an Operation record. Start and Describe(Operation) are not used.
  void Start(const std::shared_ptr<Operation>& op) override;
  std::string Describe(const Operation& op) const override;
  // Sends what is overdue itself (to workers, not servers); adds nothing to `out`.
  void ResendOverdue(int64_t now_ms, std::vector<std::pair<int, Message>>* out) override;
  void AbandonInFlight() override;

 private:
  using Channel = std::pair<int, int>;  // (peer rank, tag)
  struct OutboundSend : TrackedRequest {
    Handle handle = 0;
    Channel to;          // (destination rank, tag)
    int node = -1;       // the destination's node id
    uint32_t number = 0;  // among the sends to `to`
    const uint8_t* data = nullptr;
    uint64_t bytes = 0;
    DataType dtype = DataType::kFloat32;
    int32_t priority = 0;
    int releases_left = 0;  // payloads ZeroMQ holds
    bool received = false;  // the receive took it (or refused it: `error`)
    std::string error;
  };
  struct PostedRecv {
    Handle handle = 0;
    uint8_t* data = nullptr;
    uint64_t count = 0;
    DataType dtype = DataType::kFloat32;
  };
  struct Arrival {
    Buffer bytes;
    DataType dtype = DataType::kFloat32;
    uint64_t request = 0;
    std::string identity;  // the sender's connection on our socket
  };
  // Per (source, tag) on the receiving side.
  struct Inbound {
    uint32_t next_recv = 0;                   // the number the next receive takes
    std::map<uint32_t, PostedRecv> posted;    // receives waiting for their send
    std::map<uint32_t, Arrival> arrived;      // sends waiting for their receive
    uint32_t matched_below = 0;               // every number below it was matched
    std::set<uint32_t> matched;               // numbers matched at or above matched_below
    std::map<uint32_t, std::string> refused;  // matched numbers a receive refused, and why
    int32_t need = 1;                         // the learned order's number; 1: no receive yet
  };
  // A send and its receive, matched under the lock, carried out outside it.
  struct Match {
    PostedRecv recv;
    Arrival arrival;
    std::string error;  // non-empty: they disagree
    int32_t need = 0;   // the channel's number in the learned order
  };
  bool OnAck(const Message& m) override { (void)m; return false; }
  bool OnResult(Message&& m) override;  // P2P_ACK
  bool OnError(const Message& m) override { (void)m; return false; }

  // The node id of worker rank `rank`, or -1. Connects to it on first use.
  int ConnectTo(int rank) REQUIRES(ctx_.mu);
  Message BuildSend(uint64_t request, OutboundSend& s, bool probe) REQUIRES(ctx_.mu);
  // Finishes the send once it was received and released.
  void MaybeFinish(uint64_t request) REQUIRES(ctx_.mu);
  void NoteRelease(uint64_t request) EXCLUDES(ctx_.mu);
  // Pairs every posted receive of `in` with its arrived send.
  std::vector<Match> TakeMatches(const Channel& from, Inbound& in) REQUIRES(ctx_.mu);
  // Copies (outside the lock), answers the senders and finishes the receives.
  void Deliver(std::vector<Match> matches) EXCLUDES(ctx_.mu);
  // `need`: the channel's number in the learned order (received acks only).
  void Ack(const std::string& identity, uint64_t request, bool received, const std::string& error,
           int32_t need = 0);
  bool Matched(const Inbound& in, uint32_t number) const;

  WorkerContext& ctx_;
  RequestTracker<OutboundSend> sends_ GUARDED_BY(ctx_.mu);
  std::map<Channel, uint32_t> next_send_ GUARDED_BY(ctx_.mu);  // by (destination, tag)
  std::map<Channel, Inbound> inbound_ GUARDED_BY(ctx_.mu);     // by (source, tag)
  std::map<int, int32_t> next_need_ GUARDED_BY(ctx_.mu);       // by source: the next number
  std::map<Channel, int32_t> learned_ GUARDED_BY(ctx_.mu);     // by (destination, tag)
  std::set<int> connected_ GUARDED_BY(ctx_.mu);                // node ids
  uint64_t epoch_ GUARDED_BY(ctx_.mu) = 0;  // AbandonInFlight count: stale releases ignored
};

}  // namespace ferry
