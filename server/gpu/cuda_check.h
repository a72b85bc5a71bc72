#pragma once

// CUDA error checks for server/gpu (CUDA builds only). A failed CUDA call throws
// FerryError(kInternal) naming the call, where it was made, and CUDA's error name and
// text; the caller adds what Ferry was doing (the key, the GPU) where it handles it.

#include <cuda_runtime_api.h>

#include <chrono>

namespace ferry {
namespace gpu {

// Throws FerryError(kInternal) unless `result` is cudaSuccess. Clears CUDA's
// last-error state so that a handled error does not resurface in a later call.
void CheckCuda(cudaError_t result, const char* call, const char* file, int line);

// "cudaErrorNoDevice (no CUDA-capable device is detected)".
const char* CudaErrorText(cudaError_t result, char* buf, size_t size);

// Waits until the work before `event` on its stream is done. Polls (no CUDA blocking
// call has a deadline) and throws FerryError(kTimeout) naming `what` if it is not done
// by `deadline`, FerryError(kInternal) if the work failed.
void WaitForEvent(cudaEvent_t event, std::chrono::steady_clock::time_point deadline,
                  const char* what);

}  // namespace gpu
}  // namespace ferry

#define FERRY_CUDA_CHECK(call) ::ferry::gpu::CheckCuda((call), #call, __FILE__, __LINE__)
