// Barriers (scheduler/barriers.h) without sockets: a group releases everyone once all its
// members arrived, a node arriving again replaces its earlier wait, the join barrier names
// the worker that joined last and reconciles the workers' declarations.

#include "scheduler/barriers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/membership.h"

namespace ferry {
namespace {

// A table of `servers` servers and `workers` workers (epoch 0).
NodeTable Table(int servers, int workers) {
  std::vector<Membership::Joiner> nodes;
  for (int i = 0; i < servers + workers; ++i) {
    Membership::Joiner j;
    j.identity = "id-" + std::to_string(i);
    j.request.set_role(i < servers ? proto::SERVER : proto::WORKER);
    j.request.set_host("198.18.0." + std::to_string(i + 1));
    j.request.set_port(i < servers ? 9000 + i : 0);
    j.request.set_requested_rank(-1);
    nodes.push_back(j);
  }
  Membership m(servers);
  m.First(nodes, workers, "198.18.0.100", 8000);
  return m.table();
}

int WorkerId(const NodeTable& t, int rank) {
  for (const auto& n : t.proto().nodes()) {
    if (n.role() == proto::WORKER && n.rank() == rank) return n.id();
  }
  return -1;
}

Message Barrier(int sender, proto::BarrierGroup group, uint64_t request, int join_position = 0) {
  Message m = MakeMessage(proto::BARRIER, sender);
  m.envelope.set_request_id(request);
  m.envelope.mutable_barrier()->set_group(group);
  m.envelope.mutable_barrier()->set_join_position(join_position);
  return m;
}

TEST(BarriersTest, ReleasesEveryWorkerOnceAllArrivedAnsweringTheirRequests) {
  const NodeTable t = Table(2, 3);
  Barriers barriers;
  EXPECT_TRUE(barriers.Arrive(Barrier(WorkerId(t, 0), proto::GROUP_WORKERS, 10), t).empty());
  EXPECT_TRUE(barriers.Arrive(Barrier(WorkerId(t, 1), proto::GROUP_WORKERS, 11), t).empty());
  // A server's barrier of everyone is another group: it does not complete the workers'.
  EXPECT_TRUE(barriers.Arrive(Barrier(ServerId(0), proto::GROUP_ALL, 50), t).empty());
  auto releases = barriers.Arrive(Barrier(WorkerId(t, 2), proto::GROUP_WORKERS, 12), t);
  ASSERT_EQ(releases.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(releases[r].first, WorkerId(t, r));
    EXPECT_EQ(releases[r].second.type(), proto::BARRIER_RELEASE);
    EXPECT_EQ(releases[r].second.envelope.request_id(), 10u + r);
    EXPECT_EQ(releases[r].second.envelope.barrier().group(), proto::GROUP_WORKERS);
  }
  // The group starts over.
  EXPECT_TRUE(barriers.Arrive(Barrier(WorkerId(t, 0), proto::GROUP_WORKERS, 20), t).empty());
}

TEST(BarriersTest, ANodeArrivingAgainReplacesItsEarlierWait) {
  const NodeTable t = Table(1, 2);
  Barriers barriers;
  EXPECT_TRUE(barriers.Arrive(Barrier(WorkerId(t, 0), proto::GROUP_WORKERS, 1), t).empty());
  EXPECT_TRUE(barriers.Arrive(Barrier(WorkerId(t, 0), proto::GROUP_WORKERS, 2), t).empty());
  auto releases = barriers.Arrive(Barrier(WorkerId(t, 1), proto::GROUP_WORKERS, 3), t);
  ASSERT_EQ(releases.size(), 2u);
  EXPECT_EQ(releases[0].second.envelope.request_id(), 2u);  // the request still waiting
}

TEST(BarriersTest, ClearVoidsEveryWait) {
  const NodeTable t = Table(1, 2);
  Barriers barriers;
  EXPECT_TRUE(barriers.Arrive(Barrier(WorkerId(t, 0), proto::GROUP_WORKERS, 1), t).empty());
  barriers.Clear();
  EXPECT_TRUE(barriers.Arrive(Barrier(WorkerId(t, 1), proto::GROUP_WORKERS, 2), t).empty());
}

TEST(BarriersTest, TheJoinBarrierNamesTheHighestJoinPositionTiesToTheLaterArrival) {
  const NodeTable t = Table(1, 3);
  Barriers barriers;
  barriers.Arrive(Barrier(WorkerId(t, 2), proto::GROUP_JOIN, 1, /*join_position=*/5), t);
  barriers.Arrive(Barrier(WorkerId(t, 0), proto::GROUP_JOIN, 2, 7), t);
  auto releases = barriers.Arrive(Barrier(WorkerId(t, 1), proto::GROUP_JOIN, 3, 7), t);
  ASSERT_EQ(releases.size(), 3u);
  for (const auto& [node, release] : releases) {
    EXPECT_EQ(release.envelope.barrier().last_rank(), 1) << "node " << node;
    EXPECT_FALSE(release.envelope.barrier().catalogs_differ());
  }
}

// Catalogs: `ids` tensors named t0.. with ids 0.., next id = ids.
proto::Barrier JoinBody(int ids, uint64_t digest) {
  proto::Barrier b;
  b.set_group(proto::GROUP_JOIN);
  b.set_catalog_digest(digest);
  b.set_catalog_next_id(ids);
  b.mutable_catalog()->set_next_id(ids);
  for (int i = 0; i < ids; ++i) {
    auto* t = b.mutable_catalog()->add_tensors();
    t->set_id(i);
    t->set_name("t" + std::to_string(i));
    t->set_dtype(proto::FLOAT32);
    t->add_shape(4);
  }
  return b;
}

TEST(BarriersTest, TheJoinBarrierHandsTheRichestCatalogToWorkersThatJoinedEarly) {
  const NodeTable t = Table(1, 2);
  Barriers barriers;
  Message early = Barrier(WorkerId(t, 0), proto::GROUP_JOIN, 1, 1);
  *early.envelope.mutable_barrier() = JoinBody(2, 111);
  Message late = Barrier(WorkerId(t, 1), proto::GROUP_JOIN, 2, 2);
  *late.envelope.mutable_barrier() = JoinBody(3, 222);
  barriers.Arrive(early, t);
  auto releases = barriers.Arrive(late, t);
  ASSERT_EQ(releases.size(), 2u);
  const proto::Barrier& to_early = releases[0].second.envelope.barrier();
  EXPECT_TRUE(to_early.catalogs_differ());
  EXPECT_EQ(to_early.catalog().tensors_size(), 3);  // the later worker's
  EXPECT_FALSE(releases[1].second.envelope.barrier().catalogs_differ());
}

TEST(BarriersTest, TheJoinBarrierRefusesCatalogsThatAreNotEarlierStatesOfOneAnother) {
  const NodeTable t = Table(1, 2);
  Barriers barriers;
  Message a = Barrier(WorkerId(t, 0), proto::GROUP_JOIN, 1, 1);
  *a.envelope.mutable_barrier() = JoinBody(2, 111);
  Message b = Barrier(WorkerId(t, 1), proto::GROUP_JOIN, 2, 2);
  proto::Barrier other = JoinBody(3, 333);
  other.mutable_catalog()->mutable_tensors(0)->set_name("renamed");  // id 0 differs
  *b.envelope.mutable_barrier() = other;
  barriers.Arrive(a, t);
  auto releases = barriers.Arrive(b, t);
  ASSERT_EQ(releases.size(), 2u);
  for (const auto& [node, release] : releases) {
    EXPECT_TRUE(release.envelope.barrier().catalogs_differ()) << "node " << node;
    EXPECT_EQ(release.envelope.barrier().catalog().tensors_size(), 0);
  }
}

// Numbered barriers: a BARRIER whose number its group already released (the scheduler
// that released it died before this node heard) is answered at once with that release.
Message Numbered(int sender, proto::BarrierGroup group, uint64_t request, uint64_t seq) {
  Message m = Barrier(sender, group, request);
  m.envelope.mutable_barrier()->set_seq(seq);
  return m;
}

TEST(BarriersTest, ABarrierAlreadyReleasedIsReleasedAgainAtOnce) {
  const NodeTable t = Table(1, 2);
  Barriers barriers;
  const int w0 = WorkerId(t, 0), w1 = WorkerId(t, 1);
  EXPECT_TRUE(barriers.Arrive(Numbered(w0, proto::GROUP_WORKERS, 1, 1), t).empty());
  ASSERT_EQ(barriers.Arrive(Numbered(w1, proto::GROUP_WORKERS, 7, 1), t).size(), 2u);
  // Worker 0's release was lost: it asks again for barrier 1, under its request id.
  auto again = barriers.Arrive(Numbered(w0, proto::GROUP_WORKERS, 1, 1), t);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].first, w0);
  EXPECT_EQ(again[0].second.envelope.request_id(), 1u);
  EXPECT_EQ(again[0].second.envelope.barrier().last_rank(), 1);
  // Barrier 2 still waits for both.
  EXPECT_TRUE(barriers.Arrive(Numbered(w0, proto::GROUP_WORKERS, 2, 2), t).empty());
  EXPECT_EQ(barriers.Arrive(Numbered(w1, proto::GROUP_WORKERS, 8, 2), t).size(), 2u);
}

