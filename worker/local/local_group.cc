#include "worker/local/local_group.h"

#include "common/util/status.h"
#include "worker/local/local_peer.h"
#include "worker/local/local_root.h"
#include "worker/reserved_tensor_names.h"

namespace ferry {

LocalGroup::LocalGroup(const Config& config) : config_(config) {}

LocalGroup::~LocalGroup() = default;

std::unique_ptr<LocalGroup> LocalGroup::Create(const Config& config) {
  FERRY_ENFORCE(config.local.size == 1 || !config.server.async, ErrorCode::kInvalidConfig,
                "FERRY_ENABLE_ASYNC=1 is not supported with FERRY_LOCAL_SIZE=", config.local.size);
  std::unique_ptr<LocalGroup> g(new LocalGroup(config));
  if (config.local.size == 1) {
    g->worker_ = Worker::Create(config);
  } else if (config.local.rank == 0) {
    g->root_ = LocalRoot::Create(config);
  } else {
    g->peer_ = LocalPeer::Create(config);
  }
  return g;
}

Worker& LocalGroup::WorkerFor(const char* what) const {
  if (worker_) return *worker_;
  if (root_) return root_->worker();
  throw FerryError(ErrorCode::kInvalidArgument,
                   StrCat(what, " is not available on local rank ", config_.local.rank,
                          " (FERRY_LOCAL_SIZE=", config_.local.size,
                          "): only local rank 0 talks to the servers; make the call there"));
}

int LocalGroup::rank() const {
  if (root_) return root_->rank();
  if (peer_) return peer_->rank();
  return worker_->rank();
}

int LocalGroup::size() const {
  if (root_) return root_->size();
  if (peer_) return peer_->size();
  return worker_->size();
}

int LocalGroup::num_servers() const {
  return peer_ ? peer_->num_servers() : WorkerFor("num_servers").num_servers();
}

int LocalGroup::DeclareTensor(const std::string& name, DataType dtype,
                              const std::vector<int64_t>& shape, std::optional<int> priority) {
  CheckUserTensorName("declaration", name);
  if (peer_) return DeclareLocally(name, dtype, shape);
  return WorkerFor("DeclareTensor").DeclareTensor(name, dtype, shape, priority);
}

int LocalGroup::DeclareLocally(const std::string& name, DataType dtype,
                               const std::vector<int64_t>& shape) {
  MutexLock lock(mu_);
  auto it = declared_.find(name);
  if (it == declared_.end()) {
    const int id = static_cast<int>(declared_.size());
    declared_[name] = Declared{id, dtype, shape};
    return id;
  }
  FERRY_ENFORCE(it->second.dtype == dtype && it->second.shape == shape, ErrorCode::kMismatch,
                "tensor '", name, "' declared again with another dtype or shape (",
                DataTypeName(dtype), " vs ", DataTypeName(it->second.dtype), ")");
  return it->second.id;
}

Handle LocalGroup::PushPullAsync(const std::string& name, const void* input, void* output,
                                 DataType dtype, uint64_t count, bool average,
                                 std::optional<int> priority) {
  CheckUserTensorName("push_pull", name);
  if (worker_) return worker_->PushPullAsync(name, input, output, dtype, count, average, priority);
  {
    MutexLock lock(mu_);
    operations_++;
  }
  if (root_) {
    return root_->PushPullAsync(name, input, output, dtype, count, average, priority);
  }
  return peer_->PushPullAsync(name, input, output, dtype, count, average);
}

bool LocalGroup::Poll(Handle handle) {
  if (root_) return root_->Poll(handle);
  if (peer_) return peer_->Poll(handle);
  return worker_->Poll(handle);
}

void LocalGroup::Wait(Handle handle) {
  if (root_) return root_->Wait(handle);
  if (peer_) return peer_->Wait(handle);
  worker_->Wait(handle);
}

bool LocalGroup::WaitFor(Handle handle, int64_t timeout_ms) {
  if (root_) return root_->WaitFor(handle, timeout_ms);
  if (peer_) return peer_->WaitFor(handle, timeout_ms);
  return worker_->WaitFor(handle, timeout_ms);
}

Handle LocalGroup::WaitAny(const std::vector<Handle>& handles, int64_t timeout_ms) {
  if (root_) return root_->WaitAny(handles, timeout_ms);
  if (peer_) return peer_->WaitAny(handles, timeout_ms);
  return worker_->WaitAny(handles, timeout_ms);
}

Handle LocalGroup::PushPullRowsAsync(const std::string& name, const int64_t* rows,
                                     uint64_t num_rows, const void* values, void* output,
                                     DataType dtype, bool average, std::optional<int> priority) {
  FERRY_ENFORCE(worker_ != nullptr, ErrorCode::kInvalidArgument, "push_pull_rows of '", name,
                "' is not supported with FERRY_LOCAL_SIZE=", config_.local.size,
                ": the local group reduces dense tensors only (its ranks' row lists would have "
                "to be merged first); run one process per DMLC_WORKER_ID for sparse rows");
  return worker_->PushPullRowsAsync(name, rows, num_rows, values, output, dtype, average,
                                    priority);
}

void LocalGroup::PushPullRows(const std::string& name, const int64_t* rows, uint64_t num_rows,
                              const void* values, void* output, DataType dtype, bool average) {
  Wait(PushPullRowsAsync(name, rows, num_rows, values, output, dtype, average));
}

void LocalGroup::PushPull(const std::string& name, const void* input, void* output, DataType dtype,
                          uint64_t count, bool average) {
  Wait(PushPullAsync(name, input, output, dtype, count, average));
}

void LocalGroup::PushPullDevice(const std::string& name, const void* input, void* output,
                                DataType dtype, uint64_t count, bool average, void* stream) {
  CheckUserTensorName("push_pull", name);
  FERRY_ENFORCE(LocalNccl::Built(), ErrorCode::kInvalidArgument, "push_pull of '", name,
                "': a CUDA device tensor, but this Ferry was built without NCCL (rebuild with "
                "CUDA and NCCL found), or copy the tensor to host memory first");
  DeviceTensor t;
  t.name = name;
  t.input = input;
  t.output = output;
  t.dtype = dtype;
  t.count = count;
  t.average = average;
  t.stream = stream;
  if (!worker_) {
    {
      MutexLock lock(mu_);
      operations_++;
    }
    if (root_) return root_->PushPullDevice(t);
    return peer_->PushPullDevice(t);
  }
  uint64_t ticket = 0;
  LocalNccl* nccl = nullptr;  // made once, never replaced while the group lives
  {
    // L = 1: this process is its own root; the order of its calls is the order of GOs.
    MutexLock lock(mu_);
    if (!nccl_) {
      nccl_ = LocalNccl::Create(0, 1, config_.cluster.op_timeout_ms,
                                [w = worker_.get()](const DeviceTensor& d, void* host) {
                                  w->PushPull(d.name, host, host, d.dtype, d.count, d.average);
                                },
                                [](const std::string&) {});
    }
    nccl = nccl_.get();
    ticket = nccl->Submit(t);
    nccl->Go(name, nccl->TakeUniqueId());
  }
  nccl->Wait(ticket);
}

void LocalGroup::Broadcast(const std::string& name, void* data, DataType dtype, uint64_t count,
                           int root) {
  CheckUserTensorName("broadcast", name);
  if (root_) return root_->Broadcast(name, data, dtype, count, root);
  if (peer_) return peer_->Broadcast(name, data, dtype, count, root);
  worker_->Broadcast(name, data, dtype, count, root);
}

void LocalGroup::Barrier() {
  if (root_) return root_->Barrier();
  if (peer_) return peer_->Barrier();
  worker_->Barrier();
}

void LocalGroup::StepBoundary() {
  if (peer_) return;  // the root times the machine's iterations
  WorkerFor("StepBoundary").StepBoundary();
}

void LocalGroup::SetScheduling(int64_t partition_bytes, int64_t credit_bytes) {
  WorkerFor("SetScheduling").SetScheduling(partition_bytes, credit_bytes);
}

SchedulingChoice LocalGroup::scheduling() const { return WorkerFor("scheduling()").scheduling(); }

std::string LocalGroup::scheduling_policy() const {
  return WorkerFor("scheduling_policy()").scheduling_policy();
}

void LocalGroup::Join() {
  FERRY_ENFORCE(config_.local.size == 1, ErrorCode::kInvalidArgument,
                "Join (uneven data) is not supported with FERRY_LOCAL_SIZE=", config_.local.size,
                ": the local group reduces every rank's tensors together, so every local rank "
                "must push every round");
  worker_->Join();
}

void LocalGroup::Shutdown() {
  if (root_) return root_->Shutdown();
  if (peer_) return peer_->Shutdown();
  worker_->Shutdown();
}

WorkerStats LocalGroup::stats() const {
  if (!peer_) return WorkerFor("stats").stats();
  WorkerStats s;
  MutexLock lock(mu_);
  s.operations = operations_;
  return s;
}

CounterValues LocalGroup::Counters() const {
  if (!peer_) return WorkerFor("stats").Counters();
  MutexLock lock(mu_);
  return {{"operations", operations_}};
}

}  // namespace ferry
