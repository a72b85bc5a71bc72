#include "tests/server/fake_gpu_summer.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/reduce/reduce.h"
#include "common/util/error.h"

namespace ferry {
namespace testing {

void* FakeGpuSummer::PoisonedBlocks::Allocate(size_t bytes) {
  void* block = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  CHECK(block != nullptr) << "out of memory for a " << bytes << "-byte sum";
  return block;
}

void FakeGpuSummer::PoisonedBlocks::Free(void* block) { std::free(block); }

void FakeGpuSummer::PoisonedBlocks::Released(void* block, size_t bytes) {
  std::memset(block, 0xFF, bytes);  // whoever still reads these bytes reads NaNs
}

FakeGpuSummer::FakeGpuSummer(const GpuSummerOptions& options, const FakeGpuFaults& faults)
    : options_(options),
      faults_(faults),
      pool_(Pool::Create()),
      keys_(options.streams) {  // keys_ refuses a bad stream count
  lanes_.resize(static_cast<size_t>(options.streams));
  timer_ = std::thread([this] { TimerLoop(); });
}

FakeGpuSummer::~FakeGpuSummer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  timer_.join();  // after this no on_ready runs (as CudaSummer waits for its streams)
}

void FakeGpuSummer::CheckThread() {
  if (owner_ == std::thread::id()) owner_ = std::this_thread::get_id();
  CHECK(owner_ == std::this_thread::get_id())
      << "GpuSummer used from two threads (it belongs to one engine thread)";
}

void FakeGpuSummer::CheckFailed() const {
  if (!failure_.empty()) throw FerryError(ErrorCode::kInternal, failure_);
}

void FakeGpuSummer::Add(uint64_t key, const void* src, size_t bytes, DataType type) {
  CheckThread();
  CheckFailed();
  if (faults_.fail_after_adds > 0 && ++adds_ >= static_cast<uint64_t>(faults_.fail_after_adds)) {
    failure_ = StrCat(
        "cudaMemcpyAsync(...) failed: cudaErrorLaunchFailure (injected by "
        "FakeGpuSummer after ",
        adds_, " adds)");
    CheckFailed();
  }
  Keys::Key& k =
      keys_.ForAdd(key, bytes, type, [](Buffer& sum, size_t n) { sum = Buffer::Allocate(n); });
  if (bytes > 0) {
    // As CudaSummer: the push goes through staging, by options.copy when given (the
    // server's: split over its sum pool).
    staging_.resize(bytes);
    if (options_.copy) {
      options_.copy(staging_.data(), src, bytes);
    } else {
      std::memcpy(staging_.data(), src, bytes);
    }
    if (k.open) {
      SumInto(k.accumulator.data(), staging_.data(), bytes / DataTypeSize(type), type);
    } else {
      std::memcpy(k.accumulator.data(), staging_.data(), bytes);
    }
  }
  k.open = true;
}

void FakeGpuSummer::Finish(uint64_t key, Done done) {
  CheckThread();
  CheckFailed();
  Keys::Key& k = keys_.ForFinish(key);
  PendingSum p;
  p.sum = pool_->Acquire(k.bytes);
  if (k.bytes > 0) std::memcpy(p.sum.data(), k.accumulator.data(), k.bytes);
  ++finishes_;
  const bool slow = faults_.slow_every > 0 && finishes_ % faults_.slow_every == 0;
  const auto delay =
      slow
          ? std::chrono::microseconds(int64_t{faults_.slow_ms} * 1000)
          : std::chrono::microseconds(faults_.max_delay_us > 0
                                          ? rng_() % static_cast<uint32_t>(faults_.max_delay_us + 1)
                                          : 0);
  p.due = Clock::now() + delay;
  p.done = std::move(done);
  k.open = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::deque<PendingSum>& lane = lanes_[k.lane];
    // A stream completes in order: a sum is never due before the one queued ahead of it.
    if (!lane.empty()) p.due = std::max(p.due, lane.back().due);
    lane.push_back(std::move(p));
    ++pending_;
  }
  cv_.notify_all();
}

void FakeGpuSummer::Reset(uint64_t key) {
  CheckThread();
  keys_.Reset(key);
}

void FakeGpuSummer::Forget(uint64_t key) {
  CheckThread();
  keys_.Forget(key);  // Finish copied the sum out at once: nothing queued uses it
}

bool FakeGpuSummer::HasOpenRound(uint64_t key) const { return keys_.HasOpenRound(key); }

size_t FakeGpuSummer::RunCompletions() {
  CheckThread();
  CheckFailed();
  std::vector<PendingSum> due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point now = Clock::now();
    for (auto& lane : lanes_) {
      while (!lane.empty() && lane.front().due <= now) {
        due.push_back(std::move(lane.front()));
        lane.pop_front();
        --pending_;
      }
    }
  }
  // Without the lock: `done` may call Finish.
  for (PendingSum& p : due) {
    if (p.done) p.done(std::move(p.sum));
  }
  return due.size();
}

void FakeGpuSummer::Drain() {
  const Clock::time_point deadline = Clock::now() + options_.wait_timeout;
  while (pending() > 0) {
    if (RunCompletions() > 0) continue;
    FERRY_ENFORCE(Clock::now() < deadline, ErrorCode::kTimeout,
                  "the GPU did not finish copying a sum back before the deadline");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

size_t FakeGpuSummer::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

size_t FakeGpuSummer::blocks_allocated() const { return pool_->allocated(); }

void FakeGpuSummer::TimerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    // The earliest due time among the sums on_ready has not run for yet.
    Clock::time_point next = Clock::time_point::max();
    for (const auto& lane : lanes_) {
      for (const PendingSum& p : lane) {
        if (!p.notified) next = std::min(next, p.due);
      }
    }
    if (next == Clock::time_point::max()) {
      cv_.wait(lock);
      continue;
    }
    const Clock::time_point now = Clock::now();
    if (now < next) {
      cv_.wait_until(lock, next);
      continue;  // woken early (a new sum, stop) or on time: look again
    }
    for (auto& lane : lanes_) {
      for (PendingSum& p : lane) {
        if (p.due <= now) p.notified = true;  // RunCompletions from now on finds it due
      }
    }
    if (options_.on_ready) {
      lock.unlock();  // on_ready takes the engine's lock; never hold ours meanwhile
      options_.on_ready();
      lock.lock();
    }
  }
}

}  // namespace testing
}  // namespace ferry
