#include "worker/partition_scheduling/window_estimator.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/util/strings.h"

namespace ferry {

void WindowEstimator::LastSamples::Add(double v) {
  values_.push_back(v);
  sorted_.insert(std::upper_bound(sorted_.begin(), sorted_.end(), v), v);
  if (values_.size() > n_) {
    sorted_.erase(std::lower_bound(sorted_.begin(), sorted_.end(), values_.front()));
    values_.pop_front();
  }
}

double WindowEstimator::LastSamples::Max() const { return sorted_.empty() ? 0.0 : sorted_.back(); }

double WindowEstimator::LastSamples::Median() const {
  return sorted_.empty() ? 0.0 : sorted_[sorted_.size() / 2];
}

WindowEstimator::WindowEstimator(const WindowOptions& options)
    : options_(options),
      rates_(options.rate_samples),
      quanta_(options.rate_samples),
      extras_(options.rate_samples) {
  CHECK_GT(options_.min_bytes, 0u);
  CHECK_LE(options_.min_bytes, options_.max_bytes);
  CHECK_GE(options_.rate_samples, 1);
  set_gain(options_.gain);
}

void WindowEstimator::set_gain(double gain) {
  CHECK(gain > 0 && std::isfinite(gain)) << "window gain " << gain;
  options_.gain = gain;
}

WindowEstimator::Snapshot WindowEstimator::OnSend(int64_t now_us, uint64_t bytes, bool idle,
                                                  bool app_limited) {
  if (idle || delivered_us_ == 0) delivered_us_ = now_us;
  quanta_.Add(static_cast<double>(bytes));
  return Snapshot{now_us, delivered_, delivered_us_, app_limited};
}

void WindowEstimator::OnAck(const Snapshot& snap, uint64_t bytes, int64_t now_us) {
  delivered_ += bytes;
  delivered_us_ = now_us;
  samples_++;
  const int64_t rtt = std::max<int64_t>(1, now_us - snap.sent_us);
  while (!rtts_.empty() && rtts_.back().second >= rtt) rtts_.pop_back();
  rtts_.emplace_back(now_us, rtt);
  while (rtts_.front().first < now_us - options_.rtt_window_us) rtts_.pop_front();
  const int64_t interval = std::max<int64_t>(1, now_us - snap.delivered_us);
  AddRate(static_cast<double>(delivered_ - snap.delivered) / static_cast<double>(interval),
          snap.app_limited);
  NoteAggregation(bytes, now_us);
}

void WindowEstimator::NoteAggregation(uint64_t bytes, int64_t now_us) {
  double expected = rate_ * static_cast<double>(now_us - epoch_start_us_);
  if (epoch_start_us_ == 0 || epoch_acked_ <= expected) {  // acks at or below the rate
    epoch_start_us_ = now_us;
    epoch_acked_ = 0;
    expected = 0;
  }
  epoch_acked_ += static_cast<double>(bytes);
  extras_.Add(std::max(0.0, epoch_acked_ - expected));
}

void WindowEstimator::AddRate(double rate, bool app_limited) {
  if (app_limited && rate <= rate_) return;
  rates_.Add(rate);
  rate_ = rates_.Median();
}

double WindowEstimator::rate_bytes_per_us() const { return rate_; }

int64_t WindowEstimator::min_rtt_us() const { return rtts_.empty() ? 0 : rtts_.front().second; }

uint64_t WindowEstimator::window_bytes() const {
  if (samples_ < static_cast<uint64_t>(options_.min_samples) || rate_ <= 0) {
    return std::clamp(options_.initial_bytes, options_.min_bytes, options_.max_bytes);
  }
  const double bdp = options_.gain * rate_ * static_cast<double>(min_rtt_us()) +
                     quanta_.Max() + extras_.Max();
  const double clamped = std::clamp(bdp, static_cast<double>(options_.min_bytes),
                                    static_cast<double>(options_.max_bytes));
  return static_cast<uint64_t>(clamped);
}

std::string WindowEstimator::Describe() const {
  return StrCat("window ", window_bytes(), " bytes (rate ", rate_, " MB/s x min rtt ", min_rtt_us(),
                " us x gain ", options_.gain, " + ", static_cast<uint64_t>(quanta_.Max()),
                " bytes of a task + ", static_cast<uint64_t>(extras_.Max()), " bytes acked in bursts; ", samples_,
                " samples)");
}

}  // namespace ferry
