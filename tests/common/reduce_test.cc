// Tests of the summation kernels (common/reduce): every data type x every SIMD level
// the CPU supports x many counts x aligned and truly misaligned buffers, against a
// scalar reference written here, plus the 16-bit conversions against a slow,
// obviously-correct reference built on double arithmetic.

#include "common/reduce/reduce.h"

#include <gtest/gtest.h>

#include <iterator>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace ferry {
namespace {

const DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                              DataType::kFloat64, DataType::kInt32,   DataType::kInt64};
const SimdLevel kAllLevels[] = {SimdLevel::kPortable, SimdLevel::kAvx2, SimdLevel::kAvx512};
const size_t kCounts[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 127, 1000, 4097, 100003};

// ---------------------------------------------------------------------------------
// Reference conversions: slow and simple (double arithmetic, nearbyint rounds to
// nearest even in the default rounding mode).

double RefHalfToDouble(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) {
    v = m != 0 ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(m, -24);
  } else {
    v = std::ldexp(1024 + m, e - 25);
  }
  return s != 0 ? -v : v;
}

// `f` must be a float value (at most 24 significant bits). NaN gives 0x7E00.
uint16_t RefDoubleToHalf(double f) {
  if (std::isnan(f)) return 0x7E00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(f);
  if (std::isinf(a)) return sign | 0x7C00;
  int e;
  std::frexp(a, &e);
  const int ex = std::max(e - 1, -14);
  const double ulp = std::ldexp(1.0, ex - 10);
  const double q = std::nearbyint(a / ulp);
  const double r = q * ulp;
  if (r >= 65536.0) return sign | 0x7C00;
  if (r < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(q);
  int e2;
  std::frexp(r, &e2);
  const int ex2 = e2 - 1;
  const int mant = static_cast<int>(r / std::ldexp(1.0, ex2 - 10)) - 1024;
  return sign | static_cast<uint16_t>(((ex2 + 15) << 10) | mant);
}

double RefBf16ToDouble(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t RefDoubleToBf16(double f) {
  if (std::isnan(f)) return 0x7FC0;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(f);
  if (std::isinf(a)) return sign | 0x7F80;
  int e;
  std::frexp(a, &e);
  const int ex = std::max(e - 1, -126);
  const double ulp = std::ldexp(1.0, ex - 7);
  const double r = std::nearbyint(a / ulp) * ulp;
  if (r >= std::ldexp(1.0, 128)) return sign | 0x7F80;
  const float rf = static_cast<float>(r);  // exact
  uint32_t u;
  std::memcpy(&u, &rf, 4);
  return sign | static_cast<uint16_t>(u >> 16);
}

float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
double BitsToDouble(uint64_t u) {
  double f;
  std::memcpy(&f, &u, 8);
  return f;
}
uint64_t DoubleToBits(double f) {
  uint64_t u;
  std::memcpy(&u, &f, 8);
  return u;
}

bool HalfIsNaN(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }
bool Bf16IsNaN(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0; }

// ---------------------------------------------------------------------------------
// Element values as raw bits (little-endian low bytes of a uint64_t).

bool IsNaNBits(DataType t, uint64_t v) {
  switch (t) {
    case DataType::kFloat32: return std::isnan(BitsToFloat(static_cast<uint32_t>(v)));
    case DataType::kFloat64: return std::isnan(BitsToDouble(v));
    case DataType::kFloat16: return HalfIsNaN(static_cast<uint16_t>(v));
    case DataType::kBFloat16: return Bf16IsNaN(static_cast<uint16_t>(v));
    default: return false;
  }
}

// The value of a float-type element (reference decoding).
double Decode(DataType t, uint64_t v) {
  switch (t) {
    case DataType::kFloat32: return BitsToFloat(static_cast<uint32_t>(v));
    case DataType::kFloat64: return BitsToDouble(v);
    case DataType::kFloat16: return RefHalfToDouble(static_cast<uint16_t>(v));
    case DataType::kBFloat16: return RefBf16ToDouble(static_cast<uint16_t>(v));
    case DataType::kInt32: return static_cast<int32_t>(static_cast<uint32_t>(v));
    case DataType::kInt64: return static_cast<double>(static_cast<int64_t>(v));
  }
  return 0;
}

// Encodes an exactly representable value (reference encoding).
uint64_t Encode(DataType t, double x) {
  switch (t) {
    case DataType::kFloat32: return FloatToBits(static_cast<float>(x));
    case DataType::kFloat64: return DoubleToBits(x);
    case DataType::kFloat16: return RefDoubleToHalf(x);
    case DataType::kBFloat16: return RefDoubleToBf16(x);
    case DataType::kInt32: return static_cast<uint32_t>(static_cast<int32_t>(x));
    case DataType::kInt64: return static_cast<uint64_t>(static_cast<int64_t>(x));
  }
  return 0;
}

// The documented sum of one element pair.
uint64_t RefAdd(DataType t, uint64_t x, uint64_t y) {
  switch (t) {
    case DataType::kFloat32:
      return FloatToBits(BitsToFloat(static_cast<uint32_t>(x)) +
                         BitsToFloat(static_cast<uint32_t>(y)));
    case DataType::kFloat64: return DoubleToBits(BitsToDouble(x) + BitsToDouble(y));
    case DataType::kFloat16:
      return FloatToHalf(HalfToFloat(static_cast<uint16_t>(x)) +
                         HalfToFloat(static_cast<uint16_t>(y)));
    case DataType::kBFloat16:
      return FloatToBFloat16(BFloat16ToFloat(static_cast<uint16_t>(x)) +
                             BFloat16ToFloat(static_cast<uint16_t>(y)));
    case DataType::kInt32: return static_cast<uint32_t>(x + y);
    case DataType::kInt64: return x + y;
  }
  return 0;
}

// The documented scaling of one element.
uint64_t RefScale(DataType t, uint64_t x, double s) {
  const float sf = static_cast<float>(s);
  switch (t) {
    case DataType::kFloat32: return FloatToBits(BitsToFloat(static_cast<uint32_t>(x)) * sf);
    case DataType::kFloat64: return DoubleToBits(BitsToDouble(x) * s);
    case DataType::kFloat16:
      return FloatToHalf(HalfToFloat(static_cast<uint16_t>(x)) * sf);
    case DataType::kBFloat16:
      return FloatToBFloat16(BFloat16ToFloat(static_cast<uint16_t>(x)) * sf);
    case DataType::kInt32:  // small values only: no saturation needed here
      return static_cast<uint32_t>(
          static_cast<int32_t>(std::trunc(static_cast<int32_t>(static_cast<uint32_t>(x)) * s)));
    case DataType::kInt64:  // the library multiplies in long double (exact int64)
      return static_cast<uint64_t>(static_cast<int64_t>(std::trunc(
          static_cast<long double>(static_cast<int64_t>(x)) * static_cast<long double>(s))));
  }
  return 0;
}

bool SameValue(DataType t, uint64_t got, uint64_t want) {
  if (IsNaNBits(t, want)) return IsNaNBits(t, got);
  return got == want;
}

enum class Values { kSmallInts, kRandomBits };

// Small integers (sums and quarter-averages stay exact) or random bit patterns
// (rounding, Inf, NaN, subnormals; integer wrap-around).
uint64_t RandomValue(DataType t, Values mode, std::mt19937_64& rng) {
  const uint64_t r = rng();
  if (mode == Values::kSmallInts) {
    const auto in = [&](int64_t range) {
      return static_cast<double>(static_cast<int64_t>(r % (2 * range + 1)) - range);
    };
    switch (t) {
      case DataType::kFloat32: return Encode(t, in(1 << 20));
      case DataType::kFloat64: return Encode(t, in(int64_t{1} << 40));
      case DataType::kFloat16: return Encode(t, in(128));
      case DataType::kBFloat16: return Encode(t, in(16));
      case DataType::kInt32: return Encode(t, in(1 << 20));
      case DataType::kInt64: return Encode(t, in(int64_t{1} << 40));
    }
  }
  switch (t) {
    case DataType::kFloat32:
      // Mostly nearby exponents (so sums round), sometimes any pattern.
      if ((r >> 60) == 0) return static_cast<uint32_t>(r);
      return (r & 0x807FFFFFu) | ((120u + ((r >> 32) & 15u)) << 23);
    case DataType::kFloat64:
      if ((r >> 60) == 0) return r;
      return (r & 0x800FFFFFFFFFFFFFull) | ((1016ull + ((r >> 52) & 15u)) << 52);
    case DataType::kFloat16:
    case DataType::kBFloat16: return r & 0xFFFF;
    case DataType::kInt32: return r & 0xFFFFFFFFu;
    case DataType::kInt64: return r;
  }
  return 0;
}

// A buffer whose data starts `offset` bytes into an allocation with guard bytes on
// both sides, so misaligned starts and out-of-range writes are both checked.
class GuardedBuffer {
 public:
  static constexpr uint8_t kGuard = 0xA5;
  static constexpr size_t kGuardBytes = 64;

  GuardedBuffer(DataType t, size_t count, size_t offset)
      : size_(DataTypeSize(t)),
        count_(count),
        offset_(offset),
        mem_(offset + count * size_ + kGuardBytes, kGuard) {}

  uint8_t* data() { return mem_.data() + offset_; }
  uint64_t Get(size_t i) const {
    uint64_t v = 0;
    std::memcpy(&v, mem_.data() + offset_ + i * size_, size_);
    return v;
  }
  void Set(size_t i, uint64_t v) { std::memcpy(mem_.data() + offset_ + i * size_, &v, size_); }

  ::testing::AssertionResult GuardsIntact() const {
    for (size_t i = 0; i < mem_.size(); ++i) {
      if (i >= offset_ && i < offset_ + count_ * size_) continue;
      if (mem_[i] != kGuard) {
        return ::testing::AssertionFailure()
               << "guard byte " << i << " (data at " << offset_ << ".."
               << offset_ + count_ * size_ << ") changed to " << int{mem_[i]};
      }
    }
    return ::testing::AssertionSuccess();
  }

 private:
  size_t size_, count_, offset_;
  std::vector<uint8_t> mem_;
};

::testing::AssertionResult Matches(DataType t, const GuardedBuffer& got,
                                   const std::vector<uint64_t>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (!SameValue(t, got.Get(i), want[i])) {
      return ::testing::AssertionFailure()
             << "element " << i << " of " << want.size() << ": got 0x" << std::hex
             << got.Get(i) << ", want 0x" << want[i];
    }
  }
  return got.GuardsIntact();
}

// Selects a SIMD level for the test (skipping it when unsupported) and restores the
// CPU's best level afterwards.
class LevelScope {
 public:
  bool Enter(SimdLevel level) { return SetSimdLevel(level); }
  ~LevelScope() { SetSimdLevel(DetectedSimdLevel()); }
};

#define FERRY_USE_LEVEL(scope, level)                                                   \
  do {                                                                                  \
    if (!(scope).Enter(level)) {                                                        \
      GTEST_SKIP() << "CPU does not support SIMD level " << SimdLevelName(level);       \
    }                                                                                   \
    ASSERT_EQ(ActiveSimdLevel(), level);                                                \
  } while (0)

// ---------------------------------------------------------------------------------
// Data types.

TEST(DataTypeTest, SizesNamesAndValidity) {
  EXPECT_EQ(DataTypeSize(DataType::kFloat32), 4u);
  EXPECT_EQ(DataTypeSize(DataType::kFloat16), 2u);
  EXPECT_EQ(DataTypeSize(DataType::kBFloat16), 2u);
  EXPECT_EQ(DataTypeSize(DataType::kFloat64), 8u);
  EXPECT_EQ(DataTypeSize(DataType::kInt32), 4u);
  EXPECT_EQ(DataTypeSize(DataType::kInt64), 8u);
  EXPECT_EQ(DataTypeName(DataType::kFloat32), "float32");
  EXPECT_EQ(DataTypeName(DataType::kFloat16), "float16");
  EXPECT_EQ(DataTypeName(DataType::kBFloat16), "bfloat16");
  EXPECT_EQ(DataTypeName(DataType::kFloat64), "float64");
  EXPECT_EQ(DataTypeName(DataType::kInt32), "int32");
  EXPECT_EQ(DataTypeName(DataType::kInt64), "int64");
  EXPECT_EQ(DataTypeName(static_cast<DataType>(7)), "unknown(7)");
  EXPECT_EQ(DataTypeName(static_cast<DataType>(-1)), "unknown(-1)");
  for (int v = 0; v < kNumDataTypes; ++v) EXPECT_TRUE(IsValidDataType(v)) << v;
  EXPECT_FALSE(IsValidDataType(-1));
  EXPECT_FALSE(IsValidDataType(kNumDataTypes));
  EXPECT_FALSE(IsValidDataType(1 << 30));
}

TEST(DataTypeTest, ParseNames) {
  // Every name a type is accepted under (written out here, not taken from the parser's
  // own table, so the test checks the names themselves).
  const std::pair<DataType, std::vector<const char*>> cases[] = {
      {DataType::kFloat32, {"float32", "fp32", "float"}},
      {DataType::kFloat16, {"float16", "fp16", "half"}},
      {DataType::kBFloat16, {"bfloat16", "bf16"}},
      {DataType::kFloat64, {"float64", "fp64", "double"}},
      {DataType::kInt32, {"int32"}},
      {DataType::kInt64, {"int64"}},
  };
  for (const auto& [type, names] : cases) {
    for (const char* name : names) {
      DataType t = DataType::kInt64;
      if (type == DataType::kInt64) t = DataType::kFloat32;
      EXPECT_TRUE(ParseDataType(name, &t)) << name;
      EXPECT_EQ(t, type) << name;
    }
  }
  for (DataType t : kAllTypes) {
    DataType parsed;
    EXPECT_TRUE(ParseDataType(DataTypeName(t), &parsed));
    EXPECT_EQ(parsed, t);
  }
  DataType untouched = DataType::kInt32;
  for (const char* bad : {"", "f32", "Float32", "float32 ", "int8", "uint32", "unknown(0)"}) {
    EXPECT_FALSE(ParseDataType(bad, &untouched)) << bad;
    EXPECT_EQ(untouched, DataType::kInt32);
  }
}

// ---------------------------------------------------------------------------------
// SIMD level selection.

TEST(SimdLevelTest, SelectAndRestore) {
  EXPECT_STREQ(SimdLevelName(SimdLevel::kPortable), "portable");
  EXPECT_STREQ(SimdLevelName(SimdLevel::kAvx2), "avx2");
  EXPECT_STREQ(SimdLevelName(SimdLevel::kAvx512), "avx512");
  const SimdLevel best = DetectedSimdLevel();
  LevelScope scope;
  for (SimdLevel level : kAllLevels) {
    if (level <= best) {
      EXPECT_TRUE(SetSimdLevel(level));
      EXPECT_EQ(ActiveSimdLevel(), level);
    } else {
      SetSimdLevel(SimdLevel::kPortable);
      EXPECT_FALSE(SetSimdLevel(level));
      EXPECT_EQ(ActiveSimdLevel(), SimdLevel::kPortable) << "a refused level changed nothing";
    }
  }
  EXPECT_TRUE(SetSimdLevel(best));
  EXPECT_EQ(ActiveSimdLevel(), best);
  EXPECT_FALSE(SetSimdLevel(static_cast<SimdLevel>(3)));
  EXPECT_EQ(ActiveSimdLevel(), best);
}

// ---------------------------------------------------------------------------------
// 16-bit conversions.

TEST(ConversionTest, HalfKnownBitPatterns) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);  // largest finite
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);  // below the midpoint to 65536
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // midpoint: ties to even = Inf
  EXPECT_EQ(FloatToHalf(1e10f), 0x7C00);
  EXPECT_EQ(FloatToHalf(-1e10f), 0xFC00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1023.0f, -24)), 0x03FF);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);   // tie -> even (0)
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);   // 1.5 units, tie -> 2
  EXPECT_EQ(FloatToHalf(std::ldexp(5.0f, -25)), 0x0002);   // 2.5 units, tie -> 2
  EXPECT_EQ(FloatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -40)), 0x0000);
  EXPECT_EQ(FloatToHalf(-std::ldexp(1.0f, -40)), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);       // tie -> even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);   // tie -> even
  EXPECT_EQ(FloatToHalf(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3C01);
  EXPECT_EQ(FloatToHalf(std::ldexp(2047.0f, -11)), 0x3BFF);  // largest half below 1
  EXPECT_EQ(FloatToHalf(std::ldexp(4095.0f, -12)), 0x3C00);  // tie -> even, up to 1.0
  const uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(HalfIsNaN(nan)) << std::hex << nan;
  EXPECT_TRUE(HalfIsNaN(FloatToHalf(BitsToFloat(0x7F800001))));  // payload in low bits only
  EXPECT_TRUE(HalfIsNaN(FloatToHalf(BitsToFloat(0xFF800001))));
  EXPECT_EQ(FloatToHalf(BitsToFloat(0xFFC00000)) & 0x8000, 0x8000);

  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(HalfToFloat(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7C01)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7E00)));
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
}

