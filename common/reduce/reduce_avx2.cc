// AVX2 (+F16C) summation kernels. Compiled with `#pragma GCC target` so that only
// these functions use AVX2; reduce.cc calls them only when the CPU supports it.
//
// Every kernel works on blocks of kBlockBytes (128 bytes) of each operand with
// unaligned loads and stores. A head (elements until dst is cache-line aligned, when
// dst is element-aligned) and the tail (fewer than a block of elements) are copied
// into zeroed stack buffers, run through the same block code and copied back, so they
// get bit-identical arithmetic and nothing outside [0, count) is touched.
//
// Everything is in an anonymous namespace: no symbol compiled for AVX2 can be merged
// by the linker with a portable one.

#include "common/reduce/reduce_internal.h"

#if FERRY_REDUCE_X86_KERNELS

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#pragma GCC push_options
#pragma GCC target("avx2,f16c")

namespace ferry {
namespace reduce_internal {
namespace {

constexpr size_t kBlockBytes = 128;  // four 256-bit vectors per operand

using u8 = unsigned char;

constexpr size_t kStoreAlign = 64;  // cache line

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

// --- Block drivers. ------------------------------------------------------------------

template <typename V>
struct Block {
  static constexpr size_t kVecBytes = V::kElem * V::kLanesPerVec;
  static constexpr size_t kVecs = kBlockBytes / kVecBytes;
  static constexpr size_t kElems = kBlockBytes / V::kElem;

  static inline void Sum(u8* d, const u8* a, const u8* b) {
    for (size_t v = 0; v < kVecs; ++v) {
      V::Sum(d + v * kVecBytes, a + v * kVecBytes, b + v * kVecBytes);
    }
  }
  static inline void Mul(u8* d, __m256 sf, __m256d sd) {
    for (size_t v = 0; v < kVecs; ++v) V::Mul(d + v * kVecBytes, sf, sd);
  }
};

// Elements before dst reaches a cache-line boundary (0 when dst is not even
// element-aligned: then no alignment is reachable). Split-line stores cost far more
// than split-line loads, especially for 64-byte vectors.
template <typename V>
inline size_t HeadElems(const u8* d, size_t n) {
  const size_t mis = static_cast<size_t>(reinterpret_cast<uintptr_t>(d) % kStoreAlign);
  if (mis == 0 || mis % V::kElem != 0) return 0;
  const size_t head = (kStoreAlign - mis) / V::kElem;
  return head < n ? head : n;
}

// Fewer than a block of elements: through zeroed stack buffers and the same block
// code, so the arithmetic is identical and no byte outside [0, count) is touched.
template <typename V>
inline void SumPartial(u8* d, const u8* a, const u8* b, size_t count) {
  const size_t bytes = count * V::kElem;
  alignas(64) u8 ta[kBlockBytes] = {};
  alignas(64) u8 tb[kBlockBytes] = {};
  std::memcpy(ta, a, bytes);
  std::memcpy(tb, b, bytes);
  Block<V>::Sum(ta, ta, tb);
  std::memcpy(d, ta, bytes);
}

template <typename V>
inline void MulPartial(u8* d, size_t count, __m256 sf, __m256d sd) {
  const size_t bytes = count * V::kElem;
  alignas(64) u8 t[kBlockBytes] = {};
  std::memcpy(t, d, bytes);
  Block<V>::Mul(t, sf, sd);
  std::memcpy(d, t, bytes);
}

// d, a, b may be identical (each vector is loaded before the same bytes are stored).
template <typename V>
void SumTo(void* dst, const void* a, const void* b, size_t n) {
  using B = Block<V>;
  auto* d = static_cast<u8*>(dst);
  const auto* pa = static_cast<const u8*>(a);
  const auto* pb = static_cast<const u8*>(b);
  size_t i = HeadElems<V>(d, n);
  if (i > 0) SumPartial<V>(d, pa, pb, i);
  for (; i + B::kElems <= n; i += B::kElems) {
    const size_t off = i * V::kElem;
    B::Sum(d + off, pa + off, pb + off);
  }
  if (i < n) {
    const size_t off = i * V::kElem;
    SumPartial<V>(d + off, pa + off, pb + off, n - i);
  }
}

template <typename V>
void ScaleK(void* dst, double scale, size_t n) {
  using B = Block<V>;
  auto* d = static_cast<u8*>(dst);
  const __m256 sf = _mm256_set1_ps(static_cast<float>(scale));
  const __m256d sd = _mm256_set1_pd(scale);
  size_t i = HeadElems<V>(d, n);
  if (i > 0) MulPartial<V>(d, i, sf, sd);
  for (; i + B::kElems <= n; i += B::kElems) B::Mul(d + i * V::kElem, sf, sd);
  if (i < n) MulPartial<V>(d + i * V::kElem, n - i, sf, sd);
}

}  // namespace

void FillAvx2Kernels(KernelTable* t) {
  auto idx = [](DataType type) { return static_cast<int>(type); };
  t->sum_to[idx(DataType::kFloat32)] = &SumTo<VF32>;
  t->sum_to[idx(DataType::kFloat16)] = &SumTo<VF16>;
  t->sum_to[idx(DataType::kBFloat16)] = &SumTo<VBF16>;
  t->sum_to[idx(DataType::kFloat64)] = &SumTo<VF64>;
  t->sum_to[idx(DataType::kInt32)] = &SumTo<VI32>;
  t->sum_to[idx(DataType::kInt64)] = &SumTo<VI64>;
  t->scale[idx(DataType::kFloat32)] = &ScaleK<VF32>;
  t->scale[idx(DataType::kFloat16)] = &ScaleK<VF16>;
  t->scale[idx(DataType::kBFloat16)] = &ScaleK<VBF16>;
  t->scale[idx(DataType::kFloat64)] = &ScaleK<VF64>;
  // Integer Scale (rare: averaging integer sums) keeps the portable kernels.
}

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
