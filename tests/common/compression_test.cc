// The compression codecs (common/compress/) against scalar references: every dtype they
// take, odd lengths, error feedback's residual, momentum, determinism and corrupt input.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "common/compress/codec.h"
#include "common/compress/compression_spec.h"
#include "common/reduce/reduce.h"

namespace ferry {
namespace {

CompressionSpec Spec(const std::string& text) {
  CompressionSpec spec;
  Status s = CompressionSpec::Parse(text, &spec);
  EXPECT_TRUE(s.ok()) << s.message();
  return spec;
}

std::vector<float> Values(uint64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(gen);
  return v;
}

std::vector<uint8_t> Compress(const CompressionSpec& spec, const std::vector<float>& v,
                              uint64_t seed = 7) {
  std::vector<uint8_t> out(CompressedBytes(spec, v.size()));
  CompressFloats(spec, v.data(), v.size(), seed, out.data());
  return out;
}

std::vector<float> Decompress(const CompressionSpec& spec, const std::vector<uint8_t>& wire,
                              uint64_t n, uint64_t seed = 7) {
  std::vector<float> out(n);
  Status s = ::ferry::Decompress(spec, DataType::kFloat32, wire.data(), wire.size(), n, seed,
                                 out.data());
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

const uint64_t kLengths[] = {1, 7, 8, 9, 100, 1023, 4096};

TEST(CompressionSpecTest, ParsesEveryFormToItsCanonicalText) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "none"},          {" none ", "none"},
      {"fp16", "fp16"},      {"BF16", "bf16"},
      {"onebit+ef", "onebit+ef"},
      {"topk:0.01", "topk:0.01"},
      {"randomk:0.010+ef+momentum:0.90", "randomk:0.01+ef+momentum:0.9"},
      {"dither:32", "dither:32"},
      {"dither:8:linear+ef", "dither:8:linear+ef"},
      {"onebit+momentum:0.5", "onebit+momentum:0.5"},
  };
  for (const auto& [text, canonical] : cases) EXPECT_EQ(Spec(text).ToString(), canonical) << text;
}

TEST(CompressionSpecTest, RefusesMalformedTextNamingIt) {
  for (const char* text : {"zip", "topk", "topk:0", "topk:1.5", "topk:x", "randomk:-0.1",
                           "dither", "dither:0", "dither:128", "dither:2.5", "dither:8:log",
                           "onebit:2", "onebit+ef+ef", "onebit+momentum:1", "onebit+foo",
                           "onebit+momentum:0.9+ef", "none+ef", "topk:nan"}) {
    CompressionSpec spec;
    Status s = CompressionSpec::Parse(text, &spec);
    EXPECT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << text;
    EXPECT_NE(s.message().find(std::string("'") + text + "'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("accepted"), std::string::npos) << s.message();
  }
}

TEST(CompressionTest, WhatIsCompressed) {
  const CompressionSpec onebit = Spec("onebit"), fp16 = Spec("fp16"), none = Spec("none");
  EXPECT_TRUE(CompressesTo(onebit, DataType::kFloat32, 4096));
  EXPECT_TRUE(CompressesTo(onebit, DataType::kBFloat16, 4096));
  EXPECT_FALSE(CompressesTo(onebit, DataType::kInt32, 4096));
  EXPECT_FALSE(CompressesTo(onebit, DataType::kInt64, 4096));
  EXPECT_FALSE(CompressesTo(fp16, DataType::kFloat16, 4096));  // not smaller
  EXPECT_TRUE(CompressesTo(fp16, DataType::kFloat64, 4096));
  EXPECT_FALSE(CompressesTo(none, DataType::kFloat32, 4096));
  EXPECT_FALSE(CompressesTo(onebit, DataType::kFloat32, 4));  // 1 element: 5 bytes
}

TEST(CompressionTest, SixteenBitFloatsRoundToNearestEven) {
  for (uint64_t n : kLengths) {
    const std::vector<float> v = Values(n, 1);
    for (const char* name : {"fp16", "bf16"}) {
      const CompressionSpec spec = Spec(name);
      const std::vector<float> back = Decompress(spec, Compress(spec, v), n);
      for (uint64_t i = 0; i < n; ++i) {
        const float expected = spec.kind == CompressionSpec::Kind::kFp16
                                   ? HalfToFloat(FloatToHalf(v[i]))
                                   : BFloat16ToFloat(FloatToBFloat16(v[i]));
        ASSERT_EQ(back[i], expected) << name << " n=" << n << " i=" << i;
      }
    }
  }
}

TEST(CompressionTest, OnebitIsTheSignTimesTheMeanMagnitude) {
  const CompressionSpec spec = Spec("onebit");
  for (uint64_t n : kLengths) {
    std::vector<float> v = Values(n, 2);
    v[0] = -0.0f;  // negative zero reads back positive: only x < 0 is negative
    double mean = 0;
    for (float x : v) mean += std::fabs(x);
    mean /= static_cast<double>(n);
    const std::vector<uint8_t> wire = Compress(spec, v);
    ASSERT_EQ(wire.size(), 4 + (n + 7) / 8);
    const std::vector<float> back = Decompress(spec, wire, n);
    for (uint64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(std::fabs(back[i]), mean, 1e-5 * mean) << n;
      ASSERT_EQ(back[i] < 0, v[i] < 0) << "n=" << n << " i=" << i;
    }
  }
}

TEST(CompressionTest, TopkKeepsTheLargestMagnitudesLowerIndexFirstOnTies) {
  for (uint64_t n : kLengths) {
    std::vector<float> v = Values(n, 3);
    if (n > 8) v[3] = v[5] = -100.0f, v[4] = 100.0f;  // a tie of three
    const CompressionSpec spec = Spec("topk:0.25");
    const uint64_t k = std::max<uint64_t>(1, static_cast<uint64_t>(std::floor(0.25 * n)));
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return std::fabs(v[a]) > std::fabs(v[b]); });
    std::vector<float> expected(n, 0.0f);
    for (uint64_t j = 0; j < k; ++j) expected[order[j]] = v[order[j]];
    const std::vector<uint8_t> wire = Compress(spec, v);
    ASSERT_EQ(wire.size(), 8 * k);
    EXPECT_EQ(Decompress(spec, wire, n), expected) << n;
  }
}

