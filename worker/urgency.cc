#include "worker/urgency.h"

namespace ferry {

void UrgencyThreshold::Observe(int priority, uint64_t n) {
  MutexLock lock(mu_);
  counts_[priority] += n;
  total_ += n;
  Recompute();
}

void UrgencyThreshold::Recompute() {
  const double want = kShare * static_cast<double>(total_);
  uint64_t seen = 0;
  for (auto it = counts_.rbegin(); it != counts_.rend(); ++it) {
    seen += it->second;
    if (static_cast<double>(seen) >= want) {
      threshold_.store(it->first, std::memory_order_relaxed);
      return;
    }
  }
}

}  // namespace ferry
