// Builds without CUDA (FERRY_WITH_CUDA=OFF, or AUTO without nvcc): the GPU entry points
// exist, so the server links the same way, and say clearly that there is no CUDA here.

#include "common/util/status.h"
#include "server/gpu/gpu_device.h"
#include "server/gpu/gpu_summer.h"

namespace ferry {
namespace {

constexpr const char* kNoCuda =
    "this Ferry was built without CUDA (FERRY_WITH_CUDA=OFF, or nvcc was not found when it "
    "was built); rebuild it with -DFERRY_WITH_CUDA=ON on a machine with the CUDA toolkit, "
    "or set FERRY_SERVER_DEVICE=cpu";

}  // namespace

bool BuiltWithCuda() { return false; }
const char* CudaArchitectures() { return ""; }

int CudaDeviceCount(std::string* why) {
  if (why != nullptr) *why = kNoCuda;
  return 0;
}

GpuInfo CheckGpuAvailable(int device) {
  throw FerryError(ErrorCode::kInvalidConfig,
                   StrCat("FERRY_SERVER_DEVICE=gpu:", device, ": ", kNoCuda));
}

std::unique_ptr<GpuSummer> GpuSummer::Create(const GpuSummerOptions&) {
  throw FerryError(ErrorCode::kInvalidConfig, StrCat("GpuSummer: ", kNoCuda));
}

}  // namespace ferry
