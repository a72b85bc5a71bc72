// Integration tests: a real scheduler, real servers and real workers as separate
// processes on loopback, talking ZeroMQ. Every test cleans up its processes, also
// when it fails (ProcessGroup).

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <regex>
#include <thread>

#include "tests/support/process_group.h"
#include "tests/support/stats_files.h"

namespace ferry::testing {
namespace {

struct Cluster {
  ProcessGroup group;
  int port = FreePort();
  int scheduler = -1;
  std::vector<int> servers, workers;

  void Start(int num_servers, int num_workers, const std::vector<std::string>& worker_args,
             const std::map<std::string, std::string>& extra = {}) {
    auto env = [&](const std::string& role) {
      auto e = ClusterEnv(role, num_workers, num_servers, port);
      for (const auto& [k, v] : extra) e[k] = v;
      return e;
    };
    scheduler = group.Spawn("scheduler", {BinaryPath("ferry-scheduler")}, env("scheduler"));
    for (int s = 0; s < num_servers; ++s) {
      servers.push_back(group.Spawn("server" + std::to_string(s), {BinaryPath("ferry-server")},
                                    env("server")));
    }
    for (int w = 0; w < num_workers; ++w) {
      auto e = env("worker");
      e["DMLC_WORKER_ID"] = std::to_string(w);
      std::vector<std::string> argv = {BinaryPath("ferry-test-worker")};
      argv.insert(argv.end(), worker_args.begin(), worker_args.end());
      workers.push_back(group.Spawn("worker" + std::to_string(w), argv, e));
    }
  }
};

TEST(ClusterTest, ThreeWorkersTwoServersSumExactly) {
  Cluster c;
  c.Start(2, 3, {"--mode=sums", "--tensors=40", "--max_bytes=67108864", "--rounds=20"},
          {{"FERRY_PARTITION_BYTES", "1048576"}});
  auto results = c.group.WaitAll(600000);
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].exited) << "process " << i << " hung\n" << c.group.AllOutput();
    ASSERT_EQ(results[i].exit_code, 0) << "process " << i << "\n" << c.group.AllOutput();
  }
  for (int w : c.workers) {
    EXPECT_NE(c.group.Output(w).find("OK rounds=20"), std::string::npos) << c.group.Output(w);
  }
}

// The sum over `outputs` of the number logged before `label` ("<n> <label>").
uint64_t CountLogged(const std::vector<std::string>& outputs, const std::string& label) {
  uint64_t total = 0;
  std::regex pattern("([0-9]+) " + label);
  for (const auto& out : outputs) {
    for (std::sregex_iterator it(out.begin(), out.end(), pattern), end; it != end; ++it) {
      total += std::stoull((*it)[1]);
    }
  }
  return total;
}

TEST(ClusterTest, DroppedAndDelayedMessagesAreResentAndSumsStayExact) {
  // Fault injection in every node's transport: 1% of data messages (pushes, acks, sums,
  // pulls) dropped, every message held 20 ms. Small partitions make thousands of
  // messages, so drops happen at every kind of message; resends recover them all.
  Cluster c;
  testing::StatsFiles stats;  // the counters every node writes at exit
  c.Start(2, 2, {"--mode=sums", "--tensors=24", "--max_bytes=262144", "--rounds=15"},
          {{"FERRY_PARTITION_BYTES", "16384"},
           {"FERRY_TEST_DROP_PERCENT", "1"},
           {"FERRY_TEST_DELAY_MS", "20"},
           {"FERRY_RESEND_TIMEOUT_MS", "300"},
           {"FERRY_STATS_FILE", stats.path_template()}});
  auto results = c.group.WaitAll(300000 * TimeScale());
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].exited) << "process " << i << " hung\n" << c.group.AllOutput();
    ASSERT_EQ(results[i].exit_code, 0) << "process " << i << "\n" << c.group.AllOutput();
  }
  std::vector<std::string> workers, servers;
  for (int w : c.workers) {
    workers.push_back(c.group.Output(w));
    EXPECT_NE(workers.back().find("OK rounds=15"), std::string::npos) << workers.back();
  }
  for (int s : c.servers) servers.push_back(c.group.Output(s));
  ASSERT_EQ(stats.Count("worker"), 2);
  ASSERT_EQ(stats.Count("server"), 2);
  ASSERT_EQ(stats.Count("scheduler"), 1);
  uint64_t dropped = stats.Sum("worker", "van.injected_drops") +
                     stats.Sum("server", "van.injected_drops");
  uint64_t resent = stats.Sum("worker", "resends") + stats.Sum("worker", "pulls");
  uint64_t deduplicated =
      stats.Sum("server", "duplicate_pushes") + stats.Sum("server", "results_resent");
  // The log says the same as the files.
  EXPECT_EQ(resent, CountLogged(workers, "pushes sent again") + CountLogged(workers, "pulls"));
  EXPECT_EQ(deduplicated,
            CountLogged(servers, "duplicates dropped") + CountLogged(servers, "sums sent again"));
  EXPECT_GT(dropped, 0u) << c.group.AllOutput();
  EXPECT_GT(resent, 0u) << c.group.AllOutput();
  EXPECT_GT(deduplicated, 0u) << c.group.AllOutput();
  std::printf("fault injection: %llu messages dropped, %llu resends, %llu duplicates answered\n",
              static_cast<unsigned long long>(dropped), static_cast<unsigned long long>(resent),
              static_cast<unsigned long long>(deduplicated));
}

