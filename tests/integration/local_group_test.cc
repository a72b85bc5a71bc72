// Intra-machine reduction (worker/local/): 2 "machines" x 2 local processes on loopback,
// 2 servers. Only the local roots register with the scheduler; size() counts processes.

#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>
#include <string>

#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

constexpr int kMachines = 2, kLocal = 2, kServers = 2;

// kMachines machines of kLocal ferry-local-test-worker processes with `args`, kServers
// servers; `extra` for every role.
ClusterSpec LocalSpec(const std::vector<std::string>& args, const Env& extra = {}) {
  ClusterSpec spec;
  spec.servers = kServers;
  spec.workers = kMachines;
  spec.local_size = kLocal;
  spec.worker_program = "ferry-local-test-worker";
  spec.worker_args = args;
  spec.env = extra;
  return spec;
}

// Names in /dev/shm of the group: none may exist, while it runs or after any exit (its slots
// are memfds passed over an fd channel: they have no name; the shm_open segments of an
// earlier version had, between creation and mapping).
std::vector<std::string> LeftoverSegments(const TestCluster& c) {
  std::set<std::string> prefixes = {"ferry-local-"};
  for (int w : c.workers()) prefixes.insert("ferry-" + std::to_string(c.group().pid(w)) + "-");
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

TEST(LocalGroupTest, TwoMachinesOfTwoProcessesSumAverageAndBroadcastExactly) {
  TestCluster c(LocalSpec(
      {"--mode=sums", "--tensors=6", "--max_elems=300000", "--rounds=5", "--bcast_root=3"},
      {{"FERRY_PARTITION_BYTES", "65536"}}));
  c.Start();
  auto results = c.WaitAll(180000);
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].exited) << "process " << i << " hung\n" << c.AllOutput();
    ASSERT_EQ(results[i].exit_code, 0) << "process " << i << "\n" << c.AllOutput();
  }
  std::set<int> ranks;
  for (int m = 0; m < kMachines; ++m) {
    for (int l = 0; l < kLocal; ++l) {
      const std::string out = c.Output(c.workers()[m * kLocal + l]);
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
  const std::string sched = c.Output(c.scheduler());
  EXPECT_NE(sched.find("all 2 servers and 2 workers registered"), std::string::npos) << sched;
  std::regex registered("registered worker at", std::regex::icase);
  const auto count = std::distance(std::sregex_iterator(sched.begin(), sched.end(), registered),
                                   std::sregex_iterator());
  EXPECT_EQ(count, 2) << sched;
  EXPECT_EQ(LeftoverSegments(c), std::vector<std::string>{});
}

TEST(LocalGroupTest, LocalRanksThatDisagreeOnATensorFailTheirGroupSayingSo) {
  TestCluster c(LocalSpec({"--mode=mismatch"},
                          {{"FERRY_OP_TIMEOUT_MS", std::to_string(20000 * TimeScale())}}));
  c.Start();
  for (int i : {c.workers()[0], c.workers()[1]}) {  // machine 0: global rank 1 differs
    ChildResult r = c.Wait(i, 60000);
    ASSERT_TRUE(r.exited) << c.AllOutput();
    EXPECT_EQ(r.exit_code, 1) << c.Output(i);
    EXPECT_NE(c.Output(i).find("local ranks disagree on round 0 of 'm': local rank "),
              std::string::npos)
        << c.Output(i);
  }
}

// A host pointer passed as a CUDA device tensor (LocalGroup::PushPullDevice) is refused
// on every rank with the reason this build and machine give, and the group goes on.
TEST(LocalGroupTest, AHostPointerPassedAsADeviceTensorIsRefusedSayingWhy) {
  TestCluster c(LocalSpec({"--mode=device_refused"}));
  c.Start();
  auto results = c.WaitAll(60000);
  const std::regex why(
      "REFUSED: .*(this Ferry was built without NCCL|no usable GPU here|"
      "input 0x[0-9a-f]+ is not CUDA device memory)");
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].exited) << "process " << i << " hung\n" << c.AllOutput();
    ASSERT_EQ(results[i].exit_code, 0) << "process " << i << "\n" << c.AllOutput();
  }
  for (int w : c.workers()) {
    const std::string out = c.Output(w);
    EXPECT_TRUE(std::regex_search(out, why)) << out;
    EXPECT_NE(out.find("OK rank="), std::string::npos) << out;
  }
}

TEST(LocalGroupTest, AKilledLocalProcessEndsItsRootAndTheJobWithAClearError) {
  // Global rank 1 is machine 0's local rank 1; its root is global rank 0.
  TestCluster c(LocalSpec({"--mode=die", "--die_rank=1", "--die_round=3"},
                          {{"FERRY_OP_TIMEOUT_MS", std::to_string(10000 * TimeScale())}}));
  c.Start();
  const int root = c.workers()[0], victim = c.workers()[1];
  ChildResult r = c.Wait(root, 60000);
  ASSERT_TRUE(r.exited) << "the local root hung\n" << c.AllOutput();
  EXPECT_EQ(r.exit_code, 1) << c.AllOutput();
  const std::string want = "local rank 1 (pid " + std::to_string(c.group().pid(victim)) +
                           ") disconnected before shutting down: the process ended";
  EXPECT_NE(c.Output(root).find(want), std::string::npos) << c.Output(root);
  ChildResult v = c.group().Wait(victim, 1000);
  EXPECT_EQ(v.signal, SIGKILL) << c.Output(victim);
  // The other machine's processes end too (the scheduler reports the dead root; its
  // peer hears from its own root), with an error, well before the job's deadlines.
  for (int i : {c.workers()[2], c.workers()[3]}) {
    ChildResult o = c.Wait(i, 60000);
    ASSERT_TRUE(o.exited) << "process " << i << " hung\n" << c.AllOutput();
    EXPECT_NE(o.exit_code, 0) << c.Output(i);
  }
  EXPECT_EQ(LeftoverSegments(c), std::vector<std::string>{});
}

