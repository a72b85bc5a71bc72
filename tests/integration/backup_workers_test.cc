// Backup workers (FERRY_BACKUP_WORKERS; server/stragglers.h) with a real scheduler, servers
// and workers as processes: with b = 1 of 4 and one worker sleeping before every round,
// every averaged round closes without it, its late pushes are dropped and counted, it
// receives every closed sum, and the others' averages are exact (ferry-test-worker
// --mode=backup checks the values); sums, integer averages and barriers wait for it.
// Nodes that disagree on b are refused, naming both values.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

constexpr int kRounds = 6;

// 2 servers, 4 workers with FERRY_BACKUP_WORKERS=1 and 64 KiB partitions, rank 3 sleeping
// 300 ms before each round of ferry-test-worker --mode=backup (`args` added, `env` beside);
// every worker must report that each of the kRounds averages left rank 3 out.
std::unique_ptr<TestCluster> RunWithASlowWorker(const std::vector<std::string>& args,
                                                const Env& env = {}) {
  std::vector<std::string> all = {"--mode=backup", "--rounds=" + std::to_string(kRounds),
                                  "--slow_rank=3", "--slow_ms=300"};
  all.insert(all.end(), args.begin(), args.end());
  Env all_env = {{"FERRY_BACKUP_WORKERS", "1"}, {"FERRY_PARTITION_BYTES", "65536"}};
  all_env.insert(env.begin(), env.end());
  ClusterSpec c = SpecOf(2, 4, all, all_env);
  c.stats_files = true;
  auto cluster = std::make_unique<TestCluster>(c);
  cluster->Start();
  EXPECT_TRUE(cluster->Succeeds(120000));
  const std::string ok = "OK backup rounds=" + std::to_string(kRounds) +
                         " left_out=" + std::to_string(kRounds);
  for (int w : cluster->workers()) {
    EXPECT_NE(cluster->Output(w).find(ok), std::string::npos) << cluster->Output(w);
  }
  return cluster;
}

// Cut in whole partitions, or in frames (streaming aggregation) too.
class BackupWorkersClusterTest : public ::testing::TestWithParam<const char*> {};

TEST_P(BackupWorkersClusterTest, EveryRoundClosesWithoutTheSlowWorkerWhoStillGetsEverySum) {
  auto cluster = RunWithASlowWorker({}, {{"FERRY_FRAME_BYTES", GetParam()}});
  // The averaged tensor is 256 KiB in 64 KiB partitions: one late push of each per round.
  EXPECT_EQ(cluster->stats().Sum("server", "backup.late_pushes"), 4u * kRounds);
  EXPECT_EQ(cluster->stats().Sum("server", "rejected_pushes"), 0u);
  EXPECT_NE(cluster->AllOutput().find("worker 3's push of"), std::string::npos)
      << "a server logs the first late push of the slow worker";
}

INSTANTIATE_TEST_SUITE_P(Cuts, BackupWorkersClusterTest, ::testing::Values("0", "16384"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param) == "0" ? "WholePartitions" : "Frames";
                         });

// The slow worker catches up by sitting every other round out (PullAverageAsync): it still
// gets every average, and pushes late only in the rounds it computes.
TEST(BackupWorkersClusterTest, ALateWorkerSittingRoundsOutGetsEveryAverage) {
  auto cluster = RunWithASlowWorker({"--catch_up"});
  // Rounds 0, 2, 4 pushed late, 1, 3, 5 sat out: 4 partitions each.
  EXPECT_EQ(cluster->stats().Sum("server", "backup.late_pushes"), 4u * kRounds / 2);
  EXPECT_EQ(cluster->stats().Sum("server", "backup.rounds_sat_out"), 4u * kRounds / 2);
}

TEST(BackupWorkersClusterTest, AWorkerWithAnotherSettingIsRefusedNamingBoth) {
  ClusterSpec c = SpecOf(1, 2, {"--mode=refused", "--max_bytes=4096",
                                "--expect_error=FERRY_BACKUP_WORKERS=0 but this server runs "
                                "with FERRY_BACKUP_WORKERS=1"});
  c.server_env = {{"FERRY_BACKUP_WORKERS", "1"}};
  TestCluster cluster(c);
  cluster.Start();
  for (int w : cluster.workers()) {
    EXPECT_TRUE(cluster.WaitForOutput(w, "error as expected", 60000)) << cluster.AllOutput();
  }
}

}  // namespace
}  // namespace ferry::testing
