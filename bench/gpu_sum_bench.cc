// GPU summation benchmark (server/gpu), Google Benchmark; needs a CUDA GPU.
//
//   device/SumInto/<type>/<bytes>  dst += src on the GPU (SumIntoDevice): 2 reads + 1 write
//                                  per element -> 3 x bytes of memory traffic per call
//   device/memcpy/<bytes>          cudaMemcpyAsync device to device in the same run (1 read
//                                  + 1 write -> 2 x bytes): the memory's practical ceiling
//   link/h2d/<bytes>, link/d2h/<bytes>
//                                  cudaMemcpyAsync between pinned host memory and the GPU:
//                                  the host link's ceiling (bytes copied)
//   summer/<type>/<bytes>/<keys>/<streams>
//                                  GpuSummer end to end, as a server would use it: <keys>
//                                  keys of <bytes>, 4 pushes each from pageable host memory
//                                  (memcpy to pinned, copy to the GPU, add), Finish, sums
//                                  back in pinned memory; bytes = pushed bytes per second
//
// Device runs are timed with CUDA events (manual time); the end-to-end runs by the wall
// clock. A summary at the end gives SumInto / memcpy at 64 MiB per type, and the end-to-
// end rate beside the host-to-device link. 1 GB = 1e9 bytes.
//   ferry-gpu-sum-bench --benchmark_min_time=0.1
//   ferry-gpu-sum-bench --benchmark_filter='summer'

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/reduce/reduce.h"
#include "common/util/error.h"
#include "server/gpu/cuda_check.h"
#include "server/gpu/cuda_handles.h"
#include "server/gpu/gpu_device.h"
#include "server/gpu/gpu_summer.h"
#include "server/gpu/sum_kernels.h"
#include "server/sum_pool.h"

namespace {

using ferry::DataType;
namespace gpu = ferry::gpu;

constexpr int64_t kMinBytes = int64_t{1} << 20;
constexpr int64_t kMaxBytes = int64_t{256} << 20;
constexpr int64_t kRatioBytes = int64_t{64} << 20;
constexpr int kPushes = 4;
const DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                              DataType::kFloat64, DataType::kInt32,   DataType::kInt64};

// Host bytes of ones of the type (no NaN, Inf or subnormals that could change the speed).
std::vector<uint8_t> Ones(DataType t, size_t count) {
  const size_t size = ferry::DataTypeSize(t);
  std::vector<uint8_t> v(count * size);
  uint64_t one = 0;
  switch (t) {
    case DataType::kFloat32: { const float f = 1; std::memcpy(&one, &f, 4); break; }
    case DataType::kFloat64: { const double d = 1; std::memcpy(&one, &d, 8); break; }
    case DataType::kFloat16: one = 0x3C00; break;
    case DataType::kBFloat16: one = 0x3F80; break;
    case DataType::kInt32:
    case DataType::kInt64: one = 1; break;
  }
  for (size_t i = 0; i < count; ++i) std::memcpy(v.data() + i * size, &one, size);
  return v;
}

// An event that can be timed (gpu::NewEvent's cannot).
gpu::Event TimingEvent() {
  cudaEvent_t e = nullptr;
  FERRY_CUDA_CHECK(cudaEventCreate(&e));
  return gpu::Event(e);
}

// Times `work` (queued on `stream`) with CUDA events, once per iteration.
template <typename Work>
void TimeOnDevice(benchmark::State& state, cudaStream_t stream, int64_t bytes_per_call,
                  Work work) {
  const gpu::Event start = TimingEvent(), stop = TimingEvent();
  cudaEvent_t s = start.get(), e = stop.get();
  work();  // warm-up: first launch, page mapping
  FERRY_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (auto _ : state) {
    FERRY_CUDA_CHECK(cudaEventRecord(s, stream));
    work();
    FERRY_CUDA_CHECK(cudaEventRecord(e, stream));
    FERRY_CUDA_CHECK(cudaEventSynchronize(e));
    float ms = 0;
    FERRY_CUDA_CHECK(cudaEventElapsedTime(&ms, s, e));
    state.SetIterationTime(ms / 1e3);
  }
  state.SetBytesProcessed(bytes_per_call * state.iterations());
}