TEST(CompressionTest, RandomkDrawsTheSameIndicesFromTheSameSeed) {
  const CompressionSpec spec = Spec("randomk:0.1");
  for (uint64_t n : kLengths) {
    const std::vector<float> a = Values(n, 4), b = Values(n, 5);
    const std::vector<float> da = Decompress(spec, Compress(spec, a, 11), n, 11);
    const std::vector<float> db = Decompress(spec, Compress(spec, b, 11), n, 11);
    uint64_t kept = 0;
    for (uint64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(da[i] == 0 || da[i] == a[i]);
      ASSERT_EQ(da[i] != 0, db[i] != 0) << "the two workers kept different indices";
      kept += da[i] != 0;
    }
    EXPECT_GE(kept, 1u);
    // The sum in compressed form: decompress, sum, compress with the seed = the values' sum.
    std::vector<float> sum(n);
    for (uint64_t i = 0; i < n; ++i) sum[i] = da[i] + db[i];
    const std::vector<uint8_t> ca = Compress(spec, a, 11), cb = Compress(spec, b, 11),
                               cs = Compress(spec, sum, 11);
    for (size_t j = 0; j < cs.size(); j += 4) {
      float x, y, s;
      std::memcpy(&x, &ca[j], 4), std::memcpy(&y, &cb[j], 4), std::memcpy(&s, &cs[j], 4);
      ASSERT_EQ(s, x + y) << "value " << j / 4;
    }
  }
  // Another seed draws other indices.
  const std::vector<float> v = Values(4096, 6);
  EXPECT_NE(Decompress(spec, Compress(spec, v, 1), 4096, 1),
            Decompress(spec, Compress(spec, v, 2), 4096, 2));
}

TEST(CompressionTest, DitherRoundsToTheLevelsWithoutBias) {
  for (const char* name : {"dither:4", "dither:16:linear"}) {
    const CompressionSpec spec = Spec(name);
    const uint64_t n = 9;
    const std::vector<float> v = {0.0f, 1.0f, -1.0f, 0.5f, -0.3f, 0.07f, 0.01f, -0.9f, 0.2f};
    std::vector<double> mean(n, 0.0);
    const int trials = 4000;
    for (int t = 0; t < trials; ++t) {
      const std::vector<float> back = Decompress(spec, Compress(spec, v, t), n, t);
      for (uint64_t i = 0; i < n; ++i) {
        // Every value is a level of the scale (1: the largest magnitude), of v's sign.
        const float a = std::fabs(back[i]);
        bool on_level = a == 0;
        for (int l = 1; l <= spec.levels; ++l) {
          const float level = spec.linear ? static_cast<float>(l) / spec.levels
                                          : std::ldexp(1.0f, l - spec.levels);
          on_level |= a == level;
        }
        ASSERT_TRUE(on_level) << name << " " << back[i];
        ASSERT_TRUE(back[i] == 0 || (back[i] < 0) == (v[i] < 0));
        mean[i] += back[i] / trials;
      }
    }
    for (uint64_t i = 0; i < n; ++i) EXPECT_NEAR(mean[i], v[i], 0.03) << name << " " << i;
    EXPECT_EQ(Decompress(spec, Compress(spec, v, 3), n, 3)[1], 1.0f);  // on a level: exact
  }
}