TEST(ClusterTest, JoinForUnevenDataSumsOverTheWorkersStillPushing) {
  Cluster c;
  c.Start(2, 3, {"--mode=join"}, {{"FERRY_PARTITION_BYTES", "4096"}});
  auto results = c.group.WaitAll(120000 * TimeScale());
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].exited) << c.group.AllOutput();
    ASSERT_EQ(results[i].exit_code, 0) << "process " << i << "\n" << c.group.AllOutput();
  }
  for (int w = 0; w < 3; ++w) {
    EXPECT_NE(c.group.Output(c.workers[w]).find("OK join rounds=" + std::to_string(3 + 2 * w)),
              std::string::npos)
        << c.group.Output(c.workers[w]);
  }
}

TEST(ClusterTest, SmallPartitionsAndTightCredit) {
  // Many partitions per tensor, one in flight at a time, byte credit.
  Cluster c;
  c.Start(3, 2, {"--mode=sums", "--tensors=12", "--max_bytes=1048576", "--rounds=5"},
          {{"FERRY_PARTITION_BYTES", "4096"}, {"FERRY_SCHEDULING_CREDIT", "1"}});
  auto results = c.group.WaitAll(300000);
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_EQ(results[i].exit_code, 0) << "process " << i << "\n" << c.group.AllOutput();
  }
}

TEST(ClusterTest, MismatchedTensorFailsEveryWorkerButOtherKeysServe) {
  Cluster c;
  c.Start(2, 2, {"--mode=mismatch"});
  auto results = c.group.WaitAll(60000);
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_EQ(results[i].exit_code, 0) << "process " << i << "\n" << c.group.AllOutput();
  }
  for (int w : c.workers) {
    std::string out = c.group.Output(w);
    EXPECT_NE(out.find("error as expected"), std::string::npos) << out;
    EXPECT_NE(out.find("'mismatched'"), std::string::npos) << out;
    EXPECT_NE(out.find("OK other keys still served"), std::string::npos) << out;
  }
}

