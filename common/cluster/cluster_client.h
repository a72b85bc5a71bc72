#pragma once

// ClusterClient: a server's or worker's side of the control plane.
//
// It registers with the scheduler, learns the node table, heartbeats, runs barriers,
// and turns every sign of a failed job (a NODE_FAILED broadcast, a silent scheduler)
// into one failure reason that every waiter sees. Every wait has a deadline.
//
// Threads: HandleMessage runs on the Van's IO thread; a "heartbeat" thread sends
// heartbeats and watches the scheduler; any thread may wait.

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "common/cluster/node_table.h"
#include "common/config/config.h"
#include "common/transport/van.h"

namespace ferry {

// The Van settings a node of this job uses: frame limit, secret, link timeout, and
// the test-only fault injection.
VanOptions VanOptionsFor(const std::string& name, const Config& config);

class ClusterClient {
 public:
  // `van` must outlive this object and route every message to HandleMessage first.
  // `port` is the port this node listens on (0 for workers, which accept nothing).
  ClusterClient(const Config& config, Van* van, int port);
  ~ClusterClient();

  // Registers and waits for the node table (deadline FERRY_CONNECT_TIMEOUT_MS), then
  // starts heartbeats. Throws FerryError naming what was missing.
  void Register();

  // Consumes control messages from the scheduler; returns false for any other message.
  bool HandleMessage(const Message& m, const Origin& origin);

  int my_id() const { return my_id_; }
  // The routing id of every connection this node opens (see NodeInfo.routing_id).
  const std::string& routing_id() const { return routing_id_; }
  int my_rank() const;
  const NodeTable& table() const { return table_; }

  // Blocks until every node of `group` reached the barrier (deadline `timeout_ms`,
  // default op_timeout_ms).
  void Barrier(proto::BarrierGroup group, int64_t timeout_ms = 0);

  // Worker: tells the scheduler this worker is done and waits until the scheduler
  // ends the job (every worker finalized). Servers: just waits for that end.
  void Finalize();
  void WaitForShutdown();

  bool failed() const { return failed_; }
  std::string failure() const;
  bool shut_down() const { return shut_down_; }

  // Runs once, on the thread that detects the failure, with the reason.
  void SetFailureCallback(std::function<void(const std::string&)> callback);
  // Records a failure found by the role itself (e.g. a peer unreachable).
  void Fail(const std::string& reason);

 private:
  // Waits until `done()` or failure or the deadline; throws on failure/timeout.
  void WaitUntil(const std::function<bool()>& done, int64_t timeout_ms, const std::string& what);
  void HeartbeatLoop();
  void Send(Message m);

  const Config& config_;
  Van* van_;
  int port_;
  std::string scheduler_name_;

  mutable std::mutex mu_;         // guards everything below that is not atomic
  std::condition_variable cv_;    // signalled on any state change below
  NodeTable table_;
  int my_id_ = -1;
  const std::string routing_id_;
  std::map<uint64_t, bool> barriers_;  // request id -> released
  uint64_t next_request_ = 1;
  std::string failure_;
  std::function<void(const std::string&)> on_failure_;

  std::atomic<bool> failed_{false};
  std::atomic<bool> shut_down_{false};
  std::atomic<bool> stop_heartbeat_{false};
  std::atomic<int64_t> last_scheduler_contact_ms_{0};
  std::thread heartbeat_thread_;
};

}  // namespace ferry
