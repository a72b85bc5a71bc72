#pragma once

// The CUDA runtime and NCCL stand-in of the stub builds (FERRY_NCCL_STUB=ON): the calls
// of cuda_runtime_api.h and nccl.h on host memory, so that the local group's NCCL backend
// (worker/local/local_nccl.h) compiles and runs without a GPU, in the clang
// thread-safety build and under the sanitizers. The fake-GPU pattern of the server's
// tests (tests/server/fake_gpu_summer.h): the contract kept on the CPU, with faults to
// inject. Never linked into a build that has real CUDA (CMake refuses the combination).
//
// What it keeps of the contract:
//  - Devices: SetDeviceCount of them (default 1), the current one per thread
//    (cudaSetDevice). "Device memory" is host memory from cudaMalloc, recorded with the
//    current device: cudaPointerGetAttributes reports it as cudaMemoryTypeDevice on that
//    device, cudaMallocHost's memory as cudaMemoryTypeHost and any other pointer as
//    cudaMemoryTypeUnregistered, so the backend's checks refuse a host tensor as a real
//    GPU would.
//  - Streams: each created stream is a thread that runs its work in order; cudaMemcpyAsync,
//    cudaEventRecord, cudaStreamWaitEvent and the collectives queue work there, and
//    cudaStreamQuery says cudaErrorNotReady until it ran. The legacy default stream (null)
//    runs its work at the call. cudaStreamDestroy waits for the stream's work (the real
//    one returns at once and frees it later).
//  - Communicators: ncclGetUniqueId names a shared-memory segment (shm_open), and
//    ncclCommInitRank(Config) of each of the nranks ranks, in threads of one process or in
//    separate processes, attaches to it; the set-up is complete once all nranks did
//    (non-blocking: ncclCommGetAsyncError says ncclInProgress until then). ncclReduce
//    (sum) and ncclBroadcast queue a kernel on the stream that really moves the data
//    through the segment, in slices, and waits for the other ranks at each slice as NCCL's
//    kernels do: forever, if a rank never makes the matching call, until this rank's
//    communicator is aborted (ncclCommAbort ends its kernels; another rank's abort does
//    not). Sums are Ferry's own kernels (common/reduce), in rank order.
//  - Types: the six of Ferry's DataType; ncclSum only.
//
// Not modelled: real concurrency between streams and the host beyond the order above,
// NCCL's refusal of two ranks on one GPU ("Duplicate GPU"), CUDA's sticky errors, peer
// access, and anything a GPU's timing would show.

#include <string>

namespace ferry::cuda_nccl_stub {

// The number of devices cudaGetDeviceCount reports (0: "no CUDA device"); default 1.
void SetDeviceCount(int count);

// Fault injection: the next `call` ("ncclReduce", "ncclBroadcast", "ncclCommInitRankConfig",
// "cudaMemcpyAsync") made for local rank `rank` (any rank for cudaMemcpyAsync, which has
// none) fails: it returns ncclSystemError (cudaErrorInvalidValue for the CUDA call)
// without queueing work, and ncclGetLastError says `why`.
void FailNextCall(const std::string& call, int rank, const std::string& why);

// How long a kernel of an aborted communicator goes on before it ends (default 0): the
// stream runs the work queued behind it only then, as a GPU that notices the abort late
// would. Tests of failures set it, so that work left on a stream after a round ended shows.
void SetAbortLatency(int ms);

// Allocations made by cudaMalloc and cudaMallocHost and not freed yet (for leak checks).
int LiveAllocations();

// Streams with work queued or running: a test checks that none touches a buffer whose
// operation has ended.
int BusyStreams();

}  // namespace ferry::cuda_nccl_stub
