// AVX2 (+F16C) summation kernels. Compiled with `#pragma GCC target` so that only
// these functions use AVX2; reduce.cc calls them only when the CPU supports it.
//
// This file holds one 256-bit vector operation per data type and the traits that
// instantiate the shared block driver (reduce_simd.h: blocks of 128 bytes, head and
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

// --- One 256-bit vector of each type: load as float32 lanes, store back. -----------

struct VF32 {
  static constexpr size_t kElem = 4;
  static constexpr size_t kLanesPerVec = 8;  // elements consumed per vector op
  static void Sum(u8* d, const u8* a, const u8* b) {
    const __m256 x = _mm256_loadu_ps(reinterpret_cast<const float*>(a));
    const __m256 y = _mm256_loadu_ps(reinterpret_cast<const float*>(b));
    _mm256_storeu_ps(reinterpret_cast<float*>(d), _mm256_add_ps(x, y));
  }
  static void Mul(u8* d, __m256 s, __m256d) {
    const __m256 x = _mm256_loadu_ps(reinterpret_cast<const float*>(d));
    _mm256_storeu_ps(reinterpret_cast<float*>(d), _mm256_mul_ps(x, s));
  }
};

struct VF64 {
  static constexpr size_t kElem = 8;
  static constexpr size_t kLanesPerVec = 4;
  static void Sum(u8* d, const u8* a, const u8* b) {
    const __m256d x = _mm256_loadu_pd(reinterpret_cast<const double*>(a));
    const __m256d y = _mm256_loadu_pd(reinterpret_cast<const double*>(b));
    _mm256_storeu_pd(reinterpret_cast<double*>(d), _mm256_add_pd(x, y));
  }
  static void Mul(u8* d, __m256, __m256d s) {
    const __m256d x = _mm256_loadu_pd(reinterpret_cast<const double*>(d));
    _mm256_storeu_pd(reinterpret_cast<double*>(d), _mm256_mul_pd(x, s));
  }
};

struct VI32 {
  static constexpr size_t kElem = 4;
  static constexpr size_t kLanesPerVec = 8;
  static void Sum(u8* d, const u8* a, const u8* b) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_add_epi32(x, y));
  }
};

struct VI64 {
  static constexpr size_t kElem = 8;
  static constexpr size_t kLanesPerVec = 4;
  static void Sum(u8* d, const u8* a, const u8* b) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_add_epi64(x, y));
  }
};

// float16: 8 halves (128 bits) per float32 vector, F16C conversions.
struct VF16 {
  static constexpr size_t kElem = 2;
  static constexpr size_t kLanesPerVec = 8;
  static __m256 Load(const u8* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void Store(u8* p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static void Sum(u8* d, const u8* a, const u8* b) { Store(d, _mm256_add_ps(Load(a), Load(b))); }
  static void Mul(u8* d, __m256 s, __m256d) { Store(d, _mm256_mul_ps(Load(d), s)); }
};

// bfloat16: 16 values (256 bits) per op. Interleaving zeros below each value
// (unpacklo/hi with zero) gives float32 bit patterns directly; the lane order this
// produces within each 128-bit half is undone by packus on the way back, so no
// cross-lane shuffles are needed. Narrowing is integer round-to-nearest-even with
// NaN kept as a quiet NaN (a plain rounding add could carry a NaN into Inf).
struct VBF16 {
  static constexpr size_t kElem = 2;
  static constexpr size_t kLanesPerVec = 16;
  static __m256i LoadBits(const u8* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static __m256 Lo(__m256i v) {
    return _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), v));
  }
  static __m256 Hi(__m256i v) {
    return _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), v));
  }
  // The bf16 bits in the low 16 bits of each 32-bit lane.
  static __m256i Round(__m256 v) {
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
  static void Store(u8* p, __m256 lo, __m256 hi) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm256_packus_epi32(Round(lo), Round(hi)));
  }
  static void Sum(u8* d, const u8* a, const u8* b) {
    const __m256i x = LoadBits(a);
    const __m256i y = LoadBits(b);
    Store(d, _mm256_add_ps(Lo(x), Lo(y)), _mm256_add_ps(Hi(x), Hi(y)));
  }
  static void Mul(u8* d, __m256 s, __m256d) {
    const __m256i x = LoadBits(d);
    Store(d, _mm256_mul_ps(Lo(x), s), _mm256_mul_ps(Hi(x), s));
  }
};

// --- The traits the shared driver (reduce_simd.h) is instantiated with. -------------

struct Avx2 {
  static constexpr size_t kBlockBytes = 128;  // four 256-bit vectors per operand
  using Ps = __m256;
  using Pd = __m256d;
  static Ps SetPs(float s) { return _mm256_set1_ps(s); }
  static Pd SetPd(double s) { return _mm256_set1_pd(s); }
  using F32 = VF32;
  using F64 = VF64;
  using I32 = VI32;
  using I64 = VI64;
  using F16 = VF16;
  using BF16 = VBF16;
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
