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
#include <list>
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
enum class Stage {
  kQueued,   // submitted, not reduced yet
  kReduced,  // reduced; waiting for the machine's sum (the root) or the BROADCAST (a peer)
  kDone,
};

class NcclGroup : public LocalNccl {
 public:
  NcclGroup(int local_rank, int local_size, int64_t op_timeout_ms, int average_over,
            MachinePushPull push_pull, SendStep send_step, OnFailure on_failure)
      : local_rank_(local_rank),
        local_size_(local_size),
        op_timeout_ms_(op_timeout_ms),
        average_over_(average_over),
        push_pull_(std::move(push_pull)),
        send_step_(std::move(send_step)),
        on_failure_(std::move(on_failure)) {
    thread_ = std::thread([this] { Loop(); });
  }

  ~NcclGroup() override {
    Stop();
    // The thread is gone and the owner stopped the machine push_pulls (local_nccl.h):
    // the communicator and buffers are ours. Abort, not destroy: it never waits for the
    // other ranks.
    if (comm_ != nullptr) ncclCommAbort(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    for (const Pinned& b : pinned_) cudaFreeHost(b.data);
    for (auto& [ticket, item] : items_) {
      if (item.ready != nullptr) cudaEventDestroy(item.ready);
    }
  }

  void Stop() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stopping_) FailLocked(StrCat(Me(), ": the group shut down"));
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
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

  void Go(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t ticket = TakeLocked(queued_, name, "GO");
    if (ticket == 0) return;
    runnable_.push_back(ticket);
    cv_.notify_all();
  }