void BM_DeviceSumInto(benchmark::State& state, DataType t) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / ferry::DataTypeSize(t);
  gpu::DeviceMemory dst, src;
  dst.Reserve(bytes);
  src.Reserve(bytes);
  const std::vector<uint8_t> ones = Ones(t, count);
  FERRY_CUDA_CHECK(cudaMemcpy(src.get(), ones.data(), bytes, cudaMemcpyHostToDevice));
  FERRY_CUDA_CHECK(cudaMemcpy(dst.get(), ones.data(), bytes, cudaMemcpyHostToDevice));
  gpu::Stream stream = gpu::NewStream();
  TimeOnDevice(state, stream.get(), static_cast<int64_t>(3 * bytes), [&] {
    gpu::SumIntoDevice(dst.get(), src.get(), count, t, stream.get());
  });
}

void BM_DeviceMemcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  gpu::DeviceMemory dst, src;
  dst.Reserve(bytes);
  src.Reserve(bytes);
  FERRY_CUDA_CHECK(cudaMemset(src.get(), 0, bytes));
  gpu::Stream stream = gpu::NewStream();
  TimeOnDevice(state, stream.get(), static_cast<int64_t>(2 * bytes), [&] {
    FERRY_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice,
                                     stream.get()));
  });
}

void BM_Link(benchmark::State& state, bool to_device) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  gpu::DeviceMemory device;
  gpu::PinnedMemory host;
  device.Reserve(bytes);
  host.Reserve(bytes);
  std::memset(host.get(), 0, bytes);
  gpu::Stream stream = gpu::NewStream();
  TimeOnDevice(state, stream.get(), static_cast<int64_t>(bytes), [&] {
    FERRY_CUDA_CHECK(to_device ? cudaMemcpyAsync(device.get(), host.get(), bytes,
                                                 cudaMemcpyHostToDevice, stream.get())
                               : cudaMemcpyAsync(host.get(), device.get(), bytes,
                                                 cudaMemcpyDeviceToHost, stream.get()));
  });
}

// range(0) bytes per key, range(1) keys, range(2) streams, range(3) helper threads of the
// copies into pinned staging (0: one memcpy on the caller; N: a server's SumPool of N
// helpers, slices of at least 1 MiB); kPushes pushes per key.
void BM_Summer(benchmark::State& state, DataType t) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const int keys = static_cast<int>(state.range(1));
  ferry::GpuSummerOptions o;
  o.streams = static_cast<int>(state.range(2));
  ferry::SumPool pool(static_cast<int>(state.range(3)), 1 << 20);
  if (state.range(3) > 0) {
    o.copy = [&pool](void* dst, const void* src, size_t n) { pool.Copy(dst, src, n); };
  }
  auto summer = ferry::GpuSummer::Create(o);
  std::vector<std::vector<uint8_t>> pushes(kPushes, Ones(t, bytes / ferry::DataTypeSize(t)));
  std::vector<ferry::Buffer> sums(keys);
  const auto round = [&] {
    for (int w = 0; w < kPushes; ++w) {
      for (int k = 0; k < keys; ++k) summer->Add(k, pushes[w].data(), bytes, t);
    }
    for (int k = 0; k < keys; ++k) {
      summer->Finish(k, [&sums, k](ferry::Buffer s) { sums[k] = std::move(s); });
    }
    summer->Drain();
  };
  // Warm-up: allocations, pinning. The sums' pool reuses a block only once its Buffer is
  // let go, so drop the warm-up's sums here: otherwise the first timed round pins `keys`
  // new result blocks (cudaHostAlloc in Finish), and with 16 keys of >= 4 MiB Google
  // Benchmark times only that one round.
  round();
  for (auto& s : sums) s = ferry::Buffer();
  for (auto _ : state) {
    round();
    for (auto& s : sums) s = ferry::Buffer();  // as ZeroMQ would, once the replies are out
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * keys * kPushes * state.iterations());
}