TEST(ConversionTest, BFloat16KnownBitPatterns) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBFloat16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToBFloat16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie -> even
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie -> even
  EXPECT_EQ(FloatToBFloat16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3F81);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(FloatToBFloat16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to Inf
  EXPECT_EQ(FloatToBFloat16(BitsToFloat(0x7F7F7FFF)), 0x7F7F);
  EXPECT_EQ(FloatToBFloat16(BitsToFloat(0x00000001)), 0x0000);  // float subnormal
  EXPECT_EQ(FloatToBFloat16(BitsToFloat(0x00018000)), 0x0002);  // subnormal tie -> even
  // NaN must stay NaN: a plain rounding add would carry these into Inf or a number.
  for (uint32_t bits : {0x7FFFFFFFu, 0x7F800001u, 0x7F80FFFFu, 0xFFFFFFFFu, 0xFF800001u,
                        0x7FC00000u}) {
    const uint16_t b = FloatToBFloat16(BitsToFloat(bits));
    EXPECT_TRUE(Bf16IsNaN(b)) << std::hex << bits << " -> " << b;
    EXPECT_EQ(b & 0x8000, (bits >> 16) & 0x8000);
  }
  EXPECT_EQ(BFloat16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(0x7F80), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(0x7FC0)));
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(0x7F81)));
}

