// Summation kernels: the portable kernels and the runtime dispatch (the data types
// themselves are in common/types/data_type.cc).
//
// Dispatch: three KernelTables (portable, AVX2, AVX-512), one function pointer per
// data type and operation, built once on first use. The public entry points make one
// indirect call per buffer through the active table. The AVX2/AVX-512 kernels live
// in reduce_avx2.cc / reduce_avx512.cc (one block driver, reduce_simd.h, instantiated
// with each file's vector operations), compiled with `#pragma GCC target`, so the
// rest of the project stays at the baseline instruction set.
//
// The portable kernels are plain element loops over byte pointers with memcpy loads
// and stores (no misaligned typed dereference), which GCC vectorises at -O3.

#include "common/reduce/reduce.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>
#include <type_traits>

#include "common/reduce/reduce_internal.h"

namespace ferry {

// ---------------------------------------------------------------------------------
// 16-bit float conversions. Written without branches on the value (selects only) so
// that the portable loops below can be if-converted and vectorised. NaN handling
// matches the x86 F16C instructions: a NaN stays a NaN, gets its quiet bit set and
// keeps the top bits of its payload.

namespace {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// All-ones if c, else 0; and a bitwise select. Arithmetic masks rather than ?: so that
// GCC does not turn the selects back into branches (which would then block
// vectorisation, as the float additions could not be speculated).
inline uint32_t Mask(bool c) { return 0u - static_cast<uint32_t>(c); }
inline uint32_t Select(uint32_t mask, uint32_t if_set, uint32_t if_clear) {
  return (if_set & mask) | (if_clear & ~mask);
}

inline float HalfToFloatInline(uint16_t h) {
  const uint32_t shifted_exp = 0x7C00u << 13;
  uint32_t o = (static_cast<uint32_t>(h) & 0x7FFFu) << 13;  // exponent and mantissa
  const uint32_t exp = o & shifted_exp;
  o += (127u - 15u) << 23;                                   // rebias
  // Inf/NaN: exponent 255; a NaN gets its quiet bit set.
  const uint32_t quiet = Mask(static_cast<int32_t>(o & 0x7FFFFFu) != 0) & 0x400000u;
  const uint32_t inf_nan = (o + ((128u - 16u) << 23)) | quiet;
  // Subnormal half: add one to the exponent and subtract 2^-14 (exact in float).
  const float sub = BitsFloat(o + (1u << 23)) - BitsFloat(113u << 23);
  uint32_t r = Select(Mask(static_cast<int32_t>(exp) == static_cast<int32_t>(shifted_exp)),
                      inf_nan, o);
  r = Select(Mask(static_cast<int32_t>(exp) == 0), FloatBits(sub), r);
  return BitsFloat(r | ((static_cast<uint32_t>(h) & 0x8000u) << 16));
}

inline uint16_t FloatToHalfInline(float f) {
  const uint32_t bits = FloatBits(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t a = bits & 0x7FFFFFFFu;
  const int32_t sa = static_cast<int32_t>(a);  // signed compares: cheaper in SSE2
  // |f| >= 65536: Inf, or NaN (quiet, top 10 bits of the payload kept).
  const uint32_t big = 0x7C00u | (Mask(sa > 0x7F800000) & (0x200u | ((a >> 13) & 0x3FFu)));
  // |f| < 2^-14: the result is subnormal or zero. Adding 0.5 places the half's
  // subnormal unit (2^-24) at the float's last mantissa bit; the float addition
  // rounds to nearest even.
  const float magic = BitsFloat(((127u - 15u) + (23u - 10u) + 1u) << 23);  // 0.5f
  const uint32_t small = FloatBits(BitsFloat(a) + magic) - FloatBits(magic);
  // Normal: rebias, round the 13 dropped bits to nearest even. A carry out of the
  // mantissa increments the exponent, up to Inf for |f| >= 65520.
  const uint32_t normal = (a + ((15u - 127u) << 23) + 0xFFFu + ((a >> 13) & 1u)) >> 13;
  uint32_t r = Select(Mask(sa < (113 << 23)), small, normal);
  r = Select(Mask(sa >= ((127 + 16) << 23)), big, r);
  return static_cast<uint16_t>(r | sign);
}

inline float BFloat16ToFloatInline(uint16_t b) {
  return BitsFloat(static_cast<uint32_t>(b) << 16);
}

inline uint16_t FloatToBFloat16Inline(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x40u;  // quiet NaN; never rounds to Inf
  const bool is_nan = static_cast<int32_t>(x & 0x7FFFFFFFu) > 0x7F800000;
  return static_cast<uint16_t>(Select(Mask(is_nan), nan, rounded));
}

}  // namespace

float HalfToFloat(uint16_t h) { return HalfToFloatInline(h); }
uint16_t FloatToHalf(float f) { return FloatToHalfInline(f); }
float BFloat16ToFloat(uint16_t b) { return BFloat16ToFloatInline(b); }
uint16_t FloatToBFloat16(float f) { return FloatToBFloat16Inline(f); }

// ---------------------------------------------------------------------------------
// Portable kernels.

namespace {

// Element traits: storage type, addition and scaling.
struct F32 {
  using T = float;
  static T Add(T x, T y) { return x + y; }
  static T Mul(T x, double s) { return x * static_cast<float>(s); }
};
struct F64 {
  using T = double;
  static T Add(T x, T y) { return x + y; }
  static T Mul(T x, double s) { return x * s; }
};
struct F16 {
  using T = uint16_t;
  static T Add(T x, T y) { return FloatToHalfInline(HalfToFloatInline(x) + HalfToFloatInline(y)); }
  static T Mul(T x, double s) {
    return FloatToHalfInline(HalfToFloatInline(x) * static_cast<float>(s));
  }
};
struct BF16 {
  using T = uint16_t;
  static T Add(T x, T y) {
    return FloatToBFloat16Inline(BFloat16ToFloatInline(x) + BFloat16ToFloatInline(y));
  }
  static T Mul(T x, double s) {
    return FloatToBFloat16Inline(BFloat16ToFloatInline(x) * static_cast<float>(s));
  }
};
// Integers are added as unsigned (wraps modulo 2^N, no signed-overflow UB) and
// scaled in floating point with truncation toward zero, saturating at the type's
// range (NaN gives 0) so that no out-of-range conversion can happen.
struct I32 {
  using T = uint32_t;
  static T Add(T x, T y) { return x + y; }
  static T Mul(T x, double s) {
    const double p = static_cast<double>(static_cast<int32_t>(x)) * s;
    int32_t r;
    if (!(p == p)) {
      r = 0;
    } else if (p >= 2147483648.0) {
      r = INT32_MAX;
    } else if (p <= -2147483649.0) {
      r = INT32_MIN;
    } else {
      r = static_cast<int32_t>(p);
    }
    return static_cast<T>(r);
  }
};
struct I64 {
  using T = uint64_t;
  static T Add(T x, T y) { return x + y; }
  static T Mul(T x, double s) {
    // long double holds every int64 exactly on x86 (64-bit mantissa).
    const long double p =
        static_cast<long double>(static_cast<int64_t>(x)) * static_cast<long double>(s);
    int64_t r;
    if (!(p == p)) {
      r = 0;
    } else if (p >= 9223372036854775808.0L) {
      r = INT64_MAX;
    } else if (p < -9223372036854775808.0L) {
      r = INT64_MIN;
    } else {
      r = static_cast<int64_t>(p);
    }
    return static_cast<T>(r);
  }
};

template <typename Tr>
inline typename Tr::T Load(const unsigned char* p) {
  typename Tr::T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename Tr>
inline void Store(unsigned char* p, typename Tr::T v) {
  std::memcpy(p, &v, sizeof v);
}

// d = a + b, three distinct non-overlapping buffers.
template <typename Tr>
void SumThree(unsigned char* __restrict d, const unsigned char* __restrict a,
              const unsigned char* __restrict b, size_t n) {
  constexpr size_t S = sizeof(typename Tr::T);
  for (size_t i = 0; i < n; ++i) {
    Store<Tr>(d + i * S, Tr::Add(Load<Tr>(a + i * S), Load<Tr>(b + i * S)));
  }
}

// d = d + s (kSrcFirst: d = s + d), two distinct non-overlapping buffers.
template <typename Tr, bool kSrcFirst>
void SumTwo(unsigned char* __restrict d, const unsigned char* __restrict s, size_t n) {
  constexpr size_t S = sizeof(typename Tr::T);
  for (size_t i = 0; i < n; ++i) {
    const auto x = Load<Tr>(d + i * S);
    const auto y = Load<Tr>(s + i * S);
    Store<Tr>(d + i * S, kSrcFirst ? Tr::Add(y, x) : Tr::Add(x, y));
  }
}

// d = d + d.
template <typename Tr>
void SumSelf(unsigned char* d, size_t n) {
  constexpr size_t S = sizeof(typename Tr::T);
  for (size_t i = 0; i < n; ++i) {
    const auto x = Load<Tr>(d + i * S);
    Store<Tr>(d + i * S, Tr::Add(x, x));
  }
}

// Splits the permitted aliasing cases off so that each loop can use __restrict.
template <typename Tr>
void PortableSumTo(void* dst, const void* a, const void* b, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* pa = static_cast<const unsigned char*>(a);
  const auto* pb = static_cast<const unsigned char*>(b);
  if (d == pa) {
    if (pa == pb) {
      SumSelf<Tr>(d, n);
    } else {
      SumTwo<Tr, false>(d, pb, n);
    }
  } else if (d == pb) {
    SumTwo<Tr, true>(d, pa, n);
  } else {
    SumThree<Tr>(d, pa, pb, n);
  }
}

template <typename Tr>
void PortableScale(void* dst, double scale, size_t n) {
  constexpr size_t S = sizeof(typename Tr::T);
  auto* d = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < n; ++i) Store<Tr>(d + i * S, Tr::Mul(Load<Tr>(d + i * S), scale));
}

template <typename Tr>
void SetPortable(reduce_internal::KernelTable* t, DataType type) {
  t->sum_to[static_cast<int>(type)] = &PortableSumTo<Tr>;
  t->scale[static_cast<int>(type)] = &PortableScale<Tr>;
}

// ---------------------------------------------------------------------------------
// Dispatch.

using reduce_internal::KernelTable;

struct Tables {
  KernelTable level[3];
  SimdLevel detected = SimdLevel::kPortable;
};

SimdLevel Detect() {
#if FERRY_REDUCE_X86_KERNELS
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  const bool avx512 =
      avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  if (avx512) return SimdLevel::kAvx512;
  if (avx2) return SimdLevel::kAvx2;
#endif
  return SimdLevel::kPortable;
}

const Tables& GetTables() {
  static const Tables tables = [] {
    Tables t;
    KernelTable& p = t.level[static_cast<int>(SimdLevel::kPortable)];
    SetPortable<F32>(&p, DataType::kFloat32);
    SetPortable<F16>(&p, DataType::kFloat16);
    SetPortable<BF16>(&p, DataType::kBFloat16);
    SetPortable<F64>(&p, DataType::kFloat64);
    SetPortable<I32>(&p, DataType::kInt32);
    SetPortable<I64>(&p, DataType::kInt64);
    t.level[static_cast<int>(SimdLevel::kAvx2)] = p;
    t.level[static_cast<int>(SimdLevel::kAvx512)] = p;
    t.detected = Detect();
    // Only fill the tables the CPU can run; the others stay portable (never used).
    if (t.detected >= SimdLevel::kAvx2) {
      reduce_internal::FillAvx2Kernels(&t.level[static_cast<int>(SimdLevel::kAvx2)]);
      t.level[static_cast<int>(SimdLevel::kAvx512)] =
          t.level[static_cast<int>(SimdLevel::kAvx2)];
    }
    if (t.detected >= SimdLevel::kAvx512) {
      reduce_internal::FillAvx512Kernels(&t.level[static_cast<int>(SimdLevel::kAvx512)]);
    }
    return t;
  }();
  return tables;
}

std::atomic<const KernelTable*> g_active{nullptr};

const KernelTable* InitActive() {
  const Tables& t = GetTables();
  const KernelTable* best = &t.level[static_cast<int>(t.detected)];
  const KernelTable* expected = nullptr;
  // A concurrent SetSimdLevel wins over the default.
  if (!g_active.compare_exchange_strong(expected, best, std::memory_order_acq_rel)) {
    return expected;
  }
  return best;
}

inline const KernelTable* Active() {
  const KernelTable* k = g_active.load(std::memory_order_acquire);
  return k != nullptr ? k : InitActive();
}

[[noreturn]] void BadType(const char* fn, DataType type) {
  std::fprintf(stderr, "ferry::%s: invalid data type %d\n", fn, static_cast<int>(type));
  std::abort();
}

inline int TypeIndex(const char* fn, DataType type) {
  const int i = static_cast<int>(type);
  if (!IsValidDataType(i)) BadType(fn, type);
  return i;
}

}  // namespace

void SumInto(void* dst, const void* src, size_t count, DataType type) {
  const int i = TypeIndex("SumInto", type);
  if (count == 0) return;
  Active()->sum_to[i](dst, dst, src, count);
}

void SumTo(void* dst, const void* a, const void* b, size_t count, DataType type) {
  const int i = TypeIndex("SumTo", type);
  if (count == 0) return;
  Active()->sum_to[i](dst, a, b, count);
}

void Scale(void* dst, double scale, size_t count, DataType type) {
  const int i = TypeIndex("Scale", type);
  if (count == 0) return;
  Active()->scale[i](dst, scale, count);
}

void CopyScaled(void* dst, const void* src, double scale, size_t count, DataType type) {
  const int i = TypeIndex("CopyScaled", type);
  const size_t element = DataTypeSize(type);
  constexpr size_t kBlockBytes = 32 << 10;  // within L1/L2: scaled while still cached
  const size_t block = std::max<size_t>(1, kBlockBytes / element);
  auto* out = static_cast<uint8_t*>(dst);
  const auto* in = static_cast<const uint8_t*>(src);
  for (size_t done = 0; done < count; done += block) {
    const size_t n = std::min(block, count - done);
    std::memcpy(out + done * element, in + done * element, n * element);
    Active()->scale[i](out + done * element, scale, n);
  }
}

SimdLevel DetectedSimdLevel() { return GetTables().detected; }

SimdLevel ActiveSimdLevel() {
  const Tables& t = GetTables();
  const KernelTable* k = Active();
  for (int i = 0; i < 3; ++i) {
    if (k == &t.level[i]) return static_cast<SimdLevel>(i);
  }
  return SimdLevel::kPortable;
}

bool SetSimdLevel(SimdLevel level) {
  const int i = static_cast<int>(level);
  if (i < 0 || i > 2) return false;
  const Tables& t = GetTables();
  if (level > t.detected) return false;
  g_active.store(&t.level[i], std::memory_order_release);
  return true;
}

const char* SimdLevelName(SimdLevel level) {
  static const char* const kNames[] = {"portable", "avx2", "avx512"};  // by SimdLevel
  const int i = static_cast<int>(level);
  return i >= 0 && i < static_cast<int>(std::size(kNames)) ? kNames[i] : "unknown";
}

// ---------------------------------------------------------------------------------
// Min, max and product: plain loops (they are rare: metrics, not gradients).

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
  }
  return "?";
}

