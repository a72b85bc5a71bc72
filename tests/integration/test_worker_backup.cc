// ferry-test-worker's backup-workers mode (test_worker.cc dispatches; backup_workers_test.cc
// runs it), for a job with FERRY_BACKUP_WORKERS=1 (server/stragglers.h).
//
// "backup": --rounds rounds; rank --slow_rank sleeps --slow_ms before each. A round is, on
// every rank: an averaged float32 tensor (several partitions, on every server), a float32
// sum (average off) and an averaged int32 tensor, then a step boundary. Checks, exactly:
//   - the averaged float tensor is the average over the ranks contributors() names, as the
//     worker computes it (CopyScaled of their float sum by 1 / their number), and the slow
//     rank is not among them, also on the slow rank itself (its late push got the sum);
//   - the float sum and the int32 average hold every rank (those rounds wait for it);
//   - contributors() of the step names the same ranks as the tensor's.
// With `catch_up`, a rank the last round left out sits the next round of the averaged
// tensor out (PullAverageAsync, no contribution) and pushes again the round after.
// Prints "OK backup rounds=N left_out=K" (K: rounds whose average left the slow rank out).

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/reduce/reduce.h"
#include "worker/worker.h"

namespace ferry {
namespace {

constexpr int kExitWrong = 3;

float Value(int rank, int round, uint64_t i) {
  return static_cast<float>((i * 5 + static_cast<uint64_t>(rank) * 3 + round * 7) % 32) - 15.0f;
}

// The average of `ranks`' values, as DensePushPull::Deliver computes it.
std::vector<float> Expected(const std::vector<int>& ranks, int round, uint64_t n) {
  std::vector<float> sum(n, 0.0f);
  for (uint64_t i = 0; i < n; ++i) {
    for (int r : ranks) sum[i] += Value(r, round, i);
  }
  std::vector<float> out(n);
  CopyScaled(out.data(), sum.data(), 1.0 / static_cast<double>(ranks.size()), n,
             DataType::kFloat32);
  return out;
}

std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

// The sum and the int32 average of every rank's values in `round`; 0 if right.
int CheckEveryRank(Worker& w, int round, const std::vector<float>& sum,
                   const std::vector<int32_t>& ints) {
  std::vector<int32_t> total(ints.size(), 0);
  for (uint64_t i = 0; i < sum.size(); ++i) {
    float expected = 0;
    for (int r = 0; r < w.size(); ++r) expected += Value(r, round, i);
    if (sum[i] != expected) {
      std::fprintf(stderr, "WRONG sum round %d element %llu: %g, expected %g\n", round,
                   static_cast<unsigned long long>(i), sum[i], expected);
      return kExitWrong;
    }
  }
  for (uint64_t i = 0; i < ints.size(); ++i) {
    for (int r = 0; r < w.size(); ++r) total[i] += static_cast<int32_t>(Value(r, round, i));
  }
  std::vector<int32_t> average(ints.size());
  CopyScaled(average.data(), total.data(), 1.0 / w.size(), ints.size(), DataType::kInt32);
  if (ints != average) {
    std::fprintf(stderr, "WRONG int32 average round %d\n", round);
    return kExitWrong;
  }
  return 0;
}

}  // namespace

int RunBackup(Worker& w, int rounds, int slow_rank, int slow_ms, bool catch_up) {
  constexpr uint64_t kAverage = 1 << 16, kSmall = 1000;
  std::vector<float> avg(kAverage), sum(kSmall);
  std::vector<int32_t> ints(kSmall);
  int left_out = 0;
  bool sit_out = false;
  for (int round = 0; round < rounds; ++round) {
    if (w.rank() == slow_rank) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
    for (uint64_t i = 0; i < kAverage; ++i) avg[i] = Value(w.rank(), round, i);
    for (uint64_t i = 0; i < kSmall; ++i) {
      sum[i] = Value(w.rank(), round, i);
      ints[i] = static_cast<int32_t>(sum[i]);
    }
    Handle a = sit_out ? w.PullAverageAsync("backup/avg", avg.data(), DataType::kFloat32, kAverage)
                       : w.PushPullAsync("backup/avg", avg.data(), avg.data(), DataType::kFloat32,
                                         kAverage, true);
    Handle s = w.PushPullAsync("backup/sum", sum.data(), sum.data(), DataType::kFloat32, kSmall,
                               false);
    Handle n = w.PushPullAsync("backup/ints", ints.data(), ints.data(), DataType::kInt32, kSmall,
                               true);
    w.Wait(a);
    w.Wait(s);
    w.Wait(n);
    w.StepBoundary();
    const std::vector<int> contributors = w.Contributors("backup/avg");
    if (w.Contributors("") != contributors) {
      std::fprintf(stderr, "WRONG step contributors round %d: %s, the tensor's %s\n", round,
                   RankList(w.Contributors("")).c_str(), RankList(contributors).c_str());
      return kExitWrong;
    }
    bool slow_in = false, self_in = false;
    for (int r : contributors) {
      slow_in |= r == slow_rank;
      self_in |= r == w.rank();
    }
    left_out += slow_in ? 0 : 1;
    sit_out = catch_up && !self_in && !sit_out;  // never twice in a row
    if (avg != Expected(contributors, round, kAverage)) {
      std::fprintf(stderr, "WRONG average round %d over ranks %s\n", round,
                   RankList(contributors).c_str());
      return kExitWrong;
    }
    if (int code = CheckEveryRank(w, round, sum, ints)) return code;
  }
  std::printf("OK backup rounds=%d left_out=%d\n", rounds, left_out);
  return 0;
}

}  // namespace ferry
