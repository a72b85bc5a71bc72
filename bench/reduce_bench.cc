// Memory-bandwidth benchmark of the summation kernels (common/reduce).
//
// For every data type: SumInto (dst += src) on buffers of 4 KiB .. 256 MiB (x4 steps),
// beside memcpy and a STREAM triad (a[i] = b[i] + s * c[i], doubles) in the same run,
// at 1 and 2 threads (each thread works on its own slice of the buffer size, so the
// total footprint is the same at every thread count). Throughput is reported as memory
// traffic per second:
//   SumInto: 2 reads + 1 write per element  -> 3 x bytes per call
//   memcpy:  1 read + 1 write               -> 2 x bytes
//   triad:   2 reads + 1 write              -> 3 x bytes
// At the end the ratios SumInto / triad at 64 MiB are printed per thread count.
//
// Extra flag (besides Google Benchmark's): --simd=portable|avx2|avx512 forces a
// kernel level (default: the best the CPU supports).
//   ferry-reduce-bench --benchmark_min_time=0.05
//   ferry-reduce-bench --benchmark_filter='64M|triad' --simd=avx2

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "common/reduce/reduce.h"

namespace {

using ferry::DataType;

constexpr int64_t kMinBytes = 4 << 10;
constexpr int64_t kMaxBytes = int64_t{256} << 20;
constexpr int64_t kRatioBytes = int64_t{64} << 20;

// A thread's slice of `total_bytes`, rounded down to whole `elem`-byte elements
// (at least one).
size_t SliceElems(int64_t total_bytes, size_t elem, int threads) {
  const size_t n = static_cast<size_t>(total_bytes) / elem / static_cast<size_t>(threads);
  return n > 0 ? n : 1;
}

std::unique_ptr<uint8_t[]> Alloc(size_t bytes) {
  std::unique_ptr<uint8_t[]> p(new uint8_t[bytes]);
  std::memset(p.get(), 0, bytes);  // fault the pages in before timing
  return p;
}

// Fills with ones of the type (no NaN, Inf or subnormal values that could slow the
// arithmetic down; repeated sums saturate at a finite value for the 16-bit types).
void FillOnes(uint8_t* p, size_t n, DataType t) {
  for (size_t i = 0; i < n; ++i) {
    switch (t) {
      case DataType::kFloat32: { const float v = 1; std::memcpy(p + 4 * i, &v, 4); break; }
      case DataType::kFloat64: { const double v = 1; std::memcpy(p + 8 * i, &v, 8); break; }
      case DataType::kFloat16: { const uint16_t v = 0x3C00; std::memcpy(p + 2 * i, &v, 2); break; }
      case DataType::kBFloat16: { const uint16_t v = 0x3F80; std::memcpy(p + 2 * i, &v, 2); break; }
      case DataType::kInt32: { const int32_t v = 1; std::memcpy(p + 4 * i, &v, 4); break; }
      case DataType::kInt64: { const int64_t v = 1; std::memcpy(p + 8 * i, &v, 8); break; }
    }
  }
}

void BM_SumInto(benchmark::State& state, DataType t) {
  const size_t elem = ferry::DataTypeSize(t);
  const size_t n = SliceElems(state.range(0), elem, state.threads());
  const size_t bytes = n * elem;
  auto dst = Alloc(bytes);
  auto src = Alloc(bytes);
  FillOnes(src.get(), n, t);
  for (auto _ : state) {
    ferry::SumInto(dst.get(), src.get(), n, t);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(3 * bytes) * state.iterations());
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = SliceElems(state.range(0), 1, state.threads());
  auto dst = Alloc(bytes);
  auto src = Alloc(bytes);
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(2 * bytes) * state.iterations());
}

