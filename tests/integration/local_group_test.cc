// Intra-machine reduction (worker/local/): 2 "machines" x 2 local processes on loopback,
// 2 servers. Only the local roots register with the scheduler; size() counts processes.

#include <dirent.h>
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

#include "tests/support/process_group.h"

namespace ferry::testing {
namespace {

constexpr int kMachines = 2, kLocal = 2, kServers = 2;

struct LocalCluster {
  ProcessGroup group;
  int port = FreePort();
  int scheduler = -1;
  std::vector<int> workers;  // by global rank (machine x kLocal + local rank)

  void Start(const std::vector<std::string>& args,
             const std::map<std::string, std::string>& extra = {}) {
    auto env = [&](const std::string& role) {
      auto e = ClusterEnv(role, kMachines, kServers, port);
      for (const auto& [k, v] : extra) e[k] = v;
      return e;
    };
    scheduler = group.Spawn("scheduler", {BinaryPath("ferry-scheduler")}, env("scheduler"));
    for (int s = 0; s < kServers; ++s) {
      group.Spawn("server" + std::to_string(s), {BinaryPath("ferry-server")}, env("server"));
    }
    for (int m = 0; m < kMachines; ++m) {
      for (int l = 0; l < kLocal; ++l) {
        auto e = env("worker");
        e["DMLC_WORKER_ID"] = std::to_string(m);
        e["FERRY_LOCAL_SIZE"] = std::to_string(kLocal);
        e["FERRY_LOCAL_RANK"] = std::to_string(l);
        std::vector<std::string> argv = {BinaryPath("ferry-local-test-worker")};
        argv.insert(argv.end(), args.begin(), args.end());
        workers.push_back(
            group.Spawn("worker" + std::to_string(m) + "." + std::to_string(l), argv, e));
      }
    }
  }

  // Shared memory segments in /dev/shm named after one of the workers' pids.
  std::vector<std::string> LeftoverSegments() const {
    std::set<std::string> prefixes;
    for (int w : workers) prefixes.insert("ferry-" + std::to_string(group.pid(w)) + "-");
    std::vector<std::string> left;
    DIR* dir = opendir("/dev/shm");
    if (!dir) return left;
    while (dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      for (const auto& p : prefixes) {
        if (name.rfind(p, 0) == 0) left.push_back(name);
      }
    }
    closedir(dir);
    return left;
  }
};

TEST(LocalGroupTest, TwoMachinesOfTwoProcessesSumAverageAndBroadcastExactly) {
  LocalCluster c;
  c.Start({"--mode=sums", "--tensors=6", "--max_elems=300000", "--rounds=5", "--bcast_root=3"},
          {{"FERRY_PARTITION_BYTES", "65536"}});
  auto results = c.group.WaitAll(180000 * TimeScale());
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].exited) << "process " << i << " hung\n" << c.group.AllOutput();
    ASSERT_EQ(results[i].exit_code, 0) << "process " << i << "\n" << c.group.AllOutput();
  }
  std::set<int> ranks;
  for (int m = 0; m < kMachines; ++m) {
    for (int l = 0; l < kLocal; ++l) {
      const std::string out = c.group.Output(c.workers[m * kLocal + l]);
      std::smatch match;
      ASSERT_TRUE(std::regex_search(
          out, match, std::regex("OK rounds=5 rank=(\\d+) size=(\\d+) local=(\\d+)/(\\d+)")))
          << out;
      EXPECT_EQ(match[1], std::to_string(m * kLocal + l)) << out;  // DMLC_WORKER_ID x L + local
      EXPECT_EQ(match[2], "4") << out;
      EXPECT_EQ(match[3], std::to_string(l)) << out;
      EXPECT_EQ(match[4], "2") << out;
      ranks.insert(std::stoi(match[1]));
    }
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
  // Only the two local roots registered.
  const std::string sched = c.group.Output(c.scheduler);
  EXPECT_NE(sched.find("all 2 servers and 2 workers registered"), std::string::npos) << sched;
  std::regex registered("registered worker at", std::regex::icase);
  const auto count = std::distance(std::sregex_iterator(sched.begin(), sched.end(), registered),
                                   std::sregex_iterator());
  EXPECT_EQ(count, 2) << sched;
  EXPECT_EQ(c.LeftoverSegments(), std::vector<std::string>{});
}

TEST(LocalGroupTest, LocalRanksThatDisagreeOnATensorFailTheirGroupSayingSo) {
  LocalCluster c;
  c.Start({"--mode=mismatch"}, {{"FERRY_OP_TIMEOUT_MS", std::to_string(20000 * TimeScale())}});
  for (int i : {c.workers[0], c.workers[1]}) {  // machine 0: global rank 1 differs
    ChildResult r = c.group.Wait(i, 60000 * TimeScale());
    ASSERT_TRUE(r.exited) << c.group.AllOutput();
    EXPECT_EQ(r.exit_code, 1) << c.group.Output(i);
    EXPECT_NE(c.group.Output(i).find("local ranks disagree on round 0 of 'm': local rank "),
              std::string::npos)
        << c.group.Output(i);
  }
}

