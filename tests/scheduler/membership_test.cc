// Membership (scheduler/membership.h): epoch 0 as the scheduler always built it, and the
// elastic steps: a dead server's slot to a spare or to nobody, a dead worker's peers
// renumbered, new workers; the invariants after any sequence of steps.

#include "scheduler/membership.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace ferry {
namespace {

Membership::Joiner Node(proto::Role role, const std::string& host, int requested_rank = -1,
                        const std::string& kind = "") {
  static int next = 0;
  Membership::Joiner j;
  j.identity = "id-" + std::to_string(++next);
  j.request.set_role(role);
  j.request.set_host(host);
  j.request.set_port(role == proto::SERVER ? 9000 + next : 0);
  j.request.set_requested_rank(requested_rank);
  j.request.set_kind(kind);
  j.request.set_hostname("host-" + host);
  return j;
}

// Ranks 0..W-1 once each; live servers' weights sum to 1; ids unique; every server in a
// slot id 1..S with rank id - 1.
void ExpectInvariants(const NodeTable& t) {
  std::vector<int> ranks;
  std::set<int> ids;
  double weights = 0;
  int servers = 0;
  for (const auto& n : t.proto().nodes()) {
    EXPECT_TRUE(ids.insert(n.id()).second) << "id " << n.id() << " twice";
    if (n.role() == proto::WORKER) ranks.push_back(n.rank());
    if (n.role() == proto::SERVER) {
      ++servers;
      weights += n.weight();
      EXPECT_EQ(n.id(), ServerId(n.rank()));
      EXPECT_LE(n.id(), t.num_servers());
      EXPECT_GT(n.weight(), 0);
    }
  }
  std::sort(ranks.begin(), ranks.end());
  std::vector<int> want(ranks.size());
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(ranks, want);
  EXPECT_EQ(t.num_workers(), static_cast<int>(ranks.size()));
  if (servers > 0) {
    EXPECT_NEAR(weights, 1.0, 1e-12);
  }
}

TEST(MembershipTest, TheFirstEpochNumbersAsTheSchedulerAlwaysDid) {
  Membership m(2);
  // Registration order: a worker asking for rank 2, a CPU-only server, two join-order
  // workers, a server on a worker's host.
  const std::vector<Membership::Joiner> pending = {
      Node(proto::WORKER, "10.0.0.1", 2), Node(proto::SERVER, "10.0.0.9"),
      Node(proto::WORKER, "10.0.0.2"), Node(proto::WORKER, "10.0.0.3"),
      Node(proto::SERVER, "10.0.0.2")};
  const NodeTable& t = m.First(pending, 3, "10.0.0.100", 1234);
  EXPECT_EQ(m.epoch(), 0u);
  EXPECT_EQ(t.num_servers(), 2);
  EXPECT_EQ(t.node(kSchedulerId).port(), 1234);
  // Servers by registration order; the one on a worker's host colocated.
  EXPECT_EQ(t.node(ServerId(0)).routing_id(), pending[1].identity);
  EXPECT_EQ(t.node(ServerId(0)).kind(), "cpu");
  EXPECT_EQ(t.node(ServerId(1)).routing_id(), pending[4].identity);
  EXPECT_EQ(t.node(ServerId(1)).kind(), "colocated");
  // One colocated, one CPU-only: the theorem's n = 1 case gives the CPU server nothing.
  EXPECT_EQ(t.node(ServerId(0)).weight(), 0.0);
  EXPECT_EQ(t.node(ServerId(1)).weight(), 1.0);
  // Rank 2 as asked, the others the lowest free ranks in order; ids by rank.
  EXPECT_EQ(t.node(WorkerId(2, 2)).routing_id(), pending[0].identity);
  EXPECT_EQ(t.node(WorkerId(2, 0)).routing_id(), pending[2].identity);
  EXPECT_EQ(t.node(WorkerId(2, 1)).routing_id(), pending[3].identity);
}

// Two colocated servers and a CPU-only one (weights all positive), three workers.
Membership ThreeAndThree(std::vector<Membership::Joiner>* pending = nullptr) {
  Membership m(3);
  std::vector<Membership::Joiner> p = {
      Node(proto::SERVER, "h1"), Node(proto::SERVER, "h2"), Node(proto::SERVER, "cpu1"),
      Node(proto::WORKER, "h1"), Node(proto::WORKER, "h2"), Node(proto::WORKER, "h3")};
  m.First(p, 3, "sched", 1);
  if (pending) *pending = p;
  return m;
}

TEST(MembershipTest, ADeadServersSlotGoesToTheFirstSpareAndNobodyElseMoves) {
  std::vector<Membership::Joiner> pending;
  Membership m = ThreeAndThree(&pending);
  const proto::NodeTable before = m.table().proto();
  const Membership::Joiner spare1 = Node(proto::SERVER, "h3");
  const Membership::Joiner spare2 = Node(proto::SERVER, "cpu2");
  m.AddSpare(spare1);
  m.AddSpare(spare2);
  const NodeTable& t = m.WithoutServer(ServerId(1));
  EXPECT_EQ(m.epoch(), 1u);
  EXPECT_EQ(m.spares(), 1u);
  const proto::NodeInfo& slot = t.node(ServerId(1));
  EXPECT_EQ(slot.rank(), 1);
  EXPECT_EQ(slot.routing_id(), spare1.identity);
  EXPECT_EQ(slot.host(), "h3");
  EXPECT_EQ(slot.kind(), "colocated");  // worker 2 lives on h3
  for (int rank : {0, 2}) {
    EXPECT_EQ(t.node(ServerId(rank)).routing_id(), pending[rank].identity);
  }
  EXPECT_EQ(t.Servers().size(), 3u);
  ExpectInvariants(t);
  // Same kinds as before, so the same weights: nothing to place again.
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(t.node(ServerId(rank)).weight(), NodeTable(before).node(ServerId(rank)).weight());
  }
}

