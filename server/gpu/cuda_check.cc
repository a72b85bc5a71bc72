#include "server/gpu/cuda_check.h"

#include <cstdio>
#include <cstring>
#include <thread>

#include "common/util/status.h"

namespace ferry {
namespace gpu {

const char* CudaErrorText(cudaError_t result, char* buf, size_t size) {
  std::snprintf(buf, size, "%s (%s)", cudaGetErrorName(result), cudaGetErrorString(result));
  return buf;
}

void CheckCuda(cudaError_t result, const char* call, const char* file, int line) {
  if (result == cudaSuccess) return;
  cudaGetLastError();  // reset a non-sticky error; a sticky one stays whatever we do
  const char* base = std::strrchr(file, '/');
  char text[256];
  throw FerryError(ErrorCode::kInternal,
                   StrCat("CUDA call ", call, " failed (", base ? base + 1 : file, ":", line,
                          "): ", CudaErrorText(result, text, sizeof text)));
}

void WaitForEvent(cudaEvent_t event, std::chrono::steady_clock::time_point deadline,
                  const char* what) {
  // Spin briefly (copies and sums of a partition take microseconds), then back off so
  // that a long wait does not burn a core.
  for (int spins = 0;; ++spins) {
    const cudaError_t r = cudaEventQuery(event);
    if (r == cudaSuccess) return;
    if (r != cudaErrorNotReady) CheckCuda(r, "cudaEventQuery", __FILE__, __LINE__);
    if (std::chrono::steady_clock::now() > deadline) {
      throw FerryError(ErrorCode::kTimeout,
                       StrCat("the GPU did not finish ", what, " before the deadline"));
    }
    if (spins < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace gpu
}  // namespace ferry
