#pragma once

// The CUDA and NCCL calls of the NCCL backend (local_nccl.h) that need no state of its
// own, with their error checks: each failure is a FerryError naming the call, the
// backend (`who`: "NCCL backend of local rank R (pid P)") and CUDA's or NCCL's text.
// Compiled only with FERRY_HAVE_NCCL (real CUDA and NCCL, or the stub of
// tests/stubs/cuda_nccl).

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "common/types/data_type.h"
#include "worker/local/local_nccl.h"

namespace ferry {

// NCCL's type for t. Throws FerryError(kInvalidArgument) for a type NCCL lacks.
ncclDataType_t NcclType(DataType t);

// "cudaErrorX (text)"; clears CUDA's last error, so that a non-sticky error does not
// resurface in a later call.
std::string CudaText(cudaError_t r);

// Throws FerryError(kInternal) unless r is cudaSuccess.
void CheckCuda(cudaError_t r, const char* call, const std::string& who);

// Throws FerryError(kInternal) unless r is ncclSuccess or ncclInProgress (non-blocking
// calls). `comm`: where NCCL's last error text comes from (null: the process's).
void CheckNccl(ncclResult_t r, const char* call, ncclComm_t comm, const std::string& who);

// The caller's thread: the GPU of t's memory (the current GPU when t.count is 0). Throws
// FerryError(kInvalidArgument) naming what is wrong: no GPU, not device memory, input
// and output on different GPUs.
int CheckTensor(const DeviceTensor& t, const std::string& who);

// The caller's thread: an event recorded on t.stream, after the work there that writes
// the input (made on `device`, then the current GPU is restored). The caller owns it.
cudaEvent_t RecordReady(const DeviceTensor& t, int device, const std::string& who);

// A new NCCL unique id, serialized (the bytes of ncclUniqueId).
std::string NewUniqueId(const std::string& who);

}  // namespace ferry
