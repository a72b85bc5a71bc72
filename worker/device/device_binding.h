#pragma once

// DeviceBinding: the device path as the language bindings see it (the C API, and through
// it ferry.torch): push_pulls of tensors in device memory, named by a device index and the
// framework's stream as its runtime's native handle (torch.cuda.current_stream().cuda_stream).
// One per initialised BindingCore (binding_core.h), created with its group.
//
//   - Local size 1: a DevicePushPull (device_push_pull.h) per device index, on that
//     device's DeviceApi (CUDA, or the fake device with FERRY_DEVICE_API=fake), over the
//     group's Worker: the call returns at once, the partitions go as their copies land.
//   - Local size > 1: the local group's NCCL backend (Collective::PushPullDevice: reduce to
//     the local root, push_pull through the servers, broadcast), which blocks the caller
//     until the output holds the result; the handle is then already finished.
//
// The producer and the consumer are the same stream: the one the framework wrote the input
// on and queues its later work on. Handles are unique among the group's handles (a
// DevicePushPull's are the Worker's; the local path's have kLocalHandleBit set), so a
// binding asks Owns(h) to know where to wait.
//
// Lifetime and shutdown order: the binding holds the group (a shared_ptr) and each device's
// DevicePushPull and DeviceApi. The BindingCore drops it after the group's Shutdown (every
// operation finished or failed); then each DevicePushPull is destroyed (it synchronizes its
// streams) before its device, and the group last, by declaration order below.
//
// Thread-safe.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "common/config/config.h"
#include "common/util/mutex.h"
#include "worker/collective.h"
#include "worker/device/device_api.h"
#include "worker/device/device_push_pull.h"

namespace ferry {

class DeviceBinding {
 public:
  // Marks the handles of the local group's (blocking) device path.
  static constexpr Handle kLocalHandleBit = Handle{1} << 62;

  // `kind`: CUDA devices (NewCudaDevice), or a FakeDevice for any index; on the fake device
  // a finished operation's copies back have completed when its wait returns (the caller
  // reads the outputs from the host, where no stream orders its reads).
  DeviceBinding(std::shared_ptr<Collective> group, DeviceApiKind kind);
  ~DeviceBinding();
  DeviceBinding(const DeviceBinding&) = delete;
  DeviceBinding& operator=(const DeviceBinding&) = delete;

  // Starts the push_pull (reduce: the pushes combined by `reduce`) of `count` elements of
  // `input` into `output`, both in the memory of device `device`, written and read by the
  // work queued on native stream `stream` before and after this call. Throws FerryError:
  // kInvalidArgument for a device index below 0 or that the runtime refuses, and what the
  // push_pull refuses (worker.h).
  Handle PushPullAsync(const std::string& name, const void* input, void* output, DataType dtype,
                       uint64_t count, bool average, ReduceOp reduce,
                       std::optional<int> priority, int device, uintptr_t stream)
      EXCLUDES(mu_);
  // True if h is one of this binding's handles (not yet waited for).
  bool Owns(Handle h) const EXCLUDES(mu_);
  // As Collective::Poll and WaitFor, for this binding's handles.
  bool Poll(Handle h) EXCLUDES(mu_);
  bool WaitFor(Handle h, int64_t slice_ms) EXCLUDES(mu_);

 private:
  struct PerDevice {
    std::unique_ptr<DeviceApi> api;
    std::unique_ptr<DevicePushPull> push_pull;  // destroyed first
  };
  // Device `device`'s, created at its first use.
  PerDevice& For(int device) REQUIRES(mu_);

  const std::shared_ptr<Collective> group_;  // destroyed last
  const DeviceApiKind kind_;
  mutable Mutex mu_;
  std::map<int, PerDevice> devices_ GUARDED_BY(mu_);
  std::map<Handle, int> handles_ GUARDED_BY(mu_);  // each handle's device (local: -1)
  Handle next_local_ GUARDED_BY(mu_) = 1;
};

}  // namespace ferry
