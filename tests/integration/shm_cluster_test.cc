// The shared-memory lane in a real job (common/transport/shm_lane.h): scheduler, servers and
// workers as processes on this host. Every worker-server pair turns the lane on and every
// tensor byte then moves through shared memory, with exact sums (ferry-test-worker checks
// each element of every round); a worker with FERRY_SHM=0 shares the job with one on the
// lane; FERRY_SHM=0 everywhere is TCP only; dropped messages are resent through the lane; and
// with FERRY_SECRET the lane turns on after the authenticated probe. Across emulated hosts
// (network namespaces) the lane never turns on: tests/deploy/test_netns_cluster.py.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

const std::vector<std::string> kSums = {"--mode=sums", "--tensors=12", "--max_bytes=4194304",
                                        "--rounds=6"};

ClusterSpec Spec(const Env& env = {}) {
  ClusterSpec spec;
  spec.servers = 2;
  spec.workers = 2;
  spec.worker_args = kSums;
  spec.env = env;
  spec.stats_files = true;
  return spec;
}

void ExpectExact(const TestCluster& c) {
  for (int w : c.workers()) {
    EXPECT_NE(c.Output(w).find("OK rounds=6"), std::string::npos) << c.Output(w);
  }
}

// Starts every process of `c`, which must all exit 0, and checks every worker's sums.
void RunExactly(TestCluster& c) {
  c.Start();
  ASSERT_TRUE(c.Succeeds(300000));
  ExpectExact(c);
}

TEST(ShmClusterTest, EveryWorkerAndServerPairMovesItsBytesThroughTheLane) {
  TestCluster c(Spec());
  ASSERT_NO_FATAL_FAILURE(RunExactly(c));
  const StatsFiles& s = c.stats();
  EXPECT_EQ(s.Sum("worker", "van.shm_lanes"), 4u);  // 2 workers x 2 servers, both ends
  EXPECT_EQ(s.Sum("server", "van.shm_lanes"), 4u);
  // Every push went through shared memory and every sum came back through it.
  EXPECT_GT(s.Sum("worker", "van.shm_sent"), 0u);
  EXPECT_EQ(s.Sum("worker", "van.shm_sent"), s.Sum("server", "van.shm_received"));
  EXPECT_EQ(s.Sum("server", "van.shm_sent"), s.Sum("worker", "van.shm_received"));
  EXPECT_EQ(s.Sum("worker", "van.payloads_sent_zero_copy"), 0u);
  // The sums were made in the servers' shared arena and lent to both workers, not copied.
  EXPECT_EQ(s.Sum("server", "van.shm_lent"), s.Sum("server", "van.shm_sent"));
  EXPECT_EQ(s.Sum("worker", "van.shm_fallbacks") + s.Sum("server", "van.shm_fallbacks"), 0u);
  EXPECT_EQ(s.Sum("worker", "van.shm_refused") + s.Sum("server", "van.shm_refused"), 0u);
}

TEST(ShmClusterTest, AWorkerWithTheLaneOffSharesTheJobWithOneOnIt) {
  TestCluster c(Spec());
  c.StartScheduler();
  c.StartServer();
  c.StartServer();
  c.StartWorker(0);
  c.StartWorker(1, {}, {{"FERRY_SHM", "0"}});
  ASSERT_TRUE(c.Succeeds(300000));
  ExpectExact(c);
  const StatsFiles& s = c.stats();
  EXPECT_EQ(s.Sum("worker", "van.shm_lanes"), 2u);  // worker 0 with both servers
  EXPECT_EQ(s.Sum("server", "van.shm_lanes"), 2u);
  EXPECT_GT(s.Sum("worker", "van.payloads_sent_zero_copy"), 0u);  // worker 1, over TCP
}

TEST(ShmClusterTest, FerryShmOffMeansTcpOnly) {
  TestCluster c(Spec({{"FERRY_SHM", "0"}}));
  ASSERT_NO_FATAL_FAILURE(RunExactly(c));
  const StatsFiles& s = c.stats();
  EXPECT_EQ(s.Sum("worker", "van.shm_lanes") + s.Sum("server", "van.shm_lanes"), 0u);
  EXPECT_EQ(s.Sum("worker", "van.shm_sent") + s.Sum("server", "van.shm_sent"), 0u);
}

TEST(ShmClusterTest, DroppedMessagesAreResentThroughTheLaneAndSumsStayExact) {
  TestCluster c(Spec({{"FERRY_PARTITION_BYTES", "65536"},
                      {"FERRY_TEST_DROP_PERCENT", "2"},
                      {"FERRY_RESEND_TIMEOUT_MS", "300"}}));
  ASSERT_NO_FATAL_FAILURE(RunExactly(c));
  const StatsFiles& s = c.stats();
  EXPECT_GT(s.Sum("worker", "van.injected_drops") + s.Sum("server", "van.injected_drops"), 0u);
  EXPECT_GT(s.Sum("worker", "resends") + s.Sum("worker", "pulls"), 0u);
  EXPECT_EQ(s.Sum("worker", "van.shm_lanes"), 4u);
  EXPECT_EQ(s.Sum("worker", "van.shm_fallbacks"), 0u) << "dropped slots came back";
}

TEST(ShmClusterTest, WithASecretTheLaneTurnsOnAfterTheAuthenticatedProbe) {
  TestCluster c(Spec({{"FERRY_SECRET", "shm-lane-test-secret"}}));
  ASSERT_NO_FATAL_FAILURE(RunExactly(c));
  EXPECT_EQ(c.stats().Sum("worker", "van.shm_lanes"), 4u);
}

}  // namespace
}  // namespace ferry::testing