TEST(ConversionTest, HalfMatchesReference) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t hb = static_cast<uint16_t>(h);
    const float f = HalfToFloat(hb);
    const double ref = RefHalfToDouble(hb);
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_TRUE(HalfIsNaN(FloatToHalf(f))) << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), ref) << std::hex << h;
    ASSERT_EQ(std::signbit(f), std::signbit(ref)) << std::hex << h;
    ASSERT_EQ(FloatToHalf(f), hb) << "round trip of 0x" << std::hex << h;
    // Midpoint to the next half of larger magnitude, and just either side of it.
    if ((h & 0x7FFF) < 0x7C00) {
      const double next = RefHalfToDouble(static_cast<uint16_t>(h + 1));
      const float mid = static_cast<float>((ref + next) / 2);  // exact in float
      for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 2 * mid)}) {
        ASSERT_EQ(FloatToHalf(x), RefDoubleToHalf(x)) << std::hexfloat << x;
      }
    }
  }
  std::mt19937_64 rng(1);
  for (int i = 0; i < 1000000; ++i) {
    const float x = BitsToFloat(static_cast<uint32_t>(rng()));
    if (std::isnan(x)) continue;
    ASSERT_EQ(FloatToHalf(x), RefDoubleToHalf(x)) << std::hexfloat << x;
    // Values in the half range, where rounding matters most.
    const float y = BitsToFloat((static_cast<uint32_t>(rng()) & 0x87FFFFFFu) | (100u << 23));
    ASSERT_EQ(FloatToHalf(y), RefDoubleToHalf(y)) << std::hexfloat << y;
  }
}

