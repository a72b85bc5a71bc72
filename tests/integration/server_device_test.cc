// ferry-server with FERRY_SERVER_DEVICE: a server asked to sum on a GPU it cannot use
// exits with code 2 before joining, saying why, whatever the build and the machine; so
// does a GPU server asked for asynchronous training (not supported on the GPU engine);
// a malformed value is refused like any bad variable. Servers that do sum on a GPU:
// gpu_cluster_test.

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "server/gpu/gpu_device.h"
#include "tests/support/test_cluster.h"

namespace ferry::testing {
namespace {

// Runs ferry-server with `device` (and nothing else to talk to); its exit code and output.
std::pair<int, std::string> RunServer(const std::string& device,
                                      const std::map<std::string, std::string>& extra = {}) {
  ClusterSpec spec;
  spec.server_env = {{"FERRY_CONNECT_TIMEOUT_MS", "500"}, {"FERRY_SERVER_DEVICE", device}};
  for (const auto& [k, v] : extra) spec.server_env[k] = v;
  TestCluster g(spec);
  const int c = g.StartServer();
  const ChildResult r = g.group().Wait(c, 20000);
  EXPECT_TRUE(r.exited) << g.Output(c);
  return {r.exit_code, g.Output(c)};
}

TEST(ServerDeviceTest, GpuThatCannotBeUsedExitsTwo) {
  std::string why;
  if (BuiltWithCuda() && CudaDeviceCount(&why) > 0) {
    GTEST_SKIP() << "this machine's GPU is usable: gpu_cluster_test runs servers on it";
  }
  const auto [code, output] = RunServer("gpu");
  EXPECT_EQ(code, 2) << output;
  EXPECT_NE(output.find("FERRY_SERVER_DEVICE=gpu:0: "), std::string::npos) << output;
  const char* reason =
      !BuiltWithCuda() ? "this Ferry was built without CUDA" : "no usable CUDA GPU: ";
  EXPECT_NE(output.find(reason), std::string::npos) << output;
}

TEST(ServerDeviceTest, GpuWithAsynchronousTrainingExitsTwo) {
  // Refused before the GPU is even looked at: the same answer on every machine.
  const auto [code, output] = RunServer("gpu:0", {{"FERRY_ENABLE_ASYNC", "1"}});
  EXPECT_EQ(code, 2) << output;
  EXPECT_NE(output.find("FERRY_SERVER_DEVICE=gpu with FERRY_ENABLE_ASYNC=1: asynchronous "
                        "training is not supported on the GPU engine"),
            std::string::npos)
      << output;
}

TEST(ServerDeviceTest, MalformedDeviceExitsTwo) {
  const auto [code, output] = RunServer("tpu");
  EXPECT_EQ(code, 2) << output;
  EXPECT_NE(output.find("FERRY_SERVER_DEVICE='tpu': expected cpu, gpu or gpu:N"), std::string::npos)
      << output;
}

}  // namespace
}  // namespace ferry::testing
