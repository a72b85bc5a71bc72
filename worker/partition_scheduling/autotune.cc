#include "worker/partition_scheduling/autotune.h"

#include <glog/logging.h>

#include <algorithm>

#include "common/util/error.h"

namespace ferry {

std::string Describe(const SchedulingChoice& c) {
  return StrCat("partition ", c.partition_bytes, " bytes, ",
                c.window_gain > 0 ? StrCat("window gain ", c.window_gain)
                                  : StrCat("credit ", c.credit_bytes, " bytes"),
                c.frame_bytes > 0 ? StrCat(", frames ", c.frame_bytes, " bytes") : std::string());
}

int64_t PartitionBytesForRate(double bytes_per_s, double ms, int64_t floor, int64_t ceiling) {
  CHECK(floor > 0 && floor <= ceiling) << floor << " " << ceiling;
  if (!(bytes_per_s > 0)) return ceiling;
  const double bytes = bytes_per_s * ms / 1000.0;
  if (bytes >= static_cast<double>(ceiling)) return ceiling;
  int64_t p = floor;
  while (p * 2 <= ceiling && static_cast<double>(p * 2) <= bytes) p *= 2;
  return p;
}

Autotuner::Autotuner(std::vector<SchedulingChoice> grid, int steps)
    : grid_(std::move(grid)), steps_(steps), scores_(grid_.size(), 0.0) {
  CHECK(!grid_.empty());
  CHECK_GE(steps_, 2);
}

std::vector<SchedulingChoice> Autotuner::Grid(int64_t partition, int credit,
                                              std::vector<int64_t> partitions,
                                              std::vector<int64_t> credits, int64_t min_partition,
                                              int64_t max_partition) {
  if (partitions.empty()) partitions = {partition / 4, partition, partition * 4};
  if (credits.empty()) credits = {std::max(1, credit / 2), credit, credit * 2};
  std::vector<SchedulingChoice> grid;
  for (int64_t p : partitions) {
    p = std::clamp(p, min_partition, max_partition);
    for (int64_t c : credits) {
      SchedulingChoice choice{p, std::max<int64_t>(1, c) * p};
      if (std::find(grid.begin(), grid.end(), choice) == grid.end()) grid.push_back(choice);
    }
  }
  return grid;
}

std::vector<SchedulingChoice> Autotuner::Expand(const std::vector<SchedulingChoice>& grid,
                                                const std::vector<double>& gains,
                                                const std::vector<int64_t>& frames) {
  std::vector<SchedulingChoice> out;
  for (const SchedulingChoice& base : grid) {
    const std::vector<double> g = gains.empty() ? std::vector<double>{base.window_gain} : gains;
    const std::vector<int64_t> f =
        frames.empty() ? std::vector<int64_t>{base.frame_bytes} : frames;
    for (double gain : g) {
      for (int64_t frame : f) {
        SchedulingChoice choice = base;
        choice.window_gain = gain;
        // At most 65536 frames per partition (wire protocol 3), in whole 8-byte units.
        const int64_t least = (base.partition_bytes + 65535) / 65536;
        choice.frame_bytes = frame > 0 ? std::max(frame, (least + 7) / 8 * 8) : 0;
        if (std::find(out.begin(), out.end(), choice) == out.end()) out.push_back(choice);
      }
    }
  }
  return out;
}

Autotuner::Action Autotuner::OnStep(double ms) {
  if (done_ || deciding_) return {};
  if (step_in_current_ < 0) {  // the first boundary: measure the first candidate from here
    step_in_current_ = 0;
    return {Action::kSwitch, grid_[0]};
  }
  // Iteration 1 under a candidate is its warm-up; 2..steps are scored.
  if (++step_in_current_ >= 2) scores_[current_] += std::max(0.0, ms);
  if (step_in_current_ < steps_) return {};
  if (current_ + 1 < grid_.size()) {
    current_++;
    step_in_current_ = 0;
    return {Action::kSwitch, grid_[current_]};
  }
  deciding_ = true;
  return {Action::kDecide, {}};
}

size_t Autotuner::Decide(const std::vector<double>& summed) {
  CHECK(deciding_) << "Decide() before the search asked for it";
  CHECK_EQ(summed.size(), grid_.size());
  done_ = true;
  return static_cast<size_t>(std::min_element(summed.begin(), summed.end()) - summed.begin());
}

}  // namespace ferry