TEST(ConversionTest, BFloat16MatchesReference) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t bb = static_cast<uint16_t>(b);
    const float f = BFloat16ToFloat(bb);
    if (Bf16IsNaN(bb)) {
      ASSERT_TRUE(Bf16IsNaN(FloatToBFloat16(f))) << std::hex << b;
      continue;
    }
    ASSERT_EQ(FloatToBFloat16(f), bb) << std::hex << b;
    if ((b & 0x7FFF) < 0x7F80) {
      const double next = RefBf16ToDouble(static_cast<uint16_t>(b + 1));
      const float mid = static_cast<float>((f + next) / 2);
      for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 2 * mid)}) {
        if (std::isinf(x)) continue;
        ASSERT_EQ(FloatToBFloat16(x), RefDoubleToBf16(x)) << std::hexfloat << x;
      }
    }
  }
  std::mt19937_64 rng(2);
  for (int i = 0; i < 1000000; ++i) {
    const float x = BitsToFloat(static_cast<uint32_t>(rng()));
    if (std::isnan(x)) {
      ASSERT_TRUE(Bf16IsNaN(FloatToBFloat16(x)));
      continue;
    }
    ASSERT_EQ(FloatToBFloat16(x), RefDoubleToBf16(x)) << std::hexfloat << x;
  }
}

// ---------------------------------------------------------------------------------
// SumInto / SumTo: dtype x level x alignment case, every count inside.

struct Offsets {
  const char* name;
  size_t dst, a, b;  // byte offsets of the buffer starts
};

Offsets OffsetsFor(int alignment_case, size_t elem) {
  switch (alignment_case) {
    case 0: return {"aligned", 0, 0, 0};
    case 1: return {"elem1", elem, elem, elem};           // misaligned by one element
    case 2: return {"byte1", 1, 3, 2};                     // truly misaligned, all differ
    case 3: return {"byte2", 2, 1, 3};
    default: return {"byte3", 3, 0, 1};                    // dst misaligned, src aligned
  }
}
constexpr int kNumAlignmentCases = 5;

using KernelParam = std::tuple<DataType, SimdLevel, int>;

std::string KernelParamName(const ::testing::TestParamInfo<KernelParam>& info) {
  const DataType t = std::get<0>(info.param);
  return DataTypeName(t) + "_" + SimdLevelName(std::get<1>(info.param)) + "_" +
         OffsetsFor(std::get<2>(info.param), DataTypeSize(t)).name;
}