TEST(LocalGroupTest, AKilledLocalRootEndsItsPeersAtOnce) {
  TestCluster c(LocalSpec({"--mode=die", "--die_rank=0", "--die_round=3"},
                          {{"FERRY_OP_TIMEOUT_MS", std::to_string(30000 * TimeScale())}}));
  c.Start();
  const int root = c.workers()[0], peer = c.workers()[1];
  ChildResult p = c.Wait(peer, 60000);
  ASSERT_TRUE(p.exited) << "the peer hung\n" << c.AllOutput();
  EXPECT_EQ(p.exit_code, 1) << c.AllOutput();
  // Noticed through the socket, well before FERRY_OP_TIMEOUT_MS.
  EXPECT_LT(p.elapsed_ms, 20000 * TimeScale()) << c.AllOutput();
  const std::string want = "local rank 1 (pid " + std::to_string(c.group().pid(peer)) +
                           "): the local root (local rank 0, pid " +
                           std::to_string(c.group().pid(root)) + ") disconnected";
  EXPECT_NE(c.Output(peer).find(want), std::string::npos) << c.Output(peer);
  for (int i : {c.workers()[2], c.workers()[3]}) {
    ChildResult o = c.Wait(i, 60000);
    ASSERT_TRUE(o.exited) << "process " << i << " hung\n" << c.AllOutput();
    EXPECT_NE(o.exit_code, 0) << c.Output(i);
  }
  EXPECT_EQ(LeftoverSegments(c), std::vector<std::string>{});
}

TEST(LocalGroupTest, AStalledLocalProcessEndsItsRootAtTheDeadlineNamingIt) {
  // Global rank 3 (machine 1, local rank 1) stops calling Ferry for 3 s; its root's
  // push_pull gives up at FERRY_OP_TIMEOUT_MS = 2 s, naming it (both scaled alike).
  const int op_timeout_ms = 2000 * DetectionScale(), stall_ms = 3000 * DetectionScale();
  TestCluster c(LocalSpec({"--mode=die", "--die_rank=3", "--die_round=3",
                           "--stall_ms=" + std::to_string(stall_ms)},
                          {{"FERRY_OP_TIMEOUT_MS", std::to_string(op_timeout_ms)}}));
  c.Start();
  const int root = c.workers()[2], staller = c.workers()[3];
  ChildResult r = c.Wait(root, 60000);
  ASSERT_TRUE(r.exited) << "the local root hung\n" << c.AllOutput();
  EXPECT_EQ(r.exit_code, 1) << c.AllOutput();
  const std::string want =
      "(FERRY_OP_TIMEOUT_MS): PUSH_PULL of 'loop': waiting for local rank(s) 1 (pid " +
      std::to_string(c.group().pid(staller)) + ")";
  EXPECT_NE(c.Output(root).find(want), std::string::npos) << c.Output(root);
  // Back from its stall, the staller's next call fails: its root is gone.
  ChildResult s = c.Wait(staller, 60000);
  ASSERT_TRUE(s.exited) << c.AllOutput();
  EXPECT_EQ(s.exit_code, 1) << c.Output(staller);
  EXPECT_NE(c.Output(staller).find("disconnected"), std::string::npos) << c.Output(staller);
  EXPECT_EQ(LeftoverSegments(c), std::vector<std::string>{});
}

// The README's C++ example (examples/cpp/push_pull.cc) runs unchanged whether a machine
// has one process or a local group: LocalGroup::Create gives it the Collective either way.
TEST(LocalGroupTest, TheReadmeExampleRunsAsOneProcessOrAsALocalGroupPerMachine) {
  for (int local_size : {0, kLocal}) {
    ClusterSpec spec;
    spec.servers = kServers;
    spec.workers = kMachines;
    spec.local_size = local_size;
    spec.worker_program = "ferry-example-push-pull";
    TestCluster c(spec);
    c.Start();
    ASSERT_TRUE(c.Succeeds(120000)) << "local size " << local_size;
    const int size = kMachines * std::max(local_size, 1);
    std::set<std::string> said;
    for (int w : c.workers()) {
      std::smatch m;
      const std::string out = c.Output(w);
      ASSERT_TRUE(std::regex_search(out, m, std::regex("OK rank=(\\d+) size=(\\d+)"))) << out;
      EXPECT_EQ(m[2], std::to_string(size)) << out;
      said.insert(m[1]);
    }
    EXPECT_EQ(said.size(), static_cast<size_t>(size));
  }
}

}  // namespace
}  // namespace ferry::testing
