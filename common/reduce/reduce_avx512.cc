// AVX-512 (F + BW) summation kernels. Compiled with `#pragma GCC target` so that only
// these functions use AVX-512; reduce.cc calls them only when the CPU supports
// avx512f and avx512bw. float16 uses the AVX-512F half conversions (vcvtph2ps /
// vcvtps2ph); bfloat16 is converted with integer operations (no AVX512_BF16 needed,
// and unlike vcvtneps2bf16 it keeps float32 subnormals exactly like the portable path).
//
// Same structure as reduce_avx2.cc: only the 512-bit intrinsics, in the traits that
// instantiate the shared block driver (reduce_simd.h: blocks of 256 bytes, dst first
// brought to a cache-line boundary as split 64-byte stores are expensive); everything
// in an anonymous namespace.

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

// After the target pragma: the driver's templates are compiled for this instruction set.
#include "common/reduce/reduce_simd.h"  // NOLINT(build/include_order)

namespace ferry {
namespace reduce_internal {
namespace {

using u8 = unsigned char;

// The intrinsics the shared driver (reduce_simd.h) builds every type's vector op from.
struct Avx512 {
  static constexpr size_t kBlockBytes = 256;  // four 512-bit vectors per operand
  using Ps = __m512;
  using Pd = __m512d;
  using Pi = __m512i;
  static Ps SetPs(float s) { return _mm512_set1_ps(s); }
  static Pd SetPd(double s) { return _mm512_set1_pd(s); }

  // float32
  static Ps LoadPs(const u8* p) { return _mm512_loadu_ps(p); }
  static void StorePs(u8* p, Ps v) { _mm512_storeu_ps(p, v); }
  static Ps AddPs(Ps x, Ps y) { return _mm512_add_ps(x, y); }
  static Ps MulPs(Ps x, Ps s) { return _mm512_mul_ps(x, s); }
  // float64
  static Pd LoadPd(const u8* p) { return _mm512_loadu_pd(p); }
  static void StorePd(u8* p, Pd v) { _mm512_storeu_pd(p, v); }
  static Pd AddPd(Pd x, Pd y) { return _mm512_add_pd(x, y); }
  static Pd MulPd(Pd x, Pd s) { return _mm512_mul_pd(x, s); }
  // int32, int64 (and bfloat16's bits)
  static Pi LoadPi(const u8* p) { return _mm512_loadu_si512(p); }
  static void StorePi(u8* p, Pi v) { _mm512_storeu_si512(p, v); }
  static Pi AddI32(Pi x, Pi y) { return _mm512_add_epi32(x, y); }
  static Pi AddI64(Pi x, Pi y) { return _mm512_add_epi64(x, y); }

  // float16: 16 halves (256 bits) per float32 vector.
  static Ps LoadF16(const u8* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void StoreF16(u8* p, Ps v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }

  // bfloat16: 32 values (512 bits) per op. Interleaving zeros below each value
  // (AVX512BW unpacklo/hi with zero) gives float32 bit patterns directly; the lane
  // order this produces within each 128-bit block is undone by packus on the way
  // back, so no cross-lane shuffles are needed. Narrowing is integer
  // round-to-nearest-even with NaN kept as a quiet NaN.
  static Ps BF16Lo(Pi v) {
    return _mm512_castsi512_ps(_mm512_unpacklo_epi16(_mm512_setzero_si512(), v));
  }
  static Ps BF16Hi(Pi v) {
    return _mm512_castsi512_ps(_mm512_unpackhi_epi16(_mm512_setzero_si512(), v));
  }
  // The bf16 bits in the low 16 bits of each 32-bit lane.
  static Pi BF16Round(Ps v) {
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
  static void StoreBF16(u8* p, Ps lo, Ps hi) {
    _mm512_storeu_si512(p, _mm512_packus_epi32(BF16Round(lo), BF16Round(hi)));
  }
};

}  // namespace

void FillAvx512Kernels(KernelTable* t) { SimdDriver<Avx512>::Fill(t); }

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