class SumKernelTest : public ::testing::TestWithParam<KernelParam> {};

TEST_P(SumKernelTest, AllCounts) {
  const DataType t = std::get<0>(GetParam());
  const SimdLevel level = std::get<1>(GetParam());
  const Offsets off = OffsetsFor(std::get<2>(GetParam()), DataTypeSize(t));
  LevelScope scope;
  FERRY_USE_LEVEL(scope, level);
  std::mt19937_64 rng(static_cast<uint64_t>(t) * 131 + static_cast<uint64_t>(level) * 7 +
                      std::get<2>(GetParam()));

  for (Values mode : {Values::kSmallInts, Values::kRandomBits}) {
    for (size_t n : kCounts) {
      if (mode == Values::kRandomBits && n > 10000) continue;  // runtime
      SCOPED_TRACE(::testing::Message() << "count " << n
                                        << (mode == Values::kSmallInts ? " small ints"
                                                                       : " random bits"));
      std::vector<uint64_t> x(n), y(n), sum(n), twice(n);
      for (size_t i = 0; i < n; ++i) {
        x[i] = RandomValue(t, mode, rng);
        y[i] = RandomValue(t, mode, rng);
        sum[i] = RefAdd(t, x[i], y[i]);
        twice[i] = RefAdd(t, x[i], x[i]);
        if (mode == Values::kSmallInts) {
          // Independent of the library's conversions: exact integer sums.
          ASSERT_EQ(sum[i], Encode(t, Decode(t, x[i]) + Decode(t, y[i])))
              << "reference disagrees at " << i;
        }
      }
      const auto fill = [&](GuardedBuffer& buf, const std::vector<uint64_t>& v) {
        for (size_t i = 0; i < n; ++i) buf.Set(i, v[i]);
      };
      GuardedBuffer a(t, n, off.a), b(t, n, off.b), d(t, n, off.dst);
      fill(a, x);
      fill(b, y);

      // dst += src
      fill(d, x);
      SumInto(d.data(), b.data(), n, t);
      EXPECT_TRUE(Matches(t, d, sum)) << "SumInto";
      EXPECT_TRUE(Matches(t, b, y)) << "SumInto modified src";

      // dst = a + b, three buffers (dst starts with junk)
      for (size_t i = 0; i < n; ++i) d.Set(i, rng());
      SumTo(d.data(), a.data(), b.data(), n, t);
      EXPECT_TRUE(Matches(t, d, sum)) << "SumTo";
      EXPECT_TRUE(Matches(t, a, x)) << "SumTo modified a";
      EXPECT_TRUE(Matches(t, b, y)) << "SumTo modified b";

      // dst aliases a: SumTo(a, a, b)
      GuardedBuffer a2(t, n, off.dst);
      fill(a2, x);
      SumTo(a2.data(), a2.data(), b.data(), n, t);
      EXPECT_TRUE(Matches(t, a2, sum)) << "SumTo(a, a, b)";

      // dst aliases b: SumTo(b, a, b)
      GuardedBuffer b2(t, n, off.dst);
      fill(b2, y);
      SumTo(b2.data(), a.data(), b2.data(), n, t);
      EXPECT_TRUE(Matches(t, b2, sum)) << "SumTo(b, a, b)";

      // SumInto(x, x) and SumTo(x, x, x) double x.
      GuardedBuffer s(t, n, off.dst);
      fill(s, x);
      SumInto(s.data(), s.data(), n, t);
      EXPECT_TRUE(Matches(t, s, twice)) << "SumInto(x, x)";
      fill(s, x);
      SumTo(s.data(), s.data(), s.data(), n, t);
      EXPECT_TRUE(Matches(t, s, twice)) << "SumTo(x, x, x)";
      if (HasFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesLevelsAlignments, SumKernelTest,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes),
                                            ::testing::ValuesIn(kAllLevels),
                                            ::testing::Range(0, kNumAlignmentCases)),
                         KernelParamName);

// ---------------------------------------------------------------------------------
// Scale and averaging: dtype x level.

using TypeLevel = std::tuple<DataType, SimdLevel>;

std::string TypeLevelName(const ::testing::TestParamInfo<TypeLevel>& info) {
  return DataTypeName(std::get<0>(info.param)) + "_" + SimdLevelName(std::get<1>(info.param));
}

class TypeLevelTest : public ::testing::TestWithParam<TypeLevel> {};

TEST_P(TypeLevelTest, Scale) {
  const DataType t = std::get<0>(GetParam());
  const SimdLevel level = std::get<1>(GetParam());
  LevelScope scope;
  FERRY_USE_LEVEL(scope, level);
  const bool is_int = t == DataType::kInt32 || t == DataType::kInt64;
  std::mt19937_64 rng(static_cast<uint64_t>(t) * 17 + static_cast<uint64_t>(level));
  for (double s : {0.5, 1.0 / 3, -1.5, 1.0, 1e-3}) {
    for (Values mode : {Values::kSmallInts, Values::kRandomBits}) {
      if (is_int && mode == Values::kRandomBits) continue;  // saturation: tested below
      for (size_t n : kCounts) {
        if (n > 10000 && (mode == Values::kRandomBits || s != 0.5)) continue;  // runtime
        for (size_t offset : {size_t{0}, DataTypeSize(t), size_t{1}, size_t{3}}) {
          SCOPED_TRACE(::testing::Message() << "scale " << s << " count " << n << " offset "
                                            << offset);
          GuardedBuffer d(t, n, offset);
          std::vector<uint64_t> want(n);
          for (size_t i = 0; i < n; ++i) {
            const uint64_t v = RandomValue(t, mode, rng);
            d.Set(i, v);
            want[i] = RefScale(t, v, s);
          }
          // CopyScaled (one pass) gives what Scale does in place, across its blocks.
          GuardedBuffer copy(t, n, offset);
          CopyScaled(copy.data(), d.data(), s, n, t);
          EXPECT_TRUE(Matches(t, copy, want)) << "CopyScaled";
          Scale(d.data(), s, n, t);
          EXPECT_TRUE(Matches(t, d, want));
          if (HasFailure()) return;
        }
      }
    }
  }
}

// Every start address modulo a cache line (the SIMD kernels peel elements until dst
// is line-aligned), for SumInto, SumTo and Scale.
TEST_P(TypeLevelTest, EveryDstOffsetInACacheLine) {
  const DataType t = std::get<0>(GetParam());
  const SimdLevel level = std::get<1>(GetParam());
  LevelScope scope;
  FERRY_USE_LEVEL(scope, level);
  std::mt19937_64 rng(7);
  for (size_t dst_off = 0; dst_off < 64 + 8; ++dst_off) {
    for (size_t n : {size_t{3}, size_t{45}, size_t{300}}) {
      SCOPED_TRACE(::testing::Message() << "dst offset " << dst_off << " count " << n);
      GuardedBuffer d(t, n, dst_off), a(t, n, (dst_off * 5) % 67), b(t, n, (dst_off * 3) % 61);
      std::vector<uint64_t> x(n), y(n), sum(n), scaled(n);
      for (size_t i = 0; i < n; ++i) {
        x[i] = RandomValue(t, Values::kSmallInts, rng);
        y[i] = RandomValue(t, Values::kSmallInts, rng);
        sum[i] = RefAdd(t, x[i], y[i]);
        scaled[i] = RefScale(t, sum[i], 0.5);
        d.Set(i, x[i]);
        a.Set(i, x[i]);
        b.Set(i, y[i]);
      }
      SumInto(d.data(), b.data(), n, t);
      EXPECT_TRUE(Matches(t, d, sum)) << "SumInto";
      Scale(d.data(), 0.5, n, t);
      EXPECT_TRUE(Matches(t, d, scaled)) << "Scale";
      SumTo(d.data(), a.data(), b.data(), n, t);
      EXPECT_TRUE(Matches(t, d, sum)) << "SumTo";
      if (HasFailure()) return;
    }
  }
}

// Four workers' integers-in-floats summed and scaled by 1/4: the exact average
// (integer types: truncated toward zero).
TEST_P(TypeLevelTest, AverageOfWorkers) {
  const DataType t = std::get<0>(GetParam());
  const SimdLevel level = std::get<1>(GetParam());
  LevelScope scope;
  FERRY_USE_LEVEL(scope, level);
  const bool is_int = t == DataType::kInt32 || t == DataType::kInt64;
  constexpr int kWorkers = 4;
  std::mt19937_64 rng(99);
  for (size_t n : {size_t{1}, size_t{33}, size_t{4097}}) {
    GuardedBuffer acc(t, n, 1);
    std::vector<int64_t> total(n, 0);
    for (int w = 0; w < kWorkers; ++w) {
      GuardedBuffer grad(t, n, 2);
      for (size_t i = 0; i < n; ++i) {
        const uint64_t v = RandomValue(t, Values::kSmallInts, rng);
        grad.Set(i, v);
        total[i] += static_cast<int64_t>(Decode(t, v));
      }
      if (w == 0) {
        std::memcpy(acc.data(), grad.data(), n * DataTypeSize(t));
      } else {
        SumInto(acc.data(), grad.data(), n, t);
      }
    }
    Scale(acc.data(), 1.0 / kWorkers, n, t);
    std::vector<uint64_t> want(n);
    for (size_t i = 0; i < n; ++i) {
      want[i] = is_int ? Encode(t, static_cast<double>(total[i] / kWorkers))
                       : Encode(t, static_cast<double>(total[i]) / kWorkers);
    }
    EXPECT_TRUE(Matches(t, acc, want)) << "count " << n;
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesLevels, TypeLevelTest,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes),
                                            ::testing::ValuesIn(kAllLevels)),
                         TypeLevelName);