TEST(BarriersTest, SeededCountsReleaseTheWaitersOfABarrierTheSchedulerBeforeReleased) {
  // An adopting scheduler: worker 1 says it completed 3 barriers (the third released with
  // last rank 0); worker 0 still waits in the third; then both meet in the fourth.
  const NodeTable t = Table(1, 2);
  Barriers barriers;
  proto::Rejoin::Done done;
  done.set_group(proto::GROUP_WORKERS);
  done.set_count(3);
  done.mutable_release()->set_group(proto::GROUP_WORKERS);
  done.mutable_release()->set_last_rank(0);
  barriers.Seed(done);
  done.set_count(2);  // an older count changes nothing
  barriers.Seed(done);
  auto released = barriers.Arrive(Numbered(WorkerId(t, 0), proto::GROUP_WORKERS, 40, 3), t);
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].second.envelope.request_id(), 40u);
  EXPECT_EQ(released[0].second.envelope.barrier().last_rank(), 0);
  EXPECT_TRUE(barriers.Arrive(Numbered(WorkerId(t, 1), proto::GROUP_WORKERS, 9, 4), t).empty());
  EXPECT_EQ(barriers.Arrive(Numbered(WorkerId(t, 0), proto::GROUP_WORKERS, 41, 4), t).size(), 2u);
  // A new epoch starts the counts again.
  barriers.Clear();
  EXPECT_TRUE(barriers.Arrive(Numbered(WorkerId(t, 0), proto::GROUP_WORKERS, 42, 1), t).empty());
}

}  // namespace
}  // namespace ferry
