#include "sim/sim_worker_base.h"

#include <algorithm>

namespace ferry::sim {

SimWorkerBase::SimWorkerBase(SimJob& job, int rank, std::vector<SimServer*> servers, double jitter,
                             uint64_t seed)
    : job_(job),
      rank_(rank),
      sender_(job, rank, std::move(servers)),
      partition_bytes_(static_cast<uint64_t>(job.config.scheduling.InitialPartitionBytes())),
      jitter_(jitter),
      rng_(seed * 1000003 + static_cast<uint64_t>(rank)) {}

double SimWorkerBase::Compute(double ms, int iteration) {
  double us = ms * 1000.0;
  if (jitter_ > 0) {
    std::normal_distribution<double> noise(1.0, jitter_);
    us *= std::max(0.0, noise(rng_));
  }
  if (iteration >= 0 && iteration % job_.num_workers == rank_) us *= rotating_scale_;
  return us * compute_scale_;
}

void SimWorkerBase::SetPartitionBytes(uint64_t bytes) {
  partition_bytes_ = bytes;
  if (!sender_.core().window_on()) {
    sender_.core().SetCredit(
        static_cast<uint64_t>(job_.config.scheduling.CreditBytesFor(static_cast<int64_t>(bytes))));
  }
}

std::vector<double> SimWorkerBase::IterationMs() const {
  std::vector<double> ms;
  for (int it = warmup_; it < total_ && it + 1 < static_cast<int>(starts_.size()); ++it) {
    ms.push_back((starts_[it + 1] - starts_[it]) / 1000.0);
  }
  return ms;
}

}  // namespace ferry::sim
