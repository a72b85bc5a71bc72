// LocalNccl with CUDA and NCCL (FERRY_HAVE_NCCL): see local_nccl.h.

#include "worker/local/local_nccl.h"

#include <cuda_runtime_api.h>
#include <glog/logging.h>
#include <nccl.h>
#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "common/util/clock.h"
#include "common/util/status.h"

namespace ferry {

bool LocalNccl::Built() { return true; }

namespace {

ncclDataType_t NcclType(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
  }
  throw FerryError(ErrorCode::kInvalidArgument, StrCat("no NCCL type for ", DataTypeName(t)));
}

std::string CudaText(cudaError_t r) {
  cudaGetLastError();  // a non-sticky error must not resurface in a later call
  return StrCat(cudaGetErrorName(r), " (", cudaGetErrorString(r), ")");
}

// Where a device push_pull is: what a timeout or an error names.
enum class Stage { kQueued, kStarted, kDone };

class NcclGroup : public LocalNccl {
 public:
  NcclGroup(int local_rank, int local_size, int64_t op_timeout_ms, MachinePushPull push_pull,
            OnFailure on_failure)
      : local_rank_(local_rank),
        local_size_(local_size),
        op_timeout_ms_(op_timeout_ms),
        push_pull_(std::move(push_pull)),
        on_failure_(std::move(on_failure)) {
    thread_ = std::thread([this] { Loop(); });
  }

  ~NcclGroup() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
    // The thread is gone: the communicator and buffers are ours. Abort, not destroy: it
    // never waits for the other ranks.
    if (comm_ != nullptr) ncclCommAbort(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (host_ != nullptr) cudaFreeHost(host_);
    for (auto& [ticket, item] : items_) {
      if (item.ready != nullptr) cudaEventDestroy(item.ready);
    }
  }

  uint64_t Submit(const DeviceTensor& t) override {
    const int device = CheckTensor(t);
    cudaEvent_t ready = RecordReady(t, device);
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) {
      cudaEventDestroy(ready);
      throw FerryError(ErrorCode::kPeerFailed, failure_);
    }
    if (device_ < 0) device_ = device;
    if (device != device_) {
      cudaEventDestroy(ready);
      throw FerryError(ErrorCode::kInvalidArgument,
                       StrCat(Me(), ": push_pull of '", t.name, "' on GPU ", device,
                              ", but this process's earlier device tensors were on GPU ", device_,
                              " (one GPU per local rank)"));
    }
    const uint64_t ticket = next_ticket_++;
    Item& item = items_[ticket];
    item.t = t;
    item.ready = ready;
    item.progress_ms = NowMs();
    queued_[t.name].push_back(ticket);
    return ticket;
  }

