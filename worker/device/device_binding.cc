#include "worker/device/device_binding.h"

#include <utility>

#include "common/util/error.h"
#include "worker/device/cuda_device.h"
#include "worker/device/fake_device.h"
#include "worker/worker.h"

namespace ferry {

DeviceBinding::DeviceBinding(std::shared_ptr<Collective> group, DeviceApiKind kind)
    : group_(std::move(group)), kind_(kind) {}

DeviceBinding::~DeviceBinding() {
  MutexLock lock(mu_);
  for (auto& [index, d] : devices_) d.push_pull.reset();  // before any device goes
  devices_.clear();
}

DeviceBinding::PerDevice& DeviceBinding::For(int device) {
  auto it = devices_.find(device);
  if (it != devices_.end()) return it->second;
  auto* worker = dynamic_cast<Worker*>(group_.get());
  FERRY_ENFORCE(worker != nullptr, ErrorCode::kInternal,
                "device push_pull: no Worker behind a local size of 1");
  PerDevice d;
  if (kind_ == DeviceApiKind::kFake) {
    d.api = std::make_unique<FakeDevice>();
  } else {
    d.api = NewCudaDevice(device);
  }
  d.push_pull = std::make_unique<DevicePushPull>(*worker, *d.api);
  return devices_.emplace(device, std::move(d)).first->second;
}

Handle DeviceBinding::PushPullAsync(const std::string& name, const void* input, void* output,
                                    DataType dtype, uint64_t count, bool average,
                                    ReduceOp reduce, std::optional<int> priority, int device,
                                    uintptr_t stream) {
  FERRY_ENFORCE(device >= 0, ErrorCode::kInvalidArgument, "device push_pull of '", name,
                "': device index ", device, " (expected 0 or more)");
  if (group_->local_size() > 1) {
    FERRY_ENFORCE(kind_ == DeviceApiKind::kCuda, ErrorCode::kInvalidArgument,
                  "device push_pull of '", name,
                  "': a local group (FERRY_LOCAL_SIZE > 1) reduces device tensors with NCCL, "
                  "not on the fake device (FERRY_DEVICE_API=fake)");
    FERRY_ENFORCE(reduce == ReduceOp::kSum, ErrorCode::kInvalidArgument, "device push_pull of '",
                  name, "' by ", ReduceOpName(reduce),
                  ": a local group (FERRY_LOCAL_SIZE > 1) sums device tensors only");
    group_->PushPullDevice(name, input, output, dtype, count, average,
                           reinterpret_cast<void*>(stream));
    MutexLock lock(mu_);
    const Handle h = kLocalHandleBit | next_local_++;
    handles_[h] = -1;
    return h;
  }
  MutexLock lock(mu_);
  PerDevice& d = For(device);
  const DeviceApi::Stream s = d.api->Adopt(stream);
  const Handle h =
      d.push_pull->Start(name, input, output, dtype, count, average, s, s, priority, reduce);
  handles_[h] = device;
  return h;
}

bool DeviceBinding::Owns(Handle h) const {
  MutexLock lock(mu_);
  return handles_.count(h) > 0;
}

bool DeviceBinding::Poll(Handle h) {
  MutexLock lock(mu_);
  auto it = handles_.find(h);
  FERRY_ENFORCE(it != handles_.end(), ErrorCode::kInvalidArgument, "device push_pull ", h,
                ": unknown handle (waited for already?)");
  if (it->second < 0) return true;
  return For(it->second).push_pull->Poll(h);
}

bool DeviceBinding::WaitFor(Handle h, int64_t slice_ms) {
  DevicePushPull* push_pull = nullptr;
  {
    MutexLock lock(mu_);
    auto it = handles_.find(h);
    FERRY_ENFORCE(it != handles_.end(), ErrorCode::kInvalidArgument, "device push_pull ", h,
                  ": unknown handle (waited for already?)");
    if (it->second < 0) {
      handles_.erase(it);
      return true;
    }
    push_pull = For(it->second).push_pull.get();  // lives as long as this binding
  }
  // Throws the operation's error (then it is forgotten there too).
  bool done = false;
  try {
    done = push_pull->WaitFor(h, slice_ms, kind_ == DeviceApiKind::kFake);
  } catch (...) {
    MutexLock lock(mu_);
    handles_.erase(h);
    throw;
  }
  if (done) {
    MutexLock lock(mu_);
    handles_.erase(h);
  }
  return done;
}

}  // namespace ferry
