// Elastic training (FERRY_ELASTIC=1; worker.h, Reset(); scheduler.h): real processes on
// loopback, a node killed with SIGKILL mid-run. Every worker runs ferry-test-worker
// --mode=elastic: each step's sums are checked exactly against the live workers, the
// workers restore their last commit and take rank 0's state at each membership change,
// and at the end every surviving worker must hold the same model (equal checksums).

#include <gtest/gtest.h>
#include <signal.h>

#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

constexpr int kSteps = 40;

// `sleep_ms` between steps: 60 lets a kill land between steps mostly; 0 lands it during
// a step's push_pulls.
ClusterSpec ElasticSpec(int servers, int workers, const Env& env = {}, int sleep_ms = 60) {
  ClusterSpec spec;
  spec.servers = servers;
  spec.workers = workers;
  spec.worker_args = {"--mode=elastic", "--rounds=" + std::to_string(kSteps),
                      "--loop_sleep_ms=" + std::to_string(sleep_ms), "--commit_every=3"};
  spec.env = {{"FERRY_ELASTIC", "1"},
              // elastic_a (1.2 MB) spans every server.
              {"FERRY_PARTITION_BYTES", "262144"}};
  for (const auto& [k, v] : env) spec.env[k] = v;
  return spec;
}

// Every process in `survivors` exits 0 and every worker among them finished all steps
// with `resets` resets (-1: any number), with one checksum between them.
void ExpectFinishedAlike(TestCluster& c, const std::vector<int>& survivors,
                         const std::vector<int>& workers, int resets) {
  for (int p : survivors) {
    ChildResult r = c.Wait(p, 120000);
    ASSERT_TRUE(r.exited) << "a process hung after the failure\n" << c.AllOutput();
    ASSERT_EQ(r.exit_code, 0) << c.AllOutput();
  }
  // joined_last: every survivor ended with a join() over the live workers.
  const std::regex ok("OK elastic steps=(\\d+) resets=(\\d+) checksum=([0-9a-f]+) joined_last=\\d");
  std::set<std::string> checksums;
  for (int w : workers) {
    const std::string out = c.Output(w);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, ok)) << out;
    EXPECT_EQ(m[1].str(), std::to_string(kSteps)) << out;
    if (resets >= 0) {
      EXPECT_EQ(m[2].str(), std::to_string(resets)) << out;
    }
    checksums.insert(m[3].str());
  }
  EXPECT_EQ(checksums.size(), 1u) << "the workers' models differ\n" << c.AllOutput();
}

TEST(ElasticTest, AKilledWorkerLeavesTheOthersTrainingWithExactSums) {
  TestCluster c(ElasticSpec(2, 3));
  c.Start();
  ASSERT_TRUE(c.WaitForOutput(c.workers()[2], "step 6\n", 60000));
  c.Kill(c.workers()[2], SIGKILL);
  const std::vector<int> workers = {c.workers()[0], c.workers()[1]};
  ExpectFinishedAlike(c, {workers[0], workers[1], c.servers()[0], c.servers()[1], c.scheduler()},
                      workers, 1);
  for (int w : workers) {
    EXPECT_NE(c.Output(w).find("size 2 step"), std::string::npos) << c.Output(w);
  }
  EXPECT_NE(c.Output(c.scheduler()).find("membership epoch 1"), std::string::npos)
      << c.Output(c.scheduler());
}

TEST(ElasticTest, AKilledServersPartitionsMoveToTheSurvivors) {
  TestCluster c(ElasticSpec(3, 2));
  c.Start();
  ASSERT_TRUE(c.WaitForOutput(c.workers()[0], "step 6\n", 60000));
  c.Kill(c.servers()[1], SIGKILL);
  const std::vector<int> workers = c.workers();
  ExpectFinishedAlike(c, {workers[0], workers[1], c.servers()[0], c.servers()[2], c.scheduler()},
                      workers, 1);
  for (int w : workers) {
    EXPECT_NE(c.Output(w).find("2 live servers; "), std::string::npos) << c.Output(w);
    EXPECT_NE(c.Output(w).find("partitions placed again"), std::string::npos) << c.Output(w);
  }
  EXPECT_NE(c.Output(c.scheduler()).find("partitions move to the 2 live servers"),
            std::string::npos)
      << c.Output(c.scheduler());
}

