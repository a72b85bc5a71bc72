#pragma once

// DevicePushPull: a push_pull of a tensor in device memory, without the caller's thread
// waiting for the device: DeviceStaging copies its partitions to a pinned buffer in
// priority order after the producer's work, and each partition goes to the servers as soon
// as it landed (Worker::PushPullStagedAsync, ReleasePartition); each partition's sum is
// copied back to `output` on the staging's stream as soon as it is in, and once all are,
// the consumer's stream waits on an event recorded after them.
//
//   DevicePushPull device_path(worker, device);
//   Handle h = device_path.Start("grad.fc", grad, grad, DataType::kFloat32, n, true,
//                                torch_stream, torch_stream);
//   device_path.Wait(h);   // the sums are queued back; torch's later work sees them
//
// Completion: Wait(h) returns once the copies back are queued behind every sum (not run:
// the consumer's stream orders its later work after them), or throws the push_pull's
// FerryError (then nothing is copied back). Every wait is bounded: the Worker ends the
// push_pull with a timeout at FERRY_OP_TIMEOUT_MS.
//
// Buffers: `input` (device memory) must not change until the push_pull finished (Wait
// returned); `output` is written by the copies back until the consumer's event completed.
// The pinned buffer comes from this object's pool (allocated through the device once per
// size and reused: pinning is slow, and a training step's sizes repeat): it goes back
// once its copies back completed (checked at each Start) or at destruction. A failed
// operation's buffer is never reused nor freed: ZeroMQ may still hold its partitions
// (worker.h, "Buffers").
//
// Shutdown order: wait for every operation, then destroy this object (it synchronizes the
// staging's streams), then the Worker and the device.
//
// Thread-safe.

#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "common/transport/buffer.h"
#include "common/util/mutex.h"
#include "server/gpu/block_pool.h"
#include "worker/device/device_api.h"
#include "worker/device/device_staging.h"
#include "worker/worker.h"

namespace ferry {

class DevicePushPull {
 public:
  DevicePushPull(Worker& worker, DeviceApi& device);
  ~DevicePushPull();
  DevicePushPull(const DevicePushPull&) = delete;
  DevicePushPull& operator=(const DevicePushPull&) = delete;

  // Starts the push_pull of `count` elements of `input` (device memory; written by the
  // work queued on `producer` before this call) into `output` (device memory; read by the
  // work queued on `consumer` after Wait returned). Returns at once.
  // `priority` and `reduce`: as Worker::PushPullStagedAsync's.
  Handle Start(const std::string& name, const void* input, void* output, DataType dtype,
               uint64_t count, bool average, DeviceApi::Stream producer,
               DeviceApi::Stream consumer, std::optional<int> priority = std::nullopt,
               ReduceOp reduce = ReduceOp::kSum) EXCLUDES(mu_);
  // True once Wait(h) would not block. Unknown handle: throws kInvalidArgument.
  bool Poll(Handle h) EXCLUDES(mu_);
  // See "Completion". Forgets h.
  void Wait(Handle h) EXCLUDES(mu_);
  // Waits at most `slice_ms`: true (h forgotten, as after Wait) once finished, false if not
  // yet. `host_sync`: once finished, also blocks until the copies back completed (a caller
  // that reads `output` from the host: the fake device's tests).
  bool WaitFor(Handle h, int64_t slice_ms, bool host_sync = false) EXCLUDES(mu_);
  // Pinned blocks ever allocated (a reused one is not counted again).
  size_t pinned_allocated() const { return pool_->allocated(); }

 private:
  // The pool's blocks: pinned memory of the device.
  struct PinnedBlocks {
    DeviceApi* device = nullptr;
    void* Allocate(size_t bytes) { return device->AllocPinned(bytes); }
    void Free(void* block);  // errors ignored: a destructor's
    void Released(void*, size_t) {}
  };
  using Pool = gpu::BlockPool<PinnedBlocks>;

  struct Op {
    void* output = nullptr;
    Buffer pinned;
    std::vector<DeviceStaging::Part> parts;
    DeviceApi::Stream consumer = 0;
    bool finished = false;
    std::string error;  // the push_pull's, if it failed
    ErrorCode code = ErrorCode::kOk;
    DeviceApi::Event copied_back = 0;  // 0: none (failed)
  };
  // The Worker's completion of op `h`: copies back and Finish, or the error.
  void OnPushPullDone(Handle h, const Verdict& verdict) EXCLUDES(mu_);
  // Frees the pinned buffers whose copies back completed. REQUIRES: mu_.
  void Collect() REQUIRES(mu_);

  Worker& worker_;
  DeviceApi& device_;
  std::shared_ptr<Pool> pool_;
  DeviceStaging staging_;
  Mutex mu_;
  CondVar cv_;  // an operation finished
  std::map<Handle, std::shared_ptr<Op>> ops_ GUARDED_BY(mu_);
  // Finished: pinned buffers the copies back may still read, with their event.
  std::vector<std::pair<Buffer, DeviceApi::Event>> draining_ GUARDED_BY(mu_);
};

}  // namespace ferry
