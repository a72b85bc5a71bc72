#include "worker/device/device_staging.h"

#include <memory>
#include <utility>

namespace ferry {

DeviceStaging::DeviceStaging(DeviceApi& device)
    : device_(device), to_host_(device.NewStream()), to_device_(device.NewStream()) {}

DeviceStaging::~DeviceStaging() {
  // Every copy queued so far has run before the streams and events go.
  const DeviceApi::Event drained = device_.NewEvent();
  device_.Record(drained, to_host_);
  device_.Synchronize(drained);
  device_.Record(drained, to_device_);
  device_.Synchronize(drained);
  device_.DestroyEvent(drained);
  device_.DestroyStream(to_host_);
  device_.DestroyStream(to_device_);
  MutexLock lock(mu_);
  for (DeviceApi::Event e : all_events_) device_.DestroyEvent(e);
}

DeviceApi::Event DeviceStaging::TakeEvent() {
  if (!free_events_.empty()) {
    const DeviceApi::Event e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  const DeviceApi::Event e = device_.NewEvent();
  all_events_.push_back(e);
  return e;
}

void DeviceStaging::ToHost(const void* input, void* host, const std::vector<Part>& parts,
                           DeviceApi::Stream producer, std::function<void(size_t)> ready) {
  DeviceApi::Event produced;
  {
    MutexLock lock(mu_);
    produced = TakeEvent();
  }
  device_.Record(produced, producer);
  device_.Wait(to_host_, produced);
  auto shared_ready = std::make_shared<std::function<void(size_t)>>(std::move(ready));
  const auto* in = static_cast<const uint8_t*>(input);
  auto* out = static_cast<uint8_t*>(host);
  for (size_t i = 0; i < parts.size(); ++i) {
    // An empty partition (a tensor of no elements: its pointers may be null) copies nothing.
    if (parts[i].bytes > 0) {
      device_.CopyToHost(out + parts[i].offset, in + parts[i].offset, parts[i].bytes, to_host_);
    }
    device_.HostCallback(to_host_, [shared_ready, i] { (*shared_ready)(i); });
  }
  // The producer's event is free again once the stream waited on it: a Record on it from
  // now on is queued behind that Wait (CUDA captures an event's state at the Wait).
  MutexLock lock(mu_);
  free_events_.push_back(produced);
}

void DeviceStaging::ToDevice(void* output, const void* host, const Part& part) {
  if (part.bytes == 0) return;
  device_.CopyToDevice(static_cast<uint8_t*>(output) + part.offset,
                       static_cast<const uint8_t*>(host) + part.offset, part.bytes, to_device_);
}

DeviceApi::Event DeviceStaging::Finish(DeviceApi::Stream consumer) {
  DeviceApi::Event done;
  {
    MutexLock lock(mu_);
    done = TakeEvent();
  }
  device_.Record(done, to_device_);
  device_.Wait(consumer, done);
  return done;
}

void DeviceStaging::Release(DeviceApi::Event e) {
  MutexLock lock(mu_);
  free_events_.push_back(e);
}

}  // namespace ferry