bool IsValidReduceOp(int op) { return op >= 0 && op <= static_cast<int>(ReduceOp::kProduct); }

namespace {

template <typename C>
inline C Apply(ReduceOp op, C x, C y) {
  if constexpr (std::is_floating_point_v<C>) {
    if (op != ReduceOp::kProduct && (x != x || y != y)) return x != x ? x : y;  // NaN wins
  }
  switch (op) {
    case ReduceOp::kMin: return y < x ? y : x;
    case ReduceOp::kMax: return y > x ? y : x;
    default: return x * y;  // kProduct
  }
}

// dst[i] = op(dst[i], src[i]) with elements stored as S, computed as C.
template <typename S, typename C, typename Decode, typename Encode>
void ReduceLoop(unsigned char* d, const unsigned char* s, size_t n, ReduceOp op, Decode decode,
                Encode encode) {
  for (size_t i = 0; i < n; ++i) {
    S a, b;
    std::memcpy(&a, d + i * sizeof(S), sizeof(S));
    std::memcpy(&b, s + i * sizeof(S), sizeof(S));
    const S r = encode(Apply<C>(op, decode(a), decode(b)));
    std::memcpy(d + i * sizeof(S), &r, sizeof(S));
  }
}

// Integers: min and max compare signed; the product multiplies unsigned (wraps, no UB).
template <typename Signed, typename Unsigned>
void ReduceIntegers(unsigned char* d, const unsigned char* s, size_t n, ReduceOp op) {
  for (size_t i = 0; i < n; ++i) {
    Signed a, b;
    std::memcpy(&a, d + i * sizeof a, sizeof a);
    std::memcpy(&b, s + i * sizeof b, sizeof b);
    Signed r;
    if (op == ReduceOp::kProduct) {
      r = static_cast<Signed>(static_cast<Unsigned>(a) * static_cast<Unsigned>(b));
    } else {
      r = op == ReduceOp::kMin ? (b < a ? b : a) : (b > a ? b : a);
    }
    std::memcpy(d + i * sizeof r, &r, sizeof r);
  }
}

}  // namespace

void ReduceInto(void* dst, const void* src, size_t count, DataType type, ReduceOp op) {
  if (op == ReduceOp::kSum) {
    SumInto(dst, src, count, type);
    return;
  }
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  auto same = [](auto v) { return v; };
  switch (type) {
    case DataType::kFloat32:
      return ReduceLoop<float, float>(d, s, count, op, same, same);
    case DataType::kFloat64:
      return ReduceLoop<double, double>(d, s, count, op, same, same);
    case DataType::kFloat16:
      return ReduceLoop<uint16_t, float>(d, s, count, op, HalfToFloatInline, FloatToHalfInline);
    case DataType::kBFloat16:
      return ReduceLoop<uint16_t, float>(d, s, count, op, BFloat16ToFloatInline,
                                         FloatToBFloat16Inline);
    case DataType::kInt32:
      return ReduceIntegers<int32_t, uint32_t>(d, s, count, op);
    case DataType::kInt64:
      return ReduceIntegers<int64_t, uint64_t>(d, s, count, op);
  }
  std::fprintf(stderr, "ReduceInto: unknown data type %d\n", static_cast<int>(type));
  std::abort();
}

}  // namespace ferry
