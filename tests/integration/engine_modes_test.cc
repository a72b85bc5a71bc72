// Integration tests of the server engine's modes (docs/servers.md): deterministic sums
// (FERRY_DETERMINISTIC), split summation, and asynchronous training
// (FERRY_ENABLE_ASYNC) with workers at different speeds, one of them stopped for a while.
// Real scheduler, servers and workers as processes on loopback (TestCluster).

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

// A job of `num_servers` servers and one ferry-test-worker per entry of `worker_args`.
ClusterSpec JobSpec(int num_servers, const std::vector<std::vector<std::string>>& worker_args,
                    const Env& extra) {
  ClusterSpec spec;
  spec.servers = num_servers;
  spec.workers = static_cast<int>(worker_args.size());
  spec.per_worker_args = worker_args;
  spec.env = extra;
  return spec;
}

// The last "step N" worker `w` printed; 0 if none.
int LastStep(const TestCluster& job, int w) {
  std::string out = job.Output(job.workers()[w]);
  std::regex pattern("step ([0-9]+)\n");
  int last = 0;
  for (std::sregex_iterator it(out.begin(), out.end(), pattern), end; it != end; ++it) {
    last = std::stoi((*it)[1]);
  }
  return last;
}

// Waits until worker `w` printed step `step`; fails the test after 60 s.
void WaitForStep(const TestCluster& job, int w, int step) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60 * TimeScale());
  while (LastStep(job, w) < step) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << job.AllOutput();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string Checksum(const std::string& output) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex("checksum ([0-9a-f]+)"))) return "none";
  return m[1];
}

TEST(EngineModesTest, DeterministicSumsAreBitwiseIdenticalWhateverTheArrivalOrder) {
  // Three runs, each with its own pattern of push delays (so pushes reach the servers
  // in different orders), of values whose float sum depends on the order of addition.
  // Every worker checks each sum against the rank-order sum bit for bit; the checksums
  // over all results must agree across workers and runs. Small partitions and a small
  // split threshold: several keys, and sums cut into slices for several threads.
  std::vector<std::string> checksums;
  for (int run = 0; run < 3; ++run) {
    SCOPED_TRACE(run);
    std::vector<std::string> args = {"--mode=deterministic", "--rounds=12",
                                     "--det_seed=" + std::to_string(run)};
    TestCluster job(JobSpec(2, {args, args, args},
                            {{"FERRY_DETERMINISTIC", "1"},
                             {"FERRY_PARTITION_BYTES", "262144"},
                             {"FERRY_SERVER_SPLIT_BYTES", "65536"},
                             {"FERRY_SERVER_ENGINE_THREADS", "3"}}));
    job.Start();
    ASSERT_TRUE(job.Succeeds(120000));
    for (int w : job.workers()) {
      std::string out = job.Output(w);
      EXPECT_NE(out.find("OK deterministic rounds=12"), std::string::npos) << out;
      checksums.push_back(Checksum(out));
    }
    // Pushes did arrive out of rank order, and large sums were split.
    const uint64_t held = job.CountLogged(job.servers(), "pushes held for rank order");
    const uint64_t split = job.CountLogged(job.servers(), "sums split");
    std::printf("run %d: checksum %s, %llu pushes held for rank order, %llu sums split\n", run,
                checksums.back().c_str(), static_cast<unsigned long long>(held),
                static_cast<unsigned long long>(split));
    EXPECT_GT(held, 0u) << job.AllOutput();
    EXPECT_GT(split, 0u) << job.AllOutput();
  }
  ASSERT_EQ(checksums.size(), 9u);
  for (const std::string& c : checksums) EXPECT_EQ(c, checksums[0]);
  EXPECT_NE(checksums[0], "none");
}

TEST(EngineModesTest, SplitSumsStayExact) {
  // The sums test with every sum of 16 KiB or more cut into slices for 4 threads.
  std::vector<std::string> args = {"--mode=sums", "--tensors=16", "--max_bytes=8388608",
                                   "--rounds=6"};
  TestCluster job(JobSpec(2, {args, args, args},
                          {{"FERRY_PARTITION_BYTES", "1048576"},
                           {"FERRY_SERVER_SPLIT_BYTES", "16384"},
                           {"FERRY_SERVER_ENGINE_THREADS", "4"}}));
  job.Start();
  ASSERT_TRUE(job.Succeeds(300000));
  for (int w : job.workers()) {
    EXPECT_NE(job.Output(w).find("OK rounds=6"), std::string::npos) << job.Output(w);
  }
  EXPECT_GT(job.CountLogged(job.servers(), "sums split"), 0u) << job.AllOutput();
}

TEST(EngineModesTest, DeterministicSumsWithJoiningWorkers) {
  // Uneven data in deterministic mode: a push held for a lower rank must go once that
  // rank joins (Server::HandleJoin drains in rank order before completing rounds), and
  // the JOIN fences keep the next epoch behind the joins. Sums and averages exact.
  std::vector<std::string> args = {"--mode=join"};
  TestCluster job(JobSpec(2, {args, args, args},
                          {{"FERRY_DETERMINISTIC", "1"}, {"FERRY_PARTITION_BYTES", "4096"}}));
  job.Start();
  ASSERT_TRUE(job.Succeeds(120000));
  for (int w = 0; w < 3; ++w) {
    EXPECT_NE(job.Output(job.workers()[w]).find("OK join rounds=" + std::to_string(3 + 2 * w)),
              std::string::npos)
        << job.Output(job.workers()[w]);
  }
}