TEST(ClusterTest, KilledServerFailsEveryWorkerWithinHeartbeatTimeout) {
  Cluster c;
  c.Start(2, 2, {"--mode=loop"});
  // Let training run, then kill server 1 (the second server process).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30 * TimeScale());
  while (c.group.Output(c.workers[0]).find("round 5\n") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << c.group.AllOutput();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  c.group.Kill(c.servers[1], SIGKILL);
  auto killed_at = std::chrono::steady_clock::now();
  for (int w : c.workers) {
    ChildResult r = c.group.Wait(w, 20000 * TimeScale());
    ASSERT_TRUE(r.exited) << "worker hung after a server died\n" << c.group.AllOutput();
    EXPECT_EQ(r.exit_code, 1) << c.group.Output(w);
    std::string out = c.group.Output(w);
    // The dead server is named: its rank is 0 or 1 depending on join order, so
    // check for the words of the failure and a server.
    EXPECT_NE(out.find("presumed dead"), std::string::npos) << out;
    EXPECT_NE(out.find("server "), std::string::npos) << out;
  }
  auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - killed_at).count();
  EXPECT_LT(elapsed, (kHeartbeatTimeoutMs + 3000) * TimeScale())
      << "failure took longer than the heartbeat timeout + slack";
  // The scheduler and the surviving server end too, non-zero.
  ChildResult s = c.group.Wait(c.scheduler, 10000 * TimeScale());
  EXPECT_TRUE(s.exited);
  EXPECT_EQ(s.exit_code, 1);
  ChildResult other = c.group.Wait(c.servers[0], 10000 * TimeScale());
  EXPECT_TRUE(other.exited);
  EXPECT_EQ(other.exit_code, 1);
}

// Waits until worker `w` printed "round N"; fails the test after 30 s.
void WaitForRound(Cluster& c, int w, int round) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30 * TimeScale());
  std::string mark = "round " + std::to_string(round) + "\n";
  while (c.group.Output(c.workers[w]).find(mark) == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << c.group.AllOutput();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TEST(ClusterTest, KilledWorkerFailsEveryoneElseNamingIt) {
  Cluster c;
  c.Start(2, 2, {"--mode=loop"});
  WaitForRound(c, 0, 5);
  c.group.Kill(c.workers[1], SIGKILL);
  ChildResult r = c.group.Wait(c.workers[0], 20000 * TimeScale());
  ASSERT_TRUE(r.exited) << c.group.AllOutput();
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(c.group.Output(c.workers[0]).find("worker 1 (127.0.0.1"), std::string::npos)
      << c.group.Output(c.workers[0]);
  EXPECT_NE(c.group.Output(c.workers[0]).find("presumed dead"), std::string::npos);
  for (int s : {c.scheduler, c.servers[0], c.servers[1]}) {
    ChildResult e = c.group.Wait(s, 10000 * TimeScale());
    ASSERT_TRUE(e.exited) << "process left running after a worker died\n" << c.group.AllOutput();
    EXPECT_EQ(e.exit_code, 1) << c.group.AllOutput();
  }
}

TEST(ClusterTest, KilledSchedulerEndsEveryNode) {
  Cluster c;
  c.Start(1, 2, {"--mode=loop"});
  WaitForRound(c, 0, 5);
  c.group.Kill(c.scheduler, SIGKILL);
  for (int p : {c.workers[0], c.workers[1], c.servers[0]}) {
    ChildResult r = c.group.Wait(p, 20000 * TimeScale());
    ASSERT_TRUE(r.exited) << "a node outlived the scheduler\n" << c.group.AllOutput();
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(c.group.Output(p).find("the scheduler (127.0.0.1:"), std::string::npos) << c.group.Output(p);
    EXPECT_NE(c.group.Output(p).find("presumed dead"), std::string::npos) << c.group.Output(p);
  }
}

TEST(ClusterTest, StragglerIsNotMistakenForADeadNode) {
  // Worker 1 computes 3x longer than worker 0 and, at 600 ms a round, longer than a
  // fifth of the heartbeat timeout; nobody may be declared dead, every sum exact.
  ProcessGroup g;
  int port = FreePort();
  g.Spawn("scheduler", {BinaryPath("ferry-scheduler")}, ClusterEnv("scheduler", 2, 1, port));
  g.Spawn("server", {BinaryPath("ferry-server")}, ClusterEnv("server", 2, 1, port));
  std::vector<int> ws;
  for (int w = 0; w < 2; ++w) {
    auto e = ClusterEnv("worker", 2, 1, port);
    e["DMLC_WORKER_ID"] = std::to_string(w);
    ws.push_back(g.Spawn("worker" + std::to_string(w),
                         {BinaryPath("ferry-test-worker"), "--mode=loop", "--loop_rounds=12",
                          w == 0 ? "--loop_sleep_ms=200" : "--loop_sleep_ms=600"},
                         e));
  }
  auto results = g.WaitAll(60000 * TimeScale());
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].exited) << g.AllOutput();
    EXPECT_EQ(results[i].exit_code, 0) << g.AllOutput();
  }
  for (int w : ws) EXPECT_NE(g.Output(w).find("OK loop rounds=12"), std::string::npos) << g.Output(w);
}

