#pragma once

// Private to common/reduce: the kernel tables that reduce.cc dispatches through.
//
// One table per SIMD level. reduce.cc fills the portable table; each instruction-set
// file (reduce_avx2.cc, reduce_avx512.cc) overwrites the entries it implements in a
// copy of the portable table, so a level that lacks a kernel falls back to the
// portable one. The files compiled for wider instruction sets keep everything in
// anonymous namespaces so that no inline function or template instantiation built
// with AVX instructions can be picked by the linker for the portable code.

#include <cstddef>

#include "common/reduce/reduce.h"

// The AVX2/AVX-512 kernels are built with GCC's `#pragma GCC target` (x86, GCC only;
// elsewhere every level runs the portable kernels and only kPortable is reported).
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__)
#define FERRY_REDUCE_X86_KERNELS 1
#else
#define FERRY_REDUCE_X86_KERNELS 0
#endif

namespace ferry {
namespace reduce_internal {

// dst[i] = a[i] + b[i]. dst may equal a and/or b; otherwise no overlap.
using SumToFn = void (*)(void* dst, const void* a, const void* b, size_t count);
// dst[i] *= scale in the type's arithmetic.
using ScaleFn = void (*)(void* dst, double scale, size_t count);

struct KernelTable {
  SumToFn sum_to[kNumDataTypes];
  ScaleFn scale[kNumDataTypes];
};

// Overwrite the entries implemented with AVX2 + F16C (reduce_avx2.cc). No-ops when
// the target is not x86.
void FillAvx2Kernels(KernelTable* table);
// Overwrite the entries implemented with AVX-512 F + BW (reduce_avx512.cc).
void FillAvx512Kernels(KernelTable* table);

}  // namespace reduce_internal
}  // namespace ferry
