// Scheduler failover (scheduler/adoption.h, common/cluster/scheduler_link.h): real
// processes on loopback; the scheduler killed with SIGKILL (or paused with SIGSTOP) in the
// middle of a job. The data plane goes on without it; a scheduler restarted at the job's
// address, or a standby of FERRY_SCHEDULERS, adopts the job; every sum stays exact (the
// test workers check each one and exit non-zero on the first wrong value).

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/support/http_get.h"
#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

// How many rounds a loop-mode worker has printed.
size_t Rounds(const std::string& out) {
  size_t n = 0;
  for (size_t at = out.find("round "); at != std::string::npos; at = out.find("round ", at + 1)) ++n;
  return n;
}

void Sleep(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms * TimeScale())); }

// A scheduler started again with the job's environment (and `extra`).
int Restart(TestCluster& c, const std::string& name, const Env& extra = {}) {
  return c.Spawn(name, "ferry-scheduler", {}, "scheduler", extra);
}

// Every process of `indices` exits with `code` within `timeout_ms`.
void ExpectExit(TestCluster& c, const std::vector<int>& indices, int code, long timeout_ms) {
  for (int p : indices) {
    ChildResult r = c.Wait(p, timeout_ms);
    ASSERT_TRUE(r.exited) << "process " << p << " hung\n" << c.AllOutput();
    EXPECT_EQ(r.exit_code, code) << "process " << p << "\n" << c.AllOutput();
  }
}

TEST(SchedulerFailoverTest, RestartedSchedulerAdoptsTheRunningJob) {
  TestCluster c(SpecOf(1, 2, {"--mode=loop", "--loop_rounds=250"}));
  c.Start();
  ASSERT_TRUE(c.WaitForOutput(c.workers()[0], "round 5\n", 30000));
  c.Kill(c.scheduler(), SIGKILL);
  const size_t at_kill = Rounds(c.Output(c.workers()[0]));
  Sleep(1000);
  // The data plane does not wait for the scheduler.
  EXPECT_GT(Rounds(c.Output(c.workers()[0])), at_kill + 5) << c.Output(c.workers()[0]);
  const int again = Restart(c, "scheduler-again");
  ASSERT_TRUE(c.WaitForOutput(again, "adopted the running job (term 2): 3 of 3 nodes", 20000))
      << c.AllOutput();
  ExpectExit(c, {again, c.servers()[0], c.workers()[0], c.workers()[1]}, 0, 60000);
  for (int w : c.workers()) {
    EXPECT_NE(c.Output(w).find("OK loop rounds=250"), std::string::npos) << c.Output(w);
  }
  EXPECT_NE(c.Output(again).find("every worker finalized; job finished"), std::string::npos)
      << c.Output(again);
}

TEST(SchedulerFailoverTest, AdoptingSchedulerServesTheJobsLiveMetrics) {
  const int metrics_port = FreePort();
  TestCluster c(SpecOf(1, 2, {"--mode=loop", "--loop_rounds=400"},
                     {{"FERRY_METRICS_PORT", std::to_string(metrics_port)}}));
  c.Start();
  ASSERT_TRUE(c.WaitForOutput(c.workers()[0], "round 5\n", 30000));
  c.Kill(c.scheduler(), SIGKILL);
  Sleep(500);
  const int again = Restart(c, "scheduler-again");
  ASSERT_TRUE(c.WaitForOutput(again, "adopted the running job", 20000)) << c.AllOutput();
  // The nodes' next heartbeats carry their counters to the new scheduler.
  std::string status, exposition;
  for (int i = 0; i < 100 * TimeScale(); ++i) {
    status = HttpGet(metrics_port, "/api/status");
    exposition = HttpGet(metrics_port, "/metrics");
    if (exposition.find("role=\"worker\",rank=\"1\"") != std::string::npos &&
        exposition.find("role=\"server\"") != std::string::npos) {
      break;
    }
    Sleep(100);
  }
  EXPECT_NE(status.find("\"state\":\"running\""), std::string::npos) << status;
  EXPECT_NE(exposition.find("role=\"worker\",rank=\"0\""), std::string::npos) << exposition;
  EXPECT_NE(exposition.find("role=\"worker\",rank=\"1\""), std::string::npos) << exposition;
  EXPECT_NE(exposition.find("role=\"server\""), std::string::npos) << exposition;
  ExpectExit(c, {again, c.servers()[0], c.workers()[0], c.workers()[1]}, 0, 60000);
}

