#pragma once

// Scheduler: the control plane of a Ferry job. Carries no tensor data.
//
// Lifecycle: registration (until every server and worker arrived, or the connect
// deadline) -> node table broadcast -> running (barriers, heartbeat watch) -> orderly
// shutdown once every worker finalized (or suspended, with one finalized: re-initialisation,
// worker/binding_core.h), or failure broadcast when a node dies.
//
// Elastic (FERRY_ELASTIC=1): a dead node starts the next membership epoch instead
// (membership.h): the new table goes to every member, barriers in progress are dropped
// (their waiters throw kMembershipChanged: cluster_client.h), and everything that counts
// workers or servers counts the live ones. Spare servers (FERRY_SPARE=1) may register at
// any time; they heartbeat under id -1 until a dead server's slot is theirs. A job left with
// no live server fails; one left with fewer than FERRY_MIN_WORKERS workers publishes no
// epoch and fails at FERRY_MIN_WORKERS_TIMEOUT_MS (new workers joining: not yet).
//
// Live metrics (FERRY_METRICS_PORT): the nodes' heartbeats carry their metrics; the
// scheduler keeps them with each node's life and death in a ClusterMetrics and serves
// /metrics (Prometheus), /api/status and the status page (/) on an HttpEndpoint, whose
// own thread reads only the ClusterMetrics (never mu_). With FERRY_METRICS_LINGER_MS, Run()
// keeps serving that long after the job ended.
//
// Failover (scheduler/adoption.h): a scheduler that meets nodes of a running job (it was
// restarted at the job's address, or is a standby of FERRY_SCHEDULERS the nodes turned to)
// asks them to rejoin and adopts the job, then leads it under a term higher than any the
// nodes followed. Every message it sends carries its term; a node that follows a higher
// term answers FENCED, and the scheduler stops (Run returns 0: the job goes on under the
// other). A scheduler whose Run() loop did not run for longer than the heartbeat timeout
// (its process was paused) counts its nodes' heartbeats from then, and asks them, with a
// HEARTBEAT_ACK, whether it still leads, before it could find any of them dead.
//
// Threads: message handling runs on the Van's IO thread; Run()'s thread watches the
// deadlines (registration, heartbeats). Both touch the state under mu_.

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/cluster/node_table.h"
#include "common/config/config.h"
#include "common/metrics/http_endpoint.h"
#include "common/transport/van.h"
#include "common/util/mutex.h"
#include "scheduler/adoption.h"
#include "scheduler/barriers.h"
#include "scheduler/cluster_metrics.h"
#include "scheduler/membership.h"
#include "scheduler/stall_check.h"

namespace ferry {

class Scheduler {
 public:
  explicit Scheduler(const Config& config);
  ~Scheduler();

  // Runs the whole job. Returns 0 after an orderly shutdown (or once fenced: another
  // scheduler leads), 1 after a failure (missing node at the registration deadline, dead
  // node).
  int Run() EXCLUDES(mu_);

  // The port the scheduler listens on (after construction).
  int port() const { return port_; }

 private:
  enum class Phase { kRegistering, kRunning, kDone, kFailed, kFenced };
  struct Member {
    std::string identity;
    int64_t last_heartbeat_ms = 0;
  };

