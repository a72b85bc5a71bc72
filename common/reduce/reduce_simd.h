#pragma once

// Private to common/reduce: the block driver shared by the AVX2 and AVX-512 kernels.
//
// Every kernel works on blocks of Isa::kBlockBytes (four vectors) of each operand with
// unaligned loads and stores. A head (elements until dst is cache-line aligned, when
// dst is element-aligned: split-line stores cost far more than split-line loads,
// especially for 64-byte vectors) and the tail (fewer than a block of elements) are
// copied into zeroed stack buffers, run through the same block code and copied back,
// so they get bit-identical arithmetic and nothing outside [0, count) is touched.
//
// `Isa` is a traits struct an instruction-set file (reduce_avx2.cc, reduce_avx512.cc)
// defines with the intrinsics, nothing else; the driver builds every data type's vector
// operation from them (OneReg, BF16 below). It holds:
//   kBlockBytes                 bytes per block and operand (4 vectors)
//   Ps, Pd, Pi                  the float32, float64 and integer vector types
//   SetPs(float), SetPd(double) broadcast a scale factor
//   LoadPs, LoadPd, LoadPi (const u8*) and StorePs, StorePd, StorePi (u8*, vector):
//                               unaligned loads and stores
//   AddPs, AddPd, AddI32, AddI64 (x, y), MulPs, MulPd (x, scale): one vector op each
//   LoadF16, StoreF16           float16 <-> one float32 vector (sizeof(Ps) / 4 halves)
//   BF16Lo(Pi), BF16Hi(Pi), StoreBF16(u8*, Ps lo, Ps hi)
//                               bfloat16 bits (one Pi) <-> two float32 vectors
//
// Include this header only after `#pragma GCC target(...)` in such a file: the
// templates take the target of the point where they are defined, so each file's
// instantiations are compiled for its instruction set and can inline its intrinsics.
// Everything is in an anonymous namespace (and each file's traits are too), so no
// symbol compiled for AVX2 or AVX-512 can be merged by the linker with another build
// of the same function.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/reduce/reduce_internal.h"

namespace ferry {
namespace reduce_internal {
namespace {  // NOLINT(build/namespaces): see above, one copy per instruction set

template <typename Isa>
struct SimdDriver {
  using u8 = unsigned char;
  using Ps = typename Isa::Ps;
  using Pd = typename Isa::Pd;
  using Pi = typename Isa::Pi;
  static constexpr size_t kBlockBytes = Isa::kBlockBytes;
  static constexpr size_t kStoreAlign = 64;  // cache line

  // One vector op of a type held in one register: kElem (bytes per element), kLanesPerVec (elements
  // per vector op), Sum(d, a, b) (d = a + b) and, for the float types, Mul(d, Ps, Pd) (d *= the
  // scale of its type). Load, Store and Add are the Isa's functions. (The vector types themselves
  // cannot be template arguments: GCC drops their attributes there.)
  template <size_t kElemBytes, auto Load, auto Store, auto Add>
  struct OneReg {
    using Reg = decltype(Load(nullptr));
    static constexpr size_t kElem = kElemBytes;
    static constexpr size_t kLanesPerVec = sizeof(Reg) / (kElemBytes == 8 ? 8 : 4);
    static void Sum(u8* d, const u8* a, const u8* b) {
      const Reg x = Load(a);
      const Reg y = Load(b);
      Store(d, Add(x, y));
    }
    static void Mul(u8* d, Ps sf, Pd sd) { Store(d, Scaled(Load(d), sf, sd)); }
  };
  static Ps Scaled(Ps x, Ps sf, Pd) { return Isa::MulPs(x, sf); }
  static Pd Scaled(Pd x, Ps, Pd sd) { return Isa::MulPd(x, sd); }
  using F32 = OneReg<4, &Isa::LoadPs, &Isa::StorePs, &Isa::AddPs>;
  using F64 = OneReg<8, &Isa::LoadPd, &Isa::StorePd, &Isa::AddPd>;
  using I32 = OneReg<4, &Isa::LoadPi, &Isa::StorePi, &Isa::AddI32>;
  using I64 = OneReg<8, &Isa::LoadPi, &Isa::StorePi, &Isa::AddI64>;

  // float16: one float32 vector of halves, converted on load and store. The sum is one
  // expression, as it always was: which operand GCC converts first decides which NaN a
  // NaN + NaN keeps, and this keeps the kernel's code (and every bit) unchanged.
  struct F16 {
    static constexpr size_t kElem = 2;
    static constexpr size_t kLanesPerVec = sizeof(Ps) / 4;
    static void Sum(u8* d, const u8* a, const u8* b) {
      Isa::StoreF16(d, Isa::AddPs(Isa::LoadF16(a), Isa::LoadF16(b)));
    }
    static void Mul(u8* d, Ps s, Pd) { Isa::StoreF16(d, Isa::MulPs(Isa::LoadF16(d), s)); }
  };

