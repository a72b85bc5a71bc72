#pragma once

// NodeTable: who is in the job. Built by the scheduler once every node registered,
// then sent to every node. Ids: 0 is the scheduler, 1..S the servers (rank = id - 1),
// S+1..S+W the workers (rank = id - S - 1).

#include <string>
#include <vector>

#include "ferry.pb.h"

namespace ferry {

constexpr int kSchedulerId = 0;

inline int ServerId(int rank) { return 1 + rank; }
inline int WorkerId(int num_servers, int rank) { return 1 + num_servers + rank; }


class NodeTable {
 public:
  NodeTable() = default;
  explicit NodeTable(const proto::NodeTable& table);

  int num_workers() const { return num_workers_; }
  int num_servers() const { return num_servers_; }
  bool empty() const { return nodes_.empty(); }
  // REQUIRES: Contains(id).
  const proto::NodeInfo& node(int id) const;
  bool Contains(int id) const;
  bool IsWorker(int id) const { return Contains(id) && node(id).role() == proto::WORKER; }
  bool IsServer(int id) const { return Contains(id) && node(id).role() == proto::SERVER; }
  // Servers by rank.
  std::vector<proto::NodeInfo> Servers() const;
  // True when there is a server and every server's address is a loopback address: the
  // whole job's server traffic stays inside this host's network namespace (one machine).
  bool ServersOnLoopback() const;
  // "server 1 (10.0.0.2:9001)"; "node 7 (unknown)" for an id not in the table.
  std::string Describe(int id) const;
  const proto::NodeTable& proto() const { return table_; }

 private:
  proto::NodeTable table_;
  std::vector<proto::NodeInfo> nodes_;  // indexed by id
  int num_workers_ = 0;
  int num_servers_ = 0;
};

std::string DescribeNode(const proto::NodeInfo& n);
// "scheduler", "server" or "worker".
const char* RoleName(proto::Role role);

// True for an IPv4 address in 127.0.0.0/8 and for IPv6 ::1: an address that reaches only
// the network namespace it is used in. (Emulated hosts on one machine, scripts/netns-cluster
// and scripts/compose-local, use their own addresses, never these.)
bool IsLoopbackAddress(const std::string& ip);

}  // namespace ferry
