// ferry-split-sum-bench: where cutting a sum into slices for several threads starts to
// pay (server/sum_pool.h, FERRY_SERVER_SPLIT_BYTES).
//
// For partition sizes from 16 KiB to 16 MiB: the time of one SumInto (dst += src,
// float32) on the calling thread, beside the same sum through a SumPool with
// --threads - 1 helpers (split at every size). Buffers are rotated through a set
// larger than the last-level cache (--footprint_mb) so that every sum reads from
// memory, as a server's received frames do. Prints one row per size:
//
//   bytes  one_thread_us  split_us  speedup
//
//   ferry-split-sum-bench --threads=2 --repeats=7

#include <gflags/gflags.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/reduce/reduce.h"
#include "common/util/program_flags.h"
#include "server/sum_pool.h"

DEFINE_int32(threads, 2, "threads a split sum uses (the caller and threads - 1 helpers)");
DEFINE_int32(repeats, 7, "timed passes per size; the median is reported");
DEFINE_int64(footprint_mb, 128, "memory the buffers of one size rotate through");
DEFINE_int64(min_bytes, 16 << 10, "smallest size");
DEFINE_int64(max_bytes, 16 << 20, "largest size");

namespace {

using Clock = std::chrono::steady_clock;

// Median time of one sum, in microseconds, summing each pair of `bufs` in turn.
template <typename Sum>
double MedianMicros(std::vector<std::vector<float>>& bufs, size_t count, Sum sum) {
  std::vector<double> per_sum;
  const size_t pairs = bufs.size() / 2;
  for (int r = 0; r < FLAGS_repeats; ++r) {
    auto start = Clock::now();
    for (size_t p = 0; p < pairs; ++p) sum(bufs[2 * p].data(), bufs[2 * p + 1].data(), count);
    std::chrono::duration<double, std::micro> took = Clock::now() - start;
    per_sum.push_back(took.count() / static_cast<double>(pairs));
  }
  std::sort(per_sum.begin(), per_sum.end());
  return per_sum[per_sum.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  ferry::ParseProgramFlags(&argc, &argv, __FILE__);
  ferry::SumPool pool(FLAGS_threads - 1, 1);  // split every sum
  std::printf("simd %s, %d threads per split sum\n", ferry::SimdLevelName(ferry::ActiveSimdLevel()),
              FLAGS_threads);
  std::printf("%10s %14s %10s %8s\n", "bytes", "one_thread_us", "split_us", "speedup");
  for (int64_t bytes = FLAGS_min_bytes; bytes <= FLAGS_max_bytes; bytes *= 2) {
    const size_t count = static_cast<size_t>(bytes) / sizeof(float);
    const size_t n =
        std::max<size_t>(4, static_cast<size_t>((FLAGS_footprint_mb << 20) / bytes)) & ~size_t{1};
    std::vector<std::vector<float>> bufs(n, std::vector<float>(count, 1.0f));  // pages touched
    auto one = [](float* d, const float* s, size_t c) {
      ferry::SumInto(d, s, c, ferry::DataType::kFloat32);
    };
    auto split = [&pool](float* d, const float* s, size_t c) {
      pool.SumInto(d, s, c, ferry::DataType::kFloat32);
    };
    MedianMicros(bufs, count, one);  // warm up
    const double t1 = MedianMicros(bufs, count, one);
    const double t2 = MedianMicros(bufs, count, split);
    std::printf("%10lld %14.1f %10.1f %8.2f\n", static_cast<long long>(bytes), t1, t2, t1 / t2);
    std::fflush(stdout);
  }
  return 0;
}
