#include "common/cluster/node_table.h"

#include <arpa/inet.h>
#include <glog/logging.h>

#include <cstring>

#include "common/util/error.h"

namespace ferry {

const char* RoleName(proto::Role role) {
  return role == proto::SCHEDULER ? "scheduler" : role == proto::SERVER ? "server" : "worker";
}

std::string DescribeNode(const proto::NodeInfo& n) {
  const char* role = RoleName(n.role());
  std::string where = n.port() > 0 ? StrCat(n.host(), ":", n.port()) : n.host();
  if (!n.hostname().empty() && n.hostname() != n.host()) where += StrCat(", ", n.hostname());
  if (n.role() == proto::SCHEDULER) return StrCat("scheduler (", where, ")");
  return StrCat(role, " ", n.rank(), " (", where, ")");
}

bool IsLoopbackAddress(const std::string& ip) {
  in_addr v4{};
  if (inet_pton(AF_INET, ip.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, ip.c_str(), &v6) == 1 &&
         std::memcmp(&v6, &in6addr_loopback, sizeof v6) == 0;
}

NodeTable::NodeTable(const proto::NodeTable& table)
    : table_(table), num_workers_(table.num_workers()), num_servers_(table.num_servers()) {
  int max_id = 0;
  for (const auto& n : table.nodes()) max_id = std::max(max_id, n.id());
  nodes_.resize(max_id + 1);
  for (const auto& n : table.nodes()) nodes_[n.id()] = n;
}

bool NodeTable::Contains(int id) const {
  return id >= 0 && id < static_cast<int>(nodes_.size()) &&
         nodes_[id].role() != proto::ROLE_UNSPECIFIED;
}

const proto::NodeInfo& NodeTable::node(int id) const {
  CHECK(Contains(id)) << "node " << id << " not in the node table";
  return nodes_[id];
}

std::vector<proto::NodeInfo> NodeTable::Servers() const {
  std::vector<proto::NodeInfo> servers;
  for (int r = 0; r < num_servers_; ++r) {
    if (Contains(ServerId(r))) servers.push_back(node(ServerId(r)));
  }
  return servers;
}

bool NodeTable::ServersOnLoopback() const {
  bool any = false;
  for (int r = 0; r < num_servers_; ++r) {
    if (!Contains(ServerId(r))) continue;
    if (!IsLoopbackAddress(node(ServerId(r)).host())) return false;
    any = true;
  }
  return any;
}

std::string NodeTable::Describe(int id) const {
  if (!Contains(id)) return StrCat("node ", id, " (not a member)");
  return DescribeNode(node(id));
}

}  // namespace ferry
