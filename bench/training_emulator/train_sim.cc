#include "bench/training_emulator/train_sim.h"

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <thread>
#include <utility>

#include "common/util/error.h"

namespace ferry {
namespace {

// Values change every kBlock elements, so a sum landing at a wrong offset shows.
constexpr uint64_t kBlockShift = 10;

Clock::duration Ms(double ms) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
}

// A point of the emulated compute's clock on the worker's (NowUs: the same steady clock).
int64_t Us(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

double ElapsedMs(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

TrainSim::TrainSim(Worker& worker, Workload workload, bool check)
    : worker_(worker), workload_(std::move(workload)), check_(check) {
  size_t layers = workload_.layers.size();
  handles_.resize(layers);
  for (size_t l = 0; l < layers; ++l) {
    const Layer& layer = workload_.layers[l];
    names_.push_back(StrCat("train_sim/", l, "/", layer.name));
    gradients_.emplace_back(layer.bytes / sizeof(float));
    sums_.emplace_back(layer.bytes / sizeof(float));
  }
}

std::vector<double> TrainSim::Run(int warmup, int iterations) {
  for (size_t l = 0; l < workload_.layers.size(); ++l) {
    worker_.DeclareTensor(names_[l], DataType::kFloat32,
                          {static_cast<int64_t>(gradients_[l].size())});
    if (!check_) Fill(l, 0);  // real bytes, filled once: the fill is not training's work
  }
  worker_.Barrier();
  clock_ = Clock::now();
  const double unix_ms = std::chrono::duration<double, std::milli>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const Clock::time_point t0 = clock_;
  const int total = warmup + iterations;
  std::vector<Clock::time_point> starts;
  for (int it = 0; it <= total; ++it) {
    starts.push_back(Forward(it));
    // Forward waited for every sum of the last iteration: nothing is in flight, the
    // point where Ferry may switch partition size and credit (FERRY_AUTOTUNE).
    worker_.StepBoundary();
    if (it < total && LeftOut()) {
      SitOut();
    } else if (it < total) {
      Backward(it);
    }
  }
  std::vector<double> ms;
  start_unix_ms_.clear();
  for (int it = warmup; it < total; ++it) {
    ms.push_back(ElapsedMs(starts[it], starts[it + 1]));
    start_unix_ms_.push_back(unix_ms + ElapsedMs(t0, starts[it]));
  }
  return ms;
}

Clock::time_point TrainSim::Forward(int iteration) {
  Clock::time_point first;
  for (size_t l = 0; l < workload_.layers.size(); ++l) {
    Clock::time_point start = clock_;
    if (handles_[l]) {
      // The gate: this layer's parameters are updated once its sum is back.
      if (!worker_.Poll(*handles_[l])) {
        worker_.Wait(*handles_[l]);
        start = std::max(clock_, Clock::now());
      } else {
        worker_.Wait(*handles_[l]);  // finished: releases the handle, throws if it failed
      }
      handles_[l].reset();
      if (check_) Check(l, iteration - 1);
    }
    if (l == 0) first = start;
    // A sat-out step computes nothing: this forward pass is its second half (see SitOut).
    const double scale = runs_.sitting_out() ? 0.0 : ComputeScale(iteration);
    clock_ = start + Ms(workload_.layers[l].fwd_ms * scale);
    worker_.TraceCompute(names_[l], /*backward=*/false, Us(start), Us(clock_));
    std::this_thread::sleep_until(clock_);
  }
  return first;
}

void TrainSim::Backward(int iteration) {
  for (size_t l = workload_.layers.size(); l-- > 0;) {
    const Clock::time_point start = clock_;
    clock_ += Ms(workload_.layers[l].bwd_ms * ComputeScale(iteration));
    worker_.TraceCompute(names_[l], /*backward=*/true, Us(start), Us(clock_));
    if (check_) Fill(l, iteration);  // overlaps the emulated compute
    std::this_thread::sleep_until(clock_);
    handles_[l] = worker_.PushPullAsync(names_[l], gradients_[l].data(), sums_[l].data(),
                                        DataType::kFloat32, gradients_[l].size(), average_);
  }
}

double TrainSim::ComputeScale(int iteration) const {
  const bool straggles = iteration % worker_.size() == worker_.rank();
  return own_scale_ * (straggles ? rotating_scale_ : 1.0) *
         (iteration >= change_at_ ? change_scale_ : 1.0);
}

bool TrainSim::LeftOut() {
  if (!catch_up_) return false;
  // Late for every layer: a straggler. (Which worker is last for one layer is chance when
  // all are in step, and with b = 1 some worker is left out of every layer's sum.) Only a
  // worker left out of every sum sits out, so at most b workers sit a round out and some
  // worker always contributes to it.
  return runs_.SitOutNext([this] {
    for (const std::string& name : names_) {
      const std::vector<int> in = worker_.Contributors(name);
      if (std::find(in.begin(), in.end(), worker_.rank()) != in.end()) return false;
    }
    return true;
  });
}

void TrainSim::SitOut() {
  runs_.SatOut();
  for (size_t l = workload_.layers.size(); l-- > 0;) {
    handles_[l] = worker_.PullAverageAsync(names_[l], sums_[l].data(), DataType::kFloat32,
                                           sums_[l].size());
  }
}

float TrainSim::Value(int rank, size_t layer, int iteration, uint64_t block) const {
  // 1..16: sums over up to 2^20 workers stay exact in float32.
  uint64_t v =
      static_cast<uint64_t>(rank) + 3 * layer + 5 * static_cast<uint64_t>(iteration) + block;
  return static_cast<float>(1 + v % 16);
}

void TrainSim::Fill(size_t layer, int iteration) {
  std::vector<float>& g = gradients_[layer];
  for (uint64_t i = 0; i < g.size(); ++i)
    g[i] = Value(worker_.rank(), layer, iteration, i >> kBlockShift);
}

void TrainSim::Check(size_t layer, int iteration) {
  const std::vector<float>& s = sums_[layer];
  uint64_t wrong = 0;
  for (uint64_t begin = 0; begin < s.size(); begin += uint64_t{1} << kBlockShift) {
    uint64_t block = begin >> kBlockShift;
    float expected = 0;
    for (int r = 0; r < worker_.size(); ++r) expected += Value(r, layer, iteration, block);
    uint64_t end = std::min<uint64_t>(s.size(), begin + (uint64_t{1} << kBlockShift));
    for (uint64_t i = begin; i < end; ++i) wrong += s[i] != expected;
  }
  checked_ += s.size();
  wrong_ += wrong;
  if (wrong) {
    LOG(ERROR) << wrong << " wrong sums of " << s.size() << " in " << names_[layer]
               << ", iteration " << iteration;
  }
}

}  // namespace ferry
