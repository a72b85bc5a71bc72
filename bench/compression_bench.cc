// Throughput of the compression codecs (common/compress/codec.h) on one core: every
// compressor's compression (PartitionCompressor::Compress, error feedback included where
// the spec asks) and decompression (Decompress), in raw bytes per second, beside memcpy of
// the same bytes measured in the same run. The cases are interleaved round after round
// (--repeats); each figure is the median with the min-max over the rounds.
//
//   ferry-compression-bench                    # 1 MiB partitions of float32, 7 rounds
//   ferry-compression-bench --bytes=4194304 --repeats=9

#include <gflags/gflags.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/compress/codec.h"

DEFINE_int64(bytes, 1 << 20, "partition size in bytes (float32)");
DEFINE_int32(repeats, 7, "interleaved rounds");
DEFINE_double(min_seconds, 0.05, "each measurement runs at least this long");
DEFINE_string(specs,
              "onebit,onebit+ef,randomk:0.01,randomk:0.01+ef,topk:0.01,topk:0.01+ef,dither:32,"
              "dither:32+ef,fp16,bf16",
              "the compressors, comma-separated");

namespace {

using Clock = std::chrono::steady_clock;

// Raw bytes per second of `fn` (one call handles `bytes`), run for at least min_seconds.
template <typename Fn>
double Rate(uint64_t bytes, Fn&& fn) {
  int calls = 0;
  const auto start = Clock::now();
  double seconds = 0;
  do {
    fn();
    ++calls;
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
  } while (seconds < FLAGS_min_seconds);
  return static_cast<double>(bytes) * calls / seconds;
}

struct Samples {
  std::string name;
  std::vector<double> compress, decompress;
};

std::string Figure(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  char text[96];
  std::snprintf(text, sizeof(text), "%6.2f (%.2f-%.2f)", v[v.size() / 2] / 1e9, v.front() / 1e9,
                v.back() / 1e9);
  return text;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("throughput of the compression codecs on one core");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  const uint64_t n = static_cast<uint64_t>(FLAGS_bytes) / 4;
  const uint64_t bytes = n * 4;
  std::vector<float> input(n), output(n);
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : input) x = normal(gen);

  std::vector<ferry::CompressionSpec> specs;
  Samples reference{"memcpy (reference)", {}, {}};
  std::vector<Samples> samples;
  size_t from = 0;
  const std::string list = FLAGS_specs + ",";
  for (size_t comma; (comma = list.find(',', from)) != std::string::npos; from = comma + 1) {
    ferry::CompressionSpec spec;
    const std::string text = list.substr(from, comma - from);
    if (text.empty()) continue;
    ferry::Status s = ferry::CompressionSpec::Parse(text, &spec);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 2;
    }
    specs.push_back(spec);
    samples.push_back({spec.ToString(), {}, {}});
  }
  for (int round = 0; round < FLAGS_repeats; ++round) {
    const double copy = Rate(bytes, [&] { std::memcpy(output.data(), input.data(), bytes); });
    reference.compress.push_back(copy);
    reference.decompress.push_back(copy);
    for (size_t i = 0; i < specs.size(); ++i) {
      ferry::PartitionCompressor c(specs[i], ferry::DataType::kFloat32, n, true);
      std::vector<uint8_t> wire(ferry::CompressedBytes(specs[i], n));
      uint64_t seed = 0;
      samples[i].compress.push_back(
          Rate(bytes, [&] { c.Compress(input.data(), ++seed, wire.data()); }));
      samples[i].decompress.push_back(Rate(bytes, [&] {
        ferry::Decompress(specs[i], ferry::DataType::kFloat32, wire.data(), wire.size(), n, seed,
                          output.data())
            .ThrowIfError();
      }));
    }
  }
  std::printf("%llu-byte partitions of float32, one core, %d interleaved rounds; GB/s of raw "
              "bytes, median (min-max); ratio: median / memcpy's median\n",
              static_cast<unsigned long long>(bytes), FLAGS_repeats);
  std::printf("%-22s %8s %24s %7s %24s %7s\n", "compressor", "wire", "compress GB/s", "ratio",
              "decompress GB/s", "ratio");
  const double copy = Median(reference.compress);
  std::printf("%-22s %8s %24s %7.2f %24s %7.2f\n", reference.name.c_str(), "1",
              Figure(reference.compress).c_str(), 1.0, Figure(reference.decompress).c_str(), 1.0);
  for (size_t i = 0; i < specs.size(); ++i) {
    char ratio[32];
    std::snprintf(ratio, sizeof(ratio), "1/%.0f",
                  static_cast<double>(bytes) / ferry::CompressedBytes(specs[i], n));
    std::printf("%-22s %8s %24s %7.2f %24s %7.2f\n", samples[i].name.c_str(), ratio,
                Figure(samples[i].compress).c_str(), Median(samples[i].compress) / copy,
                Figure(samples[i].decompress).c_str(), Median(samples[i].decompress) / copy);
  }
  return 0;
}