TEST(CompressionTest, EveryDtypeCompressesThroughFloat32) {
  const CompressionSpec spec = Spec("onebit");
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                         DataType::kFloat64}) {
    const uint64_t n = 37;
    const std::vector<float> v = Values(n, 8);
    std::vector<uint8_t> raw(n * DataTypeSize(dtype));
    for (uint64_t i = 0; i < n; ++i) {
      switch (dtype) {
        case DataType::kFloat64: reinterpret_cast<double*>(raw.data())[i] = v[i]; break;
        case DataType::kFloat16: reinterpret_cast<uint16_t*>(raw.data())[i] = FloatToHalf(v[i]); break;
        case DataType::kBFloat16:
          reinterpret_cast<uint16_t*>(raw.data())[i] = FloatToBFloat16(v[i]);
          break;
        default: reinterpret_cast<float*>(raw.data())[i] = v[i];
      }
    }
    PartitionCompressor compressor(spec, dtype, n, false);
    std::vector<uint8_t> wire(CompressedBytes(spec, n));
    compressor.Compress(raw.data(), 1, wire.data());
    std::vector<uint8_t> back(raw.size());
    ASSERT_TRUE(::ferry::Decompress(spec, dtype, wire.data(), wire.size(), n, 1, back.data()).ok());
    for (uint64_t i = 0; i < n; ++i) {
      double x = 0;
      switch (dtype) {
        case DataType::kFloat64: x = reinterpret_cast<double*>(back.data())[i]; break;
        case DataType::kFloat16: x = HalfToFloat(reinterpret_cast<uint16_t*>(back.data())[i]); break;
        case DataType::kBFloat16:
          x = BFloat16ToFloat(reinterpret_cast<uint16_t*>(back.data())[i]);
          break;
        default: x = reinterpret_cast<float*>(back.data())[i];
      }
      ASSERT_EQ(x < 0, v[i] < 0) << DataTypeName(dtype) << " " << i;
    }
  }
  EXPECT_THROW(PartitionCompressor(spec, DataType::kInt32, 4, false), FerryError);
}

TEST(CompressionTest, ErrorFeedbackCarriesTheResidualExactly) {
  const CompressionSpec spec = Spec("topk:0.1+ef");
  const uint64_t n = 101;
  PartitionCompressor compressor(spec, DataType::kFloat32, n, false);
  std::vector<float> residual(n, 0.0f), sent_total(n, 0.0), pushed_total(n, 0.0);
  for (int round = 0; round < 5; ++round) {
    const std::vector<float> g = Values(n, 20 + round);
    std::vector<uint8_t> wire(CompressedBytes(spec, n));
    compressor.Compress(g.data(), CompressionSeed(9, round), wire.data());
    std::vector<float> corrected(n);
    for (uint64_t i = 0; i < n; ++i) corrected[i] = g[i] + residual[i];
    EXPECT_EQ(wire, Compress(spec, corrected, CompressionSeed(9, round)));
    const std::vector<float> sent = Decompress(spec, wire, n);
    for (uint64_t i = 0; i < n; ++i) residual[i] = corrected[i] - sent[i];
    EXPECT_EQ(compressor.residual(), residual) << "round " << round;
  }
  compressor.Clear();
  EXPECT_EQ(compressor.residual(), std::vector<float>(n, 0.0f));
}