class IntegerTest : public ::testing::TestWithParam<TypeLevel> {};

TEST_P(IntegerTest, WrapAndSaturation) {
  const DataType t = std::get<0>(GetParam());
  const SimdLevel level = std::get<1>(GetParam());
  LevelScope scope;
  FERRY_USE_LEVEL(scope, level);
  const bool i32 = t == DataType::kInt32;
  const int64_t max = i32 ? INT32_MAX : INT64_MAX;
  const int64_t min = i32 ? INT32_MIN : INT64_MIN;
  const auto bits = [&](int64_t v) {
    return i32 ? uint64_t{static_cast<uint32_t>(static_cast<int32_t>(v))}
               : static_cast<uint64_t>(v);
  };
  const size_t n = 37;  // vector blocks and a tail
  GuardedBuffer a(t, n, 3), b(t, n, 1);
  std::vector<uint64_t> want(n);
  for (size_t i = 0; i < n; ++i) {
    switch (i % 4) {
      case 0: a.Set(i, bits(max)); b.Set(i, bits(1)); want[i] = bits(min); break;
      case 1: a.Set(i, bits(min)); b.Set(i, bits(-1)); want[i] = bits(max); break;
      case 2: a.Set(i, bits(max)); b.Set(i, bits(max)); want[i] = bits(-2); break;
      default: a.Set(i, bits(min)); b.Set(i, bits(min)); want[i] = 0; break;
    }
  }
  SumInto(a.data(), b.data(), n, t);
  EXPECT_TRUE(Matches(t, a, want));

  // Scale saturates instead of overflowing; NaN gives 0; 1.0 is exact.
  const std::pair<double, std::pair<int64_t, int64_t>> cases[] = {
      {2.0, {max, max}},
      {2.0, {min, min}},
      {-1.0, {min, max}},
      {std::nan(""), {12345, 0}},
      {1.0, {max, max}},
      {1.0, {min + 1, min + 1}},
      {1.0, {max - 3, max - 3}},
      {-0.5, {7, -3}},
      {0.5, {-7, -3}},
  };
  for (const auto& c : cases) {
    GuardedBuffer d(t, n, 2);
    std::vector<uint64_t> w(n, bits(c.second.second));
    for (size_t i = 0; i < n; ++i) d.Set(i, bits(c.second.first));
    Scale(d.data(), c.first, n, t);
    EXPECT_TRUE(Matches(t, d, w)) << c.second.first << " * " << c.first;
  }
}

