#pragma once

// What the Worker's kinds of operation share: the Operation record, the context they
// work in, and the interface each kind implements (compare Horovod's
// ops/collective_operations.h: one class per kind of operation).
//
//   Worker (facade: API, catalog, handles)  --Start-->  DensePushPull / RowsPushPull
//        ^                                                 | requests to servers
//        |  FinishPartition / MaybeComplete (Sequencer)    v
//        +-------------- replies (van-io), releases (ZeroMQ), resends (sender)
//
// Locking: one lock, WorkerContext::mu, guards the catalog, every kind's requests in
// flight, the operations' progress counters and the tensors' queues of operations.
// The kinds take it themselves on the threads that reach them (van-io for replies,
// ZeroMQ's IO thread for payload releases, callers, van-io and the sender thread for
// sends (DensePushPull::SendReady), the sender thread for resends);
// methods marked REQUIRES(mu) are called with it held. Copies of payloads run outside
// it, under a hold of the operation (OperationTable::Hold).

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/cluster/cluster_client.h"
#include "common/config/config.h"
#include "common/reduce/reduce.h"
#include "common/transport/van.h"
#include "common/util/counters.h"
#include "common/util/mutex.h"
#include "worker/operation_table.h"
#include "worker/tensor_catalog.h"
#include "worker/trace.h"
#include "worker/urgency.h"