TEST(CompressionTest, NesterovMomentumBeforeCompression) {
  const CompressionSpec spec = Spec("bf16+momentum:0.5");
  const uint64_t n = 16;
  PartitionCompressor compressor(spec, DataType::kFloat32, n, true);
  std::vector<float> m(n, 0.0f);
  for (int round = 0; round < 3; ++round) {
    const std::vector<float> g = Values(n, 30 + round);
    std::vector<uint8_t> wire(CompressedBytes(spec, n));
    compressor.Compress(g.data(), 0, wire.data());
    std::vector<float> expected(n);
    for (uint64_t i = 0; i < n; ++i) {
      m[i] = 0.5f * m[i] + g[i];
      expected[i] = g[i] + 0.5f * m[i];
    }
    EXPECT_EQ(wire, Compress(spec, expected, 0)) << round;
  }
  // The server's side (momentum off) compresses the values as they are.
  PartitionCompressor server(spec, DataType::kFloat32, n, false);
  const std::vector<float> g = Values(n, 40);
  std::vector<uint8_t> wire(CompressedBytes(spec, n));
  server.Compress(g.data(), 0, wire.data());
  EXPECT_EQ(wire, Compress(spec, g, 0));
}

TEST(CompressionTest, NonFiniteGradientsCompressWithoutARefusal) {
  // What an encoder wrote always decodes (a server compressing an overflowing sum must not
  // fail): onebit carries the infinite scale, dithering sends zeros.
  std::vector<float> v = {1.0f, -3e38f, 3e38f, INFINITY, 2.0f, -1.0f, 0.5f, NAN, 7.0f};
  for (const char* name : {"onebit+ef", "dither:8+ef", "topk:0.5+ef", "randomk:0.5+ef",
                           "fp16+ef", "bf16+ef"}) {
    const CompressionSpec spec = Spec(name);
    PartitionCompressor c(spec, DataType::kFloat32, v.size(), false);
    std::vector<uint8_t> wire(CompressedBytes(spec, v.size()));
    for (int round = 0; round < 3; ++round) {
      EXPECT_NO_THROW(c.Compress(v.data(), round, wire.data())) << name;
      std::vector<float> out(v.size());
      EXPECT_TRUE(::ferry::Decompress(spec, DataType::kFloat32, wire.data(), wire.size(),
                                      v.size(), round, out.data())
                      .ok())
          << name;
    }
  }
}

TEST(CompressionTest, TheSameInputsGiveTheSameBytes) {
  for (const char* name : {"onebit+ef", "topk:0.01+ef", "randomk:0.01+ef", "dither:32+ef",
                           "fp16+ef+momentum:0.9"}) {
    const CompressionSpec spec = Spec(name);
    const std::vector<float> g = Values(5000, 50);
    std::vector<std::vector<uint8_t>> out;
    for (int copy = 0; copy < 2; ++copy) {
      PartitionCompressor c(spec, DataType::kFloat32, g.size(), true);
      std::vector<uint8_t> wire(CompressedBytes(spec, g.size()));
      for (int round = 0; round < 3; ++round) c.Compress(g.data(), round, wire.data());
      out.push_back(wire);
    }
    EXPECT_EQ(out[0], out[1]) << name;
  }
}

TEST(CompressionTest, CorruptInputIsRefusedWithTheReason) {
  const uint64_t n = 64;
  std::vector<float> out(n);
  auto refuse = [&](const char* name, std::vector<uint8_t> wire, const char* why) {
    Status s = ::ferry::Decompress(Spec(name), DataType::kFloat32, wire.data(), wire.size(), n,
                                   0, out.data());
    EXPECT_EQ(s.code(), ErrorCode::kBadMessage) << name;
    EXPECT_NE(s.message().find(why), std::string::npos) << s.message();
  };
  const std::vector<float> v = Values(n, 60);
  std::vector<uint8_t> onebit = Compress(Spec("onebit"), v);
  refuse("onebit", std::vector<uint8_t>(onebit.begin(), onebit.end() - 1), "compressed bytes");
  const float negative = -1.0f;
  std::memcpy(onebit.data(), &negative, 4);
  refuse("onebit", onebit, "scale -1 is negative");
  std::vector<uint8_t> topk = Compress(Spec("topk:0.1"), v);
  std::swap_ranges(topk.begin(), topk.begin() + 4, topk.begin() + 8);  // indices out of order
  refuse("topk:0.1", topk, "out of order");
  const uint32_t big = 1000;
  std::memcpy(topk.data(), &big, 4);
  refuse("topk:0.1", topk, "out of range");
  std::vector<uint8_t> dither = Compress(Spec("dither:4"), v);
  dither[10] = 0x05;
  refuse("dither:4", dither, "level 5");
  Status s = ::ferry::Decompress(Spec("onebit"), DataType::kInt32, onebit.data(), onebit.size(),
                                 n, 0, out.data());
  EXPECT_EQ(s.code(), ErrorCode::kBadMessage);
}

}  // namespace
}  // namespace ferry
