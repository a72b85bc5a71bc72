// The GPU summation kernels (see sum_kernels.h for the arithmetic contract).
//
// One kernel per data type: a grid-stride loop over 16-byte vectors (each thread loads
// one uint4 of dst and of src, adds its 16 / sizeof(T) elements, stores one uint4),
// then a grid-stride loop over the elements past the last whole vector. Buffers that
// are not 16-byte aligned go through the element loop alone.

#include "server/gpu/sum_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/util/status.h"
#include "server/gpu/cuda_check.h"

namespace ferry {
namespace gpu {
namespace {

// Element traits: storage type and addition, as in common/reduce/reduce.cc.
struct F32 {
  using T = float;
  __device__ static T Add(T a, T b) { return a + b; }
};
struct F64 {
  using T = double;
  __device__ static T Add(T a, T b) { return a + b; }
};
struct F16 {
  using T = unsigned short;
  __device__ static T Add(T a, T b) {
    const float s = __half2float(__ushort_as_half(a)) + __half2float(__ushort_as_half(b));
    return __half_as_ushort(__float2half_rn(s));
  }
};
struct BF16 {
  using T = unsigned short;
  __device__ static T Add(T a, T b) {
    const float s =
        __bfloat162float(__ushort_as_bfloat16(a)) + __bfloat162float(__ushort_as_bfloat16(b));
    return __bfloat16_as_ushort(__float2bfloat16_rn(s));
  }
};
// Unsigned: wraps modulo 2^N with no signed-overflow UB.
struct I32 {
  using T = unsigned int;
  __device__ static T Add(T a, T b) { return a + b; }
};
struct I64 {
  using T = unsigned long long;
  __device__ static T Add(T a, T b) { return a + b; }
};

constexpr int kThreads = 256;
constexpr size_t kVector = 16;  // bytes per uint4

// dst[i] += src[i] for i in [0, count): vectors [0, vectors), then elements
// [vectors * kPer, count). `vectors` is 0 when the buffers are not 16-byte aligned.
template <typename Tr>
__global__ void SumKernel(typename Tr::T* dst, const typename Tr::T* src, size_t vectors,
                          size_t count) {
  using T = typename Tr::T;
  constexpr int kPer = kVector / sizeof(T);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint4* dv = reinterpret_cast<uint4*>(dst);
  const uint4* sv = reinterpret_cast<const uint4*>(src);
  for (size_t i = first; i < vectors; i += stride) {
    uint4 d = dv[i];
    const uint4 s = sv[i];
    T a[kPer], b[kPer];
    memcpy(a, &d, kVector);
    memcpy(b, &s, kVector);
#pragma unroll
    for (int k = 0; k < kPer; ++k) a[k] = Tr::Add(a[k], b[k]);
    memcpy(&d, a, kVector);
    dv[i] = d;
  }
  for (size_t i = vectors * kPer + first; i < count; i += stride) dst[i] = Tr::Add(dst[i], src[i]);
}

// Enough blocks to cover the work, at most 8 per multiprocessor (grid-stride beyond).
unsigned Blocks(size_t work) {
  int device = 0, sms = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&device));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const size_t needed = (work + kThreads - 1) / kThreads;
  const size_t most = static_cast<size_t>(sms > 0 ? sms : 1) * 8;
  return static_cast<unsigned>(needed < most ? (needed > 0 ? needed : 1) : most);
}

template <typename Tr>
void Launch(void* dst, const void* src, size_t count, cudaStream_t stream) {
  using T = typename Tr::T;
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  FERRY_ENFORCE(d % sizeof(T) == 0 && s % sizeof(T) == 0, ErrorCode::kInvalidArgument,
                "SumIntoDevice: buffers must be aligned to the element size (", sizeof(T),
                " bytes); got dst=", dst, " src=", src);
  const bool vectorised = d % kVector == 0 && s % kVector == 0;
  const size_t vectors = vectorised ? count * sizeof(T) / kVector : 0;
  const size_t tail = count - vectors * (kVector / sizeof(T));
  SumKernel<Tr><<<Blocks(vectors > tail ? vectors : tail), kThreads, 0, stream>>>(
      static_cast<T*>(dst), static_cast<const T*>(src), vectors, count);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void SumIntoDevice(void* dst, const void* src, size_t count, DataType type,
                   cudaStream_t stream) {
  FERRY_ENFORCE(IsValidDataType(static_cast<int32_t>(type)), ErrorCode::kInvalidArgument,
                "SumIntoDevice: invalid data type ", static_cast<int32_t>(type));
  if (count == 0) return;
  switch (type) {
    case DataType::kFloat32: return Launch<F32>(dst, src, count, stream);
    case DataType::kFloat16: return Launch<F16>(dst, src, count, stream);
    case DataType::kBFloat16: return Launch<BF16>(dst, src, count, stream);
    case DataType::kFloat64: return Launch<F64>(dst, src, count, stream);
    case DataType::kInt32: return Launch<I32>(dst, src, count, stream);
    case DataType::kInt64: return Launch<I64>(dst, src, count, stream);
  }
}

}  // namespace gpu
}  // namespace ferry