  void OnMessage(Message&& m, const Origin& origin) EXCLUDES(mu_);
  // A member's message (heartbeat, barrier, finalize, ...), its sender checked.
  void OnMemberMessage(const Message& m) REQUIRES(mu_);
  // Failover (scheduler_adoption.cc): a node's REJOIN; leading the adopted job once the
  // adoption is ready; a member's state from its REJOIN (barriers, finalized, suspended).
  void OnRejoin(const Message& m, const std::string& identity) REQUIRES(mu_);
  void LeadAdoptedJob() REQUIRES(mu_);
  void ApplyRejoin(int id, const proto::Rejoin& r) REQUIRES(mu_);
  void OnRegister(const Message& m, const std::string& identity) REQUIRES(mu_);
  void OnBarrier(const Message& m) REQUIRES(mu_);
  void OnFinalize(const Message& m) REQUIRES(mu_);
  // SUSPEND / RESUME: a worker shut down and may init() again, or did.
  void OnSuspend(const Message& m, bool suspended) REQUIRES(mu_);
  // Ends the job (SHUTDOWN to every node) once every worker is finalized or suspended and
  // at least one is finalized: a finalized worker never comes back, so no suspended one
  // could ever complete an operation again.
  void MaybeEndJob() REQUIRES(mu_);
  void BuildNodeTable() REQUIRES(mu_);  // once all registered
  std::string MissingNodes() const REQUIRES(mu_);
  void FailJob(int node_id, const std::string& reason) REQUIRES(mu_);
  void CheckHeartbeats() REQUIRES(mu_);
  // Elastic: member `id` is dead (`why`): the next epoch without it, published, or the
  // wait below FERRY_MIN_WORKERS, or the job's failure when no server is left.
  void DropMember(int id, const std::string& why) REQUIRES(mu_);
  // Sends the newest table to every member (your_id set) and makes members_ its nodes.
  // `catalog` (may be null): for the members that are new in this epoch (joiners).
  void PublishTable(const proto::CatalogSnapshot* catalog = nullptr) REQUIRES(mu_);
  // A spare's REGISTER (any phase) and its heartbeats (id -1); silent spares are dropped.
  void OnSpare(const Message& m, const std::string& identity) REQUIRES(mu_);
  // Elastic joins: a worker registering while the job runs waits (joiners_) until the
  // workers agree at a commit (Worker::HostsUpdated) and rank 0's ADMIT brings its tensor
  // catalog: then the next epoch has them, and each joiner's table carries the catalog.
  void OnJoiner(const Message& m, const std::string& identity) REQUIRES(mu_);
  void OnAdmit(const Message& m) REQUIRES(mu_);
  void CheckSpares() REQUIRES(mu_);
  // The id of the worker of rank `rank` in the newest table; -1 if none.
  int WorkerIdOf(int rank) const REQUIRES(mu_);
  // The stall check (stall_check.h): warns the waiting workers, or ends the job.
  void CheckStalls() REQUIRES(mu_);
  void OnHeartbeat(const Message& m) REQUIRES(mu_);
  void SendTo(int id, Message m) REQUIRES(mu_);
  // Answers a registration with an ERROR giving `reason`, stamped with `version` (the
  // requester's, so that a node of another release accepts it), and logs it.
  void Refuse(const std::string& identity, const std::string& reason,
              uint32_t version = kProtocolVersion);
  // The Van's on_version_mismatch: a REGISTER of another protocol version is refused.
  void RefuseVersion(const Message& m, const Origin& origin);
  const NodeTable& table() const REQUIRES(mu_) { return membership_.table(); }
  // The endpoint's answer for `path` (its thread).
  HttpResponse ServeHttp(const std::string& path) const;

  const Config& config_;
  Van van_;
  int port_ = 0;

  // Guards phase_, pending_, membership_, members_, barriers_, finalized_, stalls_ and failure_.
  Mutex mu_;
  CondVar cv_;  // signalled when the phase changes
  Phase phase_ GUARDED_BY(mu_) = Phase::kRegistering;
  std::vector<Membership::Joiner> pending_ GUARDED_BY(mu_);  // registrations in arrival order
  Membership membership_ GUARDED_BY(mu_);  // the node table, epoch by epoch
  std::map<int, Member> members_ GUARDED_BY(mu_);  // node id -> connection and heartbeat
  Barriers barriers_ GUARDED_BY(mu_);
  std::set<int> finalized_ GUARDED_BY(mu_);
  std::set<int> suspended_ GUARDED_BY(mu_);  // workers shut down that may init() again
  StallCheck stalls_ GUARDED_BY(mu_);
  std::string failure_ GUARDED_BY(mu_);
  std::map<std::string, int64_t> spares_ GUARDED_BY(mu_);  // identity -> last heartbeat
  std::vector<Membership::Joiner> joiners_ GUARDED_BY(mu_);  // workers waiting to join
  Adoption adoption_ GUARDED_BY(mu_);  // a running job's nodes rejoining (adoption.h)
  uint64_t term_ GUARDED_BY(mu_) = 0;   // 0 until it leads a job
  std::set<std::string> asked_ GUARDED_BY(mu_);  // identities asked to rejoin (logged once)
  // Elastic: when the live workers fell below FERRY_MIN_WORKERS (0: they did not), and why.
  int64_t below_min_since_ms_ GUARDED_BY(mu_) = 0;
  std::string below_min_why_ GUARDED_BY(mu_);

  ClusterMetrics metrics_;  // thread-safe on its own
  std::unique_ptr<HttpEndpoint> http_;  // FERRY_METRICS_PORT; null when off; goes first
};

}  // namespace ferry