TEST(ClusterTest, SecondWorkerClaimingARankIsRefused) {
  ProcessGroup g;
  int port = FreePort();
  g.Spawn("scheduler", {BinaryPath("ferry-scheduler")}, ClusterEnv("scheduler", 2, 1, port));
  g.Spawn("server", {BinaryPath("ferry-server")}, ClusterEnv("server", 2, 1, port));
  auto e = ClusterEnv("worker", 2, 1, port);
  e["DMLC_WORKER_ID"] = "0";
  int first = g.Spawn("worker0", {BinaryPath("ferry-test-worker"), "--mode=loop", "--loop_rounds=3"}, e);
  std::this_thread::sleep_for(std::chrono::milliseconds(300 * TimeScale()));
  int impostor = g.Spawn("impostor", {BinaryPath("ferry-test-worker"), "--mode=loop"}, e);
  ChildResult r = g.Wait(impostor, 20000 * TimeScale());
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(g.Output(impostor).find("asks for worker rank 0 (DMLC_WORKER_ID), which worker at"),
            std::string::npos)
      << g.Output(impostor);
  // The real rank 1 arrives; the job completes.
  e["DMLC_WORKER_ID"] = "1";
  int second = g.Spawn("worker1", {BinaryPath("ferry-test-worker"), "--mode=loop", "--loop_rounds=3"}, e);
  EXPECT_EQ(g.Wait(first, 30000 * TimeScale()).exit_code, 0) << g.AllOutput();
  EXPECT_EQ(g.Wait(second, 30000 * TimeScale()).exit_code, 0) << g.AllOutput();
}

TEST(ClusterTest, MissingWorkerIsNamedAtTheConnectDeadline) {
  ProcessGroup g;
  int port = FreePort();
  auto env = [&](const std::string& role) {
    auto e = ClusterEnv(role, 3, 1, port);
    e["FERRY_CONNECT_TIMEOUT_MS"] = std::to_string(1500 * TimeScale());
    return e;
  };
  int sched = g.Spawn("scheduler", {BinaryPath("ferry-scheduler")}, env("scheduler"));
  int server = g.Spawn("server", {BinaryPath("ferry-server")}, env("server"));
  std::vector<int> workers;
  for (int w = 0; w < 2; ++w) {
    auto e = env("worker");
    e["DMLC_WORKER_ID"] = std::to_string(w);
    workers.push_back(g.Spawn("worker" + std::to_string(w),
                              {BinaryPath("ferry-test-worker"), "--mode=loop"}, e));
  }
  auto results = g.WaitAll(20000 * TimeScale());
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].exited) << "process " << i << " hung\n" << g.AllOutput();
    EXPECT_NE(results[i].exit_code, 0) << g.AllOutput();
  }
  std::string expected = "2 of 3 workers registered; missing worker 2";
  EXPECT_NE(g.Output(sched).find(expected), std::string::npos) << g.Output(sched);
  EXPECT_NE(g.Output(server).find(expected), std::string::npos) << g.Output(server);
  for (int w : workers) EXPECT_NE(g.Output(w).find(expected), std::string::npos) << g.Output(w);
}

TEST(ClusterTest, WorkerWithoutSchedulerGivesUpAtTheConnectDeadline) {
  ProcessGroup g;
  auto e = ClusterEnv("worker", 1, 1, FreePort());
  e["FERRY_CONNECT_TIMEOUT_MS"] = "800";
  int w = g.Spawn("worker", {BinaryPath("ferry-test-worker"), "--mode=loop"}, e);
  ChildResult r = g.Wait(w, 10000);
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(g.Output(w).find("timed out after 2000 ms waiting for the node table from the scheduler"),
            std::string::npos)
      << g.Output(w);
}

}  // namespace
}  // namespace ferry::testing