// Console output as usual, plus each run's bytes/s for the summary.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      const auto it = r.counters.find("bytes_per_second");
      if (r.run_type == Run::RT_Iteration && it != r.counters.end()) {
        rates_[r.run_name.function_name + "/" + r.run_name.args] = it->second.value;
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }

  void PrintSummary() const {
    const std::string size = std::to_string(kRatioBytes);
    const double copy = Rate("device/memcpy/" + size);
    std::printf("\nSummary (1 GB = 1e9 bytes):\n");
    for (DataType t : kAllTypes) {
      const double sum = Rate("device/SumInto/" + ferry::DataTypeName(t) + "/" + size);
      if (sum > 0 && copy > 0) {
        std::printf("  SumInto %-8s %8.1f GB/s / device memcpy %8.1f GB/s = %.2f (64 MiB)\n",
                    ferry::DataTypeName(t).c_str(), sum / 1e9, copy / 1e9, sum / copy);
      }
    }
    const double h2d = Rate("link/h2d/" + std::to_string(4 << 20));
    for (const auto& [name, rate] : rates_) {
      if (name.rfind("summer/", 0) != 0 || h2d <= 0) continue;
      std::printf("  %-40s %7.1f GB/s pushed = %.2f x the pinned host-to-device copy (4 MiB)\n",
                  name.c_str(), rate / 1e9, rate / h2d);
    }
    std::fflush(stdout);
  }

 private:
  double Rate(const std::string& key) const {
    const auto it = rates_.find(key);
    return it == rates_.end() ? 0 : it->second;
  }
  std::map<std::string, double> rates_;
};

void Register() {
  for (DataType t : kAllTypes) {
    benchmark::RegisterBenchmark(("device/SumInto/" + ferry::DataTypeName(t)).c_str(),
                                 BM_DeviceSumInto, t)
        ->RangeMultiplier(4)->Range(kMinBytes, kMaxBytes)->UseManualTime();
  }
  benchmark::RegisterBenchmark("device/memcpy", BM_DeviceMemcpy)
      ->RangeMultiplier(4)->Range(kMinBytes, kMaxBytes)->UseManualTime();
  benchmark::RegisterBenchmark("link/h2d", BM_Link, true)
      ->RangeMultiplier(4)->Range(kMinBytes, 64 << 20)->UseManualTime();
  benchmark::RegisterBenchmark("link/d2h", BM_Link, false)
      ->RangeMultiplier(4)->Range(kMinBytes, 64 << 20)->UseManualTime();
  for (DataType t : {DataType::kFloat32, DataType::kFloat16}) {
    benchmark::RegisterBenchmark(("summer/" + ferry::DataTypeName(t)).c_str(), BM_Summer, t)
        ->Args({4 << 20, 1, 1, 0})    // one key: nothing to overlap with
        ->Args({4 << 20, 16, 1, 0})   // many keys, one stream
        ->Args({4 << 20, 16, 4, 0})   // many keys, four streams: copies overlap sums
        ->Args({1 << 20, 16, 4, 0})
        ->Args({16 << 20, 16, 4, 0})
        // The server's copies into staging: split over its sum pool (3 helpers: 4 engine
        // threads by default) and over 7.
        ->Args({4 << 20, 1, 1, 3})
        ->Args({4 << 20, 16, 4, 3})
        ->Args({4 << 20, 16, 4, 7})
        ->Args({16 << 20, 16, 4, 3})
        ->UseRealTime()
        ->MinTime(0.5)  // several rounds even when a round takes 50-400 ms
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (ferry::CudaDeviceCount(&why) == 0) {
    std::fprintf(stderr, "ferry-gpu-sum-bench: nothing to measure: %s\n", why.c_str());
    return 1;
  }
  try {
    std::printf("%s\n", ferry::CheckGpuAvailable(0).Describe().c_str());
  } catch (const ferry::FerryError& e) {
    std::fprintf(stderr, "ferry-gpu-sum-bench: %s\n", e.what());
    return 1;
  }
  Register();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintSummary();
  benchmark::Shutdown();
  return 0;
}
