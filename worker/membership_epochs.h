#pragma once

// MembershipEpochs: how a Worker's operations follow the job's membership (worker.h:
// Reset, HostsUpdated, Suspend, Resume, Shutdown; docs/reliability.md, "Elastic
// training"). It owns the job's failure state in WorkerContext (failure, failure_code,
// shut_down) and the epoch, rank, size and live servers the operations use.
//
// Epochs: the scheduler's table carries the membership epoch. A table of a newer epoch
// (OnMembership, van-io) fails every unfinished operation with kMembershipChanged, drops
// what was in flight (so no message of an abandoned operation counts in a newer round)
// and refuses new ones until Reset() takes the newest table: rank and size may change,
// rounds start over at 0, the partitions of a server that left are placed again over the
// live ones, and the epoch moves. A failure for good (FailForGood) replaces a change
// waiting for Reset(); nothing replaces a failure for good.
//
// Joins at a commit: HostsUpdated() agrees among the workers (a one-element push_pull)
// whether any saw workers waiting; the next Reset() then admits them (rank 0 brings its
// catalog) and waits, bounded by FERRY_OP_TIMEOUT_MS, for the epoch that has them.
//
// Suspension (re-initialisation): Suspend() waits for this worker's operations, undoes
// every declaration and refuses new operations; Resume() accepts them again. Shutdown
// ends a suspension too.
//
// Locking: every state here is under WorkerContext::mu (the one lock of the Worker's
// parts, worker_context.h); the waits let go of it. Threads: OnMembership runs on van-io,
// FailForGood on whichever thread saw the job fail, the rest on the application's.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/cluster/node_table.h"
#include "common/util/mutex.h"
#include "worker/join_protocol.h"
#include "worker/operation_kind.h"
#include "worker/sequencer.h"
#include "worker/tensor_catalog.h"
#include "worker/worker_context.h"

namespace ferry {

class MembershipEpochs {
 public:
  // The Worker's parts whose state an epoch resets; valid for this object's lifetime.
  struct Parts {
    TensorCatalog& catalog;  // PT_GUARDED_BY(ctx.mu)
    Sequencer& sequencer;
    OperationKinds& kinds;
    JoinProtocol& join;
  };
  // Sums `value` over every worker (a push_pull of Ferry's own) and waits for it.
  using SumOverWorkers = std::function<void(int32_t* value)>;

  MembershipEpochs(WorkerContext& ctx, Parts parts, SumOverWorkers sum)
      : ctx_(ctx), parts_(parts), sum_(std::move(sum)) {}

  // The Worker's start, before its parts exist: connects every live server of `table`
  // (Van::Connect: a moved one is reconnected); returns the placement weights by server
  // slot (0 for an empty slot).
  static std::vector<double> ConnectServers(WorkerContext& ctx, const NodeTable& table);
  // Takes `table`'s rank, size, live servers and epoch into `ctx`.
  static void TakeMembership(WorkerContext& ctx, const NodeTable& table) REQUIRES(ctx.mu);
  // A table from the scheduler (van-io): a newer epoch fails every operation (see above).
  void OnMembership(const NodeTable& table) EXCLUDES(ctx_.mu);
  // The job failed for good (a dead peer without elasticity): every operation fails.
  void FailForGood(const std::string& reason) EXCLUDES(ctx_.mu);
  // Worker::HostsUpdated, Worker::Reset (see above).
  bool HostsUpdated() EXCLUDES(ctx_.mu);
  void Reset() EXCLUDES(ctx_.mu);
  // Worker::Suspend, Worker::Resume.
  void Suspend() EXCLUDES(ctx_.mu);
  void Resume() EXCLUDES(ctx_.mu);
  // Shutdown's first half: refuses new operations and waits (FERRY_OP_TIMEOUT_MS) for
  // this worker's. False when the worker was shut down already (and not suspended).
  bool BeginShutdown() EXCLUDES(ctx_.mu);

 private:
  // Fails every operation with `reason` (`code`); the caller holds mu.
  void FailOperations(const std::string& reason, ErrorCode code) REQUIRES(ctx_.mu);
  // Reset()'s admission: rank 0's catalog to the scheduler, then the epoch with the
  // joiners (which fails this worker's idle operations). REQUIRES: mu (let go meanwhile).
  void Admit() REQUIRES(ctx_.mu);

  WorkerContext& ctx_;
  const Parts parts_;
  const SumOverWorkers sum_;
  // Suspend()ed: shut down (ctx_.shut_down) but may Resume().
  bool suspended_ GUARDED_BY(ctx_.mu) = false;
  // HostsUpdated() said yes: the next Reset() admits the waiting workers.
  bool admitting_ GUARDED_BY(ctx_.mu) = false;
};

}  // namespace ferry
