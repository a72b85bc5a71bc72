#pragma once

// WorkerContext: what the Worker's parts share (its configuration, transport, cluster
// client, operation table and counters) and the one lock that guards their state.
//
// Locking: one lock, WorkerContext::mu, guards the catalog, every kind's requests in
// flight, the operations' progress counters and the tensors' queues of operations.
// The kinds take it themselves on the threads that reach them (van-io for replies,
// ZeroMQ's IO thread for payload releases, callers, van-io and the sender thread for
// sends (DensePushPull::SendReady), the sender thread for resends);
// methods marked REQUIRES(mu) are called with it held. Copies of payloads run outside
// it, under a hold of the operation (OperationTable::Hold).

#include <atomic>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/cluster/cluster_client.h"
#include "common/config/config.h"
#include "common/transport/van.h"
#include "common/util/mutex.h"
#include "worker/partition_scheduling/layer_decomposition.h"
#include "worker/partition_scheduling/link_sizing.h"
#include "worker/operation_table.h"
#include "worker/trace.h"
#include "worker/worker_counters.h"

namespace ferry {

class Sequencer;

// What the Worker's parts work with; owned by the Worker, valid for its lifetime.
struct WorkerContext {
  WorkerContext(const Config& config, Van& van, ClusterClient& cluster, OperationTable& table,
                WorkerCounters& counters)
      : config(config), van(van), cluster(cluster), table(table), counters(counters) {}
  const Config& config;
  Van& van;
  ClusterClient& cluster;
  OperationTable& table;
  WorkerCounters& counters;
  Trace* trace = nullptr;  // FERRY_TRACE_DIR; null when off (set before the parts exist)
  // See the file comment. Taken before the operation table's lock (the table's
  // methods are called with it held, never the other way round).
  mutable Mutex mu ACQUIRED_BEFORE(table.mu_);
  Sequencer* sequencer = nullptr;
  int my_id = -1;
  std::atomic<int> rank{-1};         // this epoch's (MembershipEpochs::Reset changes it)
  std::atomic<int> num_workers{0};  // this epoch's (MembershipEpochs::Reset changes it)
  int num_servers = 0;              // server slots (ids), live or not: live_servers
  uint64_t next_request GUARDED_BY(mu) = 1;  // request ids, shared by every kind
  // The membership epoch of the operations started from now on (elastic training:
  // MembershipEpochs::Reset() moves it to the cluster's). Every data-plane message is stamped with it
  // when it is built (NewMessage). A message built while the epoch is E belongs to an
  // operation of E: a new epoch fails every operation, and drops what was in flight,
  // before Reset() moves the epoch (MembershipEpochs::OnMembership), and an operation failed while
  // queued is never sent. So a message of an abandoned operation never counts in a newer
  // epoch's round.
  std::atomic<uint32_t> epoch{0};
  // A message of `type` from this worker, stamped with the current epoch.
  Message NewMessage(proto::MessageType type) const;
  // The frame size of pushes sent from now on (FERRY_FRAME_BYTES; autotune changes it
  // between operations, as it changes the partition size); 0: whole partitions.
  uint64_t frame_bytes GUARDED_BY(mu) = 0;
  // Partitions sized per link (FERRY_PARTITION_PER_LINK, partition_scheduling/link_sizing.h):
  // by server rank, the piece size of pushes to that server sent from now on (empty:
  // frame_bytes for every server), and the paths' rates measured at the acknowledgements.
  std::vector<uint64_t> link_frame_bytes GUARDED_BY(mu);
  LinkRates link_rates GUARDED_BY(mu);
  uint64_t link_decisions GUARDED_BY(mu) = 0;  // times the pieces were decided
  // FERRY_DECOMPOSE=per-layer (partition_scheduling/layer_decomposition.h): the iteration's
  // ready times, and by tensor id the piece its pushes are cut in (none: the link's).
  LayerTimes layer_times GUARDED_BY(mu);
  std::unordered_map<uint32_t, uint64_t> layer_frame_bytes GUARDED_BY(mu);
  uint64_t layer_decisions GUARDED_BY(mu) = 0;
  std::string failure GUARDED_BY(mu) = {};   // non-empty: the job failed; every call throws it
  // kPeerFailed (for good), or kMembershipChanged (elastic: until Worker::Reset()).
  ErrorCode failure_code GUARDED_BY(mu) = ErrorCode::kPeerFailed;
  // Server slots (by rank) that have a live server in this worker's epoch: the ones its
  // per-server messages (rows pushes, JOIN, RETIRE) go to. All of them without elasticity.
  std::vector<bool> live_servers GUARDED_BY(mu) = {};
  bool shut_down GUARDED_BY(mu) = false;     // Shutdown() began: no new operations
  // Backup workers (Worker::Contributors): the ranks left out of the sums completed since
  // the last step boundary, and those of the step before it (rank masks).
  std::string step_left_out GUARDED_BY(mu);
  std::string last_step_left_out GUARDED_BY(mu);
  bool stepped GUARDED_BY(mu) = false;  // a step boundary came
  void NoteLateReply(const Message& m);
  // Throws the job's failure, if any. REQUIRES: mu.
  void ThrowIfFailed() const;
  // Throws unless new operations may start (no failure, no shutdown); `what` of tensor
  // `name` names the refused call. REQUIRES: mu.
  void CheckRunning(const char* what, const std::string& name) const;
};

}  // namespace ferry
