#pragma once

// JoinProtocol: Worker::Join (uneven data, Horovod's join; worker.h). The worker waits
// for its own operations, sends JOIN to every server and waits for every JOIN_ACK (from
// then on the servers' rounds no longer wait for it), then waits in the scheduler's join
// barrier for the other workers; after it every worker's rounds start over at 0.
//
// Who joined last: each server numbers the JOINs in the order they reach it (JOIN_ACK's
// round); a worker's position is its lowest, and the scheduler names the worker with the
// highest (ties: the later at the barrier). A worker still pushing needs the others' JOINs
// at the servers of its keys before its last rounds complete, so the worker that called
// join() last is last at those servers, whatever the order in which the workers reach the
// scheduler's barrier.
//
// Declarations: workers still training declare names (or declare them anew, with other
// shapes) that the workers which joined early never saw; their sums count the joined ones
// as zeros, as Horovod's do. For the workers' later operations to meet on the same keys,
// the join barrier carries each worker's TensorCatalog::Digest, next id and Snapshot; when
// they differ, the scheduler hands the catalog of the worker that declared the most to
// every worker whose catalog is an earlier state of it (the same ids, names, dtypes and
// shapes, or names declared anew later), which Loads it. If some catalog is not an earlier
// state of it (the workers declared different names at the same point), join() throws
// kMismatch on every worker, saying why. Load runs with no operation in flight: Join waits
// for the worker's operations first.
//
// Threads: the caller runs Join; OnAck runs on van-io; OnFailure on whichever thread
// failed the job. The join state is under WorkerContext::mu. Every wait has a deadline:
// FERRY_OP_TIMEOUT_MS for the servers' acknowledgements, FERRY_JOIN_TIMEOUT_MS for the
// other workers.

#include <cstdint>

#include "common/transport/message.h"
#include "common/util/mutex.h"
#include "worker/sequencer.h"
#include "worker/worker_context.h"
#include "worker/tensor_catalog.h"

namespace ferry {

class JoinProtocol {
 public:
  JoinProtocol(WorkerContext& ctx, TensorCatalog& catalog) : ctx_(ctx), catalog_(catalog) {}

  // Blocks until every worker joined (see above); returns the rank that joined last.
  // Throws FerryError.
  int Join() EXCLUDES(ctx_.mu);
  // A JOIN_ACK from a server (van-io). Takes mu.
  void OnAck(const Message& m) EXCLUDES(ctx_.mu);
  // The job failed (WorkerContext::failure is set): wakes a waiting Join. REQUIRES: mu.
  void OnFailure();

 private:
  WorkerContext& ctx_;
  TensorCatalog& catalog_;                    // PT_GUARDED_BY(ctx_.mu)
  CondVar cv_;                                // signalled on a JOIN_ACK and on failure
  uint64_t request_ GUARDED_BY(ctx_.mu) = 0;  // request id of the JOIN in progress
  int acks_ GUARDED_BY(ctx_.mu) = 0;          // servers that acknowledged it
  int position_ GUARDED_BY(ctx_.mu) = 0;      // the lowest position they gave it
};

}  // namespace ferry
