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
//     without it (loopback TCP) both cost `loopback_cost` copies.
// Not thread-safe (one event loop).

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
};

class Fabric {
 public:
  using Action = EventQueue::Action;
  // `host_of_node`: the host of every node (nodes are numbered by the caller).
  Fabric(Network& network, std::vector<int> host_of_node, const FabricOptions& options);

  // Tensor bytes from node `from` to node `to`; `delivered` runs when they arrived.
  void SendData(int from, int to, uint64_t bytes, int priority, DataKind kind, Action delivered);
  // A header-only control message.
  void SendControl(int from, int to, Action delivered);

  bool same_host(int a, int b) const { return host_of_node_[a] == host_of_node_[b]; }
  int host(int node) const { return host_of_node_[node]; }
  uint64_t messages() const { return messages_; }

 private:
  struct Pending {
    int priority;
    uint64_t seq;
    uint64_t bytes;
    uint64_t cost_bytes;
    Action delivered;
  };
  struct MoreUrgentLast {
    bool operator()(const Pending& a, const Pending& b) const {
      return a.priority != b.priority ? a.priority < b.priority : a.seq > b.seq;
    }
  };
  // The watermark's queue and the control lane's connection of one ordered pair of
  // nodes (made only with either on).
  struct Path {
    int control = -1;
    std::priority_queue<Pending, std::vector<Pending>, MoreUrgentLast> waiting;
    uint64_t unreleased = 0;  // bytes handed to the connection and not yet out
  };
  // The pair's data connection, made at its first message.
  int DataConnection(int from, int to);
  Path& PathFor(int from, int to);
  void Drain(int connection, Path& path);
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
  uint64_t next_seq_ = 0;
  uint64_t messages_ = 0;
};

}  // namespace ferry::sim
