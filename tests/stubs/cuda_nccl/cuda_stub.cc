// The CUDA runtime half of the stub (cuda_nccl_stub.h): devices, host memory standing in
// for device memory, streams as threads, events, and the error texts.

#include <pthread.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "common/util/mutex.h"
#include "cuda_nccl_stub.h"
#include "cuda_runtime_api.h"
#include "stub_internal.h"

namespace ferry::cuda_nccl_stub {
namespace {

struct Allocation {
  size_t bytes = 0;
  cudaMemoryType type = cudaMemoryTypeDevice;
  int device = 0;
};

struct Injected {
  std::string call;
  int rank = -1;
  std::string why;
};

// The process's devices, allocations and injected faults.
struct Globals {
  Mutex mu;  // guards everything below
  int devices GUARDED_BY(mu) = 1;
  std::map<uintptr_t, Allocation> allocations GUARDED_BY(mu);  // by start address
  std::vector<Injected> injected GUARDED_BY(mu);
  std::set<CUstream_st*> streams GUARDED_BY(mu);  // created, not destroyed
};

Globals& G() {
  static Globals* g = new Globals;  // never destroyed: streams may outlive static objects
  return *g;
}

thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;

cudaError_t Note(cudaError_t r) {
  if (r != cudaSuccess) last_error = r;
  return r;
}

// The allocation holding p, or null. REQUIRES: G().mu held.
const Allocation* FindLocked(const void* p, uintptr_t* start) REQUIRES(G().mu) {
  auto& allocations = G().allocations;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = allocations.upper_bound(a);
  if (it == allocations.begin()) return nullptr;
  --it;
  if (a >= it->first + std::max<size_t>(it->second.bytes, 1)) return nullptr;
  *start = it->first;
  return &it->second;
}

cudaError_t Allocate(void** ptr, size_t bytes, cudaMemoryType type) {
  if (ptr == nullptr) return Note(cudaErrorInvalidValue);
  // 256-byte aligned, as cudaMalloc's memory is.
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded);
  if (p == nullptr) return Note(cudaErrorMemoryAllocation);
  MutexLock lock(G().mu);
  G().allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{bytes, type, current_device};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t Release(void* p, cudaMemoryType type) {
  if (p == nullptr) return cudaSuccess;
  {
    MutexLock lock(G().mu);
    auto it = G().allocations.find(reinterpret_cast<uintptr_t>(p));
    if (it == G().allocations.end() || it->second.type != type) {
      return Note(cudaErrorInvalidValue);
    }
    G().allocations.erase(it);
  }
  std::free(p);
  return cudaSuccess;
}

// A copy's device side must be device memory, as the kind says.
cudaError_t CheckCopy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (count == 0) return cudaSuccess;
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  if (dst_device && !IsDeviceMemory(dst, count)) return cudaErrorInvalidValue;
  if (src_device && !IsDeviceMemory(src, count)) return cudaErrorInvalidValue;
  return cudaSuccess;
}

// An event's completion: the work queued by one cudaEventRecord.
struct EventState {
  Mutex mu;                         // guards done
  CondVar cv;                       // signalled when done turns true
  bool done GUARDED_BY(mu) = true;  // an event never recorded counts as complete
};

void MarkDone(EventState& s) {
  MutexLock lock(s.mu);
  s.done = true;
  s.cv.NotifyAll();
}

}  // namespace
}  // namespace ferry::cuda_nccl_stub

using ferry::CondVar;
using ferry::Mutex;
using ferry::MutexLock;
using ferry::cuda_nccl_stub::EventState;

// A stream: one thread that runs its work in the order queued.
struct CUstream_st {
  Mutex mu;    // guards work, running and closing
  CondVar cv;  // signalled when work is queued or done, and at closing
  std::deque<std::function<void()>> work GUARDED_BY(mu);
  bool running GUARDED_BY(mu) = false;  // the thread runs an item taken from work
  bool closing GUARDED_BY(mu) = false;  // cudaStreamDestroy: end once work is empty
  std::thread thread;

