#pragma once

// Membership: who is in the job, epoch by epoch. Pure logic (no I/O, clock or lock): the
// Scheduler feeds it registrations and deaths, and sends the node tables it returns.
//
// Epoch 0 (First): every server and worker of the job registered. Ids: 0 the scheduler,
// 1..S the server slots (ServerId(rank)), S+1..S+W the workers (WorkerId(S, rank)). A
// worker's rank is its DMLC_WORKER_ID, else the lowest free rank in registration order.
// A server's kind (colocated or CPU-only) is ServerKind; the weights are ServerWeights.
//
// Later epochs (elastic training; docs/design/elastic.md), one change each:
//   - WithoutServer: the first spare (a server that registered with FERRY_SPARE=1; in no
//     slot and in no table until then) takes the dead server's slot, its id and rank, so
//     no other server's keys move; with no spare the slot stays empty and the live
//     servers share the weights (ServerWeights over them); the workers place the dead
//     server's partitions again (worker/placement.h).
//   - WithoutWorker: the others keep their ids and are renumbered 0..W-2 in their old rank
//     order (rank 0 stays rank 0 unless it died).
//   - WithWorkers: new workers take the next ranks and fresh ids.
// Invariants, after every step (membership_test.cc): worker ranks are 0..W-1, each once;
// the live servers' weights sum to 1; ids are unique and never reused, except a server
// slot's id, which a spare takes over (the routing id, checked on every message,
// tells the new process's messages from the dead one's); the epoch grows by one per step.
// `num_servers` in the table is the number of slots S (the id scheme's), of which
// Servers() are the live ones.

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/cluster/node_table.h"
#include "common/transport/message.h"

namespace ferry {

// Server weights for placement (BytePS OSDI'20, Theorem 1): with n colocated servers
// and k CPU-only servers, the CPU-only servers together carry 2k(n-1)/(n^2+kn-2k) of
// the bytes, split evenly among them; colocated servers share the rest evenly.
// `colocated[i]` says whether server i is colocated. Weights sum to 1 and are never
// negative: with n <= 1 the CPU-only share is 0, with k >= n it is 1.
std::vector<double> ServerWeights(const std::vector<bool>& colocated);

// A server's kind, "colocated" or "cpu": `requested` (the server's FERRY_NODE_KIND)
// when set; otherwise colocated when some worker advertises the same address as the
// server (`host`: DMLC_NODE_HOST, resolved, or by default the local address that routes
// to the scheduler), CPU-only when none does. `worker_hosts`: every worker's address.
std::string ServerKind(const std::string& requested, const std::string& host,
                       const std::set<std::string>& worker_hosts);

class Membership {
 public:
  // A registered node: its connection's routing identity and what it sent.
  struct Joiner {
    std::string identity;
    proto::RegisterRequest request;
  };

  // `num_servers`: the job's server slots (DMLC_NUM_SERVER).
  explicit Membership(int num_servers) : num_servers_(num_servers) {}

  // Epoch 0, with the scheduler's own entry. REQUIRES: `pending` (in registration order)
  // holds exactly `num_servers` servers and `num_workers` workers, requested ranks below
  // num_workers and distinct (the Scheduler's registration checks them).
  const NodeTable& First(const std::vector<Joiner>& pending, int num_workers,
                         const std::string& scheduler_host, int scheduler_port);
  // A running job's epoch, taken over from its nodes (scheduler/adoption.h); its spares
  // register again. Fresh ids continue above the table's highest (an id of a
  // worker dropped before and never seen by this scheduler may come again: the routing
  // id, checked on every message, tells the processes apart).
  const NodeTable& Adopt(const proto::NodeTable& table);
  // A spare server waits, in registration order, for a slot.
  void AddSpare(Joiner spare);
  // A waiting spare died (its connection's routing identity). False if none waits so.
  bool RemoveSpare(const std::string& identity);
  // The next epoch. REQUIRES: `id` is a live server (a live worker).
  const NodeTable& WithoutServer(int id);
  const NodeTable& WithoutWorker(int id);
  // The next epoch with `joiners` (workers, in registration order). REQUIRES: non-empty.
  const NodeTable& WithWorkers(const std::vector<Joiner>& joiners);

  const NodeTable& table() const { return table_; }
  uint32_t epoch() const { return table_.proto().epoch(); }
  size_t spares() const { return spares_.size(); }

 private:
  // Weights and kinds of the live servers, from the live workers' hosts; then the next
  // epoch's table.
  const NodeTable& Publish(proto::NodeTable next);
  proto::NodeInfo NodeOf(const Joiner& j, int id, int rank) const;

  const int num_servers_;
  NodeTable table_;
  std::vector<Joiner> spares_;
  int next_id_ = 0;  // the next fresh id
};

// "WORKER at 10.0.0.2:0 (host node-b, pid 4242)": a registering node, for log lines and
// refusals.
std::string DescribeRegistration(const proto::RegisterRequest& r);
// NODE_FAILED naming `node_id` (-1: none in particular) and `reason`.
Message NodeFailedMessage(int node_id, const std::string& reason);

}  // namespace ferry
