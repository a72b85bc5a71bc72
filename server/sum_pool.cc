#include "server/sum_pool.h"

#include <glog/logging.h>
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

namespace ferry {

// One split sum. Slices are claimed through `next`; `done` counts finished slices.
struct SumPool::Job {
  uint8_t* dst = nullptr;
  const uint8_t* a = nullptr;  // SumTo's first addend; null: SumInto (dst += src)
  const uint8_t* src = nullptr;
  size_t count = 0;        // elements in all
  size_t slice_count = 0;  // elements per slice (the last one takes the rest)
  size_t elem = 0;         // bytes per element
  DataType type = DataType::kFloat32;
  bool copy = false;       // Copy: dst = src, bytes (elem 1)
  int slices = 0;
  std::atomic<int> next{0};
  Mutex mu;    // guards done
  CondVar cv;  // signalled when the last slice is done
  int done GUARDED_BY(mu) = 0;
};

SumPool::SumPool(int helpers, int64_t split_bytes) : split_bytes_(split_bytes) {
  for (int i = 0; i < helpers; ++i) {
    threads_.emplace_back([this, i] {
      pthread_setname_np(pthread_self(), ("sum-" + std::to_string(i)).c_str());
      HelperLoop();
    });
  }
}

SumPool::~SumPool() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  for (auto& t : threads_) t.join();
}

void SumPool::SumInto(void* dst, const void* src, size_t count, DataType type) {
  Run(false, dst, nullptr, src, count, type);
}

void SumPool::SumTo(void* dst, const void* a, const void* src, size_t count, DataType type) {
  Run(false, dst, a, src, count, type);
}

void SumPool::Copy(void* dst, const void* src, size_t bytes) {
  Run(true, dst, nullptr, src, bytes, DataType::kFloat32);
}

void SumPool::RunRange(bool copy, void* dst, const void* a, const void* src, size_t count,
                       DataType type) {
  if (copy) {
    std::memcpy(dst, src, count);
  } else if (a) {
    ferry::SumTo(dst, a, src, count, type);
  } else {
    ferry::SumInto(dst, src, count, type);
  }
}

void SumPool::Run(bool copy, void* dst, const void* a, const void* src, size_t count,
                  DataType type) {
  const size_t elem = copy ? 1 : DataTypeSize(type);
  const size_t bytes = count * elem;
  if (threads_.empty() || split_bytes_ <= 0 || bytes < static_cast<size_t>(split_bytes_)) {
    RunRange(copy, dst, a, src, count, type);  // the caller alone, nothing to synchronise
    return;
  }
  // Slices of whole 64-byte blocks (a multiple of every element size), so every slice
  // but the last starts where a SIMD kernel would have started its block anyway.
  constexpr size_t kBlock = 64;
  const int slices = static_cast<int>(threads_.size()) + 1;
  size_t slice_bytes = (bytes / slices + kBlock - 1) / kBlock * kBlock;
  auto job = std::make_shared<Job>();
  job->dst = static_cast<uint8_t*>(dst);
  job->a = static_cast<const uint8_t*>(a);
  job->src = static_cast<const uint8_t*>(src);
  job->count = count;
  job->elem = elem;
  job->type = type;
  job->copy = copy;
  job->slice_count = slice_bytes / elem;
  job->slices = static_cast<int>((count + job->slice_count - 1) / job->slice_count);
  (copy ? split_copies_ : split_sums_)++;
  {
    MutexLock lock(mu_);
    jobs_.push_back(job);
  }
  cv_.NotifyAll();
  while (RunSlice(*job)) {
  }
  Retire(job);
  // Helpers finish what they claimed. A slice is a few milliseconds of arithmetic, so
  // a wait this long means a stuck thread; say so, but the slice still writes into
  // `dst`, so returning early is no option.
  MutexLock lock(job->mu);
  auto finished = [&job]() REQUIRES(job->mu) { return job->done == job->slices; };
  while (!job->cv.WaitFor(job->mu, std::chrono::seconds(10), finished)) {
    LOG(WARNING) << (copy ? "a copy of " : "a sum of ") << bytes << " bytes still waits for " << job->slices - job->done
                 << " slices after 10 s";
  }
}

bool SumPool::RunSlice(Job& job) {
  const int slice = job.next.fetch_add(1);
  if (slice >= job.slices) return false;
  const size_t first = static_cast<size_t>(slice) * job.slice_count;
  const size_t n = std::min(job.slice_count, job.count - first);
  const size_t at = first * job.elem;
  RunRange(job.copy, job.dst + at, job.a ? job.a + at : nullptr, job.src + at, n, job.type);
  MutexLock lock(job.mu);
  if (++job.done == job.slices) job.cv.NotifyAll();
  return true;
}

void SumPool::Retire(const std::shared_ptr<Job>& job) {
  MutexLock lock(mu_);
  auto it = std::find(jobs_.begin(), jobs_.end(), job);
  if (it != jobs_.end()) jobs_.erase(it);
}

void SumPool::HelperLoop() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      // Idle: nothing to wait for but work or the end.
      MutexLock lock(mu_);
      cv_.Wait(mu_, [this]() REQUIRES(mu_) { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = jobs_.front();
    }
    if (RunSlice(*job)) {
      helper_slices_++;
    } else {
      Retire(job);  // every slice claimed: let the next job through
    }
  }
}

}  // namespace ferry
