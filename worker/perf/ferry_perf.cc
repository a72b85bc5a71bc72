// ferry-perf: push_pull of synthetic tensors across the cluster, like nccl-tests'
// all_reduce_perf. Runs as a worker (DMLC_* environment). For every size from -b to
// -e (factor -f) it runs -w warm-up and -n timed push_pulls, checks every result
// exactly, and prints bytes, time per push_pull, algorithm bandwidth (bytes / time,
// GB = 1e9 bytes) and the number of wrong elements. Exits 1 on any wrong value.
// Only the push_pull is timed: workers fill and check outside it and meet at a
// barrier before each timed push_pull (--barrier; with --nobarrier they meet once per size
// and then run back to back, as a training loop does, so the time leaves out the barrier's
// release skew but counts the other workers' fill and check of the previous iteration:
// microseconds at small sizes, where this is the latency to quote). Each push_pull is one iteration (StepBoundary), so
// FERRY_AUTOTUNE and FERRY_PARTITION_MS act across the iterations of one size.
//
// Values are small integers that depend on the worker's rank, the iteration and the
// element's position, so a wrong partition offset or a stale round shows as an error,
// and the sums are exact in every dtype (bfloat16 included, up to 32 workers).

#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/cluster/role_main.h"
#include "common/reduce/reduce.h"
#include "common/transport/buffer.h"
#include "common/util/clock.h"
#include "common/util/error.h"
#include "common/util/program_flags.h"
#include "worker/local/local_group.h"

DEFINE_string(b, "4K", "smallest tensor size in bytes (suffixes K, M, G: powers of 1024)");
DEFINE_string(e, "256M", "largest tensor size in bytes");
DEFINE_int32(f, 2, "size multiplication factor between steps");
DEFINE_int32(n, 20, "timed iterations per size");
DEFINE_int32(w, 5, "warm-up iterations per size");
DEFINE_string(dtype, "float32", "float32, float16, bfloat16, float64, int32 or int64");
DEFINE_string(format, "text", "text (a table) or csv (bytes,time_us,algbw_GBps,errors)");
DEFINE_bool(check, true, "check every result exactly");
DEFINE_bool(barrier, true,
            "meet at a barrier before every push_pull (false: once per size, then back to "
            "back; for latency at small sizes)");
DEFINE_int32(idle_seconds, 0,
             "instead of measuring: join the cluster, stay idle this long, leave (to measure "
             "the CPU an idle cluster uses)");

