// CudaSummer: the CUDA implementation of GpuSummer (the contract and the ordering
// invariants are in gpu_summer.h; this file keeps to them).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <vector>

#include "common/util/status.h"
#include "server/gpu/cuda_check.h"
#include "server/gpu/cuda_handles.h"
#include "server/gpu/gpu_keys.h"
#include "server/gpu/gpu_summer.h"
#include "server/gpu/pinned_pool.h"
#include "server/gpu/sum_kernels.h"

namespace ferry {
namespace gpu {
namespace {

using Clock = std::chrono::steady_clock;

// A pinned block the host fills and a stream copies to the GPU. Free for the host
// once `copied` (recorded behind the copy) has completed; an event never recorded
// counts as completed.
struct StagingBlock {
  PinnedMemory memory;
  Event copied;
};

// A sum on its way back: `event` completes when the copy into `sum` is done.
struct PendingSum {
  Event event;
  Buffer sum;
  GpuSummer::Done done;
};

// One CUDA stream and what only the work queued on it uses.
struct Lane {
  Stream stream;
  // Only with on_ready: waits for each sum's event, then runs Notify, so the host
  // function never holds up `stream` itself.
  Stream notify;
  DeviceMemory scratch;  // receives non-first pushes; reused in stream order
  std::array<StagingBlock, 2> staging;
  size_t next_staging = 0;
  std::deque<PendingSum> pending;  // in Finish order = stream order
};

// A key's device-side state: its sum builds up in device memory.
using Keys = GpuKeys<DeviceMemory>;
using KeySum = Keys::Key;

// Makes `device` current on the calling thread (a thread-local setting in CUDA, and
// the summer may be used from a thread that has never set it).
void UseDevice(int device) { FERRY_CUDA_CHECK(cudaSetDevice(device)); }

class CudaSummer : public GpuSummer {
 public:
  explicit CudaSummer(const GpuSummerOptions& options);
  ~CudaSummer() override;

  void Add(uint64_t key, const void* src, size_t bytes, DataType type) override;
  void Finish(uint64_t key, Done done) override;
  void Reset(uint64_t key) override;
  void Forget(uint64_t key) override;
  bool HasOpenRound(uint64_t key) const override;
  size_t RunCompletions() override;
  void Drain() override;
  size_t pending() const override { return pending_; }

 private:
  void* ReserveScratch(Lane& lane, size_t bytes);
  void CopyIn(Lane& lane, const void* src, size_t bytes, void* device_dst);
  void WaitForLane(Lane& lane, const char* what);
  Event TakeEvent();
  static void Notify(void* summer);  // cudaLaunchHostFunc: runs on a CUDA thread

