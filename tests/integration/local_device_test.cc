// The local group's NCCL backend (worker/local/local_nccl.h) on a real GPU: device tensors
// push_pulled through LocalGroup::PushPullDevice in a real cluster on loopback (scheduler,
// one CPU server, ferry-local-device-test-worker processes). Built only with NCCL; every
// case is skipped with the reason where no GPU is present (FERRY_REQUIRE_GPU=1, set by
// scripts/gpu-checks, makes that a failure).
//
// - L = 1 on two "machines": each process is its own root (an NCCL communicator of one
//   rank): the device -> host -> servers -> host -> device path, exact sums and averages.
// - L = 2 on one machine: two local ranks, on GPUs 0 and 1 where there are two. On a
//   single GPU both ranks share it, which NCCL may refuse ("Duplicate GPU"): then the
//   test accepts that refusal as long as it is the clear error of the communicator's
//   set-up on both ranks, and says so in its output.

#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "tests/server/gpu/gpu_test_support.h"
#include "tests/support/process_group.h"

namespace ferry::testing {
namespace {

struct DeviceCluster {
  ProcessGroup group;
  int port = FreePort();
  std::vector<int> workers;  // by global rank

  void Start(int machines, int local) {
    auto env = [&](const std::string& role) { return ClusterEnv(role, machines, 1, port); };
    group.Spawn("scheduler", {BinaryPath("ferry-scheduler")}, env("scheduler"));
    group.Spawn("server", {BinaryPath("ferry-server")}, env("server"));
    for (int m = 0; m < machines; ++m) {
      for (int l = 0; l < local; ++l) {
        auto e = env("worker");
        e["DMLC_WORKER_ID"] = std::to_string(m);
        e["FERRY_LOCAL_SIZE"] = std::to_string(local);
        e["FERRY_LOCAL_RANK"] = std::to_string(l);
        e["FERRY_OP_TIMEOUT_MS"] = std::to_string(30000 * TimeScale());
        workers.push_back(group.Spawn(
            "worker" + std::to_string(m) + "." + std::to_string(l),
            {BinaryPath("ferry-local-device-test-worker"), "--tensors=4", "--rounds=3"}, e));
      }
    }
  }
};

TEST(LocalDeviceTest, TwoMachinesOfOneProcessSumAndAverageDeviceTensorsExactly) {
  FERRY_SKIP_WITHOUT_GPU();
  DeviceCluster c;
  c.Start(2, 1);
  for (int w : c.workers) {
    ChildResult r = c.group.Wait(w, 120000 * TimeScale());
    ASSERT_TRUE(r.exited) << "worker hung\n" << c.group.AllOutput();
    ASSERT_EQ(r.exit_code, 0) << c.group.AllOutput();
    EXPECT_NE(c.group.Output(w).find("OK rounds=3"), std::string::npos) << c.group.Output(w);
  }
}

TEST(LocalDeviceTest, OneMachineOfTwoLocalRanksReducesWithNccl) {
  FERRY_SKIP_WITHOUT_GPU();
  const int gpus = CudaDeviceCount(nullptr);
  DeviceCluster c;
  c.Start(1, 2);
  std::vector<ChildResult> results;
  for (int w : c.workers) {
    results.push_back(c.group.Wait(w, 120000 * TimeScale()));
    ASSERT_TRUE(results.back().exited) << "worker hung\n" << c.group.AllOutput();
  }
  if (gpus == 1 && results[0].exit_code == 1 && results[1].exit_code == 1) {
    // Two ranks on one GPU: NCCL's refusal must be the set-up's clear error.
    for (int w : c.workers) {
      const std::string out = c.group.Output(w);
      ASSERT_NE(out.find("the set-up of the NCCL communicator (2 ranks, GPU 0)"), std::string::npos)
          << c.group.AllOutput();
    }
    std::cout << "NOTE: NCCL refused two local ranks on the one GPU here, with a clear error; "
                 "L = 2 needs two GPUs to run:\n"
              << c.group.Output(c.workers[0]) << std::endl;
    return;
  }
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_EQ(results[i].exit_code, 0) << c.group.AllOutput();
    EXPECT_NE(c.group.Output(c.workers[i]).find("OK rounds=3"), std::string::npos)
        << c.group.Output(c.workers[i]);
  }
}

}  // namespace
}  // namespace ferry::testing
