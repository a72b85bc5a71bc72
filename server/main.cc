// ferry-server: the summation service of a Ferry job (see server/server.h).
#include <glog/logging.h>

#include "common/cluster/role_main.h"
#include "common/util/status.h"
#include "server/gpu/gpu_device.h"
#include "server/server.h"

namespace {

// Refuses what this server cannot run before it joins, with exit code 2 and the reason:
// settings it does not support together (CheckServerSettings: FERRY_SERVER_DEVICE=gpu
// with FERRY_ENABLE_ASYNC=1), and FERRY_SERVER_DEVICE=gpu without a usable GPU (built
// without CUDA, no driver, no such GPU, no kernels for it: CheckGpuAvailable).
void CheckServerDevice(const ferry::Config& config) {
  ferry::CheckServerSettings(config);
  if (config.server.device != ferry::ServerDevice::kGpu) return;
  const ferry::GpuInfo gpu = ferry::CheckGpuAvailable(config.server.gpu);
  LOG(INFO) << "summation device: " << gpu.Describe();
}

}  // namespace

int main(int argc, char** argv) {
  const ferry::NodeRole role = ferry::NodeRole::kServer;
  return ferry::RunRoleMain(argc, argv, &role, [](const ferry::Config& config) {
    CheckServerDevice(config);
    ferry::Server server(config);
    return server.Run();
  });
}
