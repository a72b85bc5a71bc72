// NodeTable: who is in the job, and what its addresses say about the path to the servers.

#include "common/cluster/node_table.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ferry {
namespace {

proto::NodeTable TableWithServers(const std::vector<std::string>& hosts) {
  proto::NodeTable t;
  t.set_num_servers(static_cast<int>(hosts.size()));
  t.set_num_workers(1);
  for (size_t r = 0; r < hosts.size(); ++r) {
    proto::NodeInfo* n = t.add_nodes();
    n->set_id(ServerId(static_cast<int>(r)));
    n->set_role(proto::SERVER);
    n->set_rank(static_cast<int>(r));
    n->set_host(hosts[r]);
    n->set_port(9000 + static_cast<int>(r));
  }
  proto::NodeInfo* w = t.add_nodes();
  w->set_id(WorkerId(static_cast<int>(hosts.size()), 0));
  w->set_role(proto::WORKER);
  w->set_host("198.18.0.9");
  return t;
}

TEST(NodeTableTest, LoopbackAddressesAreThoseThatReachOnlyTheirOwnNamespace) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackAddress("127.1.2.3"));
  EXPECT_TRUE(IsLoopbackAddress("::1"));
  EXPECT_FALSE(IsLoopbackAddress("198.18.0.2")) << "an emulated host is a host of its own";
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackAddress("128.0.0.1"));
  EXPECT_FALSE(IsLoopbackAddress("::2"));
  EXPECT_FALSE(IsLoopbackAddress("localhost")) << "a name, not an address";
  EXPECT_FALSE(IsLoopbackAddress(""));
}

TEST(NodeTableTest, ServersOnLoopbackOnlyWhenEveryServerIs) {
  EXPECT_TRUE(NodeTable(TableWithServers({"127.0.0.1", "127.0.0.1"})).ServersOnLoopback());
  EXPECT_FALSE(NodeTable(TableWithServers({"127.0.0.1", "198.18.0.3"})).ServersOnLoopback());
  EXPECT_FALSE(NodeTable(TableWithServers({"198.18.0.2"})).ServersOnLoopback());
  EXPECT_FALSE(NodeTable(TableWithServers({})).ServersOnLoopback()) << "no server, no path";
}

}  // namespace
}  // namespace ferry