  void RunStep(Step step, const std::string& name, uint64_t seq,
               const std::string& unique_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) return;  // every tensor failed with it
    if (step == Step::kReduce) {
      if (seq != reduces_ + 1) {
        FailLocked(StrCat(Me(), ": REDUCE number ", seq, " of device tensor '", name,
                          "' after REDUCE ", reduces_, ": a step message was lost"));
        return;
      }
      const uint64_t ticket = TakeLocked(queued_, name, "REDUCE");
      if (ticket == 0) return;
      reduces_ = seq;
      items_[ticket].reduce_seq = seq;
      reducing_[seq] = ticket;
      Work& w = steps_.emplace_back();
      w.ticket = ticket;
      w.unique_id = unique_id;
    } else {
      auto it = reducing_.find(seq);
      if (it == reducing_.end() || items_[it->second].t.name != name) {
        FailLocked(StrCat(Me(), ": BROADCAST of device tensor '", name, "' for REDUCE ", seq,
                          ", which ", it == reducing_.end() ? "this process did not run"
                                                           : "was another tensor's"));
        return;
      }
      steps_.emplace_back().ticket = it->second;
      steps_.back().step = Step::kBroadcast;
      reducing_.erase(it);
    }
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
                              " ms (3 x FERRY_OP_TIMEOUT_MS), ", StateOf(item));
        FailLocked(why);
        // The step the thread runs ends at its next poll of failure_: wait for it, so that
        // no CUDA work on this caller's buffers or event comes after the return.
        cv_.wait(lock, [&] { return item.stage == Stage::kDone; });
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
    uint64_t reduce_seq = 0;      // its REDUCE's number (local_nccl.h, SendStep)
    cudaEvent_t ready = nullptr;  // recorded on t.stream at Submit
    Stage stage = Stage::kQueued;
    bool go = false;  // started: GO (the root) or REDUCE (a peer) came
    std::string error;
    int64_t progress_ms = 0;  // submitted, started, or the thread's last step done
    void* host = nullptr;     // the root's: the pinned machine sum, REDUCE to BROADCAST
    std::string sum_error;    // the root's: the machine push_pull's error
  };
  // A step for the thread, with its item as it was when taken (copied under mu_).
  struct Work {
    Step step = Step::kReduce;
    uint64_t ticket = 0;
    std::string unique_id;  // a peer's first REDUCE
    Item item;
  };
  struct Pinned {
    void* data = nullptr;
    size_t bytes = 0;
    bool busy = false;
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

  // REQUIRES: mu_ held. The oldest ticket of `name` in `from`, marked started; 0 (and
  // the backend failed, naming it) when there is none.
  uint64_t TakeLocked(std::map<std::string, std::deque<uint64_t>>& from, const std::string& name,
                      const char* what) {
    if (!failure_.empty()) return 0;  // every tensor failed with it
    auto it = from.find(name);
    if (it == from.end() || it->second.empty()) {
      FailLocked(StrCat(Me(), ": ", what, " for device tensor '", name,
                        "', which this process has no round of to run"));
      return 0;
    }
    const uint64_t ticket = it->second.front();
    it->second.pop_front();
    if (it->second.empty()) from.erase(it);
    Item& item = items_[ticket];
    item.progress_ms = NowMs();
    item.go = true;
    return ticket;
  }

  void Erase(std::map<uint64_t, Item>::iterator it) {  // REQUIRES: mu_ held
    if (it->second.ready != nullptr) cudaEventDestroy(it->second.ready);
    items_.erase(it);
  }

  // REQUIRES: mu_ held. The running step notices failure_ at its next poll and aborts;
  // its round ends when the thread is done with it (Loop).
  void FailLocked(const std::string& reason) {
    if (!failure_.empty()) return;
    failure_ = reason;
    for (auto& [ticket, item] : items_) {
      if (item.stage != Stage::kDone && ticket != running_) {
        item.stage = Stage::kDone;
        item.error = reason;
      }
    }
    queued_.clear();
    reducing_.clear();
    runnable_.clear();
    summed_.clear();
    steps_.clear();
    cv_.notify_all();
  }

  // The Worker's completion thread: the machine's sum of `ticket` is in its host buffer.
  void OnSummed(uint64_t ticket, const std::string& error) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = items_.find(ticket);
    if (stopping_ || it == items_.end() || it->second.stage == Stage::kDone) return;
    it->second.sum_error = error;
    it->second.progress_ms = NowMs();
    summed_.push_back(ticket);
    cv_.notify_all();
  }

  // Where a started round is, for a timeout's message. REQUIRES: mu_ held.
  std::string StateOf(const Item& item) const {
    if (item.stage == Stage::kQueued) return "queued behind earlier rounds";
    if (local_rank_ != 0) return "reduced, waiting for the local root's BROADCAST";
    return "reduced, waiting for the machine's push_pull through the servers";
  }

  // Throws the backend's failure, if any: before a step queues CUDA work.
  void ThrowIfFailed() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) throw FerryError(ErrorCode::kPeerFailed, failure_);
  }

  // REQUIRES: mu_ held. The root: a summed round's BROADCAST first (it frees a caller),
  // else the next GO's REDUCE; a peer: the root's next step.
  bool HasWorkLocked() const {
    return local_rank_ == 0 ? !summed_.empty() || !runnable_.empty() : !steps_.empty();
  }
  Work TakeWorkLocked() {
    Work w;
    if (local_rank_ != 0) {
      w = std::move(steps_.front());
      steps_.pop_front();
    } else if (!summed_.empty()) {
      w.step = Step::kBroadcast;
      w.ticket = summed_.front();
      summed_.pop_front();
    } else {
      w.step = Step::kReduce;
      w.ticket = runnable_.front();
      runnable_.pop_front();
    }
    running_ = w.ticket;
    w.item = items_.at(w.ticket);
    return w;
  }

  // The "ferry-nccl" thread: runs the steps (local_nccl.h, step 3).
  void Loop() {
    pthread_setname_np(pthread_self(), "ferry-nccl");
    for (;;) {
      Work w;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || HasWorkLocked(); });
        if (stopping_) return;
        w = TakeWorkLocked();
      }
      std::string error;
      try {
        if (w.step == Step::kReduce) {
          Reduce(w);
        } else {
          Broadcast(w);
        }
      } catch (const FerryError& e) {
        error = e.what();
      }
      bool first = false;  // this step's failure is the backend's first: the owner must hear
      {
        std::lock_guard<std::mutex> lock(mu_);
        running_ = 0;
        first = !error.empty() && failure_.empty();
        if (error.empty() && !failure_.empty()) error = failure_;  // it ran into the failure
        auto it = items_.find(w.ticket);
        if (it != items_.end() && it->second.stage != Stage::kDone) {
          it->second.stage =
              !error.empty() || w.step == Step::kBroadcast ? Stage::kDone : Stage::kReduced;
          it->second.error = error;
        }
        if (!error.empty()) FailLocked(error);
        cv_.notify_all();
      }
      if (!error.empty()) {
        if (comm_ != nullptr) ncclCommAbort(comm_);  // frees the other ranks' kernels
        comm_ = nullptr;
        if (first) {
          LOG(ERROR) << error;
          on_failure_(error);
        }
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_; });  // every later round fails at once
        return;
      }
    }
  }

  // REDUCE: the local ranks' sum into the root's host buffer; the root then starts the
  // machine's push_pull of it.
  void Reduce(const Work& w) {
    const DeviceTensor& t = w.item.t;
    if (local_size_ > 1) {
      std::string id = w.unique_id;
      if (local_rank_ == 0) {
        if (comm_ == nullptr) id = NewUniqueId();
        const uint64_t seq = ++reduces_;
        {
          std::lock_guard<std::mutex> lock(mu_);
          auto it = items_.find(w.ticket);
          if (it != items_.end()) it->second.reduce_seq = seq;
        }
        send_step_(Step::kReduce, t.name, seq, id);
      }
      if (comm_ == nullptr) InitComm(id);
    } else if (stream_ == nullptr) {
      InitStream();
    }
    ThrowIfFailed();  // e.g. while send_step_ waited for its owner's lock
    void* host = nullptr;
    if (t.count > 0) {
      const size_t bytes = t.count * DataTypeSize(t.dtype);
      CheckCuda(cudaStreamWaitEvent(stream_, w.item.ready, 0), "cudaStreamWaitEvent");
      if (local_size_ > 1) {
        // The root's output is the machine's sum; a peer's output is not written here.
        CheckNccl(ncclReduce(t.input, t.output, t.count, NcclType(t.dtype), ncclSum, 0, comm_,
                             stream_),
                  "ncclReduce");
        WaitComm("ncclReduce of '" + t.name + "' (enqueueing)");  // non-blocking: may pend
      }
      if (local_rank_ == 0) {
        host = TakeHost(bytes);
        CheckCuda(cudaMemcpyAsync(host, local_size_ > 1 ? t.output : t.input, bytes,
                                  cudaMemcpyDeviceToHost, stream_),
                  "cudaMemcpyAsync (device to host)");
      }
      WaitStream(StrCat(local_size_ > 1 ? "ncclReduce" : "the copy to host memory", " of '",
                        t.name, "'"));
    }
    if (local_rank_ != 0) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = items_.find(w.ticket);
      if (it != items_.end()) it->second.host = host;
    }
    push_pull_(t, host, [this, ticket = w.ticket](const std::string& error) {
      OnSummed(ticket, error);
    });
  }

  // BROADCAST: the machine's sum from the root's host buffer to every rank's output.
  void Broadcast(const Work& w) {
    const DeviceTensor& t = w.item.t;
    const Item& item = w.item;
    if (local_rank_ == 0) {
      if (!item.sum_error.empty()) throw FerryError(ErrorCode::kPeerFailed, item.sum_error);
      if (local_size_ > 1) send_step_(Step::kBroadcast, t.name, item.reduce_seq, "");
    }
    ThrowIfFailed();
    if (t.count == 0) return;
    const size_t bytes = t.count * DataTypeSize(t.dtype);
    if (local_rank_ == 0) {
      if (t.average && average_over_ > 0) Scale(item.host, 1.0 / average_over_, t.count, t.dtype);
      CheckCuda(cudaMemcpyAsync(t.output, item.host, bytes, cudaMemcpyHostToDevice, stream_),
                "cudaMemcpyAsync (host to device)");
    }
    if (local_size_ > 1) {
      CheckNccl(ncclBroadcast(t.output, t.output, t.count, NcclType(t.dtype), 0, comm_, stream_),
                "ncclBroadcast");
      WaitComm("ncclBroadcast of '" + t.name + "' (enqueueing)");
    }
    WaitStream(StrCat(local_size_ > 1 ? "ncclBroadcast" : "the copy to device memory", " of '",
                      t.name, "'"));
    if (local_rank_ == 0) GiveBackHost(item.host);
  }

  // A pinned buffer of at least `bytes`: the smallest free one, else a new one (the free
  // ones too small are freed first: the pool holds at most the rounds in flight, each of
  // the largest size asked since).
  void* TakeHost(size_t bytes) {
    Pinned* best = nullptr;
    for (Pinned& b : pinned_) {
      if (!b.busy && b.bytes >= bytes && (best == nullptr || b.bytes < best->bytes)) best = &b;
    }
    if (best == nullptr) {
      for (auto it = pinned_.begin(); it != pinned_.end();) {
        if (it->busy) {
          ++it;
          continue;
        }
        CheckCuda(cudaFreeHost(it->data), "cudaFreeHost");
        it = pinned_.erase(it);
      }
      void* p = nullptr;
      CheckCuda(cudaMallocHost(&p, bytes), "cudaMallocHost");
      pinned_.push_back(Pinned{p, bytes, false});
      best = &pinned_.back();
    }
    best->busy = true;
    return best->data;
  }

  void GiveBackHost(void* p) {
    for (Pinned& b : pinned_) {
      if (b.data == p) b.busy = false;
    }
  }

  // A step of a round is done: the deadlines of the started rounds move on, and on a peer
  // those of the queued ones too (their REDUCE may wait behind the root's other steps).
  void Touch() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [ticket, item] : items_) {
      if ((item.go || local_rank_ != 0) && item.stage != Stage::kDone) {
        item.progress_ms = NowMs();
      }
    }
  }

  std::string NewUniqueId() const {
    ncclUniqueId id;
    CheckNccl(ncclGetUniqueId(&id), "ncclGetUniqueId", false);
    return std::string(id.internal, sizeof id.internal);
  }

  void InitStream() {
    int device = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      device = device_;
    }
    CheckCuda(cudaSetDevice(device), "cudaSetDevice");
    CheckCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }

  void InitComm(const std::string& id) {
    ncclUniqueId uid;
    FERRY_ENFORCE(id.size() == sizeof uid.internal, ErrorCode::kInternal, Me(),
                  ": the first round came without the NCCL unique id (", id.size(), " bytes)");
    InitStream();
    std::memcpy(uid.internal, id.data(), sizeof uid.internal);
    // Non-blocking: the set-up of the communicator is polled with a deadline, not
    // waited for (a rank that never joins would hang ncclCommInitRank).
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    CheckNccl(ncclCommInitRankConfig(&comm_, local_size_, uid, local_rank_, &config),
              "ncclCommInitRankConfig");
    int device = 0;
    cudaGetDevice(&device);
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
  // FERRY_OP_TIMEOUT_MS. Polling, not a blocking wait, on purpose: a peer that died
  // leaves NCCL's kernel spinning forever, and NCCL's documented way to notice that and
  // abort the communicator is to poll ncclCommGetAsyncError against a deadline (the one
  // loop of the data path that polls; the host path waits on condition variables).
  void WaitStream(const std::string& what) {
    const int64_t deadline = NowMs() + op_timeout_ms_;
    for (int spins = 0;; ++spins) {
      const cudaError_t r = cudaStreamQuery(stream_);
      if (r == cudaSuccess) {
        Touch();
        return;
      }
      if (r != cudaErrorNotReady) CheckCuda(r, what.c_str());
      if (comm_ != nullptr) {
        ncclResult_t state = ncclSuccess;
        CheckNccl(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
        CheckNccl(state, what.c_str());
      }
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
  const int average_over_;
  const MachinePushPull push_pull_;
  const SendStep send_step_;
  const OnFailure on_failure_;

  // The "ferry-nccl" thread's alone (the destructor's after the join).
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::list<Pinned> pinned_;  // the root's host buffers (a list: pointers stay valid)

  std::mutex mu_;                   // guards everything below
  std::condition_variable cv_;      // signalled on GO, steps, sums, failure and stop
  std::map<uint64_t, Item> items_;  // by ticket, until Wait takes it
  using Queues = std::map<std::string, std::deque<uint64_t>>;
  Queues queued_;  // submitted, not started, by name
  std::map<uint64_t, uint64_t> reducing_;  // a peer's: REDUCE number -> ticket, until its BROADCAST
  uint64_t reduces_ = 0;  // REDUCE steps numbered so far (the root's: on its thread)
  uint64_t running_ = 0;  // the ticket whose step the thread runs, or 0
  std::deque<uint64_t> runnable_;  // the root's: GO received, not reduced, in GO order
  std::deque<uint64_t> summed_;    // the root's: the machine's sum came, in that order
  std::deque<Work> steps_;         // a peer's: the root's steps, in their order
  uint64_t next_ticket_ = 1;
  int device_ = -1;  // the GPU of this process's device tensors (the first one's)
  std::string failure_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace

std::unique_ptr<LocalNccl> LocalNccl::Create(int local_rank, int local_size, int64_t op_timeout_ms,
                                             int average_over, MachinePushPull push_pull,
                                             SendStep send_step, OnFailure on_failure) {
  return std::make_unique<NcclGroup>(local_rank, local_size, op_timeout_ms, average_over,
                                     std::move(push_pull), std::move(send_step),
                                     std::move(on_failure));
}

}  // namespace ferry
