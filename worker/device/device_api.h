#pragma once

// DeviceApi: the few things the worker's device path asks of a GPU runtime: streams,
// events, asynchronous copies between device memory and pinned host memory, and host
// callbacks queued on a stream. Two implementations: CudaDevice (cuda_device.h, CUDA builds)
// and FakeDevice (fake_device.h: host memory standing in for device memory, each stream a
// thread), on which the staging logic (device_staging.h) is unit-tested exactly, on CPU.
//
// Semantics (CUDA's): work queued on one stream runs in queue order; streams run
// independently of each other, but for events: Record(e, s) completes e when the work
// queued on s before it has run; Wait(s, e) makes the work queued on s after it wait for
// the last Record of e before the Wait (no Record yet: no wait). A host callback runs on a
// runtime thread once the stream's earlier work has run; it must not call the DeviceApi.
// No call blocks the caller on device work, except Synchronize(e).
//
// Handles are small integers owned by the caller: DestroyStream / DestroyEvent once no queued
// work uses them (Synchronize on an event recorded last on the stream first).
//
// Thread-safe: any thread may queue work on any stream.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace ferry {

class DeviceApi {
 public:
  using Stream = uint64_t;  // 0: the device's default (legacy) stream
  using Event = uint64_t;

  virtual ~DeviceApi() = default;

  // "cuda:0 (NVIDIA H200)", "fake:0": for messages.
  virtual std::string Describe() const = 0;

  virtual Stream NewStream() = 0;
  // A stream created elsewhere, named by the runtime's own handle (a framework's current
  // stream: torch.cuda.current_stream().cuda_stream, a cudaStream_t): its handle here, the
  // same for the same native stream; 0 for the native default stream (0). Not owned:
  // DestroyStream forgets it without destroying it, and the adopter keeps it alive.
  virtual Stream Adopt(uintptr_t native) = 0;
  virtual void DestroyStream(Stream s) = 0;
  virtual Event NewEvent() = 0;
  virtual void DestroyEvent(Event e) = 0;

  virtual void Record(Event e, Stream s) = 0;
  virtual void Wait(Stream s, Event e) = 0;
  // Whether e completed (true for an event never recorded).
  virtual bool Query(Event e) = 0;
  // Blocks the caller until e completed.
  virtual void Synchronize(Event e) = 0;

  // Asynchronous copies on stream s; `host` must be pinned (AllocPinned).
  virtual void CopyToHost(void* host, const void* device, size_t bytes, Stream s) = 0;
  virtual void CopyToDevice(void* device, const void* host, size_t bytes, Stream s) = 0;
  // Runs fn on a runtime thread once the work queued on s before it has run.
  virtual void HostCallback(Stream s, std::function<void()> fn) = 0;

  // Page-locked host memory the device copies to and from at full speed.
  virtual void* AllocPinned(size_t bytes) = 0;
  virtual void FreePinned(void* p) = 0;
  // Device memory (tests, scratch space): FreeDevice once no queued work uses it.
  virtual void* AllocDevice(size_t bytes) = 0;
  virtual void FreeDevice(void* p) = 0;
};

}  // namespace ferry