  std::string TakeUniqueId() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (id_taken_) return "";
    id_taken_ = true;
    ncclUniqueId id;
    CheckNccl(ncclGetUniqueId(&id), "ncclGetUniqueId", false);
    return std::string(id.internal, sizeof id.internal);
  }

  void Go(const std::string& name, const std::string& unique_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) return;  // every tensor failed with it
    auto it = queued_.find(name);
    if (it == queued_.end() || it->second.empty()) {
      FailLocked(
          StrCat(Me(), ": GO for device tensor '", name, "', which this process did not submit"));
      return;
    }
    const uint64_t ticket = it->second.front();
    it->second.pop_front();
    if (it->second.empty()) queued_.erase(it);
    if (!unique_id.empty()) unique_id_ = unique_id;
    items_[ticket].progress_ms = NowMs();
    items_[ticket].go = true;
    runnable_.push_back(ticket);
    cv_.notify_all();
  }

  void Wait(uint64_t ticket) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = items_.find(ticket);
    FERRY_ENFORCE(it != items_.end(), ErrorCode::kInvalidArgument, "unknown device ticket ",
                  ticket);
    Item& item = it->second;
    // The thread's own deadlines (each step, FERRY_OP_TIMEOUT_MS; the Worker's for the
    // machine's push_pull) end a started round first; this one ends a round without a GO
    // (a local rank that does not call), or one the thread does not get to.
    while (item.stage != Stage::kDone) {
      const int64_t deadline = item.progress_ms + (item.go ? 3 : 1) * op_timeout_ms_;
      if (NowMs() >= deadline) {
        const std::string why =
            !item.go ? StrCat(Me(), ": push_pull of device tensor '", item.t.name,
                              "' did not start within ", op_timeout_ms_,
                              " ms (FERRY_OP_TIMEOUT_MS): the local root starts a round once "
                              "every local rank has called it")
                     : StrCat(Me(), ": push_pull of device tensor '", item.t.name,
                              "' made no progress within ", 3 * op_timeout_ms_,
                              " ms (3 x FERRY_OP_TIMEOUT_MS)",
                              item.stage == Stage::kQueued ? ", queued behind earlier rounds" : "");
        FailLocked(why);
        Erase(it);
        lock.unlock();
        on_failure_(why);  // without mu_: the owner's Fail calls ours
        throw FerryError(ErrorCode::kTimeout, why);
      }
      cv_.wait_for(lock, Millis(deadline - NowMs()));
    }
    const std::string error = item.error;
    Erase(it);
    if (!error.empty()) throw FerryError(ErrorCode::kPeerFailed, error);
  }

  void Fail(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    FailLocked(reason);
  }

 private:
  struct Item {
    DeviceTensor t;
    cudaEvent_t ready = nullptr;  // recorded on t.stream at Submit
    Stage stage = Stage::kQueued;
    bool go = false;  // its GO came: it waits for the thread, or runs
    std::string error;
    int64_t progress_ms = 0;  // submitted, GO, or the thread's last step done
  };

  std::string Me() const {
    return StrCat("NCCL backend of local rank ", local_rank_, " (pid ", getpid(), ")");
  }

  void CheckCuda(cudaError_t r, const char* call) const {
    if (r == cudaSuccess) return;
    throw FerryError(ErrorCode::kInternal,
                     StrCat(Me(), ": CUDA call ", call, " failed: ", CudaText(r)));
  }

  // `on_thread`: called on the "ferry-nccl" thread, which alone may read comm_.
  void CheckNccl(ncclResult_t r, const char* call, bool on_thread = true) const {
    if (r == ncclSuccess || r == ncclInProgress) return;
    const char* last = ncclGetLastError(on_thread ? comm_ : nullptr);
    throw FerryError(ErrorCode::kInternal,
                     StrCat(Me(), ": NCCL call ", call, " failed: ", ncclGetErrorString(r), " (",
                            static_cast<int>(r), ")",
                            last != nullptr && *last != 0 ? StrCat(": ", last) : std::string()));
  }

  // The caller's thread: the GPU of t's memory. Throws naming what is wrong.
  int CheckTensor(const DeviceTensor& t) const {
    int devices = 0;
    const cudaError_t r = cudaGetDeviceCount(&devices);
    FERRY_ENFORCE(r == cudaSuccess && devices > 0, ErrorCode::kInvalidArgument, Me(),
                  ": push_pull of device tensor '", t.name, "': no usable GPU here (",
                  r == cudaSuccess ? std::string("no CUDA device") : CudaText(r), ")");
    if (t.count == 0) {
      int current = 0;
      CheckCuda(cudaGetDevice(&current), "cudaGetDevice");
      return current;
    }
    int device = -1;
    for (const void* p : {t.input, static_cast<const void*>(t.output)}) {
      cudaPointerAttributes attr;
      const cudaError_t a = cudaPointerGetAttributes(&attr, p);
      FERRY_ENFORCE(a == cudaSuccess &&
                        (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged),
                    ErrorCode::kInvalidArgument, Me(), ": push_pull of device tensor '", t.name,
                    "': ", p == t.input ? "input" : "output", " ", p, " is not CUDA device memory",
                    a == cudaSuccess ? std::string() : StrCat(" (", CudaText(a), ")"));
      FERRY_ENFORCE(device < 0 || attr.device == device, ErrorCode::kInvalidArgument, Me(),
                    ": push_pull of device tensor '", t.name, "': input on GPU ", device,
                    ", output on GPU ", attr.device);
      device = attr.device;
    }
    return device;
  }

  // The caller's thread: an event after the work on t.stream that writes the input.
  cudaEvent_t RecordReady(const DeviceTensor& t, int device) const {
    int current = 0;
    CheckCuda(cudaGetDevice(&current), "cudaGetDevice");
    if (current != device) CheckCuda(cudaSetDevice(device), "cudaSetDevice");
    cudaEvent_t ready = nullptr;
    cudaError_t r = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
    if (r == cudaSuccess) r = cudaEventRecord(ready, static_cast<cudaStream_t>(t.stream));
    if (current != device) cudaSetDevice(current);
    if (r != cudaSuccess && ready != nullptr) cudaEventDestroy(ready);
    CheckCuda(r, "cudaEventRecord (on the caller's stream)");
    return ready;
  }

  void Erase(std::map<uint64_t, Item>::iterator it) {  // REQUIRES: mu_ held
    if (it->second.ready != nullptr) cudaEventDestroy(it->second.ready);
    items_.erase(it);
  }

  // REQUIRES: mu_ held. A running round notices failure_ at its next poll and aborts.
  void FailLocked(const std::string& reason) {
    if (!failure_.empty()) return;
    failure_ = reason;
    for (auto& [ticket, item] : items_) {
      if (item.stage != Stage::kDone) {
        item.stage = Stage::kDone;
        item.error = reason;
      }
    }
    queued_.clear();
    runnable_.clear();
    cv_.notify_all();
  }

  // The "ferry-nccl" thread: runs the rounds in the order of their GOs.
  void Loop() {
    pthread_setname_np(pthread_self(), "ferry-nccl");
    for (;;) {
      uint64_t ticket = 0;
      DeviceTensor t;
      cudaEvent_t ready = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !runnable_.empty(); });
        if (stopping_) return;
        ticket = runnable_.front();
        runnable_.pop_front();
        Item& item = items_[ticket];
        item.stage = Stage::kStarted;
        item.progress_ms = NowMs();
        t = item.t;
        ready = item.ready;
      }
      std::string error;
      try {
        Run(t, ready);
      } catch (const FerryError& e) {
        error = e.what();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = items_.find(ticket);
        if (it != items_.end() && it->second.stage != Stage::kDone) {
          it->second.stage = Stage::kDone;
          it->second.error = error;
        }
        if (!error.empty()) FailLocked(error);
        cv_.notify_all();
      }
      if (!error.empty()) {
        LOG(ERROR) << error;
        if (comm_ != nullptr) ncclCommAbort(comm_);  // frees the other ranks' kernels
        comm_ = nullptr;
        on_failure_(error);
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_; });  // every later round fails at once
        return;
      }
    }
  }

  // The "ferry-nccl" thread: one round (local_nccl.h, step 3).
  void Run(const DeviceTensor& t, cudaEvent_t ready) {
    if (comm_ == nullptr) InitComm();
    const size_t bytes = t.count * DataTypeSize(t.dtype);
    if (t.count == 0) {  // every rank skips NCCL alike; the servers still see the round
      if (local_rank_ == 0) push_pull_(t, nullptr);
      return;
    }
    const ncclDataType_t type = NcclType(t.dtype);
    CheckCuda(cudaStreamWaitEvent(stream_, ready, 0), "cudaStreamWaitEvent");
    // The root's output is the machine's sum; a peer's output is not written here.
    CheckNccl(ncclReduce(t.input, t.output, t.count, type, ncclSum, 0, comm_, stream_),
              "ncclReduce");
    WaitComm("ncclReduce of '" + t.name + "' (enqueueing)");  // non-blocking: may be pending
    WaitStream("ncclReduce of '" + t.name + "'");
    if (local_rank_ == 0) {
      if (host_bytes_ < bytes) {
        if (host_ != nullptr) CheckCuda(cudaFreeHost(host_), "cudaFreeHost");
        host_ = nullptr;
        host_bytes_ = 0;
        CheckCuda(cudaMallocHost(&host_, bytes), "cudaMallocHost");
        host_bytes_ = bytes;
      }
      CheckCuda(cudaMemcpyAsync(host_, t.output, bytes, cudaMemcpyDeviceToHost, stream_),
                "cudaMemcpyAsync (device to host)");
      WaitStream("the copy of '" + t.name + "' to host memory");
      push_pull_(t, host_);
      Touch();
      CheckCuda(cudaMemcpyAsync(t.output, host_, bytes, cudaMemcpyHostToDevice, stream_),
                "cudaMemcpyAsync (host to device)");
    }
    CheckNccl(ncclBroadcast(t.output, t.output, t.count, type, 0, comm_, stream_), "ncclBroadcast");
    WaitComm("ncclBroadcast of '" + t.name + "' (enqueueing)");
    // A peer's broadcast also waits for the root's push_pull through the servers (whose
    // own deadline is FERRY_OP_TIMEOUT_MS): the root fails first and aborts.
    WaitStream("ncclBroadcast of '" + t.name + "'", local_rank_ == 0 ? 1 : 2);
  }

  // A step of the running round is done: the deadlines of the rounds with a GO (running,
  // or queued behind it) move on.
  void Touch() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [ticket, item] : items_) {
      if (item.go && item.stage != Stage::kDone) item.progress_ms = NowMs();
    }
  }

  void InitComm() {
    std::string id;
    int device = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      id = unique_id_;
      device = device_;
    }
    FERRY_ENFORCE(id.size() == sizeof(ncclUniqueId), ErrorCode::kInternal, Me(),
                  ": the first round came without the NCCL unique id (", id.size(), " bytes)");
    CheckCuda(cudaSetDevice(device), "cudaSetDevice");
    CheckCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    ncclUniqueId uid;
    std::memcpy(uid.internal, id.data(), sizeof uid.internal);
    // Non-blocking: the set-up of the communicator is polled with a deadline, not
    // waited for (a rank that never joins would hang ncclCommInitRank).
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    CheckNccl(ncclCommInitRankConfig(&comm_, local_size_, uid, local_rank_, &config),
              "ncclCommInitRankConfig");
    WaitComm(
        StrCat("the set-up of the NCCL communicator (", local_size_, " ranks, GPU ", device, ")"));
    LOG(INFO) << Me() << ": NCCL communicator of " << local_size_ << " local ranks on GPU "
              << device;
  }

  // Polls the communicator until its pending call is over (non-blocking mode).
  void WaitComm(const std::string& what) {
    const int64_t deadline = NowMs() + op_timeout_ms_;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      CheckNccl(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
      if (state == ncclSuccess) return;
      CheckNccl(state, what.c_str());
      CheckDeadline(deadline, what);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  // Polls the stream (and the communicator's errors) until its work is done, for at most
  // `timeouts` x FERRY_OP_TIMEOUT_MS. Polling, not a blocking wait, on purpose: a peer that
  // died leaves NCCL's kernel spinning forever, and NCCL's documented way to notice that
  // and abort the communicator is to poll ncclCommGetAsyncError against a deadline (the
  // one loop of the data path that polls; the host path waits on condition variables).
  void WaitStream(const std::string& what, int timeouts = 1) {
    const int64_t deadline = NowMs() + timeouts * op_timeout_ms_;
    for (int spins = 0;; ++spins) {
      const cudaError_t r = cudaStreamQuery(stream_);
      if (r == cudaSuccess) {
        Touch();
        return;
      }
      if (r != cudaErrorNotReady) CheckCuda(r, what.c_str());
      ncclResult_t state = ncclSuccess;
      CheckNccl(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
      CheckNccl(state, what.c_str());
      CheckDeadline(deadline, what);
      if (spins < 1000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  void CheckDeadline(int64_t deadline, const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failure_.empty()) throw FerryError(ErrorCode::kPeerFailed, failure_);
    }
    if (NowMs() < deadline) return;
    throw FerryError(ErrorCode::kTimeout,
                     StrCat(Me(), ": ", what,
                            " did not finish by its deadline (FERRY_OP_TIMEOUT_MS=", op_timeout_ms_,
                            " ms); is every local rank alive and calling?"));
  }

  const int local_rank_, local_size_;
  const int64_t op_timeout_ms_;
  const MachinePushPull push_pull_;
  const OnFailure on_failure_;

  // The "ferry-nccl" thread's alone (the destructor's after the join).
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* host_ = nullptr;  // pinned: the root's machine sum
  size_t host_bytes_ = 0;

  std::mutex mu_;                   // guards everything below
  std::condition_variable cv_;      // signalled on GO, on a finished round, on failure and stop
  std::map<uint64_t, Item> items_;  // by ticket, until Wait takes it
  std::map<std::string, std::deque<uint64_t>> queued_;  // submitted, no GO yet, by name
  std::deque<uint64_t> runnable_;                       // GO received, in GO order
  uint64_t next_ticket_ = 1;
  int device_ = -1;        // the GPU of this process's device tensors (the first one's)
  std::string unique_id_;  // from the first GO
  bool id_taken_ = false;
  std::string failure_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace

std::unique_ptr<LocalNccl> LocalNccl::Create(int local_rank, int local_size, int64_t op_timeout_ms,
                                             MachinePushPull push_pull, OnFailure on_failure) {
  return std::make_unique<NcclGroup>(local_rank, local_size, op_timeout_ms, std::move(push_pull),
                                     std::move(on_failure));
}

}  // namespace ferry
