#include "tests/server/fake_gpu_summer.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/reduce/reduce.h"
#include "common/util/error.h"

namespace ferry {
namespace testing {

// Blocks by exact size, reused as soon as the last holder lets go, poisoned then.
// Thread-safe (ZeroMQ's IO thread releases blocks). Lives as long as any block it
// handed out (each Buffer's owner holds it).
class FakeGpuSummer::Pool : public std::enable_shared_from_this<Pool> {
 public:
  ~Pool() {
    for (auto& [bytes, blocks] : free_) {
      for (void* b : blocks) std::free(b);
    }
  }
  Buffer Acquire(size_t bytes) {
    if (bytes == 0) return Buffer();
    void* block = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        block = it->second.back();
        it->second.pop_back();
      } else {
        ++allocated_;
      }
    }
    if (block == nullptr) block = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    CHECK(block != nullptr) << "out of memory for a " << bytes << "-byte sum";
    std::shared_ptr<Pool> self = shared_from_this();
    return Buffer(block, bytes, std::shared_ptr<void>(block, [self, bytes](void* b) {
                    self->Release(b, bytes);
                  }));
  }
  size_t allocated() const {
    std::lock_guard<std::mutex> lock(mu_);
    return allocated_;
  }

 private:
  void Release(void* block, size_t bytes) {
    std::memset(block, 0xFF, bytes);  // whoever still reads these bytes reads NaNs
    std::lock_guard<std::mutex> lock(mu_);
    free_[bytes].push_back(block);
  }

  mutable std::mutex mu_;  // guards free_ and allocated_
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t allocated_ = 0;
};

FakeGpuSummer::FakeGpuSummer(const GpuSummerOptions& options, const FakeGpuFaults& faults)
    : options_(options), faults_(faults), pool_(std::make_shared<Pool>()) {
  FERRY_ENFORCE(options.streams >= 1 && options.streams <= 64, ErrorCode::kInvalidArgument,
                "GpuSummer: streams must be 1..64, got ", options.streams);
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
  FERRY_ENFORCE(IsValidDataType(static_cast<int32_t>(type)), ErrorCode::kInvalidArgument,
                "GpuSummer: key ", key, ": invalid data type ", static_cast<int32_t>(type));
  FERRY_ENFORCE(bytes % DataTypeSize(type) == 0, ErrorCode::kInvalidArgument, "GpuSummer: key ",
                key, ": ", bytes, " bytes is not a whole number of ", DataTypeName(type),
                " elements");
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    KeySum k;
    k.lane = next_lane_;
    next_lane_ = (next_lane_ + 1) % lanes_.size();
    k.bytes = bytes;
    k.type = type;
    k.accumulator = Buffer::Allocate(bytes);
    it = keys_.emplace(key, std::move(k)).first;
  }
  KeySum& k = it->second;
  FERRY_ENFORCE(k.bytes == bytes && k.type == type, ErrorCode::kInvalidArgument, "GpuSummer: key ",
                key, " holds ", k.bytes, " bytes of ", DataTypeName(k.type), "; Add got ", bytes,
                " bytes of ", DataTypeName(type));
  if (bytes > 0) {
    if (k.open) {
      SumInto(k.accumulator.data(), src, bytes / DataTypeSize(type), type);
    } else {
      std::memcpy(k.accumulator.data(), src, bytes);
    }
  }
  k.open = true;
}

void FakeGpuSummer::Finish(uint64_t key, Done done) {
  CheckThread();
  CheckFailed();
  auto it = keys_.find(key);
  FERRY_ENFORCE(it != keys_.end() && it->second.open, ErrorCode::kInvalidArgument,
                "GpuSummer: Finish of key ", key, ", which has no open round");
  KeySum& k = it->second;
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
  auto it = keys_.find(key);
  if (it != keys_.end()) it->second.open = false;
}

bool FakeGpuSummer::HasOpenRound(uint64_t key) const {
  auto it = keys_.find(key);
  return it != keys_.end() && it->second.open;
}

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
