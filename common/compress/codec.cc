#include "common/compress/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "common/reduce/reduce.h"
#include "common/util/strings.h"

namespace ferry {

namespace {

using Kind = CompressionSpec::Kind;

// Independent partial sums: a fixed association (so every machine gets the same bits)
// that the compiler can still keep in vector registers.
constexpr int kLanes = 16;

// splitmix64: the codecs' random numbers (random-k's indices, dithering's rounding).
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n).
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }
  // Uniform in [0, 1) with 24 bits.
  float Unit() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }

 private:
  uint64_t state_;
};

uint64_t Kept(const CompressionSpec& spec, uint64_t n) {
  if (n == 0) return 0;
  const auto k = static_cast<uint64_t>(std::floor(spec.ratio * static_cast<double>(n)));
  return std::clamp<uint64_t>(k, 1, n);
}

void PutFloat(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
float GetFloat(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
void PutU32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
uint32_t GetU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void ToFloats(const void* in, DataType dtype, uint64_t n, float* out) {
  switch (dtype) {
    case DataType::kFloat32:
      std::memcpy(out, in, n * 4);
      return;
    case DataType::kFloat64: {
      const double* d = static_cast<const double*>(in);
      for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<float>(d[i]);
      return;
    }
    case DataType::kFloat16: {
      const uint16_t* h = static_cast<const uint16_t*>(in);
      for (uint64_t i = 0; i < n; ++i) out[i] = HalfToFloat(h[i]);
      return;
    }
    case DataType::kBFloat16: {
      const uint16_t* h = static_cast<const uint16_t*>(in);
      for (uint64_t i = 0; i < n; ++i) out[i] = BFloat16ToFloat(h[i]);
      return;
    }
    default:
      throw FerryError(ErrorCode::kInternal,
                       StrCat("compression of ", DataTypeName(dtype), " values"));
  }
}

void FromFloats(const float* in, uint64_t n, DataType dtype, void* out) {
  switch (dtype) {
    case DataType::kFloat32:
      std::memcpy(out, in, n * 4);
      return;
    case DataType::kFloat64: {
      double* d = static_cast<double*>(out);
      for (uint64_t i = 0; i < n; ++i) d[i] = in[i];
      return;
    }
    case DataType::kFloat16: {
      uint16_t* h = static_cast<uint16_t*>(out);
      for (uint64_t i = 0; i < n; ++i) h[i] = FloatToHalf(in[i]);
      return;
    }
    case DataType::kBFloat16: {
      uint16_t* h = static_cast<uint16_t*>(out);
      for (uint64_t i = 0; i < n; ++i) h[i] = FloatToBFloat16(in[i]);
      return;
    }
    default:
      throw FerryError(ErrorCode::kInternal,
                       StrCat("decompression into ", DataTypeName(dtype), " values"));
  }
}

float MeanMagnitude(const float* v, uint64_t n) {
  float lanes[kLanes] = {};
  uint64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lanes[j] += std::fabs(v[i + j]);
  }
  for (; i < n; ++i) lanes[i % kLanes] += std::fabs(v[i]);
  float sum = 0;
  for (float lane : lanes) sum += lane;
  return n == 0 ? 0.0f : sum / static_cast<float>(n);
}

void CompressOnebit(const float* v, uint64_t n, uint8_t* out) {
  PutFloat(out, MeanMagnitude(v, n));
  uint8_t* bits = out + 4;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint8_t byte = 0;
    for (int j = 0; j < 8; ++j) byte |= static_cast<uint8_t>((v[i + j] < 0) << j);
    bits[i / 8] = byte;
  }
  if (i < n) {
    uint8_t byte = 0;
    for (int j = 0; i + j < n; ++j) byte |= static_cast<uint8_t>((v[i + j] < 0) << j);
    bits[i / 8] = byte;
  }
}

