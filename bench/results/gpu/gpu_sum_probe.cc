// Probe for the 16-key / 4-stream slowdown of GpuSummer (not part of Ferry).
// For each case, times every round separately: round 1 right after a warm-up round whose
// sums are still held (as bench/gpu_sum_bench.cc does), then rounds 2..N; splits each round
// into Add loop / Finish calls (results_->Acquire: cudaHostAlloc when the pool is empty) /
// Drain. Mode "release" drops the warm-up's sums first. Also times cudaHostAlloc alone and
// a plain single-thread memcpy of the same bytes into one pinned block.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "server/gpu/gpu_summer.h"

using Clock = std::chrono::steady_clock;
static double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
static double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 10;
  constexpr int kPushes = 4;
  const ferry::DataType t = ferry::DataType::kFloat32;
  struct Case { size_t bytes; int keys, streams; };
  const Case cases[] = {{4 << 20, 1, 1}, {4 << 20, 16, 1}, {4 << 20, 16, 4},
                        {1 << 20, 16, 4}, {16 << 20, 16, 4}};
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  for (size_t bytes : {size_t{4} << 20, size_t{16} << 20}) {
    std::vector<void*> p(16);
    const auto a = Clock::now();
    for (void*& b : p)
      if (cudaHostAlloc(&b, bytes, cudaHostAllocPortable) != cudaSuccess) return 1;
    const auto b = Clock::now();
    for (void* q : p) cudaFreeHost(q);
    std::printf("cudaHostAlloc %2zu MiB x16: %.2f ms each\n", bytes >> 20, Ms(a, b) / 16);
  }
  for (const Case& c : cases) {
    std::vector<std::vector<uint8_t>> pushes(kPushes, std::vector<uint8_t>(c.bytes, 1));
    {  // reference: the same memcpys into one pinned block, one thread
      void* pin = nullptr;
      if (cudaHostAlloc(&pin, c.bytes, cudaHostAllocPortable) != cudaSuccess) return 1;
      std::memset(pin, 0, c.bytes);
      const auto a = Clock::now();
      for (int w = 0; w < kPushes; ++w)
        for (int k = 0; k < c.keys; ++k) std::memcpy(pin, pushes[w].data(), c.bytes);
      const auto b = Clock::now();
      cudaFreeHost(pin);
      std::printf("\n%zu MiB x %d keys x %d streams: plain memcpy of a round %.2f ms (%.1f GB/s)\n",
                  c.bytes >> 20, c.keys, c.streams, Ms(a, b),
                  c.bytes * c.keys * kPushes / Ms(a, b) / 1e6);
    }
    for (bool release : {false, true}) {
      ferry::GpuSummerOptions o;
      o.streams = c.streams;
      auto summer = ferry::GpuSummer::Create(o);
      std::vector<ferry::Buffer> sums(c.keys);
      double add = 0, fin = 0, drain = 0;
      const auto round = [&] {
        const auto t0 = Clock::now();
        for (int w = 0; w < kPushes; ++w)
          for (int k = 0; k < c.keys; ++k) summer->Add(k, pushes[w].data(), c.bytes, t);
        const auto t1 = Clock::now();
        for (int k = 0; k < c.keys; ++k)
          summer->Finish(k, [&sums, k](ferry::Buffer s) { sums[k] = std::move(s); });
        const auto t2 = Clock::now();
        summer->Drain();
        const auto t3 = Clock::now();
        add = Ms(t0, t1), fin = Ms(t1, t2), drain = Ms(t2, t3);
        return Ms(t0, t3);
      };
      round();  // warm-up
      if (release) for (auto& s : sums) s = ferry::Buffer();
      std::vector<double> rest, rest_add, rest_fin, rest_drain;
      for (int i = 0; i < iters; ++i) {
        const double ms = round();
        for (auto& s : sums) s = ferry::Buffer();
        const double gbs = c.bytes * c.keys * kPushes / ms / 1e6;
        if (i == 0) {
          std::printf("  %-22s round 1: %8.2f ms %5.1f GB/s (add %.2f finish %.2f drain %.2f)\n",
                      release ? "warm-up sums released" : "as the bench", ms, gbs, add, fin, drain);
        } else {
          rest.push_back(ms), rest_add.push_back(add), rest_fin.push_back(fin),
              rest_drain.push_back(drain);
        }
      }
      const double m = Median(rest);
      std::printf("  %-22s rounds 2-%d median: %8.2f ms %5.1f GB/s (add %.2f finish %.2f drain %.2f)\n",
                  "", iters, m, c.bytes * c.keys * kPushes / m / 1e6, Median(rest_add),
                  Median(rest_fin), Median(rest_drain));
    }
  }
  return 0;
}
