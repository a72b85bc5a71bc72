#pragma once

// Summation kernels: the arithmetic every server performs on every byte pushed.
//
// All kernels are correct for any element count and any alignment of the buffers.
// float16 and bfloat16 are summed through float32 and rounded back to nearest-even.
// Integer sums wrap modulo 2^N (two's complement), as a reduction of gradients never
// relies on overflow behaviour and UB must not be possible on wire data.

#include <cstddef>
#include <cstdint>

#include "common/types/data_type.h"

namespace ferry {

// dst[i] += src[i] for i in [0, count). dst and src may be unaligned; they must not
// overlap unless dst == src (in which case dst doubles).
void SumInto(void* dst, const void* src, size_t count, DataType type);

// dst[i] = a[i] + b[i]. dst may alias a or b.
void SumTo(void* dst, const void* a, const void* b, size_t count, DataType type);

// The reductions a server performs (Horovod's ops but Average, which is a Sum scaled by
// the worker, and Adasum).
enum class ReduceOp : int { kSum = 0, kMin = 1, kMax = 2, kProduct = 3 };
const char* ReduceOpName(ReduceOp op);  // "sum", "min", "max", "product"
bool IsValidReduceOp(int op);

// dst[i] = op(dst[i], src[i]) for i in [0, count); kSum is SumInto. The 16-bit floats
// compute in float32 and round back to nearest-even; integers multiply modulo 2^N. Min
// and max return NaN where either input is NaN (as torch.minimum / torch.maximum). dst and
// src must not overlap unless dst == src.
void ReduceInto(void* dst, const void* src, size_t count, DataType type, ReduceOp op);

// dst[i] *= scale, computed in the type's arithmetic (float32 for the 16-bit floats,
// double for float64, truncation toward zero for integers: dst = dst * scale).
// Used to turn a sum into an average (scale = 1 / number of workers).
void Scale(void* dst, double scale, size_t count, DataType type);

// dst[i] = src[i] * scale, as Scale: the copy and the scaling in one pass over memory (in
// blocks that stay in the cache), for a worker averaging a sum into its output. dst and
// src must not overlap.
void CopyScaled(void* dst, const void* src, double scale, size_t count, DataType type);

// Conversions used by the 16-bit kernels and by tests (round to nearest even).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

// The instruction-set level the kernels use; the best the CPU supports by default.
enum class SimdLevel { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };
SimdLevel DetectedSimdLevel();           // what this CPU supports
SimdLevel ActiveSimdLevel();             // what the kernels currently use
// Forces a level (tests use this to check every path). Returns false, changing
// nothing, if the CPU does not support `level`. Not thread-safe with running kernels.
bool SetSimdLevel(SimdLevel level);
const char* SimdLevelName(SimdLevel level);

}  // namespace ferry
