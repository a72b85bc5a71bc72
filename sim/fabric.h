#pragma once

// Fabric: the transports of every simulated node (common/transport/van.h as the simulator
// sees it) on one Network: the connections between nodes, the transport's priority queue
// with its watermark, the control lane and the same-host lane.
//
//   Fabric fabric(network, host_of_node, options);
//   fabric.SendData(worker, server, bytes, priority, DataKind::kPush, [&] { ... });
//   fabric.SendControl(server, worker, [&] { ... });     // an acknowledgement
//
// What it models of the real Van:
//   - one data connection per ordered pair of nodes (a worker's DEALER to a server, the
//     server's replies to that worker on the same TCP connection, so each direction is an
//     ordered stream);
//   - the watermark (FERRY_TRANSPORT_WATERMARK_BYTES > 0): messages with tensor bytes
//     wait per destination in a priority queue (priority, then arrival) and go to the
//     connection only while less than the watermark of their bytes to that destination
//     is unreleased (not yet out of the sender); 0: they go at once, in order;
//   - control messages (acknowledgements) go at once: on the control lane
//     (FERRY_CONTROL_LANE=1), a connection of their own, or on the data connection behind
//     what was handed to it;
//   - nodes on one host talk over the host's local path: with the shared-memory lane
//     (FERRY_SHM=1) a push costs one copy of its bytes and a sum none (it is lent);
//     without it (loopback TCP) both cost `loopback_cost` copies;
//   - links (a worker's Van under SchedulesLinks; van.h, "Links"): a point-to-point send
//     from such a node is a critical flow: it goes before every other message queued for
//     its destination, and while it runs no other message with tensor bytes from that node
//     to a destination on another host is handed to its connection (they all cross the
//     node's uplink; one on the node's host crosses no link and is never held). The flow
//     ends when its last critical message is delivered (the peer's kernel has its bytes;
//     the Van's millisecond checks are not modelled), and what it held goes at once.
//     Messages already handed over go on: what the watermark let out before the flow.
//     Acknowledgements and other control messages are never held.
// Invariants: a node's flows are open exactly while one of its paths has critical
// messages queued or undelivered; with no flow open and no watermark, nothing waits in a
// path. Not thread-safe (one event loop).

#include <cstdint>
#include <deque>
#include <queue>
#include <vector>

#include "sim/network.h"

namespace ferry::sim {

enum class DataKind { kPush, kSum };

struct FabricOptions {
  bool control_lane = false;
  uint64_t watermark_bytes = 0;
  bool shm = true;
  double loopback_cost = 2.5;  // loopback TCP's cost in copies of the bytes
  // By node (missing: false): its Van schedules links (a worker's, under SchedulesLinks).
  std::vector<bool> link_scheduling;
};

class Fabric {
 public:
  using Action = EventQueue::Action;
  // `host_of_node`: the host of every node (nodes are numbered by the caller).
  Fabric(Network& network, std::vector<int> host_of_node, const FabricOptions& options);

  // Tensor bytes from node `from` to node `to`; `delivered` runs when they arrived.
  void SendData(int from, int to, uint64_t bytes, int priority, DataKind kind, Action delivered);
  // A point-to-point send (P2P_SEND) of `bytes` between workers: a critical flow when
  // `from` schedules links, else a message like a push, in its priority's place.
  void SendPointToPoint(int from, int to, uint64_t bytes, int priority, Action delivered);
  // A header-only control message.
  void SendControl(int from, int to, Action delivered);
  // A header-only message that is no control message (an empty ROWS_PUSH or ROWS_RESULT):
  // on the pair's data connection at once (only tensor bytes wait or are held).
  void SendEmpty(int from, int to, Action delivered);

  bool same_host(int a, int b) const { return host_of_node_[a] == host_of_node_[b]; }
  int host(int node) const { return host_of_node_[node]; }
  uint64_t messages() const { return messages_; }
  // As the Van's link_flows and link_held: flows opened; messages with tensor bytes queued
  // while a flow held their link (those queued when it opened included).
  uint64_t flows_opened() const { return flows_opened_; }
  uint64_t held_messages() const { return held_messages_; }

 private:
  struct Pending {
    bool critical;  // a point-to-point send under link scheduling: goes before the others
    int priority;
    uint64_t seq;
    uint64_t bytes;
    uint64_t cost_bytes;
    Action delivered;
  };
  struct MoreUrgentLast {
    bool operator()(const Pending& a, const Pending& b) const {
      if (a.critical != b.critical) return b.critical;
      return a.priority != b.priority ? a.priority < b.priority : a.seq > b.seq;
    }
  };
  // The order queue and the control lane's connection of one ordered pair of nodes (made
  // only for the watermark, the control lane, a held message or a critical one).
  struct Path {
    int from = 0, to = 0;
    int connection = -1;
    int control = -1;
    std::priority_queue<Pending, std::vector<Pending>, MoreUrgentLast> waiting;
    uint64_t unreleased = 0;   // bytes handed to the connection and not yet out
    uint32_t critical = 0;     // critical messages queued or not yet delivered
    uint32_t critical_waiting = 0;  // ... of them still queued here
    bool flow_open = false;
  };
  // The pair's data connection, made at its first message.
  int DataConnection(int from, int to);
  Path& PathFor(int from, int to);
  // Hands `path`'s messages to its connection while the watermark and the links let them.
  void Drain(Path& path);
  void Queue(int from, int to, Pending p);
  void Hand(Path& path, Pending p);
  bool SchedulesLinks(int node) const {
    return static_cast<size_t>(node) < options_.link_scheduling.size() &&
           options_.link_scheduling[node];
  }
  // Whether a message with tensor bytes from `from` to `to` waits for a flow.
  bool Held(int from, int to) const {
    return !same_host(from, to) && open_flows_.size() > static_cast<size_t>(from) &&
           open_flows_[from] > 0;
  }
  void OpenFlow(Path& path);
  // `path`'s last critical message was delivered: the flow ends; what it held goes.
  void CloseFlow(Path& path);
  uint64_t CostBytes(int from, int to, uint64_t bytes, DataKind kind) const;
  size_t PairIndex(int from, int to) const {
    return static_cast<size_t>(from) * host_of_node_.size() + static_cast<size_t>(to);
  }

  Network& network_;
  const std::vector<int> host_of_node_;
  const FabricOptions options_;
  // By ordered pair of nodes (PairIndex): the data connection's id + 1, 0 while it has
  // none. A flat table: every worker talks to every server, so most pairs that can be
  // used are (4 bytes a pair; 16 MiB at 2048 nodes).
  std::vector<int32_t> data_of_;
  std::deque<Path> paths_;        // stable addresses
  std::vector<int32_t> path_of_;  // by pair: index + 1 in paths_, 0 none; made on first use
  std::vector<std::vector<Path*>> paths_from_;  // by node: its paths, in the order made
  std::vector<int> open_flows_;  // by node: its open flows to other hosts
  uint64_t next_seq_ = 0;
  uint64_t messages_ = 0;
  uint64_t flows_opened_ = 0;
  uint64_t held_messages_ = 0;
};

}  // namespace ferry::sim