TEST(ElasticTest, AServerKilledDuringPushPullsWithDroppedMessages) {
  // No pause between steps: the kill lands while partitions are in flight, and 1% of all
  // messages are dropped (resends), before and after the change.
  TestCluster c(ElasticSpec(2, 2,
                            {{"FERRY_TEST_DROP_PERCENT", "1"}, {"FERRY_RESEND_TIMEOUT_MS", "300"}},
                            /*sleep_ms=*/0));
  c.Start();
  ASSERT_TRUE(c.WaitForOutput(c.workers()[0], "step 8\n", 60000));
  c.Kill(c.servers()[0], SIGKILL);
  const std::vector<int> workers = c.workers();
  ExpectFinishedAlike(c, {workers[0], workers[1], c.servers()[1], c.scheduler()}, workers, 1);
}

TEST(ElasticTest, TwoFailuresInARowAServerThenAWorker) {
  TestCluster c(ElasticSpec(2, 3));
  c.Start();
  ASSERT_TRUE(c.WaitForOutput(c.workers()[0], "step 5\n", 60000));
  c.Kill(c.servers()[1], SIGKILL);
  ASSERT_TRUE(c.WaitForOutput(c.workers()[2], "reset epoch 1", 60000));
  ASSERT_TRUE(c.WaitForOutput(c.workers()[2], "step 12\n", 60000));
  c.Kill(c.workers()[2], SIGKILL);
  const std::vector<int> workers = {c.workers()[0], c.workers()[1]};
  ExpectFinishedAlike(c, {workers[0], workers[1], c.servers()[0], c.scheduler()}, workers, 2);
  for (int w : workers) {
    EXPECT_NE(c.Output(w).find("reset epoch 2 rank"), std::string::npos) << c.Output(w);
  }
}

TEST(ElasticTest, ASpareTakesTheDeadServersSlotAndAnUnneededSpareEndsCleanly) {
  TestCluster c(ElasticSpec(2, 2));
  c.Start();
  // One spare by its setting, one because it came to a job whose slots were filled (as a
  // dead server restarted by its supervisor does).
  const int spare1 = c.StartServer({{"FERRY_SPARE", "1"}}, "spare1");
  ASSERT_TRUE(c.WaitForOutput(c.scheduler(), "node table sent", 60000));
  const int spare2 = c.StartServer({}, "late-server");
  ASSERT_TRUE(c.WaitForOutput(c.scheduler(), "2 spare(s) wait", 60000));
  ASSERT_TRUE(c.WaitForOutput(c.workers()[0], "step 6\n", 60000));
  c.Kill(c.servers()[1], SIGKILL);
  const std::vector<int> workers = c.workers();
  ExpectFinishedAlike(c, {workers[0], workers[1], c.servers()[0], spare1, spare2, c.scheduler()},
                      workers, 1);
  EXPECT_NE(c.Output(c.scheduler()).find("a spare took the slot of server "), std::string::npos)
      << c.Output(c.scheduler());
  // The first spare to register took the slot; the workers moved to it.
  const bool first = c.Output(spare1).find("joined the cluster as server") != std::string::npos;
  const int promoted = first ? spare1 : spare2;
  const int unneeded = first ? spare2 : spare1;
  EXPECT_NE(c.Output(promoted).find("joined the cluster as server"), std::string::npos)
      << c.AllOutput();
  EXPECT_TRUE(std::regex_search(c.Output(promoted), std::regex("server done: [1-9][0-9]* pushes")))
      << c.Output(promoted);
  for (int w : workers) {
    EXPECT_NE(c.Output(w).find("moved from"), std::string::npos) << c.Output(w);
    EXPECT_EQ(c.Output(w).find("partitions placed again"), std::string::npos) << c.Output(w);
  }
  EXPECT_NE(c.Output(unneeded).find("the job ended before this spare server was needed"),
            std::string::npos)
      << c.Output(unneeded);
}

