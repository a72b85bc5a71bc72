#pragma once

// SumPool: a large sum (or copy) cut into slices done by several threads at once.
//
// One pool per server, shared by every engine thread. A sum of at least `split_bytes`
// bytes is cut into up to 1 + helpers slices of whole 64-byte blocks; the caller posts
// the job, then claims and sums slices itself exactly as the helpers do, and waits only
// for slices a helper claimed. So a sum never waits for a busy pool: when every helper
// is busy with other engines' sums, the caller sums every slice itself. Sums below
// `split_bytes` (and every sum when helpers == 0 or split_bytes == 0) run on the
// caller's thread alone, with no synchronisation at all.
//
// Results are bitwise those of one SumInto over the whole buffer: the kernels work
// element by element (common/reduce/reduce.h), so where a slice starts changes nothing.
// Copy splits a memcpy the same way (a GPU server's copies of pushes into pinned staging:
// one thread copies pageable memory at a fifth of a host-to-device link).
//
// Thread-safe: any number of threads may call SumInto and SumTo at once.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "common/reduce/reduce.h"
#include "common/util/mutex.h"

namespace ferry {

class SumPool {
 public:
  // Starts `helpers` threads named "sum-N".
  SumPool(int helpers, int64_t split_bytes);
  ~SumPool();
  SumPool(const SumPool&) = delete;
  SumPool& operator=(const SumPool&) = delete;

  // dst[i] += src[i] for i in [0, count), as ferry::SumInto.
  void SumInto(void* dst, const void* src, size_t count, DataType type) EXCLUDES(mu_);
  // dst[i] = a[i] + src[i], as ferry::SumTo (dst must not overlap a or src).
  void SumTo(void* dst, const void* a, const void* src, size_t count, DataType type) EXCLUDES(mu_);
  // memcpy(dst, src, bytes), sliced as a sum of as many bytes would be.
  void Copy(void* dst, const void* src, size_t bytes) EXCLUDES(mu_);

  // Sums that were cut into slices, and slices summed by helpers (not the caller).
  uint64_t split_sums() const { return split_sums_; }
  uint64_t split_copies() const { return split_copies_; }
  uint64_t helper_slices() const { return helper_slices_; }

 private:
  struct Job;
  // dst = a + src (a null: dst += src), or with `copy` dst = src (count bytes), sliced
  // when large.
  void Run(bool copy, void* dst, const void* a, const void* src, size_t count, DataType type)
      EXCLUDES(mu_);
  // dst = a + src (a null: dst += src), or with `copy` dst = src (count bytes), here.
  static void RunRange(bool copy, void* dst, const void* a, const void* src, size_t count,
                       DataType type);
  void HelperLoop() EXCLUDES(mu_);
  // Claims the job's next slice and sums it; false when every slice was claimed.
  static bool RunSlice(Job& job);
  void Retire(const std::shared_ptr<Job>& job) EXCLUDES(mu_);  // no helper takes it from now on

  const int64_t split_bytes_;
  Mutex mu_;    // guards jobs_ and stop_
  CondVar cv_;  // signalled on a new job or stop
  // Jobs with slices perhaps left to claim.
  std::deque<std::shared_ptr<Job>> jobs_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> split_sums_{0}, split_copies_{0}, helper_slices_{0};
};

}  // namespace ferry
