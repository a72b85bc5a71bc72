// AVX-512 (F + BW) summation kernels. Compiled with `#pragma GCC target` so that only
// these functions use AVX-512; reduce.cc calls them only when the CPU supports
// avx512f and avx512bw. float16 uses the AVX-512F half conversions (vcvtph2ps /
// vcvtps2ph); bfloat16 is converted with integer operations (no AVX512_BF16 needed,
// and unlike vcvtneps2bf16 it keeps float32 subnormals exactly like the portable path).
//
// Same structure as reduce_avx2.cc: blocks of kBlockBytes (256 bytes) per operand
// with unaligned loads/stores; dst is first brought to a cache-line boundary (split
// 64-byte stores are expensive); head and tail go through zeroed stack buffers and
// the same block code; everything in an anonymous namespace.

#include "common/reduce/reduce_internal.h"

#if FERRY_REDUCE_X86_KERNELS

// GCC 12's AVX-512 intrinsics initialise their "undefined" operands from themselves
// (`__m512 __Y = __Y;`), which -W(maybe-)uninitialized reports once inlined here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#pragma GCC push_options
#pragma GCC target("avx2,f16c,avx512f,avx512bw")

namespace ferry {
namespace reduce_internal {
namespace {

constexpr size_t kBlockBytes = 256;  // four 512-bit vectors per operand

using u8 = unsigned char;

constexpr size_t kStoreAlign = 64;  // cache line

// --- One vector op of each type. ----------------------------------------------------

struct VF32 {
  static constexpr size_t kElem = 4;
  static constexpr size_t kLanesPerVec = 16;  // elements consumed per vector op
  static void Sum(u8* d, const u8* a, const u8* b) {
    const __m512 x = _mm512_loadu_ps(a);
    const __m512 y = _mm512_loadu_ps(b);
    _mm512_storeu_ps(d, _mm512_add_ps(x, y));
  }
  static void Mul(u8* d, __m512 s, __m512d) {
    _mm512_storeu_ps(d, _mm512_mul_ps(_mm512_loadu_ps(d), s));
  }
};

struct VF64 {
  static constexpr size_t kElem = 8;
  static constexpr size_t kLanesPerVec = 8;
  static void Sum(u8* d, const u8* a, const u8* b) {
    const __m512d x = _mm512_loadu_pd(a);
    const __m512d y = _mm512_loadu_pd(b);
    _mm512_storeu_pd(d, _mm512_add_pd(x, y));
  }
  static void Mul(u8* d, __m512, __m512d s) {
    _mm512_storeu_pd(d, _mm512_mul_pd(_mm512_loadu_pd(d), s));
  }
};

struct VI32 {
  static constexpr size_t kElem = 4;
  static constexpr size_t kLanesPerVec = 16;
  static void Sum(u8* d, const u8* a, const u8* b) {
    const __m512i x = _mm512_loadu_si512(a);
    const __m512i y = _mm512_loadu_si512(b);
    _mm512_storeu_si512(d, _mm512_add_epi32(x, y));
  }
};

struct VI64 {
  static constexpr size_t kElem = 8;
  static constexpr size_t kLanesPerVec = 8;
  static void Sum(u8* d, const u8* a, const u8* b) {
    const __m512i x = _mm512_loadu_si512(a);
    const __m512i y = _mm512_loadu_si512(b);
    _mm512_storeu_si512(d, _mm512_add_epi64(x, y));
  }
};

// float16: 16 halves (256 bits) per float32 vector.
struct VF16 {
  static constexpr size_t kElem = 2;
  static constexpr size_t kLanesPerVec = 16;
  static __m512 Load(const u8* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void Store(u8* p, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static void Sum(u8* d, const u8* a, const u8* b) { Store(d, _mm512_add_ps(Load(a), Load(b))); }
  static void Mul(u8* d, __m512 s, __m512d) { Store(d, _mm512_mul_ps(Load(d), s)); }
};

// bfloat16: 32 values (512 bits) per op. Interleaving zeros below each value
// (AVX512BW unpacklo/hi with zero) gives float32 bit patterns directly; the lane
// order this produces within each 128-bit block is undone by packus on the way
// back, so no cross-lane shuffles are needed. Narrowing is integer
// round-to-nearest-even with NaN kept as a quiet NaN.
struct VBF16 {
  static constexpr size_t kElem = 2;
  static constexpr size_t kLanesPerVec = 32;
  static __m512 Lo(__m512i v) {
    return _mm512_castsi512_ps(_mm512_unpacklo_epi16(_mm512_setzero_si512(), v));
  }
  static __m512 Hi(__m512i v) {
    return _mm512_castsi512_ps(_mm512_unpackhi_epi16(_mm512_setzero_si512(), v));
  }
  // The bf16 bits in the low 16 bits of each 32-bit lane.
  static __m512i Round(__m512 v) {
    const __m512i x = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
    const __m512i abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF));
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7F800000));
    return _mm512_mask_blend_epi32(is_nan, rounded, nan);
  }
  // Lanes are <= 0xFFFF, so packus's unsigned saturation is exact.
  static void Store(u8* p, __m512 lo, __m512 hi) {
    _mm512_storeu_si512(p, _mm512_packus_epi32(Round(lo), Round(hi)));
  }
  static void Sum(u8* d, const u8* a, const u8* b) {
    const __m512i x = _mm512_loadu_si512(a);
    const __m512i y = _mm512_loadu_si512(b);
    Store(d, _mm512_add_ps(Lo(x), Lo(y)), _mm512_add_ps(Hi(x), Hi(y)));
  }
  static void Mul(u8* d, __m512 s, __m512d) {
    const __m512i x = _mm512_loadu_si512(d);
    Store(d, _mm512_mul_ps(Lo(x), s), _mm512_mul_ps(Hi(x), s));
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
  static inline void Mul(u8* d, __m512 sf, __m512d sd) {
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
inline void MulPartial(u8* d, size_t count, __m512 sf, __m512d sd) {
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
  const __m512 sf = _mm512_set1_ps(static_cast<float>(scale));
  const __m512d sd = _mm512_set1_pd(scale);
  size_t i = HeadElems<V>(d, n);
  if (i > 0) MulPartial<V>(d, i, sf, sd);
  for (; i + B::kElems <= n; i += B::kElems) B::Mul(d + i * V::kElem, sf, sd);
  if (i < n) MulPartial<V>(d + i * V::kElem, n - i, sf, sd);
}

}  // namespace

void FillAvx512Kernels(KernelTable* t) {
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
#pragma GCC diagnostic pop

#else  // !FERRY_REDUCE_X86_KERNELS

namespace ferry {
namespace reduce_internal {
void FillAvx512Kernels(KernelTable*) {}
}  // namespace reduce_internal
}  // namespace ferry

#endif