  const GpuSummerOptions options_;
  std::vector<Lane> lanes_;  // sized once: references into it stay valid
  Keys keys_;
  std::shared_ptr<PinnedPool> results_ = PinnedPool::Create();
  std::vector<Event> spare_events_;
  size_t pending_ = 0;
};

CudaSummer::CudaSummer(const GpuSummerOptions& options)
    : options_(options), keys_(options.streams) {  // keys_ refuses a bad stream count
  UseDevice(options_.device);
  lanes_.resize(static_cast<size_t>(options.streams));
  for (Lane& lane : lanes_) {
    lane.stream = NewStream();
    if (options_.on_ready) lane.notify = NewStream();
    for (StagingBlock& block : lane.staging) block.copied = NewEvent();
  }
}

CudaSummer::~CudaSummer() {
  // Queued copies still read staging blocks and write accumulators, and host functions
  // still refer to this object: let them finish before any member goes.
  cudaSetDevice(options_.device);
  for (Lane& lane : lanes_) {
    cudaStreamSynchronize(lane.stream.get());
    if (lane.notify.get() != nullptr) cudaStreamSynchronize(lane.notify.get());
  }
}

void CudaSummer::Add(uint64_t key, const void* src, size_t bytes, DataType type) {
  UseDevice(options_.device);
  KeySum& k = keys_.ForAdd(key, bytes, type, [](DeviceMemory& sum, size_t n) { sum.Reserve(n); });
  Lane& lane = lanes_[k.lane];
  if (bytes > 0) {
    // The first push of a round lands in the accumulator (behind the previous round's
    // copy out, on this stream); a later one in the scratch buffer, then is added.
    void* target = k.open ? ReserveScratch(lane, bytes) : k.accumulator.get();
    CopyIn(lane, src, bytes, target);
    if (k.open) {
      SumIntoDevice(k.accumulator.get(), target, bytes / DataTypeSize(type), type,
                    lane.stream.get());
    }
  }
  k.open = true;
}

void* CudaSummer::ReserveScratch(Lane& lane, size_t bytes) {
  if (bytes > lane.scratch.capacity()) {
    WaitForLane(lane, "the work queued before growing a scratch buffer");  // old one unused
    lane.scratch.Reserve(bytes);
  }
  return lane.scratch.get();
}

void CudaSummer::CopyIn(Lane& lane, const void* src, size_t bytes, void* device_dst) {
  StagingBlock& block = lane.staging[lane.next_staging];
  lane.next_staging = (lane.next_staging + 1) % lane.staging.size();
  WaitForEvent(block.copied.get(), Clock::now() + options_.wait_timeout,
               "copying a push out of a staging block");
  block.memory.Reserve(bytes);  // only now unused by the GPU
  if (options_.copy) {
    options_.copy(block.memory.get(), src, bytes);
  } else {
    std::memcpy(block.memory.get(), src, bytes);
  }
  FERRY_CUDA_CHECK(cudaMemcpyAsync(device_dst, block.memory.get(), bytes,
                                   cudaMemcpyHostToDevice, lane.stream.get()));
  FERRY_CUDA_CHECK(cudaEventRecord(block.copied.get(), lane.stream.get()));
}

void CudaSummer::Finish(uint64_t key, Done done) {
  UseDevice(options_.device);
  KeySum& k = keys_.ForFinish(key);
  Lane& lane = lanes_[k.lane];
  PendingSum p{TakeEvent(), results_->Acquire(k.bytes), std::move(done)};
  if (k.bytes > 0) {
    FERRY_CUDA_CHECK(cudaMemcpyAsync(p.sum.data(), k.accumulator.get(), k.bytes,
                                     cudaMemcpyDeviceToHost, lane.stream.get()));
  }
  FERRY_CUDA_CHECK(cudaEventRecord(p.event.get(), lane.stream.get()));
  if (options_.on_ready) {
    FERRY_CUDA_CHECK(cudaStreamWaitEvent(lane.notify.get(), p.event.get(), 0));
    FERRY_CUDA_CHECK(cudaLaunchHostFunc(lane.notify.get(), &CudaSummer::Notify, this));
  }
  lane.pending.push_back(std::move(p));
  ++pending_;
  k.open = false;
}

void CudaSummer::Notify(void* summer) { static_cast<CudaSummer*>(summer)->options_.on_ready(); }

void CudaSummer::Reset(uint64_t key) { keys_.Reset(key); }

void CudaSummer::Forget(uint64_t key) {
  const KeySum* k = keys_.Find(key);
  if (!k) return;
  UseDevice(options_.device);
  // The accumulator may still be the source of a Finish's copy on its stream.
  WaitForLane(lanes_[k->lane], "the work queued before a retired key's memory is freed");
  keys_.Forget(key);
}

bool CudaSummer::HasOpenRound(uint64_t key) const { return keys_.HasOpenRound(key); }

size_t CudaSummer::RunCompletions() {
  UseDevice(options_.device);
  size_t delivered = 0;
  for (Lane& lane : lanes_) {
    while (!lane.pending.empty()) {
      const cudaError_t r = cudaEventQuery(lane.pending.front().event.get());
      if (r == cudaErrorNotReady) break;
      FERRY_CUDA_CHECK(r);
      // Off the queue before `done` runs: it may call Finish on this lane.
      PendingSum p = std::move(lane.pending.front());
      lane.pending.pop_front();
      --pending_;
      spare_events_.push_back(std::move(p.event));
      ++delivered;
      if (p.done) p.done(std::move(p.sum));
    }
  }
  return delivered;
}

void CudaSummer::Drain() {
  const Clock::time_point deadline = Clock::now() + options_.wait_timeout;
  while (pending_ > 0) {
    if (RunCompletions() > 0) continue;
    for (Lane& lane : lanes_) {
      if (!lane.pending.empty()) {
        WaitForEvent(lane.pending.front().event.get(), deadline, "copying a sum back");
        break;
      }
    }
  }
}

void CudaSummer::WaitForLane(Lane& lane, const char* what) {
  Event e = TakeEvent();
  FERRY_CUDA_CHECK(cudaEventRecord(e.get(), lane.stream.get()));
  WaitForEvent(e.get(), Clock::now() + options_.wait_timeout, what);
  spare_events_.push_back(std::move(e));
}

Event CudaSummer::TakeEvent() {
  if (spare_events_.empty()) return NewEvent();
  Event e = std::move(spare_events_.back());
  spare_events_.pop_back();
  return e;
}

}  // namespace
}  // namespace gpu

std::unique_ptr<GpuSummer> GpuSummer::Create(const GpuSummerOptions& options) {
  return std::make_unique<gpu::CudaSummer>(options);
}

}  // namespace ferry
