// Integration tests of servers that sum on a GPU (FERRY_SERVER_DEVICE=gpu): a real
// scheduler, servers and workers as processes on loopback, with exact sums checked by
// every worker (ferry-test-worker), also when messages are dropped and resent, in
// deterministic mode, and with workers joining.
//
// Every case runs twice:
//  - RealGpu: ferry-server on this machine's GPU. Skipped, with the reason, without a
//    usable GPU; fails instead under FERRY_REQUIRE_GPU=1 (scripts/gpu-checks runs it so).
//  - FakeGpu: ferry-test-fake-gpu-server, the same server with a CPU stand-in for the
//    GPU summer (tests/server/fake_gpu_summer.h) that keeps its contract: sums delivered
//    later, from another thread's wake-up, some of them after longer than the workers'
//    resend timeout. This runs everywhere and covers the server's GPU path (OnSumReady,
//    resends while a sum is on its way, joins, generations); only CUDA itself is not in it.

#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <regex>
#include <string>
#include <vector>

#include "tests/server/gpu/gpu_test_support.h"
#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

struct Device {
  std::string name;
  std::string server;  // the server program
  bool real_gpu = false;
};

// Test names and ctest's list show the device's name, not the bytes of the struct.
void PrintTo(const Device& d, std::ostream* os) { *os << d.name; }

class GpuClusterTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    if (GetParam().real_gpu) FERRY_SKIP_WITHOUT_GPU();
  }

  // The fake's fault flags for this case; the real GPU takes none.
  std::vector<std::string> ServerArgs(const std::vector<std::string>& fake_args) const {
    return GetParam().real_gpu ? std::vector<std::string>{} : fake_args;
  }
};

// A job of `num_servers` servers running `server` with `server_args` (every one with
// FERRY_SERVER_DEVICE=gpu) and `num_workers` ferry-test-workers; `extra` for every role.
ClusterSpec JobSpec(const std::string& server, const std::vector<std::string>& server_args,
                    int num_servers, int num_workers, const std::vector<std::string>& worker_args,
                    const Env& extra) {
  ClusterSpec spec;
  spec.servers = num_servers;
  spec.workers = num_workers;
  spec.server_program = server;
  spec.server_args = server_args;
  spec.worker_args = worker_args;
  spec.stats_files = true;  // the counters the assertions read
  spec.env = {{"FERRY_SERVER_DEVICE", "gpu"}};
  for (const auto& [k, v] : extra) spec.env[k] = v;
  return spec;
}

// Every server summed on the GPU (or its stand-in): said so at start and at the end.
void ExpectServersOnGpu(const TestCluster& job) {
  for (int s : job.servers()) {
    const std::string out = job.Output(s);
    EXPECT_NE(out.find("sums on GPU 0 with"), std::string::npos) << out;
    EXPECT_NE(out.find("summation device: "), std::string::npos) << out;
  }
  EXPECT_GT(job.stats().Sum("server", "device_sums"), 0u) << job.AllOutput();
}

TEST_P(GpuClusterTest, SumsAreExact) {
  // 20 tensors from 1 element to 4 MiB in 256 KiB partitions over 2 servers with 2
  // engine threads each and 3 CUDA streams per engine: many keys per stream; every
  // other tensor averaged.
  TestCluster job(JobSpec(GetParam().server, ServerArgs({}), 2, 3,
                          {"--mode=sums", "--tensors=20", "--max_bytes=4194304", "--rounds=6"},
                          {{"FERRY_PARTITION_BYTES", "262144"},
                           {"FERRY_SERVER_ENGINE_THREADS", "2"},
                           {"FERRY_SERVER_GPU_STREAMS", "3"}}));
  job.Start();
  ASSERT_TRUE(job.Succeeds(180000));
  for (int w : job.workers()) {
    EXPECT_NE(job.Output(w).find("OK rounds=6"), std::string::npos) << job.Output(w);
  }
  ExpectServersOnGpu(job);
  EXPECT_EQ(job.stats().Sum("server", "device_sums"), job.stats().Sum("server", "frames_completed"))
      << "every round's (or frame's) sum came from the GPU\n"
      << job.AllOutput();
}

