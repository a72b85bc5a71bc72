// Workers that cut one key differently (partitions sized per link; server/key_state.h,
// "Cuts that differ"), with a real scheduler, servers and workers as processes on loopback.
// Each worker here sets its own FERRY_FRAME_BYTES, as partitions sized per link make each
// worker's pieces its own: the servers split the coarser pieces and gather the finer ones
// into the grid of each round's first piece, and every sum stays exact (ferry-test-worker
// checks every value), in rank order too, across elastic epochs too. Cuts that do not nest
// fail the key for every worker, saying why.

#include <gtest/gtest.h>
#include <signal.h>

#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

// Whole partitions, 16 KiB and 4 KiB pieces of 64 KiB partitions: each round's grid is
// whichever piece reaches its server first.
const std::vector<std::string> kCuts = {"0", "16384", "4096"};

// A job of `servers` servers and one worker per cut of `cuts`, rank r with cuts[r], every
// worker with `args`; returns when every process ended.
std::vector<int> StartMixed(TestCluster& c, int servers, const std::vector<std::string>& cuts) {
  c.StartScheduler();
  for (int s = 0; s < servers; ++s) c.StartServer();
  std::vector<int> workers;
  for (size_t r = 0; r < cuts.size(); ++r) {
    workers.push_back(c.StartWorker(static_cast<int>(r), {}, {{"FERRY_FRAME_BYTES", cuts[r]}}));
  }
  return workers;
}

ClusterSpec MixedSpec(int servers, const std::vector<std::string>& args, const Env& env = {}) {
  ClusterSpec spec = SpecOf(servers, static_cast<int>(kCuts.size()), args, env);
  spec.env["FERRY_PARTITION_BYTES"] = "65536";
  spec.stats_files = true;
  return spec;
}

TEST(UnevenLinksTest, WorkersCuttingKeysDifferentlySumExactly) {
  TestCluster c(MixedSpec(2, {"--mode=sums", "--tensors=12", "--max_bytes=1048576", "--rounds=8"}));
  const std::vector<int> workers = StartMixed(c, 2, kCuts);
  ASSERT_TRUE(c.Succeeds(120000)) << c.AllOutput();
  for (int w : workers) EXPECT_NE(c.Output(w).find("OK rounds=8"), std::string::npos) << c.Output(w);
  // Pieces were split or gathered into other cuts, and nothing was refused.
  EXPECT_GT(c.stats().Sum("server", "frames_recut"), 0u);
  EXPECT_EQ(c.stats().Sum("server", "rejected_pushes"), 0u);
}

TEST(UnevenLinksTest, MixedCutsSumInRankOrderToTheBit) {
  // FERRY_DETERMINISTIC=1: each grid frame is summed in rank order whatever the pieces, so
  // the bits equal a sum of whole partitions (the worker compares them bit for bit).
  TestCluster c(MixedSpec(2, {"--mode=deterministic", "--rounds=6", "--det_delay_ms=20"},
                          {{"FERRY_DETERMINISTIC", "1"}}));
  const std::vector<int> workers = StartMixed(c, 2, kCuts);
  ASSERT_TRUE(c.Succeeds(120000)) << c.AllOutput();
  std::set<std::string> checksums;
  const std::regex ok("OK deterministic rounds=6 checksum ([0-9a-f]+)");
  for (int w : workers) {
    const std::string out = c.Output(w);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, ok)) << out;
    checksums.insert(m[1].str());
  }
  EXPECT_EQ(checksums.size(), 1u) << c.AllOutput();
  EXPECT_GT(c.stats().Sum("server", "frames_recut"), 0u);
}

TEST(UnevenLinksTest, CutsThatDoNotNestFailTheKeyForEveryWorkerSayingWhy) {
  // 12 KiB and 8 KiB pieces: neither divides the other, so no grid holds both. Whoever
  // comes second is refused and the key fails on both workers (no one waits out a deadline);
  // the other keys are still served.
  ClusterSpec spec = SpecOf(1, 2, {"--mode=refused", "--max_bytes=262144",
                                   "--expect_error=cuts must nest"});
  spec.env["FERRY_PARTITION_BYTES"] = "262144";
  TestCluster c(spec);
  const std::vector<int> workers = StartMixed(c, 1, {"12288", "8192"});
  for (int w : workers) {
    EXPECT_TRUE(c.WaitForOutput(w, "OK other keys still served", 60000)) << c.AllOutput();
  }
}

TEST(UnevenLinksTest, ElasticEpochsWithMixedCutsKeepSumsExact) {
  // Three workers cutting elastic_a's partitions three ways; rank 2 is killed mid-run: the
  // two left train on in a new epoch (still cut two ways) with exact sums and end alike.
  constexpr int kSteps = 30;
  ClusterSpec spec = SpecOf(2, 3, {"--mode=elastic", "--rounds=" + std::to_string(kSteps),
                                   "--loop_sleep_ms=60", "--commit_every=3"},
                            {{"FERRY_ELASTIC", "1"}});
  spec.env["FERRY_PARTITION_BYTES"] = "262144";
  spec.stats_files = true;
  TestCluster c(spec);
  const std::vector<int> workers = StartMixed(c, 2, {"0", "65536", "16384"});
  ASSERT_TRUE(c.WaitForOutput(workers[2], "step 6\n", 60000)) << c.AllOutput();
  c.Kill(workers[2], SIGKILL);
  const std::regex ok("OK elastic steps=(\\d+) resets=(\\d+) checksum=([0-9a-f]+)");
  std::set<std::string> checksums;
  for (int w : {workers[0], workers[1]}) {
    ChildResult r = c.Wait(w, 120000);
    ASSERT_TRUE(r.exited && r.exit_code == 0) << c.AllOutput();
    const std::string out = c.Output(w);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, ok)) << out;
    EXPECT_EQ(m[1].str(), std::to_string(kSteps)) << out;
    EXPECT_EQ(m[2].str(), "1") << out;
    checksums.insert(m[3].str());
    EXPECT_NE(out.find("size 2 step"), std::string::npos) << out;
  }
  EXPECT_EQ(checksums.size(), 1u) << "the workers' models differ\n" << c.AllOutput();
}

}  // namespace
}  // namespace ferry::testing
