#include "worker/device/fake_device.h"

#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "common/util/error.h"
#include "common/util/status.h"

namespace ferry {

// One stream: a thread running its queue in order. Its state is under the device's mu_.
struct FakeDevice::Queue {
  std::deque<std::function<void()>> work;
  bool running = false;   // executing an op (not counting the time it is blocked)
  const std::function<bool()>* blocked_until = nullptr;  // its op waits for this to hold
  bool stopping = false;  // drain, then end
  std::thread thread;
};

namespace {
thread_local FakeDevice::Queue* t_queue = nullptr;  // on a stream's thread: its queue
}  // namespace

void FakeDevice::Run(Queue* q) {
  MutexLock lock(mu_);
  t_queue = q;
  for (;;) {
    cv_.Wait(mu_, [q]() REQUIRES(mu_) { return q->stopping || !q->work.empty(); });
    if (q->work.empty()) return;  // stopping, and drained
    std::function<void()> op = std::move(q->work.front());
    q->work.pop_front();
    q->running = true;
    {
      MutexUnlock unlock(mu_);
      op();
    }
    q->running = false;
    cv_.NotifyAll();
  }
}

void FakeDevice::Block(const std::function<bool()>& ready) {
  t_queue->running = false;
  t_queue->blocked_until = &ready;
  cv_.NotifyAll();
  cv_.Wait(mu_, ready);
  t_queue->blocked_until = nullptr;
  t_queue->running = true;
}

void FakeDevice::Push(Stream s, std::function<void()> op) {
  MutexLock lock(mu_);
  auto it = streams_.find(s);
  FERRY_ENFORCE(it != streams_.end(), ErrorCode::kInvalidArgument, "fake device: no stream ", s);
  it->second->work.push_back(std::move(op));
  cv_.NotifyAll();
}

void FakeDevice::Gate::Open() {
  MutexLock lock(device_->mu_);
  open_ = true;
  device_->cv_.NotifyAll();
}

FakeDevice::FakeDevice() { NewStreamWithId(0); }

DeviceApi::Stream FakeDevice::NewStreamWithId(Stream s) {
  auto q = std::make_unique<Queue>();
  Queue* raw = q.get();
  {
    MutexLock lock(mu_);
    streams_[s] = std::move(q);
  }
  raw->thread = std::thread([this, raw] { Run(raw); });
  return s;
}

FakeDevice::~FakeDevice() {
  // Stop them all first: a stream may drain work that waits on another's events.
  std::vector<std::unique_ptr<Queue>> queues;
  {
    MutexLock lock(mu_);
    for (auto& [s, q] : streams_) {
      q->stopping = true;
      queues.push_back(std::move(q));
    }
    cv_.NotifyAll();
  }
  for (auto& q : queues) q->thread.join();
  MutexLock lock(mu_);
  streams_.clear();
}

DeviceApi::Stream FakeDevice::NewStream() {
  Stream s;
  {
    MutexLock lock(mu_);
    s = next_stream_++;
  }
  return NewStreamWithId(s);
}

DeviceApi::Stream FakeDevice::Adopt(uintptr_t native) {
  MutexLock lock(mu_);
  FERRY_ENFORCE(streams_.count(native) > 0, ErrorCode::kInvalidArgument, Describe(),
                ": no stream ", native, " to adopt");
  return native;
}

void FakeDevice::DestroyStream(Stream s) {
  Queue* q = nullptr;
  {
    MutexLock lock(mu_);
    auto it = streams_.find(s);
    if (it == streams_.end() || s == 0) return;
    q = it->second.get();
    q->stopping = true;
    cv_.NotifyAll();
  }
  q->thread.join();  // drains its queue first
  MutexLock lock(mu_);
  streams_.erase(s);
}

DeviceApi::Event FakeDevice::NewEvent() {
  MutexLock lock(mu_);
  const Event e = next_event_++;
  events_[e] = EventState{};
  return e;
}

void FakeDevice::DestroyEvent(Event e) {
  MutexLock lock(mu_);
  events_.erase(e);
}

void FakeDevice::Complete(Event e, uint64_t generation) {
  MutexLock lock(mu_);
  EventState& state = events_[e];
  if (generation > state.completed) state.completed = generation;
  cv_.NotifyAll();
}

void FakeDevice::WaitFor(Event e, uint64_t generation) {
  MutexLock lock(mu_);
  std::function<bool()> done = [&]() NO_THREAD_SAFETY_ANALYSIS {
    return events_[e].completed >= generation;
  };
  if (done()) return;
  if (t_queue != nullptr) {
    Block(done);  // a stream's op: counts as blocked for Quiesce
  } else {
    cv_.Wait(mu_, done);  // the caller's thread (Synchronize)
  }
}

void FakeDevice::Record(Event e, Stream s) {
  uint64_t generation = 0;
  {
    MutexLock lock(mu_);
    generation = ++events_[e].recorded;
  }
  Push(s, [this, e, generation] { Complete(e, generation); });
}

void FakeDevice::Wait(Stream s, Event e) {
  uint64_t generation = 0;
  {
    MutexLock lock(mu_);
    generation = events_[e].recorded;  // the last Record before this Wait
  }
  if (generation == 0) return;
  Push(s, [this, e, generation] { WaitFor(e, generation); });
}

bool FakeDevice::Query(Event e) {
  MutexLock lock(mu_);
  const EventState& state = events_[e];
  return state.completed >= state.recorded;
}

void FakeDevice::Synchronize(Event e) {
  uint64_t generation = 0;
  {
    MutexLock lock(mu_);
    generation = events_[e].recorded;
  }
  WaitFor(e, generation);
}

void FakeDevice::CopyToHost(void* host, const void* device, size_t bytes, Stream s) {
  std::shared_ptr<Gate> gate;
  {
    MutexLock lock(mu_);
    gate = copy_gate_;
  }
  Push(s, [this, host, device, bytes, gate] {
    if (gate) Pass(gate);
    std::memcpy(host, device, bytes);
    MutexLock lock(mu_);
    copies_++;
    copied_bytes_ += bytes;
  });
}

void FakeDevice::CopyToDevice(void* device, const void* host, size_t bytes, Stream s) {
  CopyToHost(device, host, bytes, s);  // both are host memory here
}

void FakeDevice::HostCallback(Stream s, std::function<void()> fn) { Push(s, std::move(fn)); }

void* FakeDevice::AllocPinned(size_t bytes) {
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  FERRY_ENFORCE(p != nullptr, ErrorCode::kInternal, "fake device: out of memory for ", bytes,
                " pinned bytes");
  MutexLock lock(mu_);
  pinned_live_++;
  return p;
}

void FakeDevice::FreePinned(void* p) {
  if (p == nullptr) return;
  std::free(p);
  MutexLock lock(mu_);
  pinned_live_--;
}

void FakeDevice::Pass(const std::shared_ptr<Gate>& gate) {
  MutexLock lock(mu_);
  std::function<bool()> open = [&]() NO_THREAD_SAFETY_ANALYSIS { return gate->open_; };
  if (!open()) Block(open);
}

void* FakeDevice::AllocDevice(size_t bytes) {
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  FERRY_ENFORCE(p != nullptr, ErrorCode::kInternal, "fake device: out of memory for ", bytes,
                " device bytes");
  return p;
}

void FakeDevice::FreeDevice(void* p) { std::free(p); }

std::shared_ptr<FakeDevice::Gate> FakeDevice::Hold(Stream s) {
  std::shared_ptr<Gate> gate(new Gate(this));
  Push(s, [this, gate] { Pass(gate); });
  return gate;
}

std::shared_ptr<FakeDevice::Gate> FakeDevice::HoldCopies() {
  std::shared_ptr<Gate> gate(new Gate(this));
  MutexLock lock(mu_);
  copy_gate_ = gate;
  return gate;
}

void FakeDevice::Quiesce() {
  MutexLock lock(mu_);
  cv_.Wait(mu_, [this]() REQUIRES(mu_) {
    for (const auto& [s, q] : streams_) {
      if (q->running) return false;
      if (q->blocked_until != nullptr ? (*q->blocked_until)() : !q->work.empty()) return false;
    }
    return true;
  });
}

uint64_t FakeDevice::copies() const {
  MutexLock lock(mu_);
  return copies_;
}

uint64_t FakeDevice::copied_bytes() const {
  MutexLock lock(mu_);
  return copied_bytes_;
}

int FakeDevice::pinned_live() const {
  MutexLock lock(mu_);
  return pinned_live_;
}

}  // namespace ferry
