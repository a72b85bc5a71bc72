#pragma once

// ClusterClient: a server's or worker's side of the control plane.
//
// It registers with the scheduler, learns the node table, heartbeats, runs barriers,
// and turns every sign of a failed job (a NODE_FAILED broadcast, no scheduler for
// FERRY_SCHEDULER_TIMEOUT_MS) into one failure reason that every waiter sees. Every wait has a deadline.
//
// Scheduler failover (scheduler/adoption.h): the data plane never needs the scheduler, so
// a silent one ends nothing at once. The SchedulerLink (scheduler_link.h) says which
// scheduler the node follows and for how long it may be silent (FERRY_SCHEDULER_TIMEOUT_MS);
// meanwhile only the waits that need it (barriers, init() after shutdown(), the end of the
// job) wait. A scheduler that does not know the node asks it to rejoin (REJOIN_ASK): the
// node sends what it holds (SendRejoin: table, term, finalized or suspended, the barriers
// it waits in and how many of each group it completed), or, before it has a table, its
// REGISTER again; Register() also sends it again every heartbeat interval.
//
// Threads: HandleMessage runs on the Van's IO thread; a "heartbeat" thread sends
// heartbeats and watches the scheduler; any thread may wait.
//
// The stall check (scheduler/stall_check.h): a worker's heartbeats carry what it has
// submitted and not finished (its StallReporter's operations, and its barriers and
// joins, labelled "barrier" and "join"), as the last HEARTBEAT_ACK's StallWatch asks; a
// STALL from the scheduler is logged as a warning.
//
// Membership epochs (elastic training, FERRY_ELASTIC=1; scheduler/membership.h): the
// scheduler may send a newer node table at any time. Every table this client was sent
// stays alive until it is destroyed (tables_), and table() returns the newest, so a
// reference from table() never dangles; a caller that needs one membership for a whole
// operation takes the reference once. At a new epoch, on the IO thread: the table is
// adopted (table() returns it), every barrier still waiting throws kMembershipChanged,
// then the membership callback runs. (It runs for the first table too, before anything
// that arrived ahead of it is handled: a spare's first table is a later epoch's.) A node the new table no longer lists fails (the
// scheduler declared it dead). Without FERRY_ELASTIC the first table is the only one.
//
// Spares (FERRY_SPARE=1, or any server the scheduler tells to wait as one: it came to an
// elastic job whose slots are filled): Register() returns only once a dead server's slot is
// given to this node (its id is then the slot's), heartbeating meanwhile under id -1; it
// throws kShutdown if the job ends first.

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/cluster/node_table.h"
#include "common/cluster/scheduler_link.h"
#include "common/config/config.h"
#include "common/transport/van.h"
#include "common/util/mutex.h"

namespace ferry {

// The Van settings a node of this job uses: frame limit, secret, link timeout, and
// the test-only fault injection.
VanOptions VanOptionsFor(const std::string& name, const Config& config);

// Fills a heartbeat's StallReport with the node's own operations: those at least
// `report_after_ms` old (oldest first, at most kMaxReported), the submitted counts of
// `labels`, and idle_ms. Called on the heartbeat thread with no lock of the client held.
using StallReporter = std::function<void(int64_t report_after_ms,
                                         const std::vector<std::string>& labels,
                                         proto::StallReport* report)>;

// Fills a heartbeat's metrics (common/metrics/series.h) with the role's own: called on the
// heartbeat thread while the scheduler serves metrics (FERRY_METRICS_PORT), under a lock of
// its own that SetMetricsReporter also takes; it must not call into the ClusterClient.
using MetricsReporter = std::function<void(proto::MetricsSnapshot* out)>;

class ClusterClient {
 public:
  // Operations a heartbeat reports at most (the oldest).
  static constexpr size_t kMaxReported = 32;

  // `van` must outlive this object and route every message to HandleMessage first.
  // `port` is the port this node listens on (0 for workers, which accept nothing).
  ClusterClient(const Config& config, Van* van, int port);
  ~ClusterClient();

  // Registers and waits for the node table (deadline FERRY_CONNECT_TIMEOUT_MS), then
  // starts heartbeats. Throws FerryError naming what was missing.
  void Register() EXCLUDES(mu_);

  // Consumes control messages from the scheduler; returns false for any other message.
  bool HandleMessage(const Message& m, const Origin& origin) EXCLUDES(mu_);