  // bfloat16: one integer vector of bits is two float32 vectors (BF16Lo, BF16Hi).
  struct BF16 {
    static constexpr size_t kElem = 2;
    static constexpr size_t kLanesPerVec = sizeof(Pi) / 2;
    static void Sum(u8* d, const u8* a, const u8* b) {
      const Pi x = Isa::LoadPi(a);
      const Pi y = Isa::LoadPi(b);
      Isa::StoreBF16(d, Isa::AddPs(Isa::BF16Lo(x), Isa::BF16Lo(y)),
                     Isa::AddPs(Isa::BF16Hi(x), Isa::BF16Hi(y)));
    }
    static void Mul(u8* d, Ps s, Pd) {
      const Pi x = Isa::LoadPi(d);
      Isa::StoreBF16(d, Isa::MulPs(Isa::BF16Lo(x), s), Isa::MulPs(Isa::BF16Hi(x), s));
    }
  };

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
    static inline void Mul(u8* d, Ps sf, Pd sd) {
      for (size_t v = 0; v < kVecs; ++v) V::Mul(d + v * kVecBytes, sf, sd);
    }
  };

  // Elements before dst reaches a cache-line boundary (0 when dst is not even
  // element-aligned: then no alignment is reachable).
  template <typename V>
  static inline size_t HeadElems(const u8* d, size_t n) {
    const size_t mis = static_cast<size_t>(reinterpret_cast<uintptr_t>(d) % kStoreAlign);
    if (mis == 0 || mis % V::kElem != 0) return 0;
    const size_t head = (kStoreAlign - mis) / V::kElem;
    return head < n ? head : n;
  }

  // Fewer than a block of elements: through zeroed stack buffers and the same block
  // code, so the arithmetic is identical and no byte outside [0, count) is touched.
  template <typename V>
  static inline void SumPartial(u8* d, const u8* a, const u8* b, size_t count) {
    const size_t bytes = count * V::kElem;
    alignas(64) u8 ta[kBlockBytes] = {};
    alignas(64) u8 tb[kBlockBytes] = {};
    std::memcpy(ta, a, bytes);
    std::memcpy(tb, b, bytes);
    Block<V>::Sum(ta, ta, tb);
    std::memcpy(d, ta, bytes);
  }

  template <typename V>
  static inline void MulPartial(u8* d, size_t count, Ps sf, Pd sd) {
    const size_t bytes = count * V::kElem;
    alignas(64) u8 t[kBlockBytes] = {};
    std::memcpy(t, d, bytes);
    Block<V>::Mul(t, sf, sd);
    std::memcpy(d, t, bytes);
  }

  // d, a, b may be identical (each vector is loaded before the same bytes are stored).
  template <typename V>
  static void SumTo(void* dst, const void* a, const void* b, size_t n) {
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
  static void Scale(void* dst, double scale, size_t n) {
    using B = Block<V>;
    auto* d = static_cast<u8*>(dst);
    const Ps sf = Isa::SetPs(static_cast<float>(scale));
    const Pd sd = Isa::SetPd(scale);
    size_t i = HeadElems<V>(d, n);
    if (i > 0) MulPartial<V>(d, i, sf, sd);
    for (; i + B::kElems <= n; i += B::kElems) B::Mul(d + i * V::kElem, sf, sd);
    if (i < n) MulPartial<V>(d + i * V::kElem, n - i, sf, sd);
  }

  // Overwrites the entries this instruction set implements. Integer Scale (rare:
  // averaging integer sums) keeps the portable kernels.
  static void Fill(KernelTable* t) {
    auto idx = [](DataType type) { return static_cast<int>(type); };
    t->sum_to[idx(DataType::kFloat32)] = &SumTo<F32>;
    t->sum_to[idx(DataType::kFloat16)] = &SumTo<F16>;
    t->sum_to[idx(DataType::kBFloat16)] = &SumTo<BF16>;
    t->sum_to[idx(DataType::kFloat64)] = &SumTo<F64>;
    t->sum_to[idx(DataType::kInt32)] = &SumTo<I32>;
    t->sum_to[idx(DataType::kInt64)] = &SumTo<I64>;
    t->scale[idx(DataType::kFloat32)] = &Scale<F32>;
    t->scale[idx(DataType::kFloat16)] = &Scale<F16>;
    t->scale[idx(DataType::kBFloat16)] = &Scale<BF16>;
    t->scale[idx(DataType::kFloat64)] = &Scale<F64>;
  }
};

}  // namespace
}  // namespace reduce_internal
}  // namespace ferry
