#pragma once

// Summation on the GPU: dst[i] += src[i], the device twin of common/reduce's SumInto
// (CUDA builds only).
//
// Same arithmetic as the CPU kernels, so both give the same bits for the same inputs:
// float32 and float64 add in their own precision (IEEE round to nearest even, subnormals
// kept: Ferry never builds with -ftz or --use_fast_math); float16 and bfloat16 are
// widened to float32, added, and rounded back to nearest even; int32 and int64 wrap
// modulo 2^N. The one difference: a NaN result may carry another payload (GPUs return
// the canonical NaN), which is why tests compare NaNs by class, as reduce_test does.

#include <cuda_runtime_api.h>

#include <cstddef>

#include "common/reduce/reduce.h"

namespace ferry {
namespace gpu {

// Queues dst[i] += src[i] for i in [0, count) on `stream` (nothing waits for it).
// REQUIRES: dst and src are device memory of the current device, each aligned to
// DataTypeSize(type), and do not overlap. 16-byte aligned buffers (all cudaMalloc
// memory) take the vectorised path; others the element-wise one.
// Throws FerryError(kInvalidArgument) on a bad type or misaligned pointer, and
// FerryError(kInternal) if the launch fails (e.g. no kernel image for this GPU).
void SumIntoDevice(void* dst, const void* src, size_t count, DataType type,
                   cudaStream_t stream);

}  // namespace gpu
}  // namespace ferry