  void Loop() {
    pthread_setname_np(pthread_self(), "cuda-stub");
    MutexLock lock(mu);
    for (;;) {
      cv.Wait(mu, [&]() REQUIRES(mu) { return closing || !work.empty(); });
      if (work.empty()) return;  // closing
      std::function<void()> w = std::move(work.front());
      work.pop_front();
      running = true;
      {
        ferry::MutexUnlock unlock(mu);
        w();
      }
      running = false;
      cv.NotifyAll();
    }
  }
  bool Idle() REQUIRES(mu) { return work.empty() && !running; }
};

struct CUevent_st {
  Mutex mu;  // guards state
  // The latest record's completion (shared with the work that completes it).
  std::shared_ptr<EventState> state GUARDED_BY(mu) = std::make_shared<EventState>();

  std::shared_ptr<EventState> State() {
    MutexLock lock(mu);
    return state;
  }
};

namespace ferry::cuda_nccl_stub {

cudaError_t Enqueue(cudaStream_t stream, std::function<void()> work) {
  if (stream == nullptr) {
    work();
    return cudaSuccess;
  }
  MutexLock lock(stream->mu);
  if (stream->closing) return cudaErrorInvalidResourceHandle;
  stream->work.push_back(std::move(work));
  stream->cv.NotifyAll();
  return cudaSuccess;
}

bool IsDeviceMemory(const void* p, size_t bytes) {
  MutexLock lock(G().mu);
  uintptr_t start = 0;
  const Allocation* a = FindLocked(p, &start);
  return a != nullptr && a->type == cudaMemoryTypeDevice &&
         reinterpret_cast<uintptr_t>(p) + bytes <= start + std::max<size_t>(a->bytes, 1);
}

bool TakeInjectedFailure(const std::string& call, int rank, std::string* why) {
  MutexLock lock(G().mu);
  auto& injected = G().injected;
  for (auto it = injected.begin(); it != injected.end(); ++it) {
    if (it->call == call && (it->rank == rank || rank < 0)) {
      *why = it->why;
      injected.erase(it);
      return true;
    }
  }
  return false;
}

void SetDeviceCount(int count) {
  MutexLock lock(G().mu);
  G().devices = count;
}

void FailNextCall(const std::string& call, int rank, const std::string& why) {
  MutexLock lock(G().mu);
  G().injected.push_back(Injected{call, rank, why});
}

int LiveAllocations() {
  MutexLock lock(G().mu);
  return static_cast<int>(G().allocations.size());
}

int BusyStreams() {
  MutexLock lock(G().mu);
  int busy = 0;
  for (CUstream_st* s : G().streams) {
    MutexLock stream_lock(s->mu);
    busy += s->Idle() ? 0 : 1;
  }
  return busy;
}

}  // namespace ferry::cuda_nccl_stub

namespace stub = ferry::cuda_nccl_stub;

extern "C" {

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
  }
  return "unknown error";
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t r = stub::last_error;
  stub::last_error = cudaSuccess;
  return r;
}