TEST_P(GpuClusterTest, DroppedMessagesAreResentAndSumsStayExact) {
  // 1% of data messages (pushes, acknowledgements, sums, RESEND_SUMs) dropped: lost pushes are
  // resent, a push whose reply was lost is resent or PULLed and must be answered without
  // being added twice. The stand-in also holds every 20th sum for 700 ms, longer than the
  // resend timeout, so resent pushes and RESEND_SUMs arrive while that round's sum is on its
  // way (they must be acknowledged again, not added).
  TestCluster job(JobSpec(GetParam().server, ServerArgs({"--slow_every=20", "--slow_ms=700"}), 2, 2,
                          {"--mode=sums", "--tensors=16", "--max_bytes=262144", "--rounds=12"},
                          {{"FERRY_PARTITION_BYTES", "16384"},
                           {"FERRY_TEST_DROP_PERCENT", "1"},
                           {"FERRY_RESEND_TIMEOUT_MS", "300"}}));
  job.Start();
  ASSERT_TRUE(job.Succeeds(300000));
  for (int w : job.workers()) {
    EXPECT_NE(job.Output(w).find("OK rounds=12"), std::string::npos) << job.Output(w);
  }
  ExpectServersOnGpu(job);
  const uint64_t dropped = job.stats().Sum("server", "van.injected_drops") +
                           job.stats().Sum("worker", "van.injected_drops");
  const uint64_t resent = job.stats().Sum("worker", "resends") + job.stats().Sum("worker", "pulls");
  const uint64_t answered =
      job.stats().Sum("server", "duplicate_pushes") + job.stats().Sum("server", "results_resent");
  std::printf("%s: %llu messages dropped, %llu resends, %llu duplicates answered\n",
              GetParam().name.c_str(), static_cast<unsigned long long>(dropped),
              static_cast<unsigned long long>(resent), static_cast<unsigned long long>(answered));
  EXPECT_GT(dropped, 0u) << job.AllOutput();
  EXPECT_GT(resent, 0u) << job.AllOutput();
  EXPECT_GT(answered, 0u) << job.AllOutput();
}

TEST_P(GpuClusterTest, DeterministicSumsAreBitwiseInRankOrder) {
  // Values whose float sum depends on the order of addition, pushed in varying orders:
  // every sum must equal the rank-order sum bit for bit (pushes go to the GPU in rank
  // order), and every worker must see the same results.
  TestCluster job(JobSpec(GetParam().server, ServerArgs({}), 2, 3,
                          {"--mode=deterministic", "--rounds=10"},
                          {{"FERRY_DETERMINISTIC", "1"},
                           {"FERRY_PARTITION_BYTES", "262144"},
                           {"FERRY_SERVER_ENGINE_THREADS", "2"}}));
  job.Start();
  ASSERT_TRUE(job.Succeeds(180000));
  std::vector<std::string> checksums;
  for (int w : job.workers()) {
    const std::string out = job.Output(w);
    EXPECT_NE(out.find("OK deterministic rounds=10"), std::string::npos) << out;
    std::smatch m;
    checksums.push_back(std::regex_search(out, m, std::regex("checksum ([0-9a-f]+)")) ? m[1].str()
                                                                                      : "none");
  }
  for (const std::string& c : checksums) EXPECT_EQ(c, checksums[0]);
  EXPECT_NE(checksums[0], "none");
  EXPECT_GT(job.stats().Sum("server", "pushes_held"), 0u) << job.AllOutput();
  ExpectServersOnGpu(job);
}