TEST(SchedulerFailoverTest, BarrierWaitingAcrossARestartCompletes) {
  // Rank 0 waits in barrier 2 when the scheduler dies; rank 1 reaches it 3 s later, at the
  // restarted scheduler, which counts rank 0's arrival from its REJOIN.
  TestCluster c(SpecOf(1, 2, {"--mode=barriers", "--rounds=5", "--slow_barrier=2",
                            "--barrier_sleep_ms=" + std::to_string(3000 * TimeScale())}));
  c.Start();
  ASSERT_TRUE(c.WaitForOutput(c.workers()[0], "barrier 1 waited", 30000));
  Sleep(300);
  c.Kill(c.scheduler(), SIGKILL);
  Sleep(1000);
  const int again = Restart(c, "scheduler-again");
  ExpectExit(c, {again, c.servers()[0], c.workers()[0], c.workers()[1]}, 0, 60000);
  for (int w : c.workers()) {
    EXPECT_NE(c.Output(w).find("OK barriers=5"), std::string::npos) << c.Output(w);
  }
  EXPECT_NE(c.Output(c.workers()[0]).find("asks this node to rejoin: sending its part of the job "
                                          "(1 barrier(s) waiting)"),
            std::string::npos)
      << c.Output(c.workers()[0]);
}

TEST(SchedulerFailoverTest, WorkerThatDiedWithoutASchedulerIsFoundByTheNextOne) {
  TestCluster c(SpecOf(1, 2, {"--mode=loop"}));
  c.Start();
  ASSERT_TRUE(c.WaitForOutput(c.workers()[0], "round 5\n", 30000));
  c.Kill(c.scheduler(), SIGKILL);
  c.Kill(c.workers()[1], SIGKILL);
  Sleep(1000);
  const int again = Restart(c, "scheduler-again");
  // It leads with the majority that rejoined, then finds worker 1 silent.
  ExpectExit(c, {again, c.servers()[0], c.workers()[0]}, 1, 60000);
  EXPECT_NE(c.Output(again).find("2 of 3 nodes of membership epoch 0 rejoined; not yet heard "
                                 "from: worker 1 (127.0.0.1"),
            std::string::npos)
      << c.Output(again);
  for (int p : {c.servers()[0], c.workers()[0]}) {
    EXPECT_NE(c.Output(p).find("worker 1 (127.0.0.1"), std::string::npos) << c.Output(p);
    EXPECT_NE(c.Output(p).find("presumed dead"), std::string::npos) << c.Output(p);
  }
}

TEST(SchedulerFailoverTest, ElasticJobGoesOnWithoutAWorkerThatDiedWithoutAScheduler) {
  // As elastic_test runs it: each step's sums checked against the live workers.
  ClusterSpec spec = SpecOf(1, 3, {"--mode=elastic", "--rounds=40", "--loop_sleep_ms=60",
                                 "--commit_every=3"},
                          {{"FERRY_ELASTIC", "1"}, {"FERRY_PARTITION_BYTES", "262144"}});
  TestCluster c(spec);
  c.Start();
  ASSERT_TRUE(c.WaitForOutput(c.workers()[0], "step 5", 30000)) << c.AllOutput();
  c.Kill(c.scheduler(), SIGKILL);
  c.Kill(c.workers()[2], SIGKILL);
  Sleep(1000);
  const int again = Restart(c, "scheduler-again");
  ExpectExit(c, {again, c.servers()[0], c.workers()[0], c.workers()[1]}, 0, 90000);
  for (int w : {c.workers()[0], c.workers()[1]}) {
    EXPECT_NE(c.Output(w).find("OK elastic steps=40"), std::string::npos) << c.Output(w);
    EXPECT_NE(c.Output(w).find("reset epoch 1 rank"), std::string::npos) << c.Output(w);
  }
  EXPECT_NE(c.Output(again).find("worker 2 (127.0.0.1"), std::string::npos) << c.Output(again);
}