namespace ferry {
namespace {

uint64_t ParseSize(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  std::string suffix = end ? end : "";
  double mult = suffix.empty() ? 1
                : (suffix == "K" || suffix == "k") ? 1024.0
                : (suffix == "M" || suffix == "m") ? 1048576.0
                : (suffix == "G" || suffix == "g") ? 1073741824.0
                                                   : -1;
  FERRY_ENFORCE(end != text.c_str() && mult > 0 && v > 0, ErrorCode::kInvalidConfig,
                "invalid configuration: -", flag, "='", text,
                "': expected a size in bytes like 4096, 4K, 16M or 1G");
  return static_cast<uint64_t>(v * mult);
}

// The value worker `rank` contributes at element i of iteration `iter`: 1..8.
inline int64_t Pattern(int rank, uint64_t i, int iter) {
  return static_cast<int64_t>((i * 7 + static_cast<uint64_t>(rank) * 13 + iter * 3) % 8) + 1;
}

void Store(void* p, uint64_t i, DataType t, int64_t v) {
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(p)[i] = static_cast<double>(v); break;
    case DataType::kFloat16: static_cast<uint16_t*>(p)[i] = FloatToHalf(static_cast<float>(v)); break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToBFloat16(static_cast<float>(v));
      break;
    case DataType::kInt32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(p)[i] = v; break;
  }
}

double Load(const void* p, uint64_t i, DataType t) {
  switch (t) {
    case DataType::kFloat32: return static_cast<const float*>(p)[i];
    case DataType::kFloat64: return static_cast<const double*>(p)[i];
    case DataType::kFloat16: return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::kBFloat16: return BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::kInt32: return static_cast<const int32_t*>(p)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
  }
  return 0;
}

uint64_t CountErrors(const void* out, uint64_t count, DataType t, int workers, int iter) {
  uint64_t errors = 0;
  for (uint64_t i = 0; i < count; ++i) {
    int64_t expected = 0;
    for (int r = 0; r < workers; ++r) expected += Pattern(r, i, iter);
    if (Load(out, i, t) != static_cast<double>(expected)) ++errors;
  }
  return errors;
}

int RunPerf(const Config& config) {
  DataType dtype;
  FERRY_ENFORCE(ParseDataType(FLAGS_dtype, &dtype), ErrorCode::kInvalidConfig,
                "invalid configuration: --dtype='", FLAGS_dtype,
                "': expected float32, float16, bfloat16, float64, int32 or int64");
  FERRY_ENFORCE(FLAGS_format == "text" || FLAGS_format == "csv", ErrorCode::kInvalidConfig,
                "invalid configuration: --format='", FLAGS_format, "': expected text or csv");
  FERRY_ENFORCE(FLAGS_f >= 2 && FLAGS_n >= 1 && FLAGS_w >= 0, ErrorCode::kInvalidConfig,
                "invalid configuration: need -f >= 2, -n >= 1, -w >= 0");
  uint64_t min_bytes = ParseSize("b", FLAGS_b), max_bytes = ParseSize("e", FLAGS_e);
  size_t element = DataTypeSize(dtype);

  auto worker = LocalGroup::Create(config);  // with FERRY_LOCAL_SIZE > 1, a local group
  if (FLAGS_idle_seconds > 0) {
    std::this_thread::sleep_for(std::chrono::seconds(FLAGS_idle_seconds));
    worker->Shutdown();
    return 0;
  }
  const bool print = worker->rank() == 0;
  if (print && FLAGS_format == "text") {
    std::printf("# ferry-perf: %d workers, %d servers, dtype %s, %d warm-up + %d timed iterations\n",
                worker->size(), worker->num_servers(), DataTypeName(dtype).c_str(), FLAGS_w,
                FLAGS_n);
    std::printf("%14s %12s %12s %8s\n", "bytes", "time_us", "algbw_GB/s", "errors");
  } else if (print) {
    std::printf("bytes,time_us,algbw_GBps,errors\n");
  }
  std::fflush(stdout);

  uint64_t total_errors = 0;
  for (uint64_t bytes = min_bytes; bytes <= max_bytes; bytes *= FLAGS_f) {
    uint64_t count = std::max<uint64_t>(1, bytes / element);
    uint64_t size = count * element;
    std::string name = StrCat("perf/", size);
    worker->DeclareTensor(name, dtype, {static_cast<int64_t>(count)});
    Buffer input = Buffer::Allocate(size), output = Buffer::Allocate(size);
    int64_t timed_us = 0;
    uint64_t errors = 0;
    for (int iter = 0; iter < FLAGS_w + FLAGS_n; ++iter) {
      // Unchecked runs (CPU measurements) fill once: the fill is not Ferry's work.
      if (FLAGS_check || iter == 0) {
        for (uint64_t i = 0; i < count; ++i) Store(input.data(), i, dtype, Pattern(worker->rank(), i, iter));
      }
      // Each push_pull is an iteration (FERRY_AUTOTUNE, FERRY_PARTITION_MS); every worker
      // starts the timed push_pull together, so one worker's untimed fill and check never
      // overlap another's timed section.
      worker->StepBoundary();
      if (FLAGS_barrier || iter == 0) worker->Barrier();
      int64_t t0 = NowUs();
      worker->PushPull(name, input.data(), output.data(), dtype, count, false);
      int64_t t1 = NowUs();
      if (iter >= FLAGS_w) timed_us += t1 - t0;
      if (FLAGS_check) errors += CountErrors(output.data(), count, dtype, worker->size(), iter);
    }
    total_errors += errors;
    double us = static_cast<double>(timed_us) / FLAGS_n;
    double gbps = us > 0 ? static_cast<double>(size) / (us * 1e3) : 0;
    if (print) {
      if (FLAGS_format == "csv") {
        std::printf("%llu,%.1f,%.4f,%llu\n", static_cast<unsigned long long>(size), us, gbps,
                    static_cast<unsigned long long>(errors));
      } else {
        std::printf("%14llu %12.1f %12.4f %8llu\n", static_cast<unsigned long long>(size), us, gbps,
                    static_cast<unsigned long long>(errors));
      }
      std::fflush(stdout);
    }
    if (errors) LOG(ERROR) << errors << " wrong elements at " << size << " bytes";
  }
  const CounterValues s = worker->Counters();
  LOG(INFO) << "ferry-perf: " << CounterValue(s, "partitions_pushed") << " partitions pushed, "
            << CounterValue(s, "van.payloads_sent_zero_copy") << " payloads sent without copy, "
            << CounterValue(s, "van.bytes_sent") << " bytes sent, "
            << CounterValue(s, "van.bytes_received") << " bytes received";
  worker->Shutdown();
  if (total_errors) {
    std::fprintf(stderr, "ferry-perf: %llu wrong values\n",
                 static_cast<unsigned long long>(total_errors));
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  gflags::SetUsageMessage("push_pull bandwidth of a Ferry cluster (run as a worker)");
  ferry::ParseProgramFlags(&argc, &argv, __FILE__);
  const ferry::NodeRole role = ferry::NodeRole::kWorker;
  return ferry::RunRoleMain(argc, argv, &role, ferry::RunPerf);
}