namespace ferry {

// The counters of a Worker, in its registry: Worker::Counters() reads them (with the
// transport's "van.*"), FERRY_STATS_FILE writes them at Shutdown.
//   operations          push_pull calls          partitions_pushed  partitions sent (first sends)
//   bytes_pushed        payload bytes handed to ZeroMQ, without copy
//   bytes_received      payload bytes of sums    send_releases      ZeroMQ release hooks fired
//   payloads_lent       inputs lent to ZeroMQ without copy (a partition or a frame, first
//                       sends and resends); each one's release hook fires once
//   resends             pushes sent again (no acknowledgement in time)
//   pulls               sums asked for again (acknowledged, but no sum in time)
//   late_replies        replies to requests already answered (acks not counted)
//   late_acks           acks of requests already answered: on the control lane an ack may
//                       arrive after its sum (van.h, "Lanes"), which is no fault
//   fused_messages      PUSH_FUSED messages      partitions_fused   partitions inside them
//   frames_pushed       frames of partitions sent as frames (FERRY_FRAME_BYTES; first sends)
//   sender_thread_batches  batches of partitions the sender thread sent: let out by a policy's
//                       timer, a new credit or window, or missed by the thread that let them out
//                       (dense_push_pull.h, "Who sends"); every other batch went from the caller
//                       or van-io without a hand-off
//   redeclarations      names declared again with another dtype or size (tensor_catalog.h)
//   partitions_staged   partitions of staged push_pulls released (the device path's: each
//                       copied to pinned memory; Worker::ReleasePartition)
//   rows_operations     PushPullRows calls       rows_pushed        rows they listed
//   rows_bytes_pushed   ROWS_PUSH payload bytes (first sends)
//   rows_bytes_received ROWS_RESULT payload bytes
struct WorkerCounters {
  CounterRegistry registry;
  Counter& operations = registry.Register("operations");
  Counter& partitions_pushed = registry.Register("partitions_pushed");
  Counter& bytes_pushed = registry.Register("bytes_pushed");
  Counter& bytes_received = registry.Register("bytes_received");
  Counter& send_releases = registry.Register("send_releases");
  Counter& payloads_lent = registry.Register("payloads_lent");
  Counter& resends = registry.Register("resends");
  Counter& pulls = registry.Register("pulls");
  Counter& late_replies = registry.Register("late_replies");
  Counter& late_acks = registry.Register("late_acks");
  Counter& fused_messages = registry.Register("fused_messages");
  Counter& partitions_fused = registry.Register("partitions_fused");
  Counter& frames_pushed = registry.Register("frames_pushed");
  Counter& sender_thread_batches = registry.Register("sender_thread_batches");
  Counter& redeclarations = registry.Register("redeclarations");
  Counter& partitions_staged = registry.Register("partitions_staged");
  Counter& rows_operations = registry.Register("rows_operations");
  Counter& rows_pushed = registry.Register("rows_pushed");
  Counter& rows_bytes_pushed = registry.Register("rows_bytes_pushed");
  Counter& rows_bytes_received = registry.Register("rows_bytes_received");
  // From a server's hand-off of a reply (Envelope.sent_us, its wall clock) to its arrival
  // here, in microseconds: acks and errors, and sums. Exact where the nodes share a clock
  // (one host, the emulated clusters); across hosts only as good as their clock sync.
  Histogram& ack_delay_us = registry.RegisterHistogram("ack_delay_us");
  Histogram& sum_delay_us = registry.RegisterHistogram("sum_delay_us");
  // Live metrics (common/metrics/series.h), in microseconds: how long an urgent partition
  // (`urgency`) waited in the send queue (ready to sent), each partition's round (its push
  // sent to its sum received), and the iterations between step boundaries.
  Histogram& urgent_queue_delay_us = registry.RegisterHistogram("urgent_queue_delay_us");
  Histogram& partition_round_us = registry.RegisterHistogram("partition_round_us");
  Histogram& iteration_us = registry.RegisterHistogram("iteration_us");
  UrgencyThreshold urgency;  // learns from every partition started
  // By server slot: push bytes handed to the Van (first sends and resends) and reply bytes
  // that arrived (late and duplicate sums too), dense and rows: what the servers count as
  // received and sent. The Worker sizes it.
  PeerBytes servers;
};

// Sparse rows of one operation (RowsPushPull), fixed at the call.
struct RowsPlan {
  uint64_t row_elements = 0;
  uint64_t row_bytes = 0;
  std::vector<Message> pushes;  // by server rank, built at the call; sent at the start
  // By server rank: for each row its push carries, the row's index in the caller's list
  // (where its sum goes in `output`). Read without the lock.
  std::vector<std::vector<uint64_t>> positions;
};

// One push_pull (dense or rows) of one tensor, from the call until it finished.
struct Operation {
  Handle handle = 0;  // in the Worker's OperationTable
  std::shared_ptr<TensorInfo> tensor;  // its declaration: held until the operation is gone
  const uint8_t* input = nullptr;
  uint8_t* output = nullptr;
  bool average = false;
  ReduceOp reduce = ReduceOp::kSum;  // dense push_pull: how the servers combine the pushes
  int priority = 0;
  uint32_t layout = 0;    // the layout generation its partitions use
  int replies_left = 0;   // partitions (rows: servers) whose answer has not arrived
  int releases_left = 0;  // payloads handed to ZeroMQ and not yet released (resends add)
  bool started = false;
  bool done = false;  // no more writes to `output`; finished in the table
  std::unique_ptr<RowsPlan> rows;  // sparse rows; null for a dense push_pull
  // A staged input (the device path, worker/device/device_staging.h): partition i may be
  // sent only once released[i] (its bytes are in `input`; Worker::ReleasePartition).
  // Empty: every partition is ready at Start.
  std::vector<bool> released;
  uint32_t releases_pending = 0;  // partitions not yet released
  // Optional: called with a partition's index once its whole sum is in `output` (on the
  // thread that delivered it, outside the lock, while the operation is held: its
  // completion, a failure's included, waits until this returns). Must not block.
  std::function<void(uint32_t part)> part_summed;
};

class Sequencer;

// What a kind of operation works with; owned by the Worker, valid for its lifetime.
struct WorkerContext {
  const Config& config;
  Van& van;
  ClusterClient& cluster;
  OperationTable& table;
  WorkerCounters& counters;
  Trace* trace = nullptr;  // FERRY_TRACE_DIR; null when off
  Mutex& mu;               // see the file comment
  Sequencer* sequencer = nullptr;
  int my_id = -1;
  std::atomic<int> num_workers{0};  // this epoch's (Worker::Reset changes it)
  int num_servers = 0;              // server slots (ids), live or not: live_servers
  uint64_t next_request GUARDED_BY(mu) = 1;  // request ids, shared by every kind
  // The membership epoch of the operations started from now on (elastic training:
  // Worker::Reset() moves it to the cluster's). Every data-plane message is stamped with it
  // when it is built (NewMessage). A message built while the epoch is E belongs to an
  // operation of E: a new epoch fails every operation, and drops what was in flight,
  // before Reset() moves the epoch (Worker::OnMembership), and an operation failed while
  // queued is never sent. So a message of an abandoned operation never counts in a newer
  // epoch's round.
  std::atomic<uint32_t> epoch{0};
  // A message of `type` from this worker, stamped with the current epoch.
  Message NewMessage(proto::MessageType type) const;
  // The frame size of pushes sent from now on (FERRY_FRAME_BYTES; autotune changes it
  // between operations, as it changes the partition size); 0: whole partitions.
  uint64_t frame_bytes GUARDED_BY(mu) = 0;
  std::string failure GUARDED_BY(mu) = {};   // non-empty: the job failed; every call throws it
  // kPeerFailed (for good), or kMembershipChanged (elastic: until Worker::Reset()).
  ErrorCode failure_code GUARDED_BY(mu) = ErrorCode::kPeerFailed;
  // Server slots (by rank) that have a live server in this worker's epoch: the ones its
  // per-server messages (rows pushes, JOIN, RETIRE) go to. All of them without elasticity.
  std::vector<bool> live_servers GUARDED_BY(mu) = {};
  bool shut_down GUARDED_BY(mu) = false;     // Shutdown() began: no new operations
  void NoteLateReply(const Message& m);
  // Throws the job's failure, if any. REQUIRES: mu.
  void ThrowIfFailed() const;
  // Throws unless new operations may start (no failure, no shutdown); `what` of tensor
  // `name` names the refused call. REQUIRES: mu.
  void CheckRunning(const char* what, const std::string& name) const;
};

class OperationKind {
 public:
  virtual ~OperationKind() = default;
  // Sends (or queues) the operation's requests. REQUIRES: mu held (implementations
  // assert it: the interface cannot name the lock).
  virtual void Start(const std::shared_ptr<Operation>& op) = 0;
  // A reply to a request of this kind (van-io thread; takes mu), by type: PUSH_ACK to
  // OnAck, `result_type` (PUSH_RESULT, ROWS_RESULT) to OnResult (which may take `m`'s
  // payload), ERROR to OnError. False: not ours (`m` is untouched), for the next kind.
  bool OnReply(Message& m, proto::MessageType result_type);
  // Sender thread, resends on: what to send again, as (server rank, message).
  // REQUIRES: mu held.
  virtual void ResendOverdue(int64_t now_ms, std::vector<std::pair<int, Message>>* out) = 0;
  // Elastic training: a new membership epoch failed every operation (Sequencer::FailAll);
  // forgets every request in flight (no resend, late replies dropped) and gives back
  // the scheduling credit they held. REQUIRES: mu held.
  virtual void AbandonInFlight() = 0;
  // What the unfinished operation waits for, for a timeout. REQUIRES: mu held.
  virtual std::string Describe(const Operation& op) const = 0;

