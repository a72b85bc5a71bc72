// ferry-server: the summation service of a Ferry job (see server/server.h).
#include <glog/logging.h>

#include "common/cluster/role_main.h"
#include "common/util/status.h"
#include "server/gpu/gpu_device.h"
#include "server/server.h"

namespace {

// FERRY_SERVER_DEVICE=gpu: a server without a usable GPU exits 2 here, before joining.
// The GPU engine (server/gpu/gpu_summer.h) is not wired into the engine threads yet, so
// a server with a usable GPU is refused too, rather than silently summing on the CPU.
void CheckServerDevice(const ferry::Config& config) {
  if (config.server_device != ferry::ServerDevice::kGpu) return;
  const ferry::GpuInfo gpu = ferry::CheckGpuAvailable(config.server_gpu);
  LOG(INFO) << "summation device: " << gpu.Describe();
  throw ferry::FerryError(
      ferry::ErrorCode::kInvalidConfig,
      ferry::StrCat("FERRY_SERVER_DEVICE=gpu:", config.server_gpu, ": ", gpu.Describe(),
                    " is usable, but this ferry-server does not sum on the GPU yet (the engine "
                    "in server/gpu/ is not wired into the server's engine threads); set "
                    "FERRY_SERVER_DEVICE=cpu"));
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
