// NcclGroup's steps on the GPU, on the "ferry-nccl" thread: REDUCE, BROADCAST, the
// communicator, the pinned host buffers and the polls with deadlines. See nccl_group.h
// and local_nccl.h.

#include <glog/logging.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/reduce/reduce.h"
#include "common/util/clock.h"
#include "common/util/status.h"
#include "worker/local/nccl_calls.h"
#include "worker/local/nccl_group.h"

namespace ferry {

// REDUCE: the local ranks' sum into the root's host buffer; the root then starts the
// machine's push_pull of it.
void NcclGroup::Reduce(const Work& w) {
  const DeviceTensor& t = w.item.t;
  BeginReduce(w);
  ThrowIfFailed();  // e.g. while send_step_ waited for its owner's lock
  void* host = t.count > 0 ? ReduceToHost(t, w.item.ready) : nullptr;
  if (local_rank_ != 0) return;
  {
    MutexLock lock(mu_);
    auto it = items_.find(w.ticket);
    if (it != items_.end()) it->second.host = host;
  }
  push_pull_(t, host,
             [this, ticket = w.ticket](const std::string& error) { OnSummed(ticket, error); });
}

// Before a REDUCE's GPU work: the root numbers it and tells the peers (with the unique
// id the first time); the first one makes the communicator (L > 1) or the stream.
void NcclGroup::BeginReduce(const Work& w) {
  if (local_size_ == 1) {
    if (stream_ == nullptr) InitStream();
    return;
  }
  std::string id = w.unique_id;
  if (local_rank_ == 0) {
    if (comm_ == nullptr) id = NewUniqueId(Me());
    uint64_t seq = 0;
    {
      MutexLock lock(mu_);
      seq = ++reduces_;
      auto it = items_.find(w.ticket);
      if (it != items_.end()) it->second.reduce_seq = seq;
    }
    send_step_(Step::kReduce, w.item.t.name, seq, id);
  }
  if (comm_ == nullptr) InitComm(id);
}

// The GPU work of a REDUCE of t (t.count > 0), after the caller's `ready`: ncclReduce
// (L > 1), and on the root the copy of the sum to a pinned buffer, which it returns.
void* NcclGroup::ReduceToHost(const DeviceTensor& t, cudaEvent_t ready) {
  const size_t bytes = t.count * DataTypeSize(t.dtype);
  CheckCuda(cudaStreamWaitEvent(stream_, ready, 0), "cudaStreamWaitEvent", Me());
  if (local_size_ > 1) {
    // The root's output is the machine's sum; a peer's output is not written here.
    CheckNccl(ncclReduce(t.input, t.output, t.count, NcclType(t.dtype), ncclSum, 0, comm_, stream_),
              "ncclReduce", comm_, Me());
    WaitComm("ncclReduce of '" + t.name + "' (enqueueing)");  // non-blocking: may pend
  }
  void* host = nullptr;
  if (local_rank_ == 0) {
    host = TakeHost(bytes);
    CheckCuda(cudaMemcpyAsync(host, local_size_ > 1 ? t.output : t.input, bytes,
                              cudaMemcpyDeviceToHost, stream_),
              "cudaMemcpyAsync (device to host)", Me());
  }
  WaitStream(
      StrCat(local_size_ > 1 ? "ncclReduce" : "the copy to host memory", " of '", t.name, "'"));
  return host;
}

// BROADCAST: the machine's sum from the root's host buffer to every rank's output.
void NcclGroup::Broadcast(const Work& w) {
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
              "cudaMemcpyAsync (host to device)", Me());
  }
  if (local_size_ > 1) {
    CheckNccl(ncclBroadcast(t.output, t.output, t.count, NcclType(t.dtype), 0, comm_, stream_),
              "ncclBroadcast", comm_, Me());
    WaitComm("ncclBroadcast of '" + t.name + "' (enqueueing)");
  }
  WaitStream(StrCat(local_size_ > 1 ? "ncclBroadcast" : "the copy to device memory", " of '",
                    t.name, "'"));
  if (local_rank_ == 0) GiveBackHost(item.host);
}

