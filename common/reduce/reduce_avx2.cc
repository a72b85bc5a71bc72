// AVX2 (+F16C) summation kernels. Compiled with `#pragma GCC target` so that only
// these functions use AVX2; reduce.cc calls them only when the CPU supports it.
//
// This file holds only the 256-bit intrinsics, in the traits that instantiate the shared
// block driver (reduce_simd.h: every type's vector op, blocks of 128 bytes, head and
// tail through zeroed stack buffers). Everything is in an anonymous namespace: no
// symbol compiled for AVX2 can be merged by the linker with a portable one.

#include "common/reduce/reduce_internal.h"

#if FERRY_REDUCE_X86_KERNELS

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#pragma GCC push_options
#pragma GCC target("avx2,f16c")

// After the target pragma: the driver's templates are compiled for this instruction set.
#include "common/reduce/reduce_simd.h"  // NOLINT(build/include_order)

namespace ferry {
namespace reduce_internal {
namespace {

using u8 = unsigned char;

// The intrinsics the shared driver (reduce_simd.h) builds every type's vector op from.
struct Avx2 {
  static constexpr size_t kBlockBytes = 128;  // four 256-bit vectors per operand
  using Ps = __m256;
  using Pd = __m256d;
  using Pi = __m256i;
  static Ps SetPs(float s) { return _mm256_set1_ps(s); }
  static Pd SetPd(double s) { return _mm256_set1_pd(s); }

  // float32
  static Ps LoadPs(const u8* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  static void StorePs(u8* p, Ps v) { _mm256_storeu_ps(reinterpret_cast<float*>(p), v); }
  static Ps AddPs(Ps x, Ps y) { return _mm256_add_ps(x, y); }
  static Ps MulPs(Ps x, Ps s) { return _mm256_mul_ps(x, s); }
  // float64
  static Pd LoadPd(const u8* p) { return _mm256_loadu_pd(reinterpret_cast<const double*>(p)); }
  static void StorePd(u8* p, Pd v) { _mm256_storeu_pd(reinterpret_cast<double*>(p), v); }
  static Pd AddPd(Pd x, Pd y) { return _mm256_add_pd(x, y); }
  static Pd MulPd(Pd x, Pd s) { return _mm256_mul_pd(x, s); }
  // int32, int64 (and bfloat16's bits)
  static Pi LoadPi(const u8* p) { return _mm256_loadu_si256(reinterpret_cast<const Pi*>(p)); }
  static void StorePi(u8* p, Pi v) { _mm256_storeu_si256(reinterpret_cast<Pi*>(p), v); }
  static Pi AddI32(Pi x, Pi y) { return _mm256_add_epi32(x, y); }
  static Pi AddI64(Pi x, Pi y) { return _mm256_add_epi64(x, y); }

  // float16: 8 halves (128 bits) per float32 vector, F16C conversions.
  static Ps LoadF16(const u8* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void StoreF16(u8* p, Ps v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }

  // bfloat16: 16 values (256 bits) per op. Interleaving zeros below each value
  // (unpacklo/hi with zero) gives float32 bit patterns directly; the lane order this
  // produces within each 128-bit half is undone by packus on the way back, so no
  // cross-lane shuffles are needed. Narrowing is integer round-to-nearest-even with
  // NaN kept as a quiet NaN (a plain rounding add could carry a NaN into Inf).
  static Ps BF16Lo(Pi v) {
    return _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), v));
  }
  static Ps BF16Hi(Pi v) {
    return _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), v));
  }
  // The bf16 bits in the low 16 bits of each 32-bit lane.
  static Pi BF16Round(Ps v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000));
    return _mm256_blendv_epi8(rounded, nan, is_nan);
  }
  // Lanes are <= 0xFFFF, so packus's unsigned saturation is exact.
  static void StoreBF16(u8* p, Ps lo, Ps hi) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm256_packus_epi32(BF16Round(lo), BF16Round(hi)));
  }
};

}  // namespace

void FillAvx2Kernels(KernelTable* t) { SimdDriver<Avx2>::Fill(t); }

}  // namespace reduce_internal
}  // namespace ferry

#pragma GCC pop_options

#else  // !FERRY_REDUCE_X86_KERNELS

namespace ferry {
namespace reduce_internal {
void FillAvx2Kernels(KernelTable*) {}
}  // namespace reduce_internal
}  // namespace ferry

#endif