void Triad(double* __restrict a, const double* __restrict b, const double* __restrict c,
           double s, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

void BM_Triad(benchmark::State& state) {
  const size_t n = SliceElems(state.range(0), sizeof(double), state.threads());
  std::vector<double> a(n, 0.0), b(n, 1.0), c(n, 2.0);
  for (auto _ : state) {
    Triad(a.data(), b.data(), c.data(), 3.0, n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(3 * n * sizeof(double)) * state.iterations());
}

void Configure(benchmark::internal::Benchmark* b) {
  b->RangeMultiplier(4)->Range(kMinBytes, kMaxBytes)->Threads(1)->Threads(2)->UseRealTime();
}

// Console output as usual, plus the bytes/s of each run kept for the ratio summary.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  explicit RatioReporter(bool color)
      : ConsoleReporter(color ? OO_ColorTabular : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration) continue;
      const auto it = r.counters.find("bytes_per_second");
      if (it == r.counters.end()) continue;
      rates_[Key(r.run_name.function_name, r.run_name.args, r.threads)] = it->second.value;
    }
    ConsoleReporter::ReportRuns(runs);
  }

  static std::string Key(const std::string& fn, const std::string& args, int64_t threads) {
    return fn + "/" + args + "/" + std::to_string(threads);
  }

  void PrintRatios() const {
    const std::string size = std::to_string(kRatioBytes);
    bool header = false;
    for (int64_t threads : {1, 2}) {
      const auto triad = rates_.find(Key("triad", size, threads));
      if (triad == rates_.end() || triad->second <= 0) continue;
      for (const char* type : {"float32", "float16", "bfloat16"}) {
        const auto sum = rates_.find(Key(std::string("SumInto/") + type, size, threads));
        if (sum == rates_.end()) continue;
        if (!header) {
          std::printf("\nSumInto / triad at %lld MiB (memory traffic, 1 GB = 1e9 bytes):\n",
                      static_cast<long long>(kRatioBytes >> 20));
          header = true;
        }
        std::printf("  threads=%lld %-8s %7.2f GB/s / triad %7.2f GB/s = %.2f\n",
                    static_cast<long long>(threads), type, sum->second / 1e9,
                    triad->second / 1e9, sum->second / triad->second);
      }
    }
    std::fflush(stdout);
  }

 private:
  std::map<std::string, double> rates_;
};

}  // namespace

// Colour as Google Benchmark's own console reporter would (--benchmark_color=
// true/false/auto; auto: when stdout is a terminal).
bool WantColor(int argc, char** argv) {
  std::string value = "auto";
  const char* kColor = "--benchmark_color=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], kColor, std::strlen(kColor)) == 0) {
      value = argv[i] + std::strlen(kColor);
    }
  }
  if (value == "true" || value == "yes" || value == "1" || value == "on") return true;
  if (value == "false" || value == "no" || value == "0" || value == "off") return false;
  return isatty(STDOUT_FILENO) != 0;
}

int main(int argc, char** argv) {
  const bool color = WantColor(argc, argv);
  // Our own flag, removed before Google Benchmark parses the rest.
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const char* kSimd = "--simd=";
    if (i > 0 && std::strncmp(argv[i], kSimd, std::strlen(kSimd)) == 0) {
      const std::string name = argv[i] + std::strlen(kSimd);
      bool ok = false;
      for (ferry::SimdLevel level :
           {ferry::SimdLevel::kPortable, ferry::SimdLevel::kAvx2, ferry::SimdLevel::kAvx512}) {
        if (name == ferry::SimdLevelName(level)) ok = ferry::SetSimdLevel(level);
      }
      if (!ok) {
        std::fprintf(stderr, "--simd=%s: unknown or unsupported by this CPU\n", name.c_str());
        return 2;
      }
      continue;
    }
    args.push_back(argv[i]);
  }
  int new_argc = static_cast<int>(args.size());
  args.push_back(nullptr);

  for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                     DataType::kFloat64, DataType::kInt32, DataType::kInt64}) {
    Configure(benchmark::RegisterBenchmark(("SumInto/" + ferry::DataTypeName(t)).c_str(),
                                           BM_SumInto, t));
  }
  Configure(benchmark::RegisterBenchmark("memcpy", BM_Memcpy));
  Configure(benchmark::RegisterBenchmark("triad", BM_Triad));

  benchmark::Initialize(&new_argc, args.data());
  if (benchmark::ReportUnrecognizedArguments(new_argc, args.data())) return 1;
  benchmark::AddCustomContext("ferry_simd_level", ferry::SimdLevelName(ferry::ActiveSimdLevel()));
  RatioReporter reporter(color);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios();
  benchmark::Shutdown();
  return 0;
}