TEST_P(GpuClusterTest, JoiningWorkersAndRestartedRounds) {
  // Uneven data: worker r pushes 3 + 2r rounds, then joins; rounds complete over the
  // workers still pushing (a JOIN completes rounds, whose sums then come from the GPU);
  // after every worker joined, rounds restart at 0 for 2 more rounds together.
  TestCluster job(JobSpec(GetParam().server, ServerArgs({}), 2, 3, {"--mode=join"},
                          {{"FERRY_PARTITION_BYTES", "4096"}}));
  job.Start();
  ASSERT_TRUE(job.Succeeds(120000));
  for (int w = 0; w < 3; ++w) {
    const std::string out = job.Output(job.workers()[w]);
    EXPECT_NE(out.find("OK join rounds=" + std::to_string(3 + 2 * w)), std::string::npos) << out;
  }
  ExpectServersOnGpu(job);
}

INSTANTIATE_TEST_SUITE_P(Devices, GpuClusterTest,
                         ::testing::Values(Device{"RealGpu", "ferry-server", true},
                                           Device{"FakeGpu", "ferry-test-fake-gpu-server", false}),
                         [](const ::testing::TestParamInfo<Device>& info) {
                           return info.param.name;
                         });

TEST(FakeGpuClusterTest, ResendsWhileASumIsOnItsWayAreAnsweredNotAdded) {
  // No message is lost, but every 8th sum takes 600 ms to come back, twice the resend
  // timeout: the worker whose push completed that round resends it, and the others, whose
  // pushes were acknowledged, send RESEND_SUMs, all while the round is complete but its sum is
  // not there yet. Each must be acknowledged again (not added: the sums stay exact), and
  // the sum must still reach everyone once it arrives.
  TestCluster job(JobSpec("ferry-test-fake-gpu-server", {"--slow_every=8", "--slow_ms=600"}, 1, 3,
                          {"--mode=sums", "--tensors=6", "--max_bytes=65536", "--rounds=8"},
                          {{"FERRY_PARTITION_BYTES", "16384"},
                           {"FERRY_SERVER_ENGINE_THREADS", "2"},
                           {"FERRY_RESEND_TIMEOUT_MS", "300"}}));
  job.Start();
  ASSERT_TRUE(job.Succeeds(180000));
  for (int w : job.workers()) {
    EXPECT_NE(job.Output(w).find("OK rounds=8"), std::string::npos) << job.Output(w);
  }
  const uint64_t resent = job.stats().Sum("worker", "resends");
  const uint64_t pulls = job.stats().Sum("worker", "pulls");
  const uint64_t duplicates = job.stats().Sum("server", "duplicate_pushes");
  std::printf("%llu pushes sent again, %llu PULLs, %llu duplicate pushes acknowledged again\n",
              static_cast<unsigned long long>(resent), static_cast<unsigned long long>(pulls),
              static_cast<unsigned long long>(duplicates));
  EXPECT_GT(resent + pulls, 0u) << job.AllOutput();
  EXPECT_EQ(job.stats().Sum("server", "van.injected_drops"), 0u);
}

TEST(FakeGpuClusterTest, SummationFailureFailsTheJobWithTheReason) {
  // The stand-in fails as a broken GPU would (the 40th push an engine adds, and every
  // call after it): the pushers waiting are told why, the server leaves the job, and
  // nothing hangs.
  TestCluster job(
      JobSpec("ferry-test-fake-gpu-server", {"--fail_after_adds=40"}, 1, 2,
              {"--mode=sums", "--tensors=8", "--max_bytes=65536", "--rounds=20"},
              {{"FERRY_PARTITION_BYTES", "4096"}, {"FERRY_SERVER_ENGINE_THREADS", "1"}}));
  job.Start();
  auto results = job.WaitAll(120000);
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].exited) << "process " << i << " hung\n" << job.AllOutput();
  }
  const std::string server = job.Output(job.servers()[0]);
  EXPECT_EQ(results[job.servers()[0]].exit_code, 1) << server;
  EXPECT_NE(server.find("the server's summation failed: cudaMemcpyAsync(...) failed"),
            std::string::npos)
      << server;
  bool told = false;
  for (int w : job.workers()) {
    EXPECT_NE(results[w].exit_code, 0) << job.Output(w);
    told = told || job.Output(w).find("summation failed") != std::string::npos;
  }
  EXPECT_TRUE(told) << "no worker was told why\n" << job.AllOutput();
}

}  // namespace
}  // namespace ferry::testing