// Special values through every kernel: the 16-bit results are exactly the rounded
// float sums, NaN stays NaN (bf16 NaN never becomes Inf), Inf - Inf is NaN.
INSTANTIATE_TEST_SUITE_P(IntegerTypesLevels, IntegerTest,
                         ::testing::Combine(::testing::Values(DataType::kInt32, DataType::kInt64),
                                            ::testing::ValuesIn(kAllLevels)),
                         TypeLevelName);

class SixteenBitTest : public ::testing::TestWithParam<TypeLevel> {};

TEST_P(SixteenBitTest, SpecialValues) {
  const DataType t = std::get<0>(GetParam());
  const SimdLevel level = std::get<1>(GetParam());
  LevelScope scope;
  FERRY_USE_LEVEL(scope, level);
  const bool half = t == DataType::kFloat16;
  struct Case {
    uint16_t x, y;
    bool nan;
    uint16_t want;
  };
  static const Case kHalfCases[] = {
      {0x3C00, 0x3C00, false, 0x4000},  // 1 + 1
      {0x7BFF, 0x7BFF, false, 0x7C00},  // max + max overflows to Inf
      {0x7BFF, 0x4F80, false, 0x7C00},  // 65504 + 30: past the midpoint, Inf
      {0x7BFF, 0x4B80, false, 0x7BFF},  // 65504 + 15: below the midpoint
      {0x7BFF, 0x4C00, false, 0x7C00},  // 65504 + 16: the midpoint, ties to Inf
      {0x7C00, 0x3C00, false, 0x7C00},  // Inf + 1
      {0x7C00, 0xFC00, true, 0},        // Inf - Inf
      {0x7E00, 0x3C00, true, 0},        // NaN + 1
      {0x7C01, 0x0000, true, 0},        // signalling NaN + 0
      {0x0001, 0x0001, false, 0x0002},  // subnormals
      {0x03FF, 0x0001, false, 0x0400},  // subnormal to normal
      {0x8001, 0x0001, false, 0x0000},
      {0x3C00, 0x1000, false, 0x3C00},  // 1 + 2^-11: tie -> even (1.0)
      {0x3C01, 0x1000, false, 0x3C02},  // tie -> even (up)
      {0x3C00, 0x1001, false, 0x3C01},  // just past the tie
  };
  static const Case kBf16Cases[] = {
      {0x3F80, 0x3F80, false, 0x4000},  // 1 + 1
      {0x7F7F, 0x7F7F, false, 0x7F80},  // overflow to Inf
      {0x7F80, 0x3F80, false, 0x7F80},  // Inf + 1
      {0x7F80, 0xFF80, true, 0},        // Inf - Inf
      {0x7FC0, 0x3F80, true, 0},        // NaN + 1
      {0x7FFF, 0x0000, true, 0},        // NaN with all payload bits: must not carry to Inf
      {0x7F81, 0x0000, true, 0},        // signalling NaN
      {0xFFFF, 0x3F80, true, 0},
      {0x3F80, 0x3B80, false, 0x3F80},  // 1 + 2^-8: tie -> even
      {0x3F81, 0x3B80, false, 0x3F82},  // tie -> even (up)
      {0x0001, 0x0001, false, 0x0002},  // float subnormals
  };
  const Case* cases = half ? kHalfCases : kBf16Cases;
  const size_t num_cases = half ? std::size(kHalfCases) : std::size(kBf16Cases);
  const size_t n = 3 * 64 + 5;  // blocks and tail at every level
  GuardedBuffer a(t, n, 1), b(t, n, 0);
  std::vector<uint64_t> want(n);
  for (size_t i = 0; i < n; ++i) {
    const Case& c = cases[i % num_cases];
    a.Set(i, c.x);
    b.Set(i, c.y);
    want[i] = c.nan ? (half ? 0x7E00 : 0x7FC0) : c.want;
    ASSERT_TRUE(SameValue(t, RefAdd(t, c.x, c.y), want[i])) << "case " << i % num_cases;
  }
  SumInto(a.data(), b.data(), n, t);
  EXPECT_TRUE(Matches(t, a, want));
}

INSTANTIATE_TEST_SUITE_P(SixteenBitTypesLevels, SixteenBitTest,
                         ::testing::Combine(::testing::Values(DataType::kFloat16,
                                                              DataType::kBFloat16),
                                            ::testing::ValuesIn(kAllLevels)),
                         TypeLevelName);

