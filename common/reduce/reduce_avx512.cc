// AVX-512 (F + BW) summation kernels. Compiled with `#pragma GCC target` so that only
// these functions use AVX-512; reduce.cc calls them only when the CPU supports
// avx512f and avx512bw. float16 uses the AVX-512F half conversions (vcvtph2ps /
// vcvtps2ph); bfloat16 is converted with integer operations (no AVX512_BF16 needed,
// and unlike vcvtneps2bf16 it keeps float32 subnormals exactly like the portable path).
//
// Same structure as reduce_avx2.cc: blocks of kBlockBytes (256 bytes) per operand
// with unaligned loads/stores; the tail goes through zeroed stack buffers and the
// same block code; everything in an anonymous namespace.

#include "common/reduce/reduce_internal.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)

// GCC 12's AVX-512 intrinsics initialise their "undefined" operands from themselves
// (`__m512 __Y = __Y;`), which -Wmaybe-uninitialized reports once inlined here.
#pragma GCC diagnostic push
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

// bfloat16: widen with a 16-bit shift; narrow with integer round-to-nearest-even,
// NaN kept as a quiet NaN (a plain rounding add could carry a NaN into Inf).
struct VBF16 {
  static constexpr size_t kElem = 2;
  static constexpr size_t kLanesPerVec = 16;
  static __m512 Load(const u8* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static void Store(u8* p, __m512 v) {
    const __m512i x = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
    const __m512i abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF));
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7F800000));
    const __m512i r = _mm512_mask_blend_epi32(is_nan, rounded, nan);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
  }
  static void Sum(u8* d, const u8* a, const u8* b) { Store(d, _mm512_add_ps(Load(a), Load(b))); }
  static void Mul(u8* d, __m512 s, __m512d) { Store(d, _mm512_mul_ps(Load(d), s)); }
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

// d, a, b may be identical (each vector is loaded before the same bytes are stored).
template <typename V>
void SumTo(void* dst, const void* a, const void* b, size_t n) {
  using B = Block<V>;
  auto* d = static_cast<u8*>(dst);
  const auto* pa = static_cast<const u8*>(a);
  const auto* pb = static_cast<const u8*>(b);
  size_t i = 0;
  for (; i + B::kElems <= n; i += B::kElems) {
    const size_t off = i * V::kElem;
    B::Sum(d + off, pa + off, pb + off);
  }
  if (i < n) {
    const size_t off = i * V::kElem;
    const size_t bytes = (n - i) * V::kElem;
    alignas(64) u8 ta[kBlockBytes] = {};
    alignas(64) u8 tb[kBlockBytes] = {};
    std::memcpy(ta, pa + off, bytes);
    std::memcpy(tb, pb + off, bytes);
    B::Sum(ta, ta, tb);
    std::memcpy(d + off, ta, bytes);
  }
}

template <typename V>
void ScaleK(void* dst, double scale, size_t n) {
  using B = Block<V>;
  auto* d = static_cast<u8*>(dst);
  const __m512 sf = _mm512_set1_ps(static_cast<float>(scale));
  const __m512d sd = _mm512_set1_pd(scale);
  size_t i = 0;
  for (; i + B::kElems <= n; i += B::kElems) B::Mul(d + i * V::kElem, sf, sd);
  if (i < n) {
    const size_t off = i * V::kElem;
    const size_t bytes = (n - i) * V::kElem;
    alignas(64) u8 t[kBlockBytes] = {};
    std::memcpy(t, d + off, bytes);
    B::Mul(t, sf, sd);
    std::memcpy(d + off, t, bytes);
  }
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

#else  // not x86 with GCC/Clang

namespace ferry {
namespace reduce_internal {
void FillAvx512Kernels(KernelTable*) {}
}  // namespace reduce_internal
}  // namespace ferry

#endif
