#pragma once

// What the stub's NCCL half (nccl_stub.cc) needs of its CUDA half (cuda_stub.cc).

#include <cstddef>
#include <functional>
#include <string>

#include "cuda_runtime_api.h"

namespace ferry::cuda_nccl_stub {

// Queues `work` on `stream` (run in order on its thread; the null stream runs it now).
// Returns cudaErrorInvalidResourceHandle for a destroyed stream.
cudaError_t Enqueue(cudaStream_t stream, std::function<void()> work);

// Whether [p, p + bytes) lies in one live cudaMalloc allocation (bytes 0: p in one).
bool IsDeviceMemory(const void* p, size_t bytes);

// The injected failure of `call` for local rank `rank` (FailNextCall), taken: true and its
// text in `why`; false when none is due.
bool TakeInjectedFailure(const std::string& call, int rank, std::string* why);

}  // namespace ferry::cuda_nccl_stub
