#include "worker/partition_scheduling/ready_profile.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstdlib>

#include "common/util/strings.h"

namespace ferry {
namespace {

int64_t Median(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

void ReadyProfile::OnReady(int priority, int64_t now_us) {
  if (step_us_ < 0) return;  // before the first boundary: not an iteration yet
  if (!seen_.emplace(priority, now_us).second) return;
  if (phase_ != Phase::kPredicting) {
    if (first_ready_us_ < 0) first_ready_us_ = now_us;
    return;
  }
  auto it = index_.find(priority);
  if (it == index_.end()) return;  // not profiled: no prediction to keep or break
  const Entry& e = entries_[it->second];
  if (first_ready_us_ < 0) first_ready_us_ = now_us - e.offset_us;
  profiled_seen_++;
  last_burst_ = std::max(last_burst_, e.burst);
  if (std::llabs(now_us - (first_ready_us_ + e.offset_us)) > Tolerance()) Drift();
}

void ReadyProfile::OnStep(int64_t now_us) {
  if (step_us_ >= 0) {
    EndIteration(now_us - step_us_);
  } else if (phase_left_ <= 0) {
    StartProfiling();  // nothing to skip
  }
  step_us_ = now_us;
  first_ready_us_ = -1;
  seen_.clear();
  profiled_seen_ = 0;
  last_burst_ = -1;
  iteration_drifted_ = false;
}

void ReadyProfile::EndIteration(int64_t period_us) {
  switch (phase_) {
    case Phase::kSkipping:
      if (--phase_left_ <= 0) StartProfiling();
      return;
    case Phase::kProfiling:
      if (!seen_.empty()) {
        std::unordered_map<int, int64_t> offsets;
        for (const auto& [priority, at] : seen_) offsets[priority] = at - first_ready_us_;
        observed_.push_back(std::move(offsets));
        periods_us_.push_back(period_us);
        if (--phase_left_ <= 0) BuildProfile();
      }
      return;
    case Phase::kPredicting: {
      if (profiled_seen_ == 0) return;  // no backward in this iteration
      predicted_iterations_++;
      const bool off = iteration_drifted_ || profiled_seen_ < entries_.size();
      const bool slow = period_us > options_.slowdown * static_cast<double>(reference_period_us_);
      strikes_ = off || slow ? strikes_ + 1 : 0;
      if (strikes_ < options_.strikes) return;
      drifts_++;
      // Only slower iterations right after profiling: the predictions did not help (the
      // workload did not change): wait longer before the next profile.
      backoff_ = !off && predicted_iterations_ <= options_.strikes ? std::min(backoff_ * 2, 64) : 1;
      LOG(INFO) << "scheduling profile: drift ("
                << (off ? "gradients off their predicted times" : "iterations slower than profiled")
                << "); profiling again over " << options_.iterations * backoff_ << " iterations";
      StartProfiling();
      return;
    }
  }
}

void ReadyProfile::StartProfiling() {
  phase_ = Phase::kProfiling;
  profile_iterations_ = std::max(1, options_.iterations) * backoff_;
  phase_left_ = profile_iterations_;
  observed_.clear();
  periods_us_.clear();
  entries_.clear();
  index_.clear();
  strikes_ = 0;
}

void ReadyProfile::BuildProfile() {
  // The priorities seen in every profiled iteration.
  std::vector<int> common;
  if (!observed_.empty()) {
    for (const auto& [priority, offset] : observed_.front()) {
      bool everywhere = true;
      for (const auto& o : observed_) everywhere = everywhere && o.count(priority);
      if (everywhere) common.push_back(priority);
    }
  }
  if (common.empty()) {  // nothing to predict from (no pushes, or none repeated)
    StartProfiling();
    return;
  }
  // Each iteration's offsets from its first common Ready; the median per priority.
  std::vector<std::vector<int64_t>> per(common.size());
  for (const auto& o : observed_) {
    int64_t base = o.at(common.front());
    for (int p : common) base = std::min(base, o.at(p));
    for (size_t i = 0; i < common.size(); ++i) per[i].push_back(o.at(common[i]) - base);
  }
  entries_.clear();
  for (size_t i = 0; i < common.size(); ++i) entries_.push_back({common[i], Median(per[i]), 0});
  std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
    return a.offset_us != b.offset_us ? a.offset_us < b.offset_us : a.priority < b.priority;
  });
  burst_offset_us_.clear();
  index_.clear();
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (i == 0 || e.offset_us - entries_[i - 1].offset_us > options_.burst_gap_us) {
      burst_offset_us_.push_back(e.offset_us);
    }
    e.burst = static_cast<int>(burst_offset_us_.size()) - 1;
    index_[e.priority] = i;
  }
  span_us_ = entries_.back().offset_us;
  std::vector<int64_t> periods;
  for (int64_t p : periods_us_) {
    if (p > 0) periods.push_back(p);
  }
  reference_period_us_ = periods.empty() ? 0 : Median(periods);
  phase_ = Phase::kPredicting;
  predicted_iterations_ = 0;
  strikes_ = 0;
  profiles_++;
  LOG(INFO) << "scheduling profile: " << Describe();
}

int64_t ReadyProfile::Tolerance() const {
  return std::max(options_.min_tolerance_us,
                  static_cast<int64_t>(options_.tolerance * static_cast<double>(span_us_)));
}

bool ReadyProfile::Predicting(int64_t now_us) const {
  if (phase_ != Phase::kPredicting || iteration_drifted_) return false;
  // A burst later than its prediction by more than the tolerance: the profile is off.
  const int64_t next = NextBurstUs();
  return next == kNever || now_us <= next + Tolerance();
}

int64_t ReadyProfile::EndsPredictingUs() const {
  if (phase_ != Phase::kPredicting || iteration_drifted_) return kNever;
  const int64_t next = NextBurstUs();
  return next == kNever ? kNever : next + Tolerance() + 1;
}

bool ReadyProfile::BackwardOver() const {
  return first_ready_us_ < 0 || profiled_seen_ >= entries_.size();
}

int64_t ReadyProfile::NextBurstUs() const {
  const size_t next = static_cast<size_t>(last_burst_ + 1);
  if (BackwardOver() || next >= burst_offset_us_.size()) return kNever;
  return first_ready_us_ + burst_offset_us_[next];
}

int64_t ReadyProfile::BackwardAfterUs(int priority) const {
  auto it = index_.find(priority);
  return it == index_.end() ? 0 : span_us_ - entries_[it->second].offset_us;
}

std::string ReadyProfile::Describe() const {
  switch (phase_) {
    case Phase::kSkipping:
      return "skipping the first iterations";
    case Phase::kProfiling:
      return StrCat("profiling (", profile_iterations_ - phase_left_ + 1, " of ",
                    profile_iterations_, ")");
    case Phase::kPredicting:
      return StrCat("predicting: ", entries_.size(), " priorities in ", burst_offset_us_.size(),
                    " bursts over ", span_us_ / 1000.0, " ms; iteration ",
                    reference_period_us_ / 1000.0, " ms");
  }
  return "";
}

}  // namespace ferry
