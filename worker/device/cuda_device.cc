#include "worker/device/cuda_device.h"

#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <utility>

#include "common/util/error.h"
#include "common/util/mutex.h"
#include "common/util/strings.h"
#include "server/gpu/cuda_check.h"

namespace ferry {
namespace {

class CudaDevice : public DeviceApi {
 public:
  explicit CudaDevice(int device) : device_(device) {
    SetDevice();
    cudaDeviceProp prop{};
    FERRY_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    name_ = prop.name;
  }
  ~CudaDevice() override {
    MutexLock lock(mu_);
    for (auto& [id, s] : streams_) {
      if (adopted_.count(s) == 0) cudaStreamDestroy(s);
    }
    for (auto& [id, e] : events_) cudaEventDestroy(e);
  }

  std::string Describe() const override { return StrCat("cuda:", device_, " (", name_, ")"); }

  Stream NewStream() override {
    SetDevice();
    cudaStream_t s = nullptr;
    FERRY_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return Add(streams_, s);
  }
  Stream Adopt(uintptr_t native) override {
    if (native == 0) return 0;
    cudaStream_t s = reinterpret_cast<cudaStream_t>(native);
    MutexLock lock(mu_);  // one look and one insertion: a stream is adopted once
    auto [it, fresh] = adopted_.emplace(s, next_);
    if (fresh) streams_[next_++] = s;
    return it->second;
  }
  void DestroyStream(Stream id) override {
    cudaStream_t s = Take(streams_, id);
    if (s == nullptr) return;
    {
      MutexLock lock(mu_);
      if (adopted_.erase(s) > 0) return;  // not ours
    }
    FERRY_CUDA_CHECK(cudaStreamDestroy(s));
  }
  Event NewEvent() override {
    SetDevice();
    cudaEvent_t e = nullptr;
    FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return Add(events_, e);
  }
  void DestroyEvent(Event id) override {
    if (cudaEvent_t e = Take(events_, id)) FERRY_CUDA_CHECK(cudaEventDestroy(e));
  }
  void Record(Event e, Stream s) override {
    SetDevice();
    FERRY_CUDA_CHECK(cudaEventRecord(EventOf(e), StreamOf(s)));
  }
  void Wait(Stream s, Event e) override {
    SetDevice();
    FERRY_CUDA_CHECK(cudaStreamWaitEvent(StreamOf(s), EventOf(e), 0));
  }
  bool Query(Event e) override {
    const cudaError_t r = cudaEventQuery(EventOf(e));
    if (r == cudaErrorNotReady) {
      cudaGetLastError();  // not an error: clear it
      return false;
    }
    FERRY_CUDA_CHECK(r);
    return true;
  }
  void Synchronize(Event e) override { FERRY_CUDA_CHECK(cudaEventSynchronize(EventOf(e))); }
  void CopyToHost(void* host, const void* device, size_t bytes, Stream s) override {
    SetDevice();
    FERRY_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, StreamOf(s)));
  }
  void CopyToDevice(void* device, const void* host, size_t bytes, Stream s) override {
    SetDevice();
    FERRY_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, StreamOf(s)));
  }
  void HostCallback(Stream s, std::function<void()> fn) override {
    SetDevice();
    auto* heap = new std::function<void()>(std::move(fn));
    const cudaError_t r = cudaLaunchHostFunc(StreamOf(s), &RunCallback, heap);
    if (r != cudaSuccess) delete heap;
    FERRY_CUDA_CHECK(r);
  }
  void* AllocPinned(size_t bytes) override {
    SetDevice();
    void* p = nullptr;
    FERRY_CUDA_CHECK(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable));
    return p;
  }
  void FreePinned(void* p) override {
    if (p != nullptr) FERRY_CUDA_CHECK(cudaFreeHost(p));
  }
  void* AllocDevice(size_t bytes) override {
    SetDevice();
    void* p = nullptr;
    FERRY_CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
    return p;
  }
  void FreeDevice(void* p) override {
    if (p != nullptr) FERRY_CUDA_CHECK(cudaFree(p));
  }

 private:
  static void CUDART_CB RunCallback(void* arg) {
    auto* fn = static_cast<std::function<void()>*>(arg);
    (*fn)();
    delete fn;
  }
  void SetDevice() const { FERRY_CUDA_CHECK(cudaSetDevice(device_)); }
  // A new id for handle h in `handles` (streams_ or events_).
  template <typename T>
  uint64_t Add(std::map<uint64_t, T>& handles, T h) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    const uint64_t id = next_++;
    handles[id] = h;
    return id;
  }
  // The handle of `id`, forgotten; null if unknown.
  template <typename T>
  T Take(std::map<uint64_t, T>& handles, uint64_t id) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    auto it = handles.find(id);
    if (it == handles.end()) return T{};
    const T h = it->second;
    handles.erase(it);
    return h;
  }
  cudaStream_t StreamOf(Stream id) EXCLUDES(mu_) {
    if (id == 0) return nullptr;  // the legacy default stream
    MutexLock lock(mu_);
    auto it = streams_.find(id);
    FERRY_ENFORCE(it != streams_.end(), ErrorCode::kInvalidArgument, Describe(), ": no stream ",
                  id);
    return it->second;
  }
  cudaEvent_t EventOf(Event id) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    auto it = events_.find(id);
    FERRY_ENFORCE(it != events_.end(), ErrorCode::kInvalidArgument, Describe(), ": no event ", id);
    return it->second;
  }

  const int device_;
  std::string name_;
  Mutex mu_;
  std::map<uint64_t, cudaStream_t> streams_ GUARDED_BY(mu_);
  std::map<cudaStream_t, Stream> adopted_ GUARDED_BY(mu_);  // Adopt()ed: not destroyed here
  std::map<uint64_t, cudaEvent_t> events_ GUARDED_BY(mu_);
  uint64_t next_ GUARDED_BY(mu_) = 1;
};

}  // namespace

std::unique_ptr<DeviceApi> NewCudaDevice(int device) {
  return std::make_unique<CudaDevice>(device);
}

bool CudaBuilt() { return true; }

}  // namespace ferry
