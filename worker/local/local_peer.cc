#include "worker/local/local_peer.h"

#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/util/clock.h"
#include "common/util/status.h"
#include "worker/reserved_tensor_names.h"

namespace ferry {

struct LocalPeer::Op {
  uint64_t seq = 0;
  Handle handle = 0;  // in table_
  LocalOp kind = LocalOp::kPushPull;
  std::string name;
  void* output = nullptr;
  size_t bytes = 0;
};

LocalPeer::LocalPeer(const Config& config)
    : LocalMember(config, [this](Handle h) { return TimeoutMessage(h); }) {}

LocalPeer::~LocalPeer() {
  // The shutdown order of local_nccl.h: no step runs after this.
  if (LocalNccl* nccl = Nccl()) nccl->Stop();
  if (link_) link_->Stop();
  table_.Close();  // its callbacks and timeout messages use this object
}

std::string LocalPeer::Me() const {
  return StrCat("local rank ", config_.local.rank, " (pid ", getpid(), ")");
}

std::unique_ptr<LocalPeer> LocalPeer::Create(const Config& config) {
  std::unique_ptr<LocalPeer> p(new LocalPeer(config));
  p->link_ = std::make_unique<LocalLink>(false, config.LocalSocketName(),
                                         StrCat("local-", config.local.rank));
  p->link_->Start([q = p.get()](LocalMessage&& m) { q->OnMessage(std::move(m)); },
                  [q = p.get()] { q->OnDisconnect(); });
  LocalMessage hello;
  hello.header.op = static_cast<uint32_t>(LocalOp::kHello);
  hello.header.local_rank = config.local.rank;
  hello.header.pid = getpid();
  p->link_->Send(std::move(hello));
  MutexLock lock(p->mu_);
  const int64_t wait_ms = 2 * config.cluster.connect_timeout_ms;
  if (!p->cv_.WaitFor(p->mu_, Millis(wait_ms),
                      [&]() REQUIRES(p->mu_) { return p->welcomed_ || !p->failure_.empty(); })) {
    throw FerryError(ErrorCode::kTimeout,
                     StrCat(p->Me(), ": no WELCOME from the local root (local rank 0) at ",
                            p->link_->endpoint(), " within ", wait_ms,
                            " ms (2 x FERRY_CONNECT_TIMEOUT_MS): is local rank 0 running, with "
                            "the same DMLC_WORKER_ID and scheduler address?"));
  }
  FERRY_ENFORCE(p->failure_.empty(), ErrorCode::kPeerFailed, p->failure_);
  // The root listens for fd channels before it welcomes anyone.
  p->fd_channel_ = FdChannel::Connect(LocalFdChannelName(config));
  FERRY_ENFORCE(p->fd_channel_ != nullptr, ErrorCode::kPeerFailed, p->Me(),
                ": the local root's fd channel '", LocalFdChannelName(config),
                "' is not there (is local rank 0 in another network namespace?)");
  p->fd_channel_->Send(StrCat("HELLO ", config.local.rank));
  return p;
}

void LocalPeer::OnMessage(LocalMessage&& m) {
  MutexLock lock(mu_);
  const LocalHeader& h = m.header;
  switch (static_cast<LocalOp>(h.op)) {
    case LocalOp::kWelcome:
      rank_ = h.rank;
      size_ = h.size;
      num_servers_ = h.num_servers;
      root_pid_ = h.pid;
      welcomed_ = true;
      break;
    case LocalOp::kDone: {
      auto it = by_seq_.find(h.seq);
      if (it == by_seq_.end()) {
        LOG(WARNING) << Me() << ": DONE for unknown operation " << h.seq;
        return;
      }
      std::shared_ptr<Op> op = it->second;
      by_seq_.erase(it);
      if (op->kind != LocalOp::kBarrier) {
        Slot& slot = slots_[op->name];
        if (op->bytes > 0) std::memcpy(op->output, slot.segment->data(), op->bytes);
        slot.busy = false;
      }
      table_.Finish(op->handle, Verdict{});
      break;
    }
    case LocalOp::kFail:
      Fail(StrCat(Me(), ": the local root (pid ", root_pid_, ") reported: ", m.text));
      break;
    case LocalOp::kDevicePushPull:   // the root's steps of a round (local_nccl.h)
    case LocalOp::kDeviceBroadcast:
      if (!nccl_ || !failure_.empty()) {
        if (!nccl_) {
          Fail(StrCat(Me(), ": ", LocalOpName(static_cast<LocalOp>(h.op)), " for device tensor '",
                      m.name, "', never submitted"));
        }
        return;
      }
      nccl_->RunStep(h.op == static_cast<uint32_t>(LocalOp::kDevicePushPull)
                         ? LocalNccl::Step::kReduce
                         : LocalNccl::Step::kBroadcast,
                     m.name, h.seq, m.text);
      break;
    case LocalOp::kBye:
      bye_received_ = true;
      bye_error_ = m.text;
      break;
    default:
      LOG(WARNING) << Me() << ": unexpected " << LocalOpName(static_cast<LocalOp>(h.op));
  }
  cv_.NotifyAll();
}

void LocalPeer::OnDisconnect() {
  MutexLock lock(mu_);
  if (bye_received_) return;
  Fail(StrCat(Me(), ": the local root (local rank 0, pid ", root_pid_,
              ") disconnected: it ended or failed"));
}

void LocalPeer::Fail(const std::string& reason) {
  if (!failure_.empty()) return;
  failure_ = reason;
  LOG(ERROR) << reason;
  if (nccl_) nccl_->Fail(reason);
  table_.FailAll(reason);
  cv_.NotifyAll();
}

Handle LocalPeer::Submit(LocalOp kind, const std::string& name, const void* input, void* output,
                         DataType dtype, uint64_t count, bool average, int root,
                         CompletionCallback done) {
  MutexLock lock(mu_);
  FERRY_ENFORCE(failure_.empty(), ErrorCode::kPeerFailed, failure_);
  FERRY_ENFORCE(!bye_sent_, ErrorCode::kShutdown, LocalOpName(kind), " of '", name,
                "' after Shutdown()");
  const size_t bytes = count * DataTypeSize(dtype);
  LocalMessage m;
  if (kind != LocalOp::kBarrier) {
    Slot& slot = slots_[name];
    // The slot is the root's until DONE of the previous operation on this tensor.
    if (!cv_.WaitFor(mu_, Millis(config_.cluster.op_timeout_ms),
                     [&]() REQUIRES(mu_) { return !slot.busy || !failure_.empty(); })) {
      Fail(StrCat(Me(), ": ", LocalOpName(kind), " of '", name, "' waited ",
                  config_.cluster.op_timeout_ms,
                  " ms (FERRY_OP_TIMEOUT_MS) for the previous operation "
                  "on that tensor"));
    }
    FERRY_ENFORCE(failure_.empty(), ErrorCode::kPeerFailed, failure_);
    if (!slot.segment || slot.segment->size() < bytes) {
      const size_t size = std::max<size_t>(bytes, 64);
      const uint64_t id = next_segment_++;
      slot.segment = MemfdSegment::Create(StrCat("ferry-local-", config_.local.rank, "-", id), size);
      // Before the submission that names it: the root reads it when the submission comes.
      fd_channel_->Send(StrCat("SLOT ", id), slot.segment->fd());
      m.header.shm_bytes = slot.segment->size();
      m.text = std::to_string(id);
    }
    if (bytes > 0) std::memcpy(slot.segment->data(), input, bytes);
    slot.busy = true;
  }
  auto op = std::make_shared<Op>();
  op->seq = next_seq_++;
  op->kind = kind;
  op->name = name;
  op->output = output;
  op->bytes = bytes;
  m.header.op = static_cast<uint32_t>(kind);
  m.header.local_rank = config_.local.rank;
  m.header.pid = getpid();
  m.header.dtype = static_cast<int32_t>(dtype);
  m.header.count = count;
  m.header.seq = op->seq;
  m.header.average = average ? 1 : 0;
  m.header.root = root;
  m.name = name;
  link_->Send(std::move(m));
  op->handle = table_.Add(std::move(done));
  by_seq_[op->seq] = op;
  return op->handle;
}

int LocalPeer::DeclareTensor(const std::string& name, DataType dtype,
                             const std::vector<int64_t>& shape, std::optional<int>) {
  CheckUserTensorName("declaration", name);
  MutexLock lock(mu_);
  auto it = declared_.find(name);
  if (it == declared_.end()) {
    const int id = static_cast<int>(declared_.size());
    declared_[name] = Declared{id, dtype, shape};
    return id;
  }
  // Another dtype or shape declares the name anew at the local root (tensor_catalog.h,
  // "Re-declarations"); the id, which names nothing on the wire here, stays.
  it->second.dtype = dtype;
  it->second.shape = shape;
  return it->second.id;
}

Handle LocalPeer::PushPullAsync(const std::string& name, const void* input, void* output,
                                DataType dtype, uint64_t count, bool average, std::optional<int>,
                                CompletionCallback done) {
  CheckUserTensorName("push_pull", name);
  operations_++;
  return Submit(LocalOp::kPushPull, name, input, output, dtype, count, average, -1,
                std::move(done));
}

void LocalPeer::PushPullDevice(const std::string& name, const void* input, void* output,
                               DataType dtype, uint64_t count, bool average, void* stream) {
  CheckUserTensorName("push_pull", name);
  const DeviceTensor t = CheckedDeviceTensor(name, input, output, dtype, count, average, stream);
  operations_++;
  uint64_t ticket = 0;
  LocalNccl* nccl = nullptr;  // made once, destroyed only with this object
  {
    MutexLock lock(mu_);
    FERRY_ENFORCE(failure_.empty(), ErrorCode::kPeerFailed, failure_);
    FERRY_ENFORCE(!bye_sent_, ErrorCode::kShutdown, "push_pull of '", t.name, "' after Shutdown()");
    if (!nccl_) {
      nccl_ =
          LocalNccl::Create(config_.local.rank, config_.local.size, config_.cluster.op_timeout_ms,
                            0, nullptr, nullptr, [this](const std::string& reason) {
                              MutexLock lock(mu_);
                              Fail(reason);
                            });
    }
    // Queued before the root hears of it, so that its GO finds it.
    nccl = nccl_.get();
    ticket = nccl->Submit(t);
    LocalMessage m;
    m.header.op = static_cast<uint32_t>(LocalOp::kDevicePushPull);
    m.header.local_rank = config_.local.rank;
    m.header.pid = getpid();
    m.header.dtype = static_cast<int32_t>(t.dtype);
    m.header.count = t.count;
    m.header.seq = next_seq_++;
    m.header.average = t.average ? 1 : 0;
    m.name = t.name;
    link_->Send(std::move(m));
  }
  nccl->Wait(ticket);
}

Worker& LocalPeer::MachineWorker(const char* what) const {
  throw FerryError(ErrorCode::kInvalidArgument,
                   StrCat(what, " is not available on local rank ", config_.local.rank,
                          " (FERRY_LOCAL_SIZE=", config_.local.size,
                          "): only local rank 0 talks to the servers; make the call there"));
}

CounterValues LocalPeer::Counters() const { return {{"operations", operations_.value()}}; }

std::string LocalPeer::TimeoutMessage(Handle handle) const {
  MutexLock lock(mu_);
  for (const auto& [seq, op] : by_seq_) {
    if (op->handle != handle) continue;
    return StrCat(Me(), ": ", LocalOpName(op->kind), " of '", op->name,
                  "': no answer from the local root (pid ", root_pid_, ") within ",
                  config_.cluster.op_timeout_ms, " ms (FERRY_OP_TIMEOUT_MS)");
  }
  return StrCat(Me(), ": operation ", handle, ": no answer from the local root (pid ", root_pid_,
                ") within ", config_.cluster.op_timeout_ms, " ms (FERRY_OP_TIMEOUT_MS)");
}

void LocalPeer::Broadcast(const std::string& name, void* data, DataType dtype, uint64_t count,
                          int root) {
  CheckUserTensorName("broadcast", name);
  FERRY_ENFORCE(root >= 0 && root < size_, ErrorCode::kInvalidArgument, "broadcast of '", name,
                "': root rank ", root, " is not a rank (0..", size_ - 1, ")");
  Wait(Submit(LocalOp::kBroadcast, name, data, data, dtype, count, false, root));
}

void LocalPeer::Barrier() {
  Wait(Submit(LocalOp::kBarrier, "", nullptr, nullptr, DataType::kFloat32, 0, false, -1));
}

void LocalPeer::Shutdown() {
  MutexLock lock(mu_);
  if (bye_sent_) return;
  auto quiet = [&]() REQUIRES(mu_) { return by_seq_.empty() || !failure_.empty(); };
  if (!cv_.WaitFor(mu_, Millis(config_.cluster.op_timeout_ms), quiet)) {
    Fail(StrCat(Me(), ": Shutdown() waited ", config_.cluster.op_timeout_ms,
                " ms (FERRY_OP_TIMEOUT_MS) for this rank's operations"));
  }
  bye_sent_ = true;
  if (failure_.empty()) {
    LocalMessage bye;
    bye.header.op = static_cast<uint32_t>(LocalOp::kBye);
    bye.header.local_rank = config_.local.rank;
    bye.header.pid = getpid();
    link_->Send(std::move(bye));
    if (!cv_.WaitFor(mu_, Millis(config_.cluster.op_timeout_ms),
                     [&]() REQUIRES(mu_) { return bye_received_ || !failure_.empty(); })) {
      Fail(StrCat(Me(), ": Shutdown() waited ", config_.cluster.op_timeout_ms,
                  " ms (FERRY_OP_TIMEOUT_MS) for the local root (pid ", root_pid_,
                  ") to shut the job down"));
    }
  }
  const std::string error = !failure_.empty() ? failure_ : bye_error_;
  slots_.clear();  // unmaps; unlinks names the root never mapped
  lock.Unlock();
  link_->Stop();
  FERRY_ENFORCE(error.empty(), ErrorCode::kPeerFailed, error);
}

}  // namespace ferry
