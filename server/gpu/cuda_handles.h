#pragma once

// Owning handles for CUDA objects (CUDA builds only): each frees what it owns in its
// destructor, ignoring errors there (at process exit the CUDA runtime may already be
// gone, and a destructor must not throw). Move-only.
//
// None of them synchronizes: whoever destroys one must know that no queued GPU work
// still uses it (CudaSummer's destructor waits for its streams first).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "server/gpu/cuda_check.h"

namespace ferry {
namespace gpu {

template <typename T, void (*Free)(T)>
class CudaHandle {
 public:
  CudaHandle() = default;
  explicit CudaHandle(T h) : h_(h) {}
  CudaHandle(CudaHandle&& o) noexcept : h_(std::exchange(o.h_, T{})) {}
  CudaHandle& operator=(CudaHandle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, T{});
    }
    return *this;
  }
  CudaHandle(const CudaHandle&) = delete;
  CudaHandle& operator=(const CudaHandle&) = delete;
  ~CudaHandle() { reset(); }

  T get() const { return h_; }
  void reset() {
    if (h_ != T{}) Free(std::exchange(h_, T{}));
  }

 private:
  T h_{};
};

inline void FreeStream(cudaStream_t s) { cudaStreamDestroy(s); }
inline void FreeEvent(cudaEvent_t e) { cudaEventDestroy(e); }
inline void FreeDevice(void* p) { cudaFree(p); }
inline void FreePinned(void* p) { cudaFreeHost(p); }

using Stream = CudaHandle<cudaStream_t, FreeStream>;
using Event = CudaHandle<cudaEvent_t, FreeEvent>;

// A stream that does not synchronize with the legacy default stream.
inline Stream NewStream() {
  cudaStream_t s = nullptr;
  FERRY_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}

// An event for ordering only (no timing: cheaper to record and query).
inline Event NewEvent() {
  cudaEvent_t e = nullptr;
  FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return Event(e);
}

// Bytes that grow on demand: device memory (cudaMalloc) or pinned host memory
// (cudaHostAlloc). Reserve() frees and reallocates: REQUIRES no queued GPU work still
// uses the old bytes (the caller waited for it).
template <void (*Free)(void*), bool kPinned>
class Memory {
 public:
  void* get() const { return p_.get(); }
  size_t capacity() const { return capacity_; }
  void Reserve(size_t bytes) {
    if (bytes <= capacity_) return;
    p_.reset();
    capacity_ = 0;
    void* p = nullptr;
    if constexpr (kPinned) {
      FERRY_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
    } else {
      FERRY_CUDA_CHECK(cudaMalloc(&p, bytes));
    }
    p_ = CudaHandle<void*, Free>(p);
    capacity_ = bytes;
  }

 private:
  CudaHandle<void*, Free> p_;
  size_t capacity_ = 0;
};

using DeviceMemory = Memory<FreeDevice, false>;
using PinnedMemory = Memory<FreePinned, true>;

}  // namespace gpu
}  // namespace ferry