  // This node's id: -1 until Register() returns, then fixed (a spare's is its slot's).
  int my_id() const { return my_id_.load(std::memory_order_acquire); }
  // The routing id of every connection this node opens (see NodeInfo.routing_id).
  const std::string& routing_id() const { return routing_id_; }
  // This node's rank in the newest table (-1 before Register()).
  int my_rank() const;
  // The newest node table (empty before Register()); see the file comment.
  const NodeTable& table() const { return *table_.load(std::memory_order_acquire); }
  uint32_t epoch() const { return table().proto().epoch(); }
  // Elastic joins (scheduler.h): workers waiting to join, as the last HEARTBEAT_ACK said.
  uint32_t workers_waiting() const { return workers_waiting_.load(); }
  // Worker: the workers agreed to admit them (Worker::HostsUpdated): tells the scheduler,
  // with this worker's catalog when it is rank 0 (else null).
  void Admit(const proto::CatalogSnapshot* catalog) EXCLUDES(mu_);
  // A worker that joined a running job: rank 0's catalog, from its first table (null
  // otherwise). Written before Register() returns, never after.
  const proto::CatalogSnapshot* joined_catalog() const {
    return joined_with_catalog_ ? &joined_catalog_ : nullptr;
  }
  // Runs on the IO thread with every table adopted, the first included (= table()).
  void SetMembershipCallback(std::function<void(const NodeTable&)> callback) EXCLUDES(mu_);

  // Blocks until every node of `group` reached the barrier (deadline `timeout_ms`,
  // default op_timeout_ms). Returns the rank of the node that arrived last (GROUP_JOIN:
  // that joined last, by `join->position`: worker/join_protocol.h). `join` (GROUP_JOIN):
  // what the worker sends, and on return whether the workers' catalog digests differ.
  struct JoinInfo {
    int position = 0;
    uint64_t catalog_digest = 0;
    uint32_t catalog_next_id = 0;
    const proto::CatalogSnapshot* catalog = nullptr;  // this worker's (TensorCatalog::Snapshot)
    bool catalogs_differ = false;  // set on return
    // Set on return when catalogs_differ and this worker's catalog is an earlier state of
    // another's: that catalog, to adopt (worker/join_protocol.h).
    std::optional<proto::CatalogSnapshot> adopt;
  };
  // `epoch` (elastic): the membership epoch the caller works in (a worker's, until its
  // Reset(); default: the newest): an older one than the newest throws kMembershipChanged
  // at once, and the scheduler counts the barrier in that epoch only.
  int Barrier(proto::BarrierGroup group, int64_t timeout_ms = 0, JoinInfo* join = nullptr,
              std::optional<uint32_t> epoch = std::nullopt) EXCLUDES(mu_);

  // Worker: tells the scheduler this worker is done and waits until the scheduler
  // ends the job (every worker finalized). Servers: just waits for that end.
  void Finalize() EXCLUDES(mu_);
  // Worker: this worker shut down but may come back (SUSPEND): returns at once; the
  // heartbeats go on. Resume(): it came back (RESUME), once the scheduler acknowledged it
  // (deadline FERRY_OP_TIMEOUT_MS); throws kShutdown if the job ended meanwhile (another
  // worker finalized), or the job's failure.
  void Suspend() EXCLUDES(mu_);
  void Resume() EXCLUDES(mu_);
  void WaitForShutdown() EXCLUDES(mu_);

  bool failed() const { return failed_; }
  std::string failure() const EXCLUDES(mu_);
  bool shut_down() const { return shut_down_; }

  // Runs once, on the thread that detects the failure, with the reason.
  void SetFailureCallback(std::function<void(const std::string&)> callback) EXCLUDES(mu_);
  // Records a failure found by the role itself (e.g. a peer unreachable).
  void Fail(const std::string& reason) EXCLUDES(mu_);

  // Workers: what the heartbeats report for the stall check (see the file comment).
  void SetStallReporter(StallReporter reporter) EXCLUDES(mu_);
  // Every role: its metrics for the scheduler's endpoint; the client adds the Van's
  // refusals (ferry_refused_messages_total, reasons malformed and handshake). Returns once
  // no call of the previous reporter runs: a role clears it (nullptr) before its counters
  // go, and the heartbeat thread never reads them after.
  void SetMetricsReporter(MetricsReporter reporter) EXCLUDES(reporter_mu_);

