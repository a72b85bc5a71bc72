#pragma once

// Sequencer: the operations of each tensor, one at a time, in call order.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/util/mutex.h"
#include "worker/operation.h"
#include "worker/operation_kind.h"
#include "worker/tensor_catalog.h"
#include "worker/worker_context.h"

namespace ferry {

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
  // `catalog_of(id)`: the catalog holding declaration `id` (the global set's, or a process
  // set's: Worker::CatalogOfId).
  Sequencer(WorkerContext& ctx, std::function<TensorCatalog&(uint32_t id)> catalog_of,
            std::function<void(uint32_t tensor_id)> tell_servers)
      : ctx_(ctx), catalog_of_(std::move(catalog_of)), tell_servers_(std::move(tell_servers)) {}
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
  std::function<TensorCatalog&(uint32_t id)> catalog_of_;  // PT_GUARDED_BY(ctx_.mu)
  const std::function<void(uint32_t)> tell_servers_;
  // By tensor id, only ids with operations queued; front is the running one.
  std::map<uint32_t, std::deque<Queued>> pending_ GUARDED_BY(ctx_.mu);
};

}  // namespace ferry
