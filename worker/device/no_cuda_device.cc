#include "common/util/error.h"
#include "common/util/strings.h"
#include "worker/device/cuda_device.h"

namespace ferry {

std::unique_ptr<DeviceApi> NewCudaDevice(int device) {
  throw FerryError(ErrorCode::kInvalidArgument,
                   StrCat("CUDA device ", device, ": this Ferry was built without CUDA (no nvcc "
                          "was found when it was built)"));
}

bool CudaBuilt() { return false; }

}  // namespace ferry