// Element i is the scale with bit i of `bits` as its sign bit: no branch, 8 at a time.
void DecodeOnebit(float scale, const uint8_t* bits, uint64_t n, float* out) {
  uint32_t magnitude;
  std::memcpy(&magnitude, &scale, 4);
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint32_t byte = bits[i / 8];
    uint32_t words[8];
    for (int j = 0; j < 8; ++j) words[j] = magnitude | (((byte >> j) & 1u) << 31);
    std::memcpy(out + i, words, sizeof(words));
  }
  for (; i < n; ++i) {
    const uint32_t word = magnitude | (((bits[i / 8] >> (i % 8)) & 1u) << 31);
    std::memcpy(out + i, &word, 4);
  }
}

// The magnitude top-k orders by: NaN above everything (a NaN gradient is sent, not hidden).
float Magnitude(float x) { return std::isnan(x) ? INFINITY : std::fabs(x); }

void CompressTopk(const CompressionSpec& spec, const float* v, uint64_t n, uint8_t* out) {
  const uint64_t k = Kept(spec, n);
  std::vector<uint32_t> index(n);
  std::iota(index.begin(), index.end(), 0u);
  auto larger = [v](uint32_t a, uint32_t b) {
    const float ma = Magnitude(v[a]), mb = Magnitude(v[b]);
    return ma > mb || (ma == mb && a < b);
  };
  if (k < n) std::nth_element(index.begin(), index.begin() + k, index.end(), larger);
  std::sort(index.begin(), index.begin() + k);
  for (uint64_t j = 0; j < k; ++j) {
    PutU32(out + 8 * j, index[j]);
    PutFloat(out + 8 * j + 4, v[index[j]]);
  }
}

void CompressRandomk(const CompressionSpec& spec, const float* v, uint64_t n, uint64_t seed,
                     uint8_t* out) {
  const uint64_t k = Kept(spec, n);
  Random random(seed);
  for (uint64_t j = 0; j < k; ++j) PutFloat(out + 4 * j, v[random.Below(n)]);
}

// Natural levels: level l > 0 is 2^(l - S); 0 is 0.
float NaturalLevel(int l, int levels) {
  return l == 0 ? 0.0f : std::ldexp(1.0f, l - levels);
}

float LevelValue(const CompressionSpec& spec, int l) {
  return spec.linear ? static_cast<float>(l) / static_cast<float>(spec.levels)
                     : NaturalLevel(l, spec.levels);
}

// The level of a in [0, 1], rounded up with the probability that keeps it unbiased.
int DitherLevel(const CompressionSpec& spec, float a, float u) {
  const int s = spec.levels;
  if (!(a > 0)) return 0;
  if (a >= 1) return s;
  if (spec.linear) {
    const float scaled = a * static_cast<float>(s);
    const int low = static_cast<int>(scaled);
    return low + (u < scaled - static_cast<float>(low) ? 1 : 0);
  }
  int exponent = 0;
  std::frexp(a, &exponent);  // a in [2^(e-1), 2^e)
  int low = s + exponent - 1;  // NaturalLevel(low) <= a
  if (low < 1) low = 0;        // below the smallest level: between 0 and level 1
  const float lo = NaturalLevel(low, s), hi = NaturalLevel(low + 1, s);
  return low + (u < (a - lo) / (hi - lo) ? 1 : 0);
}

void CompressDither(const CompressionSpec& spec, const float* v, uint64_t n, uint64_t seed,
                    uint8_t* out) {
  float scale = 0;
  for (uint64_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(v[i]));
  if (!std::isfinite(scale)) scale = 0;  // a NaN or infinite gradient: sent as zeros
  PutFloat(out, scale);
  Random random(seed);
  const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
  for (uint64_t i = 0; i < n; ++i) {
    const int level = DitherLevel(spec, std::fabs(v[i]) * inverse, random.Unit());
    out[4 + i] = static_cast<uint8_t>((v[i] < 0 ? 0x80 : 0) | level);
  }
}