 private:
  // Waits until `done()` (called with mu_ held) or failure or the deadline; throws on
  // failure/timeout.
  void WaitUntil(const std::function<bool()>& done, int64_t timeout_ms, const std::string& what)
      EXCLUDES(mu_);
  void HeartbeatLoop() EXCLUDES(mu_);
  // The next HEARTBEAT, with the StallReport the last StallWatch asked for and the
  // metrics, if the scheduler wants them.
  Message MakeHeartbeat() EXCLUDES(mu_, reporter_mu_);
  // NODE_TABLE: the first, or (elastic) a newer epoch's; see the file comment.
  void OnNodeTable(const proto::NodeTable& table) EXCLUDES(mu_);
  // A spare's wait for a slot (see the file comment).
  void WaitForSlot() EXCLUDES(mu_);
  void StartHeartbeats();
  // REJOIN_ASK: this node's part of the job (see the file comment), or its REGISTER again.
  void SendRejoin() EXCLUDES(mu_);

  const Config& config_;
  Van* van_;
  int port_;

  // Guards tables_, barriers_, next_request_, failure_, on_failure_ and on_membership_;
  // the writes of my_id_ and table_ happen under it.
  mutable Mutex mu_;
  CondVar cv_;  // signalled on any change of the state below (and of the atomics)
  std::deque<NodeTable> tables_ GUARDED_BY(mu_);  // every table sent, oldest first
  const NodeTable empty_table_;
  std::atomic<const NodeTable*> table_{&empty_table_};  // the newest of tables_
  std::atomic<int> my_id_{-1};
  std::function<void(const NodeTable&)> on_membership_ GUARDED_BY(mu_);
  const std::string routing_id_;
  SchedulerLink link_;
  proto::RegisterRequest register_ GUARDED_BY(mu_);  // as sent by Register()
  struct BarrierWait {
    bool released = false;
    int last_rank = -1;  // from the release
    bool catalogs_differ = false;  // from the release (GROUP_JOIN)
    std::optional<proto::CatalogSnapshot> catalog;  // from the release (GROUP_JOIN)
    std::string label;  // "barrier", "join", ...: the stall check's label
    uint64_t seq = 0;   // under the label
    int64_t start_ms = 0;
    uint32_t interrupted_at = 0;  // > 0: the epoch that interrupted the wait
    int group = -1;  // a barrier's group (-1: another wait, e.g. Resume())
    uint32_t epoch = 0;  // the epoch it counts in
    proto::Barrier body;  // as sent (its seq: see Done)
  };
  // Per barrier group: how many the node completed in `epoch`, and the last release; a
  // barrier's seq is one more (scheduler/barriers.h, "Numbered barriers").
  struct Done {
    uint32_t epoch = 0;
    uint64_t count = 0;
    proto::Barrier release;
  };
  std::map<int, Done> done_ GUARDED_BY(mu_);
  std::map<uint64_t, BarrierWait> barriers_ GUARDED_BY(mu_);  // by request id
  std::map<std::string, uint64_t> barriers_entered_ GUARDED_BY(mu_);  // label -> count
  StallReporter stall_reporter_ GUARDED_BY(mu_);
  Mutex reporter_mu_;  // held while metrics_reporter_ runs; never with mu_
  MetricsReporter metrics_reporter_ GUARDED_BY(reporter_mu_);
  std::atomic<bool> metrics_wanted_{false};  // the last HEARTBEAT_ACK's metrics_wanted
  proto::StallWatch stall_watch_ GUARDED_BY(mu_);  // the last HEARTBEAT_ACK's
  uint64_t next_request_ GUARDED_BY(mu_) = 1;
  std::string failure_ GUARDED_BY(mu_);
  std::function<void(const std::string&)> on_failure_ GUARDED_BY(mu_);

  std::atomic<bool> failed_{false};
  std::atomic<bool> waiting_as_spare_{false};  // the scheduler said: no slot yet, wait
  std::atomic<uint32_t> workers_waiting_{0};
  proto::CatalogSnapshot joined_catalog_;  // see joined_catalog()
  bool joined_with_catalog_ = false;
  std::atomic<bool> shut_down_{false};
  // A worker that Resume()d and has not finalized or suspended since: a SHUTDOWN then
  // fails it (its RESUME crossed the end of the job) instead of ending it quietly.
  std::atomic<bool> resumed_{false};  // set by Resume() and read by SHUTDOWN under mu_
  std::atomic<bool> finalized_{false};  // FINALIZE sent
  std::atomic<bool> suspended_{false};  // SUSPEND sent, RESUME not yet
  std::atomic<bool> stop_heartbeat_{false};
  std::thread heartbeat_thread_;
};

}  // namespace ferry
