// Adoption (scheduler/adoption.h) without sockets: which REJOINs a scheduler takes, when it
// leads, with which table and term, and what it keeps of the messages that came meanwhile.

#include "scheduler/adoption.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "scheduler/membership.h"

namespace ferry {
namespace {

// Epoch `epoch` of a job of one server and two workers: ids 1 (server), 2 and 3 (workers),
// routing ids "node-<id>".
proto::NodeTable JobTable(uint32_t epoch) {
  proto::NodeTable t;
  t.set_epoch(epoch);
  t.set_num_workers(2);
  t.set_num_servers(1);
  auto add = [&t](int id, proto::Role role, int rank) {
    proto::NodeInfo* n = t.add_nodes();
    n->set_id(id);
    n->set_role(role);
    n->set_rank(rank);
    n->set_routing_id("node-" + std::to_string(id));
  };
  add(kSchedulerId, proto::SCHEDULER, 0);
  add(1, proto::SERVER, 0);
  add(2, proto::WORKER, 0);
  add(3, proto::WORKER, 1);
  return t;
}

proto::Rejoin RejoinOf(int id, uint32_t epoch, uint64_t term) {
  proto::Rejoin r;
  *r.mutable_table() = JobTable(epoch);
  r.mutable_table()->set_your_id(id);
  r.set_term(term);
  r.set_job_workers(2);
  r.set_job_servers(1);
  return r;
}

Config::Cluster Job() {
  Config::Cluster job;
  job.num_workers = 2;
  job.num_servers = 1;
  return job;
}

TEST(AdoptionTest, LeadsOnceEveryNodeRejoinedWithTheNewestTableAndAHigherTerm) {
  const Config::Cluster job = Job();
  Adoption a(job);
  EXPECT_FALSE(a.Ready(0, 1000));
  a.Add("node-1", RejoinOf(1, 0, 1), 100);
  a.Add("node-2", RejoinOf(2, 1, 3), 120);
  EXPECT_FALSE(a.Ready(130, 1000));
  a.Add("node-3", RejoinOf(3, 1, 3), 150);
  EXPECT_TRUE(a.Ready(150, 1000));
  EXPECT_EQ(a.table().epoch(), 1u);
  EXPECT_EQ(a.term(), 4u);
  EXPECT_EQ(a.Progress(), "3 of 3 nodes of membership epoch 1 rejoined");
  EXPECT_EQ(a.TakeNodes().size(), 3u);
}

TEST(AdoptionTest, AfterTheGraceAMajorityIsEnoughButAMinorityIsNot) {
  const Config::Cluster job = Job();
  Adoption a(job);
  a.Add("node-1", RejoinOf(1, 0, 1), 100);
  EXPECT_FALSE(a.Ready(5000, 1000));  // 1 of 3
  a.Add("node-2", RejoinOf(2, 0, 1), 200);
  EXPECT_FALSE(a.Ready(1099, 1000));
  EXPECT_TRUE(a.Ready(1100, 1000));  // 2 of 3, the grace passed
  EXPECT_EQ(a.started_ms(), 100);
}

TEST(AdoptionTest, RefusesNodesOfAnotherJobNamingTheDifferenceAndStrangeConnections) {
  const Config::Cluster job = Job();
  Adoption a(job);
  proto::Rejoin other = RejoinOf(2, 0, 1);
  other.set_job_workers(3);
  EXPECT_NE(a.Refusal("node-2", other).find("DMLC_NUM_WORKER=3 (this scheduler's: 2)"),
            std::string::npos)
      << a.Refusal("node-2", other);
  EXPECT_NE(a.Refusal("someone-else", RejoinOf(2, 0, 1)).find("its connection is not the one"),
            std::string::npos);
  EXPECT_EQ(a.Refusal("node-2", RejoinOf(2, 0, 1)), "");
}

TEST(AdoptionTest, MessagesHeldMeanwhileJoinTheirNodeOnce) {
  const Config::Cluster job = Job();
  Adoption a(job);
  proto::Rejoin r = RejoinOf(2, 0, 1);
  proto::Rejoin::Waiting* w = r.add_waiting();
  w->set_request_id(5);
  w->mutable_barrier()->set_seq(2);
  Message same = MakeMessage(proto::BARRIER, 2);
  same.envelope.set_request_id(5);  // also in the REJOIN: counted once
  Message later = MakeMessage(proto::BARRIER, 2);
  later.envelope.set_request_id(6);
  a.Hold("node-2", same);
  a.Add("node-2", r, 10);
  a.Hold("node-2", later);
  a.Hold("node-2", MakeMessage(proto::FINALIZE, 2));
  a.Hold("node-9", MakeMessage(proto::FINALIZE, 9));  // never rejoins: dropped
  auto nodes = a.TakeNodes();
  ASSERT_EQ(nodes.size(), 1u);
  const Adoption::Node& n = nodes.at(2);
  ASSERT_EQ(n.rejoin.waiting_size(), 2);
  EXPECT_EQ(n.rejoin.waiting(0).request_id(), 5u);
  EXPECT_EQ(n.rejoin.waiting(1).request_id(), 6u);
  ASSERT_EQ(n.held.size(), 1u);
  EXPECT_EQ(n.held[0].type(), proto::FINALIZE);
  EXPECT_EQ(WaitingBarriers(n.rejoin).size(), 2u);
  EXPECT_EQ(WaitingBarriers(n.rejoin)[0].sender(), 2);
}

}  // namespace
}  // namespace ferry