 private:
  // OnReply by type; each returns false if the request is not one of this kind's.
  virtual bool OnAck(const Message& m) = 0;
  virtual bool OnResult(Message&& m) = 0;
  virtual bool OnError(const Message& m) = 0;
};

// The operations of each tensor run one at a time, in call order. Methods marked
// "REQUIRES: mu" are called by other objects holding WorkerContext::mu (the analysis
// cannot see that it is theirs), so they assert it (Mutex::AssertHeld checks the owner).
//
// Declarations (tensor_catalog.h, "Re-declarations"): operations queue by declaration
// (tensor id), so a re-declared name's new operations do not wait for the old
// declaration's. When the last operation of a superseded declaration is done, the
// sequencer retires it from the catalog and, unless an operation of it ever ended with
// requests still on the way to or from a server, or refused by one (TensorInfo::
// requests_out: `tell_servers` would race such a request, which the servers would see
// after they dropped the keys), tells the servers through `tell_servers(id)`.
// An operation a server refused undoes its declaration (TensorCatalog::Undeclare), so
// workers that disagreed on it agree again on the placement of later tensors. That is
// the same on every worker when the program waits for the refused operation before it
// declares another tensor, as a program that sees the error does.
class Sequencer {
 public:
  Sequencer(WorkerContext& ctx, TensorCatalog& catalog,
            std::function<void(uint32_t tensor_id)> tell_servers)
      : ctx_(ctx), catalog_(catalog), tell_servers_(std::move(tell_servers)) {}
  // `t` was superseded (TensorCatalog::Declare): retires it now if no operation of it is
  // queued, else its last operation will. REQUIRES: mu.
  void Superseded(const std::shared_ptr<TensorInfo>& t);
  // Queues `op` behind its tensor's earlier operations; starts it if none. REQUIRES: mu.
  void Submit(const std::shared_ptr<Operation>& op, OperationKind& kind);
  // One partition (rows: one server) of `op` was answered (`error` empty) or failed.
  // Takes mu.
  void FinishPartition(const std::shared_ptr<Operation>& op, const std::string& error)
      EXCLUDES(ctx_.mu);
  // Finishes `op` if every answer came and ZeroMQ released every payload. REQUIRES: mu.
  void MaybeComplete(const std::shared_ptr<Operation>& op);
  // Every unfinished operation is done (the table failed them). REQUIRES: mu.
  void FailAll();
  // Elastic training (Worker::Reset): forgets every operation, all done (FailAll ran);
  // the next operation of each tensor starts at once. REQUIRES: mu.
  void Reset();
  // `op` failed outside the protocol (its deadline passed): it is done, and the next
  // operation of its tensor starts. REQUIRES: mu.
  void Abandon(const std::shared_ptr<Operation>& op);
  // What the unfinished operation with `handle` waits for (its kind's Describe), for a
  // timeout message. REQUIRES: mu.
  std::string Describe(Handle handle) const;
  // True while any operation is unfinished. REQUIRES: mu.
  bool AnyUnfinished() const;
  // Waits (FERRY_OP_TIMEOUT_MS, letting go of mu meanwhile) until no operation is
  // unfinished, including those nobody waits for; false on timeout. Throws the job's
  // failure. REQUIRES: mu.
  bool WaitUntilIdle();
  // The same, throwing a timeout that names `what`. REQUIRES: mu.
  void WaitUntilIdleOrThrow(const char* what);

 private:
  struct Queued {
    std::shared_ptr<Operation> op;
    OperationKind* kind;
  };
  // Starts the tensor's next operation.
  void Pop(const std::shared_ptr<Operation>& op) REQUIRES(ctx_.mu);
  // Retires a superseded declaration with no operation queued; tells the servers unless
  // t.requests_out (see above).
  void Retire(const TensorInfo& t) REQUIRES(ctx_.mu);
  WorkerContext& ctx_;
  TensorCatalog& catalog_;  // PT_GUARDED_BY(ctx_.mu)
  const std::function<void(uint32_t)> tell_servers_;
  // By tensor id, only ids with operations queued; front is the running one.
  std::map<uint32_t, std::deque<Queued>> pending_ GUARDED_BY(ctx_.mu);
};

}  // namespace ferry
