#pragma once

// OperationKind: the interface each kind of operation of the Worker implements
// (DensePushPull, RowsPushPull; compare Horovod's ops/collective_operations.h: one class
// per kind of operation). A kind works on Operation records (operation.h) in the
// WorkerContext (worker_context.h); the Sequencer (sequencer.h) starts them.
//
//   Worker (facade: API, catalog, handles)  --Start-->  DensePushPull / RowsPushPull
//        ^                                                 | requests to servers
//        |  FinishPartition / MaybeComplete (Sequencer)    v
//        +-------------- replies (van-io), releases (ZeroMQ), resends (sender)
//
// Locking: WorkerContext::mu (worker_context.h).
//
// OperationKinds: the Worker's kinds in one list. What concerns every kind (routing a
// server's reply, resending overdue requests, abandoning them at a new membership epoch)
// goes through the list, so a new kind is its own class plus one Add where the Worker
// builds its parts (docs/architecture.md, "Adding an operation").

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/transport/message.h"
#include "worker/operation.h"

namespace ferry {

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

class OperationKinds {
 public:
  // `result_type`: the reply type carrying the kind's results (PUSH_RESULT, ROWS_RESULT).
  // A reply is offered to the kinds in the order added; the first that claims it takes it
  // (a kind that knows its request ids goes before one that claims by key). Every Add
  // happens before the list is shared with another thread.
  void Add(OperationKind* kind, proto::MessageType result_type);
  // A reply to a request (van-io thread; each kind takes mu): false if no kind claimed it.
  bool OnReply(Message& m);
  // Every kind's overdue requests, as (server rank, message). REQUIRES: mu held.
  void ResendOverdue(int64_t now_ms, std::vector<std::pair<int, Message>>* out);
  // Every kind forgets its requests in flight (OperationKind::AbandonInFlight).
  // REQUIRES: mu held.
  void AbandonInFlight();

 private:
  std::vector<std::pair<OperationKind*, proto::MessageType>> kinds_;
};

}  // namespace ferry