TEST(SchedulerFailoverTest, SchedulerOfAnotherJobIsRefusedAndTheJobWaitsForItsOwn) {
  TestCluster c(SpecOf(1, 2, {"--mode=loop", "--loop_rounds=300"}));
  c.Start();
  ASSERT_TRUE(c.WaitForOutput(c.workers()[0], "round 5\n", 30000));
  c.Kill(c.scheduler(), SIGKILL);
  const int wrong = Restart(c, "scheduler-wrong", {{"DMLC_NUM_WORKER", "3"}});
  ASSERT_TRUE(c.WaitForOutput(c.workers()[0], "DMLC_NUM_WORKER=2 (this scheduler's: 3)", 20000))
      << c.AllOutput();
  c.Kill(wrong, SIGKILL);
  const int right = Restart(c, "scheduler-right");
  ExpectExit(c, {right, c.servers()[0], c.workers()[0], c.workers()[1]}, 0, 60000);
  for (int w : c.workers()) {
    EXPECT_NE(c.Output(w).find("OK loop rounds=300"), std::string::npos) << c.Output(w);
  }
}

// Two schedulers: the first leads, the second stands by (FERRY_SCHEDULERS on every node).
struct Standby {
  int port = FreePort();
  Env env;
  explicit Standby(const TestCluster& c)
      : env{{"FERRY_SCHEDULERS", "127.0.0.1:" + std::to_string(c.port()) + ",127.0.0.1:" +
                                     std::to_string(port)}} {}
  int Start(TestCluster& c) const {
    Env own = env;
    own["DMLC_PORT"] = std::to_string(port);
    return Restart(c, "standby", own);
  }
};

TEST(SchedulerFailoverTest, StandbyTakesOverWithoutARestart) {
  TestCluster c(SpecOf(1, 2, {"--mode=loop", "--loop_rounds=400"}));
  const Standby standby(c);
  c.spec().env = standby.env;
  c.Start();
  const int second = standby.Start(c);
  ASSERT_TRUE(c.WaitForOutput(c.workers()[0], "round 5\n", 30000));
  c.Kill(c.scheduler(), SIGKILL);
  ASSERT_TRUE(c.WaitForOutput(second, "adopted the running job (term 2)", 30000)) << c.AllOutput();
  ExpectExit(c, {second, c.servers()[0], c.workers()[0], c.workers()[1]}, 0, 60000);
  for (int w : c.workers()) {
    EXPECT_NE(c.Output(w).find("OK loop rounds=400"), std::string::npos) << c.Output(w);
    EXPECT_NE(c.Output(w).find("turning to the scheduler (127.0.0.1:" +
                               std::to_string(standby.port) + ")"),
              std::string::npos)
        << c.Output(w);
    EXPECT_NE(c.Output(w).find("adopted the job (term 2)"), std::string::npos) << c.Output(w);
  }
}

TEST(SchedulerFailoverTest, PausedLeaderIsFencedOnceTheStandbyLeads) {
  TestCluster c(SpecOf(1, 2, {"--mode=loop", "--loop_rounds=600"}));
  const Standby standby(c);
  c.spec().env = standby.env;
  c.Start();
  const int second = standby.Start(c);
  ASSERT_TRUE(c.WaitForOutput(c.workers()[0], "round 5\n", 30000));
  c.Kill(c.scheduler(), SIGSTOP);
  ASSERT_TRUE(c.WaitForOutput(second, "adopted the running job (term 2)", 30000)) << c.AllOutput();
  c.Kill(c.scheduler(), SIGCONT);
  // The old leader asks its nodes whether it still leads; they answer FENCED; it stops
  // without acting on anyone.
  ExpectExit(c, {c.scheduler()}, 0, 30000);
  EXPECT_NE(c.Output(c.scheduler()).find("another scheduler leads this job (term 2, this one's 1"),
            std::string::npos)
      << c.Output(c.scheduler());
  ExpectExit(c, {second, c.servers()[0], c.workers()[0], c.workers()[1]}, 0, 60000);
  for (int w : c.workers()) {
    EXPECT_NE(c.Output(w).find("OK loop rounds=600"), std::string::npos) << c.Output(w);
  }
}

}  // namespace
}  // namespace ferry::testing