std::vector<std::string> AsyncArgs(int steps, int sleep_ms) {
  return {"--mode=async", "--steps=" + std::to_string(steps),
          "--step_sleep_ms=" + std::to_string(sleep_ms)};
}

TEST(EngineModesTest, AsyncWorkersGoAtTheirOwnPaceAndEveryDeltaCountsOnce) {
  // Three workers at different speeds; worker 2 is stopped (SIGSTOP) in the middle
  // until the others went 20 steps further (or finished). They must keep going
  // meanwhile (the wait has a deadline), and after everyone is done the
  // parameters are the initial ones plus every delta of every worker, exactly. The
  // heartbeat timeout is raised so that the stopped worker is not declared dead.
  const int steps = 300;
  TestCluster job(JobSpec(2, {AsyncArgs(steps, 4), AsyncArgs(steps, 25), AsyncArgs(steps, 8)},
                          {{"FERRY_ENABLE_ASYNC", "1"},
                           {"FERRY_PARTITION_BYTES", "262144"},
                           {"FERRY_HEARTBEAT_TIMEOUT_MS", std::to_string(30000 * TimeScale())}}));
  job.Start();
  WaitForStep(job, 2, 10);
  if (HasFatalFailure()) return;
  job.Kill(job.workers()[2], SIGSTOP);
  const int stopped_at = LastStep(job, 2);
  const int before0 = LastStep(job, 0), before1 = LastStep(job, 1);
  auto advanced = [&](int w, int before) {
    const int now = LastStep(job, w);
    return now >= before + 20 || now == steps;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30 * TimeScale());
  while (!(advanced(0, before0) && advanced(1, before1)) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int after0 = LastStep(job, 0), after1 = LastStep(job, 1), after2 = LastStep(job, 2);
  job.Kill(job.workers()[2], SIGCONT);
  std::printf(
      "while worker 2 was stopped at step %d: worker 0 went from step %d to %d, "
      "worker 1 from %d to %d\n",
      stopped_at, before0, after0, before1, after1);
  EXPECT_EQ(after2, stopped_at) << "worker 2 ran while stopped";
  // Nobody waits for the stopped worker: the others advance (or finish).
  EXPECT_TRUE(after0 >= before0 + 20 || after0 == steps) << job.AllOutput();
  EXPECT_TRUE(after1 >= before1 + 20 || after1 == steps) << job.AllOutput();
  ASSERT_TRUE(job.Succeeds(120000));
  for (int w : job.workers()) {
    std::string out = job.Output(w);
    EXPECT_NE(out.find("OK async steps=300 final parameters exact"), std::string::npos) << out;
    for (const char* what : {"average refused", "broadcast refused", "join refused"}) {
      EXPECT_NE(out.find(what), std::string::npos) << out;
    }
  }
  EXPECT_GT(job.CountLogged(job.servers(), "async updates"), 0u) << job.AllOutput();
}

TEST(EngineModesTest, AsyncResendsAreAppliedOnce) {
  // 1% of data messages dropped: lost pushes are resent, and a push whose reply was
  // lost is resent too and must not be added a second time. The final parameters
  // (initial + every delta once) prove it; the servers must have seen duplicates.
  const int steps = 60;
  TestCluster job(JobSpec(2, {AsyncArgs(steps, 2), AsyncArgs(steps, 5), AsyncArgs(steps, 3)},
                          {{"FERRY_ENABLE_ASYNC", "1"},
                           {"FERRY_PARTITION_BYTES", "65536"},
                           {"FERRY_TEST_DROP_PERCENT", "1"},
                           {"FERRY_RESEND_TIMEOUT_MS", "300"}}));
  job.Start();
  ASSERT_TRUE(job.Succeeds(180000));
  for (int w : job.workers()) {
    EXPECT_NE(job.Output(w).find("OK async steps=60 final parameters exact"), std::string::npos)
        << job.Output(w);
  }
  const uint64_t duplicates = job.CountLogged(job.servers(), "duplicates dropped");
  std::printf("%llu resent pushes answered without being added again\n",
              static_cast<unsigned long long>(duplicates));
  EXPECT_GT(duplicates, 0u) << job.AllOutput();
}

TEST(EngineModesTest, AsyncWorkerAndSyncServerRefuseEachOther) {
  // FERRY_ENABLE_ASYNC must be set alike everywhere: a push in the other mode is
  // refused with an error that says so.
  TestCluster c(JobSpec(1, {{"--mode=async", "--steps=1"}}, {}));
  c.StartScheduler();
  c.StartServer();
  int w = c.StartWorker(0, {}, {{"FERRY_ENABLE_ASYNC", "1"}});
  ChildResult r = c.Wait(w, 30000);
  ASSERT_TRUE(r.exited) << c.AllOutput();
  EXPECT_EQ(r.exit_code, 1) << c.AllOutput();
  EXPECT_NE(c.Output(w).find("set FERRY_ENABLE_ASYNC alike on every node"), std::string::npos)
      << c.Output(w);
}

}  // namespace
}  // namespace ferry::testing