// A pinned buffer of at least `bytes`: the smallest free one, else a new one (the free
// ones too small are freed first: the pool holds at most the rounds in flight, each of
// the largest size asked since).
void* NcclGroup::TakeHost(size_t bytes) {
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
      CheckCuda(cudaFreeHost(it->data), "cudaFreeHost", Me());
      it = pinned_.erase(it);
    }
    void* p = nullptr;
    CheckCuda(cudaMallocHost(&p, bytes), "cudaMallocHost", Me());
    pinned_.push_back(Pinned{p, bytes, false});
    best = &pinned_.back();
  }
  best->busy = true;
  return best->data;
}

void NcclGroup::GiveBackHost(void* p) {
  for (Pinned& b : pinned_) {
    if (b.data == p) b.busy = false;
  }
}

void NcclGroup::InitStream() {
  int device = 0;
  {
    MutexLock lock(mu_);
    device = device_;
  }
  CheckCuda(cudaSetDevice(device), "cudaSetDevice", Me());
  CheckCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate", Me());
}

void NcclGroup::InitComm(const std::string& id) {
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
            "ncclCommInitRankConfig", nullptr, Me());
  int device = 0;
  cudaGetDevice(&device);
  WaitComm(
      StrCat("the set-up of the NCCL communicator (", local_size_, " ranks, GPU ", device, ")"));
  LOG(INFO) << Me() << ": NCCL communicator of " << local_size_ << " local ranks on GPU " << device;
}

// Polls the communicator until its pending call is over (non-blocking mode).
void NcclGroup::WaitComm(const std::string& what) {
  const int64_t deadline = NowMs() + op_timeout_ms_;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    CheckNccl(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", comm_, Me());
    if (state == ncclSuccess) return;
    CheckNccl(state, what.c_str(), comm_, Me());
    CheckDeadline(deadline, what);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// Polls the stream (and the communicator's errors) until its work is done, for at most
// FERRY_OP_TIMEOUT_MS. Polling, not a blocking wait, on purpose: a peer that died
// leaves NCCL's kernel spinning forever, and NCCL's documented way to notice that and
// abort the communicator is to poll ncclCommGetAsyncError against a deadline (the one
// loop of the data path that polls; the host path waits on condition variables).
void NcclGroup::WaitStream(const std::string& what) {
  const int64_t deadline = NowMs() + op_timeout_ms_;
  for (int spins = 0;; ++spins) {
    const cudaError_t r = cudaStreamQuery(stream_);
    if (r == cudaSuccess) {
      Touch();
      return;
    }
    if (r != cudaErrorNotReady) CheckCuda(r, what.c_str(), Me());
    if (comm_ != nullptr) {
      ncclResult_t state = ncclSuccess;
      CheckNccl(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", comm_, Me());
      CheckNccl(state, what.c_str(), comm_, Me());
    }
    CheckDeadline(deadline, what);
    if (spins < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

// After a failed step: ends this rank's NCCL kernels (ncclCommAbort; the other ranks'
// end when their own steps fail) and waits until the stream ran the work queued behind
// them, for at most FERRY_OP_TIMEOUT_MS (then it says so and goes on).
void NcclGroup::AbortAndDrain() {
  if (comm_ != nullptr) ncclCommAbort(comm_);
  comm_ = nullptr;
  if (stream_ == nullptr) return;
  const int64_t deadline = NowMs() + op_timeout_ms_;
  while (cudaStreamQuery(stream_) == cudaErrorNotReady) {
    if (NowMs() >= deadline) {
      LOG(ERROR) << Me() << ": the stream still runs work of the failed step after "
                 << op_timeout_ms_ << " ms (FERRY_OP_TIMEOUT_MS)";
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace ferry