cudaError_t cudaPeekAtLastError(void) { return stub::last_error; }

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return stub::Note(cudaErrorInvalidValue);
  MutexLock lock(stub::G().mu);
  *count = stub::G().devices;
  return stub::G().devices > 0 ? cudaSuccess : stub::Note(cudaErrorNoDevice);
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return stub::Note(cudaErrorInvalidValue);
  *device = stub::current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  MutexLock lock(stub::G().mu);
  if (device < 0 || device >= stub::G().devices) return stub::Note(cudaErrorInvalidDevice);
  stub::current_device = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaMalloc(void** ptr, size_t size) {
  return stub::Allocate(ptr, size, cudaMemoryTypeDevice);
}
cudaError_t cudaFree(void* ptr) { return stub::Release(ptr, cudaMemoryTypeDevice); }
cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return stub::Allocate(ptr, size, cudaMemoryTypeHost);
}
cudaError_t cudaFreeHost(void* ptr) { return stub::Release(ptr, cudaMemoryTypeHost); }

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attributes, const void* ptr) {
  if (attributes == nullptr) return stub::Note(cudaErrorInvalidValue);
  *attributes = cudaPointerAttributes{};
  MutexLock lock(stub::G().mu);
  uintptr_t start = 0;
  const stub::Allocation* a = stub::FindLocked(ptr, &start);
  if (a == nullptr) return cudaSuccess;  // cudaMemoryTypeUnregistered, as CUDA 11 and later
  attributes->type = a->type;
  attributes->device = a->device;
  attributes->devicePointer = const_cast<void*>(ptr);
  attributes->hostPointer = a->type == cudaMemoryTypeHost ? const_cast<void*>(ptr) : nullptr;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  const cudaError_t r = stub::CheckCopy(dst, src, count, kind);
  if (r != cudaSuccess) return stub::Note(r);
  if (count > 0) std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  if (count > 0 && !stub::IsDeviceMemory(ptr, count)) return stub::Note(cudaErrorInvalidValue);
  if (count > 0) std::memset(ptr, value, count);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  std::string why;
  if (stub::TakeInjectedFailure("cudaMemcpyAsync", -1, &why)) {
    return stub::Note(cudaErrorInvalidValue);
  }
  const cudaError_t r = stub::CheckCopy(dst, src, count, kind);
  if (r != cudaSuccess) return stub::Note(r);
  return stub::Note(stub::Enqueue(stream, [dst, src, count] {
    if (count > 0) std::memmove(dst, src, count);
  }));
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (stream == nullptr) return stub::Note(cudaErrorInvalidValue);
  auto s = std::make_unique<CUstream_st>();
  CUstream_st* raw = s.get();
  raw->thread = std::thread([raw] { raw->Loop(); });
  {
    MutexLock lock(stub::G().mu);
    stub::G().streams.insert(raw);
  }
  *stream = s.release();
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr) return stub::Note(cudaErrorInvalidResourceHandle);
  {
    MutexLock lock(stub::G().mu);
    stub::G().streams.erase(stream);
  }
  {
    MutexLock lock(stream->mu);
    stream->closing = true;
    stream->cv.NotifyAll();
  }
  stream->thread.join();
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (stream == nullptr) return cudaSuccess;
  MutexLock lock(stream->mu);
  return stream->Idle() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream == nullptr) return cudaSuccess;
  MutexLock lock(stream->mu);
  stream->cv.Wait(stream->mu, [&]() REQUIRES(stream->mu) { return stream->Idle(); });
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr) return stub::Note(cudaErrorInvalidValue);
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr) return stub::Note(cudaErrorInvalidResourceHandle);
  delete event;  // a record still queued keeps its EventState
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return stub::Note(cudaErrorInvalidResourceHandle);
  auto s = std::make_shared<EventState>();
  {
    MutexLock lock(s->mu);
    s->done = false;
  }
  {
    MutexLock lock(event->mu);
    event->state = s;
  }
  return stub::Note(stub::Enqueue(stream, [s] { stub::MarkDone(*s); }));
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (event == nullptr) return stub::Note(cudaErrorInvalidResourceHandle);
  std::shared_ptr<EventState> s = event->State();
  MutexLock lock(s->mu);
  return s->done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return stub::Note(cudaErrorInvalidResourceHandle);
  std::shared_ptr<EventState> s = event->State();
  MutexLock lock(s->mu);
  s->cv.Wait(s->mu, [&]() REQUIRES(s->mu) { return s->done; });
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (event == nullptr) return stub::Note(cudaErrorInvalidResourceHandle);
  std::shared_ptr<EventState> s = event->State();
  return stub::Note(stub::Enqueue(stream, [s] {
    MutexLock lock(s->mu);
    s->cv.Wait(s->mu, [&]() REQUIRES(s->mu) { return s->done; });
  }));
}

}  // extern "C"
