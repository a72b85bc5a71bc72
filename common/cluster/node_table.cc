#include "common/cluster/node_table.h"

#include <glog/logging.h>

#include "common/util/error.h"

namespace ferry {

std::string DescribeNode(const proto::NodeInfo& n) {
  const char* role = n.role() == proto::SCHEDULER ? "scheduler"
                     : n.role() == proto::SERVER  ? "server"
                                                  : "worker";
  std::string where = n.port() > 0 ? StrCat(n.host(), ":", n.port()) : n.host();
  if (!n.hostname().empty() && n.hostname() != n.host()) where += StrCat(", ", n.hostname());
  if (n.role() == proto::SCHEDULER) return StrCat("scheduler (", where, ")");
  return StrCat(role, " ", n.rank(), " (", where, ")");
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

std::string NodeTable::Describe(int id) const {
  if (!Contains(id)) return StrCat("node ", id, " (not a member)");
  return DescribeNode(node(id));
}

}  // namespace ferry