TEST(ElasticTest, AWorkerAddedWhileTheJobRunsJoinsAtTheNextCommit) {
  // 2 workers; a third process with the job's environment and no DMLC_WORKER_ID starts
  // mid-run: it waits, is admitted at the workers' next commit (no rollback), starts from
  // rank 0's tensor catalog and state, and from then on every sum is over 3 workers.
  TestCluster c(ElasticSpec(2, 2, {{"FERRY_MAX_WORKERS", "3"}}));
  c.Start();
  ASSERT_TRUE(c.WaitForOutput(c.workers()[0], "step 6\n", 60000));
  const int joiner = c.Spawn("joiner", "ferry-test-worker", c.spec().worker_args, "worker", {},
                             {"DMLC_WORKER_ID"});
  std::vector<int> workers = c.workers();
  workers.push_back(joiner);
  ExpectFinishedAlike(c, {workers[0], workers[1], joiner, c.servers()[0], c.servers()[1],
                          c.scheduler()},
                      workers, 0);
  EXPECT_NE(c.Output(joiner).find("joined at epoch 1 as rank 2 of 3"), std::string::npos)
      << c.Output(joiner);
  EXPECT_NE(c.Output(joiner).find("with rank 0's catalog of"), std::string::npos)
      << c.Output(joiner);
  for (int w : c.workers()) {
    EXPECT_NE(c.Output(w).find("rank " + std::string(w == c.workers()[0] ? "0" : "1") + " size 3"),
              std::string::npos)
        << c.Output(w);
  }
  EXPECT_NE(c.Output(c.scheduler()).find("1 worker(s) joined at the workers' commit"),
            std::string::npos)
      << c.Output(c.scheduler());
}

TEST(ElasticTest, BelowTheMinimumTheJobWaitsUntilAWorkerJoins) {
  // FERRY_MIN_WORKERS=2 of 2: a worker dies, the survivor waits (no epoch below the
  // minimum); a new worker process comes, the survivor takes the epoch without the dead
  // one, and admits the new worker at its next commit.
  TestCluster c(ElasticSpec(1, 2, {{"FERRY_MIN_WORKERS", "2"}}));
  c.Start();
  ASSERT_TRUE(c.WaitForOutput(c.workers()[0], "step 4\n", 60000));
  c.Kill(c.workers()[1], SIGKILL);
  ASSERT_TRUE(c.WaitForOutput(c.scheduler(), "fewer than FERRY_MIN_WORKERS=2", 60000));
  const int joiner = c.Spawn("joiner", "ferry-test-worker", c.spec().worker_args, "worker", {},
                             {"DMLC_WORKER_ID"});
  const std::vector<int> workers = {c.workers()[0], joiner};
  ExpectFinishedAlike(c, {workers[0], joiner, c.servers()[0], c.scheduler()}, workers, -1);
  EXPECT_NE(c.Output(c.workers()[0]).find("admitted at step"), std::string::npos)
      << c.Output(c.workers()[0]);
  EXPECT_NE(c.Output(joiner).find("as rank 1 of 2"), std::string::npos) << c.Output(joiner);
}

TEST(ElasticTest, BelowTheMinimumTheJobWaitsThenFailsSayingWhy) {
  TestCluster c(ElasticSpec(1, 2,
                            {{"FERRY_MIN_WORKERS", "2"}, {"FERRY_MIN_WORKERS_TIMEOUT_MS", "2000"}}));
  c.Start();
  ASSERT_TRUE(c.WaitForOutput(c.workers()[0], "step 4\n", 60000));
  c.Kill(c.workers()[1], SIGKILL);
  for (int p : {c.workers()[0], c.servers()[0], c.scheduler()}) {
    ChildResult r = c.Wait(p, 60000);
    ASSERT_TRUE(r.exited) << c.AllOutput();
    EXPECT_EQ(r.exit_code, 1) << c.Output(p);
  }
  const std::string reason =
      "only 1 live workers, fewer than FERRY_MIN_WORKERS=2 (worker 1 (127.0.0.1";
  EXPECT_NE(c.Output(c.scheduler()).find("waiting at most 2000 ms"), std::string::npos)
      << c.Output(c.scheduler());
  for (int p : {c.workers()[0], c.scheduler()}) {
    EXPECT_NE(c.Output(p).find(reason), std::string::npos) << c.Output(p);
    EXPECT_NE(c.Output(p).find("no worker joined within 2000 ms (FERRY_MIN_WORKERS_TIMEOUT_MS)"),
              std::string::npos)
        << c.Output(p);
  }
}

}  // namespace
}  // namespace ferry::testing
