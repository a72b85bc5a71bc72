// The local group's NCCL backend (worker/local/local_nccl.h) on a real GPU: device tensors
// push_pulled through LocalGroup::PushPullDevice in a real cluster on loopback (scheduler,
// one CPU server, ferry-local-device-test-worker processes). Built with NCCL, where every
// case is skipped with the reason where no GPU is present (FERRY_REQUIRE_GPU=1, set by
// scripts/gpu-checks, makes that a failure), and in the stub builds (FERRY_NCCL_STUB=ON:
// CUDA and NCCL on host memory, tests/stubs/cuda_nccl), where every case runs: the local
// root's and peers' messages, sockets and processes around the backend, under the
// sanitizers.
//
// - L = 1 on two "machines": each process is its own root (an NCCL communicator of one
//   rank): the device -> host -> servers -> host -> device path, exact sums and averages.
// - L = 2 on one machine: two local ranks, on GPUs 0 and 1 where there are two. On a
//   single GPU both ranks share it, which NCCL may refuse ("Duplicate GPU"): then the
//   test accepts that refusal as long as it is the clear error of the communicator's
//   set-up on both ranks, and says so in its output. The stub never refuses it.

#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "tests/server/gpu/gpu_test_support.h"
#include "tests/support/test_cluster.h"

#ifdef FERRY_NCCL_STUB
#define FERRY_SKIP_WITHOUT_NCCL_DEVICE() \
  do {                                   \
  } while (0)
#else
#define FERRY_SKIP_WITHOUT_NCCL_DEVICE() FERRY_SKIP_WITHOUT_GPU()
#endif

namespace ferry::testing {
namespace {

// `machines` machines of `local` ferry-local-device-test-worker processes, one server.
ClusterSpec DeviceSpec(int machines, int local) {
  ClusterSpec spec;
  spec.workers = machines;
  spec.local_size = local;
  spec.worker_program = "ferry-local-device-test-worker";
  spec.worker_args = {"--tensors=4", "--rounds=3"};
  spec.worker_env = {{"FERRY_OP_TIMEOUT_MS", std::to_string(30000 * TimeScale())}};
  return spec;
}

TEST(LocalDeviceTest, TwoMachinesOfOneProcessSumAndAverageDeviceTensorsExactly) {
  FERRY_SKIP_WITHOUT_NCCL_DEVICE();
  TestCluster c(DeviceSpec(2, 1));
  c.Start();
  for (int w : c.workers()) {
    ChildResult r = c.Wait(w, 120000);
    ASSERT_TRUE(r.exited) << "worker hung\n" << c.AllOutput();
    ASSERT_EQ(r.exit_code, 0) << c.AllOutput();
    EXPECT_NE(c.Output(w).find("OK rounds=3"), std::string::npos) << c.Output(w);
  }
}

TEST(LocalDeviceTest, OneMachineOfTwoLocalRanksReducesWithNccl) {
  FERRY_SKIP_WITHOUT_NCCL_DEVICE();
  const int gpus = CudaDeviceCount(nullptr);
  TestCluster c(DeviceSpec(1, 2));
  c.Start();
  std::vector<ChildResult> results;
  for (int w : c.workers()) {
    results.push_back(c.Wait(w, 120000));
    ASSERT_TRUE(results.back().exited) << "worker hung\n" << c.AllOutput();
  }
  if (gpus == 1 && results[0].exit_code == 1 && results[1].exit_code == 1) {
    // Two ranks on one GPU: NCCL's refusal must be the set-up's clear error.
    for (int w : c.workers()) {
      const std::string out = c.Output(w);
      ASSERT_NE(out.find("the set-up of the NCCL communicator (2 ranks, GPU 0)"), std::string::npos)
          << c.AllOutput();
    }
    std::cout << "NOTE: NCCL refused two local ranks on the one GPU here, with a clear error; "
                 "L = 2 needs two GPUs to run:\n"
              << c.Output(c.workers()[0]) << std::endl;
    return;
  }
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_EQ(results[i].exit_code, 0) << c.AllOutput();
    EXPECT_NE(c.Output(c.workers()[i]).find("OK rounds=3"), std::string::npos)
        << c.Output(c.workers()[i]);
  }
}

}  // namespace
}  // namespace ferry::testing