TEST(MembershipTest, WithoutASpareTheSlotEmptiesAndTheSurvivorsShareTheWeights) {
  Membership m = ThreeAndThree();
  const NodeTable& t = m.WithoutServer(ServerId(0));
  EXPECT_EQ(m.epoch(), 1u);
  EXPECT_FALSE(t.Contains(ServerId(0)));
  EXPECT_EQ(t.num_servers(), 3);  // slots
  ASSERT_EQ(t.Servers().size(), 2u);
  // One colocated (h2) and one CPU-only survivor: n = 1, so all on the colocated one.
  EXPECT_EQ(t.node(ServerId(1)).weight(), 1.0);
  EXPECT_EQ(t.node(ServerId(2)).weight(), 0.0);
  // ExpectInvariants wants positive weights; this case is the theorem's n = 1 edge.
  const NodeTable& t2 = m.WithoutServer(ServerId(2));
  EXPECT_EQ(m.epoch(), 2u);
  ASSERT_EQ(t2.Servers().size(), 1u);
  ExpectInvariants(t2);
}

TEST(MembershipTest, ADeadWorkersPeersAreRenumberedInTheirOldOrderWithTheirIds) {
  Membership m = ThreeAndThree();
  const int w0 = WorkerId(3, 0), w2 = WorkerId(3, 2);
  const NodeTable& t = m.WithoutWorker(WorkerId(3, 1));
  EXPECT_EQ(m.epoch(), 1u);
  EXPECT_EQ(t.num_workers(), 2);
  EXPECT_EQ(t.node(w0).rank(), 0);
  EXPECT_EQ(t.node(w2).rank(), 1);
  ExpectInvariants(t);
  const NodeTable& t2 = m.WithoutWorker(w0);
  EXPECT_EQ(t2.node(w2).rank(), 0);  // rank 0 moves only when rank 0 died
  ExpectInvariants(t2);
}

TEST(MembershipTest, NewWorkersTakeTheNextRanksAndIdsNoOneHadBefore) {
  Membership m = ThreeAndThree();
  std::set<int> ever;
  for (const auto& n : m.table().proto().nodes()) ever.insert(n.id());
  m.WithoutWorker(WorkerId(3, 0));
  const Membership::Joiner a = Node(proto::WORKER, "h4"), b = Node(proto::WORKER, "h5", 0);
  const NodeTable& t = m.WithWorkers({a, b});
  EXPECT_EQ(m.epoch(), 2u);
  EXPECT_EQ(t.num_workers(), 4);
  for (const auto& n : t.proto().nodes()) {
    if (n.routing_id() == a.identity || n.routing_id() == b.identity) {
      EXPECT_TRUE(ever.insert(n.id()).second) << "id " << n.id() << " reused";
      // The next ranks in registration order; a requested rank does not displace anyone.
      EXPECT_EQ(n.rank(), n.routing_id() == a.identity ? 2 : 3);
    }
  }
  ExpectInvariants(t);
}

TEST(MembershipTest, AnySequenceOfStepsKeepsTheInvariants) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    Membership m(4);
    std::vector<Membership::Joiner> p;
    for (int s = 0; s < 4; ++s) p.push_back(Node(proto::SERVER, "s" + std::to_string(s)));
    for (int w = 0; w < 4; ++w) p.push_back(Node(proto::WORKER, "w" + std::to_string(w)));
    m.First(p, 4, "sched", 1);
    std::set<int> ever;
    for (const auto& n : m.table().proto().nodes()) ever.insert(n.id());
    for (int step = 0; step < 12; ++step) {
      const proto::NodeTable& now = m.table().proto();
      std::vector<int> servers, workers;
      for (const auto& n : now.nodes()) {
        if (n.role() == proto::SERVER) servers.push_back(n.id());
        if (n.role() == proto::WORKER) workers.push_back(n.id());
      }
      const uint32_t epoch = m.epoch();
      switch (rng() % 4) {
        case 0:
          if (servers.size() > 1) m.WithoutServer(servers[rng() % servers.size()]);
          break;
        case 1:
          if (workers.size() > 1) m.WithoutWorker(workers[rng() % workers.size()]);
          break;
        case 2:
          m.AddSpare(Node(proto::SERVER, "spare" + std::to_string(step), -1, "cpu"));
          break;
        default:
          m.WithWorkers({Node(proto::WORKER, "new" + std::to_string(step))});
      }
      EXPECT_LE(m.epoch() - epoch, 1u);
      for (const auto& n : m.table().proto().nodes()) {
        if (n.role() == proto::WORKER && !std::count(workers.begin(), workers.end(), n.id())) {
          EXPECT_TRUE(ever.insert(n.id()).second) << "worker id " << n.id() << " reused";
        }
      }
      const NodeTable& t = m.table();
      // Positive weights hold unless the theorem's n = 1 edge gives a CPU server 0.
      int colocated = 0;
      for (const auto& s : t.Servers()) colocated += s.kind() == "colocated";
      if (colocated != 1) ExpectInvariants(t);
    }
  }
}

}  // namespace
}  // namespace ferry