Status DecodeFloats(const CompressionSpec& spec, const uint8_t* wire, uint64_t n, uint64_t seed,
                    float* out) {
  switch (spec.kind) {
    case Kind::kFp16:
    case Kind::kBf16: {
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, wire + 2 * i, 2);
        out[i] = spec.kind == Kind::kFp16 ? HalfToFloat(h) : BFloat16ToFloat(h);
      }
      return Status::Ok();
    }
    case Kind::kOnebit: {
      // Non-finite gradients give a non-finite mean magnitude (sent as it is, as a raw push
      // would carry them); only a negative one cannot come from an encoder.
      const float scale = GetFloat(wire);
      if (scale < 0) return BadMessageError(StrCat("onebit scale ", scale, " is negative"));
      DecodeOnebit(scale, wire + 4, n, out);
      return Status::Ok();
    }
    case Kind::kTopk: {
      std::fill(out, out + n, 0.0f);
      const uint64_t k = Kept(spec, n);
      for (uint64_t j = 0; j < k; ++j) {
        const uint32_t index = GetU32(wire + 8 * j);
        if (index >= n || (j > 0 && index <= GetU32(wire + 8 * (j - 1)))) {
          return BadMessageError(StrCat("top-k index ", index, " at position ", j,
                                        " is out of range (", n, " elements) or out of order"));
        }
        out[index] = GetFloat(wire + 8 * j + 4);
      }
      return Status::Ok();
    }
    case Kind::kRandomk: {
      std::fill(out, out + n, 0.0f);
      Random random(seed);
      const uint64_t k = Kept(spec, n);
      for (uint64_t j = 0; j < k; ++j) out[random.Below(n)] = GetFloat(wire + 4 * j);
      return Status::Ok();
    }
    case Kind::kDither: {
      const float scale = GetFloat(wire);
      if (!(scale >= 0) || !std::isfinite(scale)) {
        return BadMessageError(StrCat("dither scale ", scale, " is not a finite magnitude"));
      }
      for (uint64_t i = 0; i < n; ++i) {
        const uint8_t b = wire[4 + i];
        const int level = b & 0x7f;
        if (level > spec.levels) {
          return BadMessageError(StrCat("dither level ", level, " of element ", i,
                                        " is above the ", spec.levels, " levels"));
        }
        const float value = scale * LevelValue(spec, level);
        out[i] = b & 0x80 ? -value : value;
      }
      return Status::Ok();
    }
    case Kind::kNone:
      break;
  }
  return Status(ErrorCode::kInternal, "decompression without a compressor");
}

}  // namespace

uint64_t CompressedBytes(const CompressionSpec& spec, uint64_t n) {
  switch (spec.kind) {
    case Kind::kFp16:
    case Kind::kBf16: return 2 * n;
    case Kind::kOnebit: return 4 + (n + 7) / 8;
    case Kind::kTopk: return 8 * Kept(spec, n);
    case Kind::kRandomk: return 4 * Kept(spec, n);
    case Kind::kDither: return 4 + n;
    case Kind::kNone: break;
  }
  return 0;
}

bool CompressesTo(const CompressionSpec& spec, DataType dtype, uint64_t raw_bytes) {
  if (spec.none() || !IsFloatingPoint(dtype)) return false;
  const uint64_t n = raw_bytes / DataTypeSize(dtype);
  return n > 0 && CompressedBytes(spec, n) < raw_bytes;
}

uint64_t CompressionSeed(uint64_t key, uint32_t round, uint64_t salt) {
  Random mix(key * 0x9e3779b97f4a7c15ULL ^ (static_cast<uint64_t>(round) << 20) ^
             (salt * 0xd1b54a32d192ed03ULL));
  return mix.Next();
}

uint64_t PushSeed(const CompressionSpec& spec, uint64_t key, uint32_t round, int rank) {
  return spec.kind == Kind::kDither ? CompressionSeed(key, round, static_cast<uint64_t>(rank) + 1)
                                    : CompressionSeed(key, round);
}

