// ferry-server with FERRY_SERVER_DEVICE: a server asked to sum on a GPU it cannot use
// exits with code 2 before joining, saying why, whatever the build and the machine;
// a malformed value is refused like any bad variable.

#include <gtest/gtest.h>

#include <string>

#include "server/gpu/gpu_device.h"
#include "tests/support/process_group.h"

namespace ferry::testing {
namespace {

// Runs ferry-server with `device` (and nothing else to talk to); its exit code and output.
std::pair<int, std::string> RunServer(const std::string& device) {
  auto env = ClusterEnv("server", 1, 1, FreePort());
  env["FERRY_CONNECT_TIMEOUT_MS"] = "500";
  env["FERRY_SERVER_DEVICE"] = device;
  ProcessGroup g;
  const int c = g.Spawn("server", {BinaryPath("ferry-server")}, env);
  const ChildResult r = g.Wait(c, 20000);
  EXPECT_TRUE(r.exited) << g.Output(c);
  return {r.exit_code, g.Output(c)};
}

TEST(ServerDeviceTest, GpuThatCannotBeUsedExitsTwo) {
  const auto [code, output] = RunServer("gpu");
  EXPECT_EQ(code, 2) << output;
  EXPECT_NE(output.find("FERRY_SERVER_DEVICE=gpu:0: "), std::string::npos) << output;
  std::string why;
  const char* reason = !BuiltWithCuda()                ? "this Ferry was built without CUDA"
                       : CudaDeviceCount(&why) == 0   ? "no usable CUDA GPU: "
                                                      : "does not sum on the GPU yet";
  EXPECT_NE(output.find(reason), std::string::npos) << output;
}

TEST(ServerDeviceTest, MalformedDeviceExitsTwo) {
  const auto [code, output] = RunServer("tpu");
  EXPECT_EQ(code, 2) << output;
  EXPECT_NE(output.find("FERRY_SERVER_DEVICE='tpu': expected cpu, gpu or gpu:N"), std::string::npos)
      << output;
}

}  // namespace
}  // namespace ferry::testing
