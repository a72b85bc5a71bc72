#include "worker/local/local_root.h"

#include <glog/logging.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>

#include "common/util/clock.h"
#include "common/util/status.h"
#include "worker/reserved_tensor_names.h"

namespace ferry {

namespace {

// The rounds of Barrier().
const std::string kBarrierKey = ReservedTensorName(reserved::kLocalBarrier);
// The rounds of device tensor T are counted under kDevicePrefix + T (__ferry__/device/T): a host
// and a device push_pull of one name are rounds of two sequences.
const std::string kDevicePrefix = ReservedTensorName(reserved::kDevice) + "/";

std::string DeviceKey(const std::string& name) { return kDevicePrefix + name; }

// True when process `pid` has ended (gone, or a zombie nobody reaped yet).
bool ProcessGone(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() &&
         (line[paren + 2] == 'Z' || line[paren + 2] == 'X');
}

}  // namespace

struct LocalRoot::PeerState {
  std::string id;  // routing id
  int pid = 0;
  bool hello = false;
  bool bye = false;
  std::unique_ptr<FdChannel> fd_channel;  // from the rank (TakeSlot), once it came
  std::map<std::string, std::unique_ptr<MemfdSegment>> slots;  // by tensor name
  // The slot of tensor `key` (it exists once the peer submitted an operation of it).
  void* SlotData(const std::string& key) {
    auto it = slots.find(key);
    CHECK(it != slots.end()) << "no slot of pid " << pid << " for " << key;
    return it->second->data();
  }
};

LocalRoot::LocalRoot(const Config& config)
    : LocalMember(
          config,
          [this](Handle h) {
            MutexLock lock(mu_);
            return StrCat(
                Me(), ": timed out after ", config_.cluster.op_timeout_ms,
                " ms (FERRY_OP_TIMEOUT_MS): ",
                rounds_.Describe([h](const LocalRound& r) { return r.handle == h; }, kBarrierKey));
          }),
      peers_(config.local.size),
      rounds_(config.local.size, [this](int lr) NO_THREAD_SAFETY_ANALYSIS {
        return peers_[lr].pid;  // called by rounds_ under mu_
      }) {}

LocalRoot::~LocalRoot() {
  // The shutdown order of local_nccl.h: no step (nor its messages) after this.
  if (LocalNccl* nccl = Nccl()) nccl->Stop();
  if (link_) link_->Stop();
  table_.Close();  // its callbacks and timeout messages use this object
  // The Worker's completion callbacks use this object's members (and nccl_'s):
  // no callback may run once they are gone (members are destroyed after this
  // body, worker_ among the last); its push_pulls write nccl_'s buffers.
  worker_.reset();
  MutexLock lock(mu_);
  nccl_.reset();
}

std::string LocalRoot::Me() const {
  return StrCat("local root (local rank 0, pid ", getpid(), ")");
}

std::unique_ptr<LocalRoot> LocalRoot::Create(const Config& config) {
  std::unique_ptr<LocalRoot> r(new LocalRoot(config));
  r->link_ = std::make_unique<LocalLink>(true, config.LocalSocketName(), "");
  r->fd_listener_ = FdListener::Listen(LocalFdChannelName(config));
  r->link_->Start([p = r.get()](LocalMessage&& m) { p->OnMessage(std::move(m)); },
                  [p = r.get()] { p->OnDisconnect(); });
  std::unique_ptr<Worker> worker;
  try {
    worker = Worker::Create(config);
  } catch (const FerryError& e) {
    MutexLock lock(r->mu_);
    r->Fail(StrCat("the local root could not join the cluster: ", e.what()));
    throw;
  }
  MutexLock lock(r->mu_);
  r->worker_ = std::move(worker);
  auto all_here = [&]() REQUIRES(r->mu_) {
    for (int lr = 1; lr < r->config_.local.size; ++lr) {
      if (!r->peers_[lr].hello) return false;
    }
    return true;
  };
  if (!r->cv_.WaitFor(r->mu_, Millis(config.cluster.connect_timeout_ms),
                      [&]() REQUIRES(r->mu_) { return all_here() || !r->failure_.empty(); })) {
    std::string missing;
    for (int lr = 1; lr < r->config_.local.size; ++lr) {
      if (!r->peers_[lr].hello) missing += StrCat(missing.empty() ? "" : ", ", lr);
    }
    r->Fail(StrCat(r->Me(), ": local rank(s) ", missing, " did not connect to ",
                   r->link_->endpoint(),
                   " within FERRY_CONNECT_TIMEOUT_MS=", config.cluster.connect_timeout_ms, " ms"));
  }
  FERRY_ENFORCE(r->failure_.empty(), ErrorCode::kPeerFailed, r->failure_);
  for (int lr = 1; lr < r->config_.local.size; ++lr) {
    LocalMessage w;
    w.peer = r->peers_[lr].id;
    w.header.op = static_cast<uint32_t>(LocalOp::kWelcome);
    w.header.pid = getpid();
    w.header.rank = r->rank() + lr;
    w.header.size = r->size();
    w.header.num_servers = r->worker_->num_servers();
    r->link_->Send(std::move(w));
  }
  LOG(INFO) << "local group of " << r->config_.local.size << " at " << r->link_->endpoint()
            << ": ranks " << r->rank() << ".." << r->rank() + r->config_.local.size - 1 << " of "
            << r->size();
  return r;
}

void LocalRoot::OnMessage(LocalMessage&& m) {
  MutexLock lock(mu_);
  const LocalHeader& h = m.header;
  const int lr = h.local_rank;
  if (lr < 1 || lr >= config_.local.size) {
    LOG(WARNING) << "local group: dropped a message from local rank " << lr << " (expected 1.."
                 << config_.local.size - 1 << ")";
    return;
  }
  PeerState& peer = peers_[lr];
  const LocalOp op = static_cast<LocalOp>(h.op);
  try {
    switch (op) {
      case LocalOp::kHello:
        if (peer.hello && peer.pid != h.pid) {
          Fail(StrCat("two processes claim local rank ", lr, ": pids ", peer.pid, " and ", h.pid,
                      " (FERRY_LOCAL_RANK must differ on one machine)"));
          return;
        }
        peer.id = m.peer;
        peer.pid = h.pid;
        peer.hello = true;
        break;
      case LocalOp::kPushPull:
      case LocalOp::kBroadcast: {
        if (!failure_.empty()) return;  // the peer was told
        const size_t bytes = h.count * DataTypeSize(static_cast<DataType>(h.dtype));
        FERRY_ENFORCE(IsValidDataType(h.dtype), ErrorCode::kBadMessage, "bad dtype ", h.dtype);
        if (h.shm_bytes > 0) {
          peer.slots[m.name] = TakeSlot(lr, m.text, h.shm_bytes);
        }
        auto slot = peer.slots.find(m.name);
        FERRY_ENFORCE(slot != peer.slots.end() && slot->second->size() >= bytes,
                      ErrorCode::kBadMessage, "local rank ", lr, ": ", LocalOpName(op), " of '",
                      m.name, "' (", bytes, " bytes) without a slot that large");
        Submit(m.name, lr, op, static_cast<DataType>(h.dtype), h.count, h.average != 0, h.root,
               h.seq);
        TryStart(m.name);
        break;
      }
      case LocalOp::kDevicePushPull:
        if (!failure_.empty()) return;  // the peer was told
        FERRY_ENFORCE(IsValidDataType(h.dtype), ErrorCode::kBadMessage, "bad dtype ", h.dtype);
        Submit(DeviceKey(m.name), lr, op, static_cast<DataType>(h.dtype), h.count, h.average != 0,
               -1, h.seq);
        TryStart(DeviceKey(m.name));
        break;
      case LocalOp::kBarrier:
        if (!failure_.empty()) return;
        Submit(kBarrierKey, lr, op, DataType::kFloat32, 0, false, -1, h.seq);
        TryStart(kBarrierKey);
        break;
      case LocalOp::kBye:
        peer.bye = true;
        break;
      default:
        LOG(WARNING) << "local group: unexpected " << LocalOpName(op) << " from local rank " << lr;
    }
  } catch (const FerryError& e) {
    Fail(StrCat(Me(), ": bad ", LocalOpName(op), " from local rank ", lr, " (pid ", peer.pid,
                "): ", e.what()));
  }
  cv_.NotifyAll();
}

void LocalRoot::OnDisconnect() {
  MutexLock lock(mu_);
  std::string gone, unknown;
  // A dying process closes its socket a moment before it is a zombie: look for
  // the ended one for up to 500 ms, to name it.
  for (int attempt = 0; attempt < 50 && gone.empty(); ++attempt) {
    if (attempt > 0) {
      lock.Unlock();
      std::this_thread::sleep_for(Millis(10));
      lock.Lock();
    }
    gone.clear();
    unknown.clear();
    for (int lr = 1; lr < config_.local.size; ++lr) {
      const PeerState& p = peers_[lr];
      if (!p.hello || p.bye) continue;
      const std::string who = StrCat("local rank ", lr, " (pid ", p.pid, ")");
      std::string& list = ProcessGone(p.pid) ? gone : unknown;
      list += (list.empty() ? "" : ", ") + who;
    }
    if (unknown.empty()) break;  // every peer without BYE is gone, or none is missing
  }
  if (!gone.empty()) {
    Fail(StrCat(Me(), ": ", gone, " disconnected before shutting down: the process ended"));
  } else if (!unknown.empty()) {
    Fail(
        StrCat(Me(), ": a local process disconnected before shutting down (one of ", unknown, ")"));
  }
}

void LocalRoot::OnMachineDone(const std::string& key, const Verdict& verdict) {
  MutexLock lock(mu_);
  LocalRoundQueue* found = rounds_.Find(key);
  if (!found || found->q.empty() || found->q.front().worker_handle == 0) {
    return;  // the group failed meanwhile
  }
  LocalRoundQueue& rs = *found;
  LocalRound& round = rs.q.front();
  round.worker_handle = 0;
  if (!verdict.ok()) {
    Fail(StrCat("push_pull of '", key, "' failed: ", verdict.error));
    return;
  }
  if (round.average) Scale(rs.staging.data(), 1.0 / size(), round.count, round.dtype);
  FinishRound(key, rs.staging.data());
}

LocalRound& LocalRoot::Submit(const std::string& key, int lr, LocalOp kind, DataType dtype,
                              uint64_t count, bool average, int root, uint64_t seq) {
  try {
    return rounds_.Submit(key, lr, kind, dtype, count, average, root, seq);
  } catch (const FerryError& e) {
    Fail(e.what());  // the group cannot go on: the ranks' sequences of calls differ
    throw;
  }
}

std::unique_ptr<MemfdSegment> LocalRoot::TakeSlot(int lr, const std::string& id, uint64_t bytes) {
  // The rank sent the segment before its submission: it waits in the channel (or, for the
  // first, the rank's connection waits in the listener's backlog). The wait is a bound for
  // a rank that is gone, not a delay.
  constexpr int kTimeoutMs = 10000;
  const std::string who = StrCat("local rank ", lr, " (pid ", peers_[lr].pid, ")");
  while (!peers_[lr].fd_channel) {
    std::unique_ptr<FdChannel> channel = fd_listener_->Accept(kTimeoutMs);
    FERRY_ENFORCE(channel != nullptr, ErrorCode::kTimeout, who, " did not connect to the fd channel '",
                  LocalFdChannelName(config_), "' within ", kTimeoutMs, " ms");
    const FdChannel::Received hello = channel->Receive(kTimeoutMs);
    if (hello.fd >= 0) close(hello.fd);
    const int from = hello.header.rfind("HELLO ", 0) == 0 ? std::atoi(hello.header.c_str() + 6) : -1;
    FERRY_ENFORCE(from >= 1 && from < config_.local.size && !peers_[from].fd_channel,
                  ErrorCode::kBadMessage, "an fd channel said '", hello.header.substr(0, 40),
                  "' where a HELLO of a local rank without a channel was due");
    peers_[from].fd_channel = std::move(channel);
  }
  const FdChannel::Received r = peers_[lr].fd_channel->Receive(kTimeoutMs);
  if (r.header != "SLOT " + id || r.fd < 0) {
    if (r.fd >= 0) close(r.fd);
    throw FerryError(ErrorCode::kBadMessage, StrCat(who, " announced '", r.header.substr(0, 40),
                                                    "' where slot ", id, " was due"));
  }
  return MemfdSegment::Map(r.fd, bytes);
}

void LocalRoot::TryStart(const std::string& key) {
  LocalRoundQueue& rs = rounds_.Of(key);
  if (rs.q.empty() || rs.q.front().started || !failure_.empty()) return;
  LocalRound& round = rs.q.front();
  for (bool h : round.have) {
    if (!h) return;
  }
  round.started = true;
  if (round.kind == LocalOp::kDevicePushPull) return StartDevice(key, rs);
  if (round.kind == LocalOp::kPushPull) StartPushPull(key, rs);
  cv_.NotifyAll();  // broadcast and barrier: the root's caller takes it from
                    // here
}

void LocalRoot::StartDevice(const std::string& key, LocalRoundQueue& rs) {
  // The NCCL thread tells the peers each step as it runs it (SendDeviceStep).
  nccl_->Go(key.substr(kDevicePrefix.size()));
  rs.Pop();
  cv_.NotifyAll();
  TryStart(key);
}

void LocalRoot::SendDeviceStep(LocalNccl::Step step, const std::string& name, uint64_t seq,
                               const std::string& unique_id) {
  MutexLock lock(mu_);
  for (int lr = 1; lr < config_.local.size; ++lr) {
    LocalMessage m;
    m.peer = peers_[lr].id;
    m.header.op = static_cast<uint32_t>(step == LocalNccl::Step::kReduce
                                            ? LocalOp::kDevicePushPull
                                            : LocalOp::kDeviceBroadcast);
    m.header.seq = seq;
    m.name = name;
    m.text = unique_id;
    link_->Send(std::move(m));
  }
}

void LocalRoot::PushPullDevice(const std::string& name, const void* input, void* output,
                               DataType dtype, uint64_t count, bool average, void* stream) {
  CheckUserTensorName("push_pull", name);
  const DeviceTensor t = CheckedDeviceTensor(name, input, output, dtype, count, average, stream);
  uint64_t ticket = 0;
  LocalNccl* nccl = nullptr;  // made once, destroyed only with this object
  {
    MutexLock lock(mu_);
    FERRY_ENFORCE(failure_.empty(), ErrorCode::kPeerFailed, failure_);
    FERRY_ENFORCE(!shut_down_, ErrorCode::kShutdown, "push_pull of '", t.name,
                  "' after Shutdown()");
    if (!nccl_) {
      // A sum over the machines, never their average: the backend divides by size(),
      // every rank of the job, not by the machines.
      nccl_ = LocalNccl::Create(
          0, config_.local.size, config_.cluster.op_timeout_ms, size(),
          [this](const DeviceTensor& d, void* host, LocalNccl::MachineDone done) {
            worker_->PushPullAsync(
                d.name, host, host, d.dtype, d.count, false, std::nullopt,
                [done = std::move(done)](Handle, const Verdict& v) { done(v.error); });
          },
          [this](LocalNccl::Step step, const std::string& name, uint64_t seq,
                 const std::string& unique_id) { SendDeviceStep(step, name, seq, unique_id); },
          [this](const std::string& reason) {
            MutexLock lock(mu_);
            Fail(reason);
          });
    }
    nccl = nccl_.get();
    ticket = nccl->Submit(t);  // before the round can start: its GO finds it queued
    Submit(DeviceKey(t.name), 0, LocalOp::kDevicePushPull, t.dtype, t.count, t.average, -1, 0);
    TryStart(DeviceKey(t.name));
  }
  nccl->Wait(ticket);
}

void LocalRoot::StartPushPull(const std::string& key, LocalRoundQueue& rs) {
  LocalRound& round = rs.q.front();
  const size_t bytes = round.count * DataTypeSize(round.dtype);
  rs.staging.resize(bytes);
  if (bytes > 0) std::memcpy(rs.staging.data(), round.input, bytes);
  for (int lr = 1; lr < config_.local.size; ++lr) {
    SumInto(rs.staging.data(), peers_[lr].SlotData(key), round.count, round.dtype);
  }
  try {
    // The Worker finishes it on its completion thread (OnMachineDone), or fails
    // it with a timeout FERRY_OP_TIMEOUT_MS from now.
    round.worker_handle = worker_->PushPullAsync(
        key, rs.staging.data(), rs.staging.data(), round.dtype, round.count, false, round.priority,
        [this, key](Handle, const Verdict& v) { OnMachineDone(key, v); });
  } catch (const FerryError& e) {
    Fail(StrCat("push_pull of '", key, "': ", e.what()));
  }
}

void LocalRoot::FinishRound(const std::string& key, const void* result) {
  LocalRoundQueue& rs = rounds_.Of(key);
  LocalRound& round = rs.q.front();
  const size_t bytes = round.count * DataTypeSize(round.dtype);
  if (round.output && round.output != result && bytes > 0) {
    std::memcpy(round.output, result, bytes);
  }
  for (int lr = 1; lr < config_.local.size; ++lr) {
    if (bytes > 0) std::memcpy(peers_[lr].SlotData(key), result, bytes);
    LocalMessage done;
    done.peer = peers_[lr].id;
    done.header.op = static_cast<uint32_t>(LocalOp::kDone);
    done.header.seq = round.seq[lr];
    link_->Send(std::move(done));
  }
  if (round.handle) table_.Finish(round.handle, Verdict{});
  rs.Pop();
  cv_.NotifyAll();
  TryStart(key);
}

void LocalRoot::Fail(const std::string& reason) {
  if (!failure_.empty()) return;
  failure_ = reason;
  LOG(ERROR) << reason;
  if (nccl_) nccl_->Fail(reason);
  for (int lr = 1; lr < config_.local.size; ++lr) {
    if (!peers_[lr].hello) continue;
    LocalMessage fail;
    fail.peer = peers_[lr].id;
    fail.header.op = static_cast<uint32_t>(LocalOp::kFail);
    fail.text = reason;
    link_->Send(std::move(fail));
  }
  // Waiters last: the table's waiters do not need mu_, so one woken earlier could end the
  // process (and stop the link, dropping the FAIL) before the peers were told.
  table_.FailAll(reason);
  cv_.NotifyAll();
}

Handle LocalRoot::PushPullAsync(const std::string& name, const void* input, void* output,
                                DataType dtype, uint64_t count, bool average,
                                std::optional<int> priority, CompletionCallback done) {
  CheckUserTensorName("push_pull", name);
  MutexLock lock(mu_);
  FERRY_ENFORCE(failure_.empty(), ErrorCode::kPeerFailed, failure_);
  FERRY_ENFORCE(!shut_down_, ErrorCode::kShutdown, "push_pull of '", name, "' after Shutdown()");
  LocalRound& round = Submit(name, 0, LocalOp::kPushPull, dtype, count, average, -1, 0);
  round.input = input;
  round.output = output;
  round.op_id = next_op_id_++;
  round.priority = priority;
  round.handle = table_.Add(std::move(done));
  const Handle h = round.handle;
  TryStart(name);
  return h;
}

void LocalRoot::WaitStarted(const std::string& key, uint64_t op_id) {
  auto started = [&]() REQUIRES(mu_) {
    if (!failure_.empty()) return true;
    const LocalRoundQueue& rs = rounds_.Of(key);
    return !rs.q.empty() && rs.q.front().op_id == op_id && rs.q.front().started;
  };
  if (!cv_.WaitFor(mu_, Millis(config_.cluster.op_timeout_ms), started)) {
    const std::string why = StrCat(
        Me(), ": timed out after ", config_.cluster.op_timeout_ms, " ms (FERRY_OP_TIMEOUT_MS): ",
        rounds_.Describe([op_id](const LocalRound& r) { return r.op_id == op_id; }, kBarrierKey));
    Fail(why);
    throw FerryError(ErrorCode::kTimeout, why);
  }
  FERRY_ENFORCE(failure_.empty(), ErrorCode::kPeerFailed, failure_);
}

void LocalRoot::Broadcast(const std::string& name, void* data, DataType dtype, uint64_t count,
                          int root) {
  CheckUserTensorName("broadcast", name);
  FERRY_ENFORCE(root >= 0 && root < size(), ErrorCode::kInvalidArgument, "broadcast of '", name,
                "': root rank ", root, " is not a rank (0..", size() - 1, ")");
  MutexLock lock(mu_);
  FERRY_ENFORCE(failure_.empty(), ErrorCode::kPeerFailed, failure_);
  LocalRound& round = Submit(name, 0, LocalOp::kBroadcast, dtype, count, false, root, 0);
  round.output = data;
  const uint64_t op_id = round.op_id = next_op_id_++;
  TryStart(name);
  WaitStarted(name, op_id);
  // The round is ours until FinishRound: no peer touches its slot meanwhile.
  const int machine = root / config_.local.size, source = root % config_.local.size;
  const size_t bytes = count * DataTypeSize(dtype);
  if (machine == worker_->rank() && source != 0 && bytes > 0) {
    std::memcpy(data, peers_[source].SlotData(name), bytes);
  }
  lock.Unlock();
  std::string error;
  try {
    worker_->Broadcast(name, data, dtype, count, machine);
  } catch (const FerryError& e) {
    error = e.what();
  }
  lock.Lock();
  if (!error.empty()) {
    Fail(StrCat("broadcast of '", name, "' failed: ", error));
    throw FerryError(ErrorCode::kPeerFailed, failure_);
  }
  FinishRound(name, data);
}

void LocalRoot::Barrier() {
  MutexLock lock(mu_);
  FERRY_ENFORCE(failure_.empty(), ErrorCode::kPeerFailed, failure_);
  LocalRound& round =
      Submit(kBarrierKey, 0, LocalOp::kBarrier, DataType::kFloat32, 0, false, -1, 0);
  const uint64_t op_id = round.op_id = next_op_id_++;
  TryStart(kBarrierKey);
  WaitStarted(kBarrierKey, op_id);
  lock.Unlock();
  std::string error;
  try {
    worker_->Barrier();
  } catch (const FerryError& e) {
    error = e.what();
  }
  lock.Lock();
  if (!error.empty()) {
    Fail(StrCat("barrier failed: ", error));
    throw FerryError(ErrorCode::kPeerFailed, failure_);
  }
  FinishRound(kBarrierKey, nullptr);
}

void LocalRoot::Shutdown() {
  MutexLock lock(mu_);
  if (shut_down_) return;
  shut_down_ = true;
  auto all_bye = [&]() REQUIRES(mu_) {
    for (int lr = 1; lr < config_.local.size; ++lr) {
      if (!peers_[lr].bye) return false;
    }
    return true;
  };
  if (failure_.empty() &&
      !cv_.WaitFor(mu_, Millis(config_.cluster.op_timeout_ms),
                   [&]() REQUIRES(mu_) { return all_bye() || !failure_.empty(); })) {
    std::string missing;
    for (int lr = 1; lr < config_.local.size; ++lr) {
      if (!peers_[lr].bye)
        missing += StrCat(missing.empty() ? "" : ", ", lr, " (pid ", peers_[lr].pid, ")");
    }
    Fail(StrCat(Me(), ": Shutdown() waited ", config_.cluster.op_timeout_ms,
                " ms (FERRY_OP_TIMEOUT_MS) for local rank(s) ", missing, " to shut down"));
  }
  const std::string failure = failure_;
  lock.Unlock();
  std::string error = failure;
  if (failure.empty()) {
    try {
      worker_->Shutdown();
    } catch (const FerryError& e) {
      error = e.what();
    }
  }
  lock.Lock();
  if (failure_.empty()) {
    for (int lr = 1; lr < config_.local.size; ++lr) {
      LocalMessage bye;
      bye.peer = peers_[lr].id;
      bye.header.op = static_cast<uint32_t>(LocalOp::kBye);
      bye.text = error;
      link_->Send(std::move(bye));
    }
  }
  lock.Unlock();
  link_->Stop();  // sends the BYEs first
  // After a failure the Worker is not shut down (that would wait for every
  // other worker, which may wait for us): the process ends, and the scheduler's
  // heartbeats tell the others.
  FERRY_ENFORCE(error.empty(), ErrorCode::kPeerFailed, error);
}

}  // namespace ferry