void CompressFloats(const CompressionSpec& spec, const float* values, uint64_t n, uint64_t seed,
                    uint8_t* out) {
  switch (spec.kind) {
    case Kind::kFp16:
      for (uint64_t i = 0; i < n; ++i) {
        const uint16_t h = FloatToHalf(values[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case Kind::kBf16:
      for (uint64_t i = 0; i < n; ++i) {
        const uint16_t h = FloatToBFloat16(values[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case Kind::kOnebit: return CompressOnebit(values, n, out);
    case Kind::kTopk: return CompressTopk(spec, values, n, out);
    case Kind::kRandomk: return CompressRandomk(spec, values, n, seed, out);
    case Kind::kDither: return CompressDither(spec, values, n, seed, out);
    case Kind::kNone: break;
  }
  throw FerryError(ErrorCode::kInternal, "compression without a compressor");
}

Status Decompress(const CompressionSpec& spec, DataType dtype, const uint8_t* wire,
                  uint64_t wire_bytes, uint64_t n, uint64_t seed, void* out) {
  if (!IsFloatingPoint(dtype)) {
    return BadMessageError(StrCat("compressed ", DataTypeName(dtype),
                                  " values: only floating-point tensors are compressed"));
  }
  if (wire_bytes != CompressedBytes(spec, n)) {
    return BadMessageError(StrCat(wire_bytes, " compressed bytes where ", spec.ToString(),
                                  " of ", n, " elements takes ", CompressedBytes(spec, n)));
  }
  if (dtype == DataType::kFloat32) {
    return DecodeFloats(spec, wire, n, seed, static_cast<float*>(out));
  }
  std::vector<float> values(n);
  Status s = DecodeFloats(spec, wire, n, seed, values.data());
  if (s.ok()) FromFloats(values.data(), n, dtype, out);
  return s;
}

PartitionCompressor::PartitionCompressor(const CompressionSpec& spec, DataType dtype, uint64_t n,
                                         bool momentum)
    : spec_(spec), dtype_(dtype), n_(n), momentum_on_(momentum && spec.momentum > 0) {
  FERRY_ENFORCE(IsFloatingPoint(dtype), ErrorCode::kInvalidArgument, "compression (",
                spec.ToString(), ") of ", DataTypeName(dtype),
                " values: only floating-point tensors are compressed");
  if (spec_.error_feedback) residual_.assign(n, 0.0f);
  if (momentum_on_) momentum_.assign(n, 0.0f);
}

void PartitionCompressor::Clear() {
  std::fill(residual_.begin(), residual_.end(), 0.0f);
  std::fill(momentum_.begin(), momentum_.end(), 0.0f);
}

void PartitionCompressor::Compress(const void* input, uint64_t seed, uint8_t* out) {
  if (dtype_ == DataType::kFloat32 && residual_.empty() && momentum_.empty()) {
    CompressFloats(spec_, static_cast<const float*>(input), n_, seed, out);
    return;
  }
  work_.resize(n_);
  if (dtype_ == DataType::kFloat32 && momentum_.empty()) {  // one pass: input + residual
    const float* in = static_cast<const float*>(input);
    for (uint64_t i = 0; i < n_; ++i) work_[i] = in[i] + residual_[i];
  } else {
    ToFloats(input, dtype_, n_, work_.data());
  }
  if (!momentum_.empty()) {  // Nesterov: m = mu m + g; g' = g + mu m
    const float mu = static_cast<float>(spec_.momentum);
    for (uint64_t i = 0; i < n_; ++i) {
      momentum_[i] = mu * momentum_[i] + work_[i];
      work_[i] += mu * momentum_[i];
    }
  }
  if (!residual_.empty() && !(dtype_ == DataType::kFloat32 && momentum_.empty())) {
    for (uint64_t i = 0; i < n_; ++i) work_[i] += residual_[i];
  }
  CompressFloats(spec_, work_.data(), n_, seed, out);
  if (residual_.empty()) return;
  decoded_.resize(n_);
  Status s = DecodeFloats(spec_, out, n_, seed, decoded_.data());
  s.ThrowIfError();  // our own bytes: cannot fail
  for (uint64_t i = 0; i < n_; ++i) residual_[i] = work_[i] - decoded_[i];
}

}  // namespace ferry
