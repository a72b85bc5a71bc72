#pragma once

// DeviceStaging: moves a device tensor's partitions to pinned host memory, one partition
// at a time in the order given (priority order), and the sums back, on two streams of its
// own, without a device-wide synchronize and without blocking the caller's thread on the
// GPU. The worker's device path sends each partition as soon as it is in host memory, so
// copying partition i+1 overlaps sending partition i.
//
//   DeviceStaging staging(device);
//   staging.ToHost(grad, pinned, parts, torch_stream, [&](size_t i) { send(i); });
//   ...as each partition's sum lands in `pinned`:  staging.ToDevice(grad, pinned, parts[i]);
//   DeviceApi::Event done = staging.Finish(torch_stream);  // torch's later work waits on it
//
// Ordering (CUDA's stream semantics, device_api.h):
//  - ToHost records an event on `producer` at the call, and its copy stream waits on it:
//    the copies read what the work queued on `producer` before the call wrote, and nothing
//    the producer queues later is waited for.
//  - ready(i) runs on a runtime thread once partition i is in host memory, in the order of
//    `parts`; it must not call the DeviceApi (it may queue the partition for sending).
//  - ToDevice copies on the return stream in call order; Finish records an event after
//    every ToDevice so far and makes `consumer` wait on it: the consumer's work queued
//    after Finish sees the sums, and the caller's thread does not wait.
//
// Buffers: `input` must not change until every ready(i) ran (the producer's later work
// is not ordered before the copies: train-step code writes a gradient again only after
// the optimizer step, which follows Finish). `host` belongs to the staging from ToHost
// until the last ready(i), and again from ToDevice until Finish's event completed.
// `output` is written by the return stream until then.
//
// Events: Finish returns an event the caller owns (Query it, then Release it). The
// destructor synchronizes both streams, then destroys them and the events it still holds.
//
// Thread-safe: one ToHost and its ToDevices may come from different threads (the sums
// arrive on the transport's).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/util/mutex.h"
#include "worker/device/device_api.h"

namespace ferry {

class DeviceStaging {
 public:
  struct Part {
    uint64_t offset = 0;  // bytes from the tensor's start
    uint64_t bytes = 0;
  };

  explicit DeviceStaging(DeviceApi& device);
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  // Copies each part of `input` (device memory) to the same offset of `host` (pinned), in
  // the order of `parts`, after the work queued on `producer` before this call; ready(i)
  // once part i is in host memory.
  void ToHost(const void* input, void* host, const std::vector<Part>& parts,
              DeviceApi::Stream producer, std::function<void(size_t)> ready) EXCLUDES(mu_);
  // Copies `part` of `host` back to the same offset of `output` (device memory).
  void ToDevice(void* output, const void* host, const Part& part) EXCLUDES(mu_);
  // Makes `consumer` wait for every ToDevice so far; returns the event it waits on.
  DeviceApi::Event Finish(DeviceApi::Stream consumer) EXCLUDES(mu_);
  // Frees an event Finish returned.
  void Release(DeviceApi::Event e) EXCLUDES(mu_);

 private:
  DeviceApi::Event TakeEvent() REQUIRES(mu_);

  DeviceApi& device_;
  const DeviceApi::Stream to_host_;    // copies to host memory
  const DeviceApi::Stream to_device_;  // copies of the sums back
  Mutex mu_;
  std::vector<DeviceApi::Event> free_events_ GUARDED_BY(mu_);
  std::vector<DeviceApi::Event> all_events_ GUARDED_BY(mu_);
};

}  // namespace ferry
