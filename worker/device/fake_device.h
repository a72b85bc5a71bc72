#pragma once

// FakeDevice: a DeviceApi on host memory, for tests of the device path on CPU. "Device
// memory" is ordinary memory; each stream is a thread running its queue in order; events
// are counters; copies are memcpy; host callbacks run on the stream's thread.
//
// For tests it also counts what ran (copies, bytes) and offers Hold(s): queued on s, it
// blocks that stream until the returned gate is opened, standing in for a kernel still
// running on the producer's stream.
//
// Stream 0 (the default stream) is a stream like the others here (CUDA's legacy stream
// also orders against every blocking stream; the device path never relies on that).
// Shutdown: the destructor drains every stream's queue, then joins its thread.
//
// Thread-safe.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/util/mutex.h"
#include "worker/device/device_api.h"

namespace ferry {

class FakeDevice : public DeviceApi {
 public:
  FakeDevice();
  ~FakeDevice() override;

  std::string Describe() const override { return "fake:0"; }
  Stream NewStream() override;
  // The fake's native handles are its own stream ids: 0, or one NewStream returned.
  Stream Adopt(uintptr_t native) override EXCLUDES(mu_);
  void DestroyStream(Stream s) override;
  Event NewEvent() override;
  void DestroyEvent(Event e) override;
  void Record(Event e, Stream s) override;
  void Wait(Stream s, Event e) override;
  bool Query(Event e) override;
  void Synchronize(Event e) override;
  void CopyToHost(void* host, const void* device, size_t bytes, Stream s) override;
  void CopyToDevice(void* device, const void* host, size_t bytes, Stream s) override;
  void HostCallback(Stream s, std::function<void()> fn) override;
  void* AllocPinned(size_t bytes) override;
  void FreePinned(void* p) override;
  void* AllocDevice(size_t bytes) override;
  void FreeDevice(void* p) override;

  // Tests: blocks stream s (at this point of its queue) until the gate opens.
  class Gate {
   public:
    void Open();

   private:
    friend class FakeDevice;
    explicit Gate(FakeDevice* device) : device_(device) {}
    FakeDevice* device_;
    bool open_ = false;  // under device_->mu_
  };
  std::shared_ptr<Gate> Hold(Stream s);
  // Tests: every copy queued from now on, on any stream, waits for the gate to open
  // (standing in for a slow link between device and host).
  std::shared_ptr<Gate> HoldCopies() EXCLUDES(mu_);
  // Tests: blocks until no stream can make progress: each is idle, or waits on an event or
  // a gate. Then what the streams will do without outside help has been done.
  void Quiesce() EXCLUDES(mu_);

  uint64_t copies() const EXCLUDES(mu_);
  uint64_t copied_bytes() const EXCLUDES(mu_);
  // Pinned allocations not yet freed.
  int pinned_live() const EXCLUDES(mu_);

 private:
  Stream NewStreamWithId(Stream s) EXCLUDES(mu_);

 public:
  struct Queue;  // one stream: its thread and its work (public for fake_device.cc only)

 private:
  struct EventState {
    uint64_t recorded = 0;   // Records queued
    uint64_t completed = 0;  // of those, the ones that ran
  };
  void Push(Stream s, std::function<void()> op) EXCLUDES(mu_);
  void Run(Queue* q) EXCLUDES(mu_);
  // On a stream's thread: blocks it (marked blocked, for Quiesce) until ready() holds.
  void Block(const std::function<bool()>& ready) REQUIRES(mu_);
  void Complete(Event e, uint64_t generation) EXCLUDES(mu_);
  void WaitFor(Event e, uint64_t generation) EXCLUDES(mu_);
  void Pass(const std::shared_ptr<Gate>& gate) EXCLUDES(mu_);

  mutable Mutex mu_;
  CondVar cv_;  // any change: work queued or done, an event completed, a gate opened
  std::map<Stream, std::unique_ptr<Queue>> streams_ GUARDED_BY(mu_);
  std::map<Event, EventState> events_ GUARDED_BY(mu_);
  Stream next_stream_ GUARDED_BY(mu_) = 1;
  Event next_event_ GUARDED_BY(mu_) = 1;
  uint64_t copies_ GUARDED_BY(mu_) = 0;
  uint64_t copied_bytes_ GUARDED_BY(mu_) = 0;
  int pinned_live_ GUARDED_BY(mu_) = 0;
  std::shared_ptr<Gate> copy_gate_ GUARDED_BY(mu_);
};

}  // namespace ferry