// All levels agree bit for bit on the 16-bit types, NaN payloads included (except
// which payload wins when both operands are NaN).
TEST(CrossLevelTest, SixteenBitResultsIdenticalAcrossLevels) {
  LevelScope scope;
  std::mt19937_64 rng(5);
  const size_t n = 5000;
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    std::vector<uint16_t> x(n), y(n), first(n);
    for (size_t i = 0; i < n; ++i) {
      x[i] = static_cast<uint16_t>(rng());
      y[i] = static_cast<uint16_t>(rng());
    }
    bool have_first = false;
    for (SimdLevel level : kAllLevels) {
      if (!scope.Enter(level)) continue;
      std::vector<uint16_t> d(n);
      SumTo(d.data(), x.data(), y.data(), n, t);
      if (!have_first) {
        first = d;
        have_first = true;
        continue;
      }
      for (size_t i = 0; i < n; ++i) {
        if (IsNaNBits(t, x[i]) && IsNaNBits(t, y[i])) {
          ASSERT_TRUE(IsNaNBits(t, d[i]) && IsNaNBits(t, first[i])) << i;
          continue;
        }
        ASSERT_EQ(d[i], first[i]) << DataTypeName(t) << " level " << SimdLevelName(level)
                                  << " element " << i << " x=" << std::hex << x[i]
                                  << " y=" << y[i];
      }
    }
  }
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// ReduceInto: min, max and product against std:: on each type, NaN and wrap-around included.
template <typename T>
std::vector<T> Reduced(std::vector<T> a, const std::vector<T>& b, DataType type, ReduceOp op) {
  ReduceInto(a.data(), b.data(), a.size(), type, op);
  return a;
}

TEST(ReduceIntoTest, MinMaxProductOfFloatsAndIntegers) {
  const std::vector<float> a = {1.5f, -2.0f, 3.0f, 0.0f};
  const std::vector<float> b = {-1.0f, 4.0f, 3.0f, -0.5f};
  EXPECT_EQ(Reduced(a, b, DataType::kFloat32, ReduceOp::kMin), (std::vector<float>{-1.0f, -2.0f, 3.0f, -0.5f}));
  EXPECT_EQ(Reduced(a, b, DataType::kFloat32, ReduceOp::kMax), (std::vector<float>{1.5f, 4.0f, 3.0f, 0.0f}));
  EXPECT_EQ(Reduced(a, b, DataType::kFloat32, ReduceOp::kProduct), (std::vector<float>{-1.5f, -8.0f, 9.0f, -0.0f}));
  EXPECT_EQ(Reduced(a, b, DataType::kFloat32, ReduceOp::kSum), (std::vector<float>{0.5f, 2.0f, 6.0f, -0.5f}));
  const std::vector<double> da = {2.0, -7.0}, db = {3.0, -8.0};
  EXPECT_EQ(Reduced(da, db, DataType::kFloat64, ReduceOp::kMin), (std::vector<double>{2.0, -8.0}));
  EXPECT_EQ(Reduced(da, db, DataType::kFloat64, ReduceOp::kProduct), (std::vector<double>{6.0, 56.0}));
  const std::vector<int32_t> ia = {5, -3, INT32_MAX}, ib = {-4, -9, 2};
  EXPECT_EQ(Reduced(ia, ib, DataType::kInt32, ReduceOp::kMin), (std::vector<int32_t>{-4, -9, 2}));
  EXPECT_EQ(Reduced(ia, ib, DataType::kInt32, ReduceOp::kMax), (std::vector<int32_t>{5, -3, INT32_MAX}));
  EXPECT_EQ(Reduced(ia, ib, DataType::kInt32, ReduceOp::kProduct),
            (std::vector<int32_t>{-20, 27, -2}));  // INT32_MAX * 2 wraps to -2
  const std::vector<int64_t> la = {INT64_MIN, 6}, lb = {0, -7};
  EXPECT_EQ(Reduced(la, lb, DataType::kInt64, ReduceOp::kMin), (std::vector<int64_t>{INT64_MIN, -7}));
  EXPECT_EQ(Reduced(la, lb, DataType::kInt64, ReduceOp::kProduct), (std::vector<int64_t>{0, -42}));
}

TEST(ReduceIntoTest, SixteenBitFloatsComputeInFloat32) {
  const std::vector<uint16_t> a = {FloatToHalf(1.5f), FloatToHalf(-2.0f)};
  const std::vector<uint16_t> b = {FloatToHalf(3.0f), FloatToHalf(0.25f)};
  std::vector<uint16_t> p = Reduced(a, b, DataType::kFloat16, ReduceOp::kProduct);
  EXPECT_EQ(HalfToFloat(p[0]), 4.5f);
  EXPECT_EQ(HalfToFloat(p[1]), -0.5f);
  std::vector<uint16_t> m = Reduced(a, b, DataType::kFloat16, ReduceOp::kMax);
  EXPECT_EQ(HalfToFloat(m[0]), 3.0f);
  EXPECT_EQ(HalfToFloat(m[1]), 0.25f);
  const std::vector<uint16_t> ba = {FloatToBFloat16(-1.0f)}, bb = {FloatToBFloat16(2.0f)};
  EXPECT_EQ(BFloat16ToFloat(Reduced(ba, bb, DataType::kBFloat16, ReduceOp::kMin)[0]), -1.0f);
}

TEST(ReduceIntoTest, NanWinsMinAndMax) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    EXPECT_TRUE(std::isnan(Reduced<float>({nan}, {1.0f}, DataType::kFloat32, op)[0]));
    EXPECT_TRUE(std::isnan(Reduced<float>({1.0f}, {nan}, DataType::kFloat32, op)[0]));
  }
  EXPECT_STREQ(ReduceOpName(ReduceOp::kProduct), "product");
  EXPECT_TRUE(IsValidReduceOp(3));
  EXPECT_FALSE(IsValidReduceOp(4));
  EXPECT_FALSE(IsValidReduceOp(-1));
}

}  // namespace
}  // namespace ferry
