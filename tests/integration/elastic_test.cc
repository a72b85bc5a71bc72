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

ClusterSpec ElasticSpec(int servers, int workers, const Env& env = {}) {
  ClusterSpec spec;
  spec.servers = servers;
  spec.workers = workers;
  spec.worker_args = {"--mode=elastic", "--rounds=" + std::to_string(kSteps),
                      "--loop_sleep_ms=60", "--commit_every=3"};
  spec.env = {{"FERRY_ELASTIC", "1"},
              // elastic_a (1.2 MB) spans every server.
              {"FERRY_PARTITION_BYTES", "262144"}};
  for (const auto& [k, v] : env) spec.env[k] = v;
  return spec;
}

// Every process in `survivors` exits 0 and every worker among them finished all steps
// with `resets` resets, with one checksum between them.
void ExpectFinishedAlike(TestCluster& c, const std::vector<int>& survivors,
                         const std::vector<int>& workers, int resets) {
  for (int p : survivors) {
    ChildResult r = c.Wait(p, 120000);
    ASSERT_TRUE(r.exited) << "a process hung after the failure\n" << c.AllOutput();
    ASSERT_EQ(r.exit_code, 0) << c.AllOutput();
  }
  const std::regex ok("OK elastic steps=(\\d+) resets=(\\d+) checksum=([0-9a-f]+)");
  std::set<std::string> checksums;
  for (int w : workers) {
    const std::string out = c.Output(w);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, ok)) << out;
    EXPECT_EQ(m[1].str(), std::to_string(kSteps)) << out;
    EXPECT_EQ(m[2].str(), std::to_string(resets)) << out;
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

}  // namespace
}  // namespace ferry::testing