// A host pointer passed as a CUDA device tensor (LocalGroup::PushPullDevice) is refused
// on every rank with the reason this build and machine give, and the group goes on.
TEST(LocalGroupTest, AHostPointerPassedAsADeviceTensorIsRefusedSayingWhy) {
  LocalCluster c;
  c.Start({"--mode=device_refused"});
  auto results = c.group.WaitAll(60000 * TimeScale());
  const std::regex why(
      "REFUSED: .*(this Ferry was built without NCCL|no usable GPU here|"
      "input 0x[0-9a-f]+ is not CUDA device memory)");
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].exited) << "process " << i << " hung\n" << c.group.AllOutput();
    ASSERT_EQ(results[i].exit_code, 0) << "process " << i << "\n" << c.group.AllOutput();
  }
  for (int w : c.workers) {
    const std::string out = c.group.Output(w);
    EXPECT_TRUE(std::regex_search(out, why)) << out;
    EXPECT_NE(out.find("OK rank="), std::string::npos) << out;
  }
}

TEST(LocalGroupTest, AKilledLocalProcessEndsItsRootAndTheJobWithAClearError) {
  LocalCluster c;
  // Global rank 1 is machine 0's local rank 1; its root is global rank 0.
  c.Start({"--mode=die", "--die_rank=1", "--die_round=3"},
          {{"FERRY_OP_TIMEOUT_MS", std::to_string(10000 * TimeScale())}});
  const int root = c.workers[0], victim = c.workers[1];
  ChildResult r = c.group.Wait(root, 60000 * TimeScale());
  ASSERT_TRUE(r.exited) << "the local root hung\n" << c.group.AllOutput();
  EXPECT_EQ(r.exit_code, 1) << c.group.AllOutput();
  const std::string want = "local rank 1 (pid " + std::to_string(c.group.pid(victim)) +
                           ") disconnected before shutting down: the process ended";
  EXPECT_NE(c.group.Output(root).find(want), std::string::npos) << c.group.Output(root);
  ChildResult v = c.group.Wait(victim, 1000);
  EXPECT_EQ(v.signal, SIGKILL) << c.group.Output(victim);
  // The other machine's processes end too (the scheduler reports the dead root; its
  // peer hears from its own root), with an error, well before the job's deadlines.
  for (int i : {c.workers[2], c.workers[3]}) {
    ChildResult o = c.group.Wait(i, 60000 * TimeScale());
    ASSERT_TRUE(o.exited) << "process " << i << " hung\n" << c.group.AllOutput();
    EXPECT_NE(o.exit_code, 0) << c.group.Output(i);
  }
  EXPECT_EQ(c.LeftoverSegments(), std::vector<std::string>{});
}

TEST(LocalGroupTest, AKilledLocalRootEndsItsPeersAtOnce) {
  LocalCluster c;
  c.Start({"--mode=die", "--die_rank=0", "--die_round=3"},
          {{"FERRY_OP_TIMEOUT_MS", std::to_string(30000 * TimeScale())}});
  const int root = c.workers[0], peer = c.workers[1];
  ChildResult p = c.group.Wait(peer, 60000 * TimeScale());
  ASSERT_TRUE(p.exited) << "the peer hung\n" << c.group.AllOutput();
  EXPECT_EQ(p.exit_code, 1) << c.group.AllOutput();
  // Noticed through the socket, well before FERRY_OP_TIMEOUT_MS.
  EXPECT_LT(p.elapsed_ms, 20000 * TimeScale()) << c.group.AllOutput();
  const std::string want = "local rank 1 (pid " + std::to_string(c.group.pid(peer)) +
                           "): the local root (local rank 0, pid " +
                           std::to_string(c.group.pid(root)) + ") disconnected";
  EXPECT_NE(c.group.Output(peer).find(want), std::string::npos) << c.group.Output(peer);
  for (int i : {c.workers[2], c.workers[3]}) {
    ChildResult o = c.group.Wait(i, 60000 * TimeScale());
    ASSERT_TRUE(o.exited) << "process " << i << " hung\n" << c.group.AllOutput();
    EXPECT_NE(o.exit_code, 0) << c.group.Output(i);
  }
  EXPECT_EQ(c.LeftoverSegments(), std::vector<std::string>{});
}

TEST(LocalGroupTest, AStalledLocalProcessEndsItsRootAtTheDeadlineNamingIt) {
  LocalCluster c;
  // Global rank 3 (machine 1, local rank 1) stops calling Ferry for 8 s; its root's
  // push_pull gives up at FERRY_OP_TIMEOUT_MS = 2 s, naming it.
  c.Start({"--mode=die", "--die_rank=3", "--die_round=3", "--stall_ms=8000"},
          {{"FERRY_OP_TIMEOUT_MS", std::to_string(2000 * TimeScale())}});
  const int root = c.workers[2], staller = c.workers[3];
  ChildResult r = c.group.Wait(root, 60000 * TimeScale());
  ASSERT_TRUE(r.exited) << "the local root hung\n" << c.group.AllOutput();
  EXPECT_EQ(r.exit_code, 1) << c.group.AllOutput();
  const std::string want =
      "(FERRY_OP_TIMEOUT_MS): PUSH_PULL of 'loop': waiting for local rank(s) 1 (pid " +
      std::to_string(c.group.pid(staller)) + ")";
  EXPECT_NE(c.group.Output(root).find(want), std::string::npos) << c.group.Output(root);
  // Back from its stall, the staller's next call fails: its root is gone.
  ChildResult s = c.group.Wait(staller, 60000 * TimeScale());
  ASSERT_TRUE(s.exited) << c.group.AllOutput();
  EXPECT_EQ(s.exit_code, 1) << c.group.Output(staller);
  EXPECT_NE(c.group.Output(staller).find("disconnected"), std::string::npos)
      << c.group.Output(staller);
  EXPECT_EQ(c.LeftoverSegments(), std::vector<std::string>{});
}

}  // namespace
}  // namespace ferry::testing
