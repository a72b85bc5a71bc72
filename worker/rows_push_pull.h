#pragma once

// RowsPushPull: the sparse rows of a tensor (Worker::PushPullRowsAsync). The caller's
// rows are packed at the call into one ROWS_PUSH per server (the server owning a row's
// first byte in the dense placement), sent when the operation starts, each with the
// next round of its (tensor, server) rows key; each server answers PUSH_ACK and
// ROWS_RESULT (the sums of the rows it got, copied to their positions in the output).
//
// Buffers: the values are copied at the call (Plan), so a push's payload is owned, never
// borrowed: sending and resending it runs no release hook that takes the lock. The
// output is written outside the lock, under a hold of the operation.
//
// Threads: Plan and Start (callers, under mu), replies (van-io), resends (the Worker's
// "sender" thread). See worker_context.h for the lock.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/operation_kind.h"
#include "worker/sequencer.h"
#include "worker/worker_context.h"
#include "worker/request_tracker.h"

namespace ferry {

class RowsPushPull : public OperationKind {
 public:
  explicit RowsPushPull(WorkerContext& ctx);

  // Packs the caller's rows into one ROWS_PUSH per server (request id and round unset).
  // Throws FerryError (kInvalidArgument) if a server's message would be too large.
  // REQUIRES: mu held; rows validated by the caller.
  // `layout` and `priority`: the operation's (new operations use the catalog's current
  // layout, Worker::NewOperation).
  std::unique_ptr<RowsPlan> Plan(const TensorInfo& t, uint32_t layout, int priority,
                                 const int64_t* rows, uint64_t num_rows, const void* values);

  void Start(const std::shared_ptr<Operation>& op) override;
  void ResendOverdue(int64_t now_ms, std::vector<std::pair<int, Message>>* out) override;
  void AbandonInFlight() override;
  std::string Describe(const Operation& op) const override;

 private:
  bool OnAck(const Message& m) override EXCLUDES(ctx_.mu);
  bool OnResult(Message&& m) override EXCLUDES(ctx_.mu);
  bool OnError(const Message& m) override EXCLUDES(ctx_.mu);
  // A ROWS_PUSH between its send and its reply.
  struct InFlight : TrackedRequest {
    std::shared_ptr<Operation> op;
    int server = 0;
    Message push;  // kept for resends: its payload is owned, never borrowed
  };

  WorkerContext& ctx_;
  RequestTracker<InFlight> in_flight_ GUARDED_BY(ctx_.mu);  // request id -> rows request
};

}  // namespace ferry
