#include "worker/worker.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstring>

#include "common/util/clock.h"
#include "common/util/status.h"

namespace ferry {

struct Worker::Tensor {
  uint32_t id = 0;
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  uint64_t count = 0;
  uint64_t bytes = 0;
  uint64_t hash = 0;
  int priority = 0;
  std::vector<PartitionSpec> parts;
  std::vector<uint32_t> rounds;                    // next round, per partition
  std::deque<std::shared_ptr<Operation>> pending;  // front is the running operation
};

struct Worker::Operation {
  Handle handle = 0;
  Tensor* tensor = nullptr;
  const uint8_t* input = nullptr;
  uint8_t* output = nullptr;
  bool average = false;
  int priority = 0;
  int replies_left = 0;   // partitions whose sum has not arrived
  int releases_left = 0;  // payloads handed to ZeroMQ and not yet released (resends add)
  bool started = false;
  bool done = false;
  std::string error;      // set when done with a failure
  int64_t start_us = 0;
  int64_t wait_deadline_ms = 0;  // set by the first wait: then + FERRY_OP_TIMEOUT_MS
};

// A partition between the queue and its reply.
struct Worker::InFlight {
  std::shared_ptr<Operation> op;
  uint32_t part = 0;
  uint32_t round = 0;            // the key's round this push belongs to
  bool credit_returned = false;  // the server acknowledged the push (or answered it)
  int attempts = 0;              // resends so far
  int64_t resend_at_ms = 0;      // no answer by then: resend (see ResendOverdue)
};

namespace {

uint64_t CountOf(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += StrCat(i ? "," : "", shape[i]);
  return s + "]";
}

}  // namespace

std::unique_ptr<Worker> Worker::Create(const Config& config) {
  std::unique_ptr<Worker> w(new Worker(config));
  w->Start();
  return w;
}

Worker::Worker(const Config& config)
    : config_(config),
      van_(VanOptionsFor("worker", config)),
      cluster_(config_, &van_, 0),
      queue_(config.scheduling_credit, config.scheduling_credit_bytes) {}

void Worker::Start() {
  KeepLargeBuffersInHeap();
  van_.Start([this](Message&& m, const Origin& o) { OnMessage(std::move(m), o); });
  cluster_.SetFailureCallback([this](const std::string& reason) { FailAll(reason); });
  cluster_.Register();
  const NodeTable& table = cluster_.table();
  my_id_ = cluster_.my_id();
  rank_ = cluster_.my_rank();
  num_workers_ = table.num_workers();
  num_servers_ = table.num_servers();
  SetLogNodeName(StrCat("worker ", rank_));
  std::vector<double> weights;
  for (const auto& s : table.Servers()) {
    weights.push_back(s.weight());
    van_.Connect(s.id(), StrCat("tcp://", s.host(), ":", s.port()), cluster_.routing_id());
  }
  placement_ = std::make_unique<Placement>(weights);
  sender_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "sender");
    SenderLoop();
  });
  LOG(INFO) << "worker " << rank_ << " of " << num_workers_ << " ready; " << num_servers_
            << " servers; partition " << config_.partition_bytes << " bytes, credit "
            << (config_.scheduling_credit_bytes > 0
                    ? StrCat(config_.scheduling_credit_bytes, " bytes")
                    : StrCat(config_.scheduling_credit, " partitions"));
}

Worker::~Worker() {
  queue_.Close();
  if (sender_.joinable()) sender_.join();
  // After Stop() ZeroMQ holds no payload: every release hook has run while the
  // members they touch are still alive.
  van_.Stop();
}

int Worker::DeclareTensor(const std::string& name, DataType dtype,
                          const std::vector<int64_t>& shape, std::optional<int> priority) {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(DeclareLocked(name, dtype, shape, priority).id);
}

Worker::Tensor& Worker::DeclareLocked(const std::string& name, DataType dtype,
                                      const std::vector<int64_t>& shape,
                                      std::optional<int> priority) {
  FERRY_ENFORCE(IsValidDataType(static_cast<int32_t>(dtype)), ErrorCode::kInvalidArgument,
                "tensor '", name, "': unknown dtype ", static_cast<int>(dtype));
  for (int64_t d : shape) {
    FERRY_ENFORCE(d >= 0, ErrorCode::kInvalidArgument, "tensor '", name, "': negative dimension in shape ",
                  ShapeString(shape));
  }
  auto it = tensor_ids_.find(name);
  if (it != tensor_ids_.end()) {
    Tensor& t = *tensors_[it->second];
    FERRY_ENFORCE(t.dtype == dtype && CountOf(t.shape) == CountOf(shape), ErrorCode::kInvalidArgument,
                  "tensor '", name, "' was declared as ", DataTypeName(t.dtype), ShapeString(t.shape),
                  " and is now used as ", DataTypeName(dtype), ShapeString(shape));
    if (priority) t.priority = *priority;
    return t;
  }
  auto t = std::make_unique<Tensor>();
  t->id = static_cast<uint32_t>(tensors_.size());
  t->name = name;
  t->dtype = dtype;
  t->shape = shape;
  t->count = CountOf(shape);
  t->bytes = t->count * DataTypeSize(dtype);
  t->hash = TensorHash(name, dtype, shape);
  t->priority = priority ? *priority : -static_cast<int>(t->id);
  t->parts = SplitTensor(t->bytes, DataTypeSize(dtype), config_.partition_bytes);
  for (auto& p : t->parts) p.server = placement_->Assign(p.bytes);
  t->rounds.assign(t->parts.size(), 0);
  VLOG(1) << "declared tensor '" << name << "' id " << t->id << " " << DataTypeName(dtype)
          << ShapeString(shape) << " in " << t->parts.size() << " partitions";
  tensor_ids_[name] = static_cast<int>(t->id);
  tensors_.push_back(std::move(t));
  return *tensors_.back();
}

Handle Worker::PushPullAsync(const std::string& name, const void* input, void* output,
                             DataType dtype, uint64_t count, bool average,
                             std::optional<int> priority) {
  FERRY_ENFORCE(count == 0 || (input && output), ErrorCode::kInvalidArgument, "push_pull of '",
                name, "': null buffer");
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.empty()) throw FerryError(ErrorCode::kPeerFailed, failure_);
  FERRY_ENFORCE(!shut_down_, ErrorCode::kShutdown, "push_pull of '", name, "' after Shutdown()");
  FERRY_ENFORCE(!(average && config_.enable_async), ErrorCode::kInvalidArgument, "push_pull of '",
                name, "' with average: in asynchronous training (FERRY_ENABLE_ASYNC=1) the reply "
                "is the parameters, not a sum, so there is nothing to average");
  if (!tensor_ids_.count(name)) {
    LOG(INFO) << "tensor '" << name << "' was not declared; declaring it now as id "
              << tensors_.size() << " (declare tensors up front, in forward order, on every worker)";
  }
  Tensor& t = DeclareLocked(name, dtype, {static_cast<int64_t>(count)}, std::nullopt);
  auto op = std::make_shared<Operation>();
  op->handle = next_handle_++;
  op->tensor = &t;
  op->input = static_cast<const uint8_t*>(input);
  op->output = static_cast<uint8_t*>(output);
  op->average = average;
  op->priority = priority ? *priority : t.priority;
  op->start_us = NowUs();
  operations_[op->handle] = op;
  t.pending.push_back(op);
  if (t.pending.size() == 1) StartOperation(op);
  stat_ops_++;
  return op->handle;
}

void Worker::StartOperation(const std::shared_ptr<Operation>& op) {
  Tensor& t = *op->tensor;
  op->started = true;
  op->replies_left = static_cast<int>(t.parts.size());
  for (uint32_t i = 0; i < t.parts.size(); ++i) {
    uint64_t cookie = next_cookie_++;
    queued_[cookie] = InFlight{op, i};
    queue_.Push(PushTask{op->priority, 0, t.parts[i].bytes, cookie});
  }
}

void Worker::SenderLoop() {
  // With resends on, wake often enough to resend within a quarter of the timeout.
  const int64_t wake_ms = config_.resend_timeout_ms > 0
                              ? std::clamp<int64_t>(config_.resend_timeout_ms / 4, 5, 1000)
                              : 1000;
  while (true) {
    PushTask task;
    bool timed_out = false;
    bool got = queue_.Next(&task, wake_ms, &timed_out);
    if (config_.resend_timeout_ms > 0) ResendOverdue();
    if (!got) {
      if (timed_out) continue;
      return;  // closed
    }
    std::unique_lock<std::mutex> lock(mu_);
    auto it = queued_.find(task.cookie);
    CHECK(it != queued_.end()) << "task without a partition";
    InFlight f = std::move(it->second);
    queued_.erase(it);
    if (f.op->done) {  // failed while queued: never sent
      lock.unlock();
      queue_.Done(task.bytes);
      continue;
    }
    Tensor& t = *f.op->tensor;
    const PartitionSpec& p = t.parts[f.part];
    uint64_t request = next_request_++;
    f.round = t.rounds[f.part]++;
    f.resend_at_ms = NowMs() + config_.resend_timeout_ms;
    Message m = BuildPush(f, request);
    in_flight_[request] = std::move(f);
    lock.unlock();
    stat_parts_++;
    stat_bytes_pushed_ += p.bytes;
    van_.Send(ServerId(p.server), std::move(m));
  }
}

Message Worker::BuildPush(const InFlight& f, uint64_t request) {
  const Tensor& t = *f.op->tensor;
  const PartitionSpec& p = t.parts[f.part];
  Message m = MakeMessage(proto::PUSH, my_id_);
  m.envelope.set_request_id(request);
  m.envelope.set_key(MakeKey(t.id, p.index));
  m.envelope.set_round(f.round);
  m.envelope.set_dtype(static_cast<proto::DataTypeProto>(t.dtype));
  m.envelope.set_length(p.bytes);
  m.envelope.set_priority(f.op->priority);
  m.envelope.set_tensor_hash(t.hash);
  m.envelope.set_async_mode(config_.enable_async);
  if (p.bytes > 0) {
    std::shared_ptr<Operation> op = f.op;
    op->releases_left++;
    // Zero copy: ZeroMQ sends straight from the caller's input; the release hook
    // tells us when it no longer reads it.
    m.payload = Buffer::Borrow(const_cast<uint8_t*>(op->input) + p.offset, p.bytes, [this, op] {
      std::lock_guard<std::mutex> l(mu_);
      op->releases_left--;
      stat_releases_++;
      MaybeComplete(op);
    });
  }
  return m;
}

void Worker::ResendOverdue() {
  std::vector<std::pair<int, Message>> out;  // (server rank, message)
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = NowMs();
    for (auto& [request, f] : in_flight_) {
      if (f.op->done || now < f.resend_at_ms) continue;
      f.attempts++;
      // Back off: the timeout doubles per attempt, up to 32x.
      f.resend_at_ms = now + config_.resend_timeout_ms * (int64_t{1} << std::min(f.attempts, 5));
      const Tensor& t = *f.op->tensor;
      const PartitionSpec& p = t.parts[f.part];
      if (f.credit_returned) {
        // The server has the push; only its sum may have been lost.
        Message pull = MakeMessage(proto::PULL, my_id_);
        pull.envelope.set_request_id(request);
        pull.envelope.set_key(MakeKey(t.id, p.index));
        pull.envelope.set_round(f.round);
        out.emplace_back(p.server, std::move(pull));
        stat_pulls_++;
      } else {
        out.emplace_back(p.server, BuildPush(f, request));
        stat_resends_++;
      }
      LOG_EVERY_N(WARNING, 100) << "no answer from " << cluster_.table().Describe(ServerId(p.server))
                                << " for " << KeyName(MakeKey(t.id, p.index)) << " of tensor '"
                                << t.name << "' round " << f.round << "; sending "
                                << (f.credit_returned ? "a PULL for its sum" : "the push again")
                                << " (attempt " << f.attempts << "; " << google::COUNTER
                                << " resends so far)";
    }
  }
  for (auto& [server, m] : out) van_.Send(ServerId(server), std::move(m));
}

void Worker::OnMessage(Message&& m, const Origin& origin) {
  if (cluster_.HandleMessage(m, origin)) return;
  if (origin.inbound || !cluster_.table().IsServer(origin.peer) || m.sender() != origin.peer) {
    LOG_EVERY_N(WARNING, 100) << "dropped " << Describe(m) << ": not from a server connection";
    return;
  }
  if (m.type() == proto::JOIN_ACK) {
    std::lock_guard<std::mutex> lock(mu_);
    if (m.envelope.request_id() == join_request_) join_acks_++;
    cv_.notify_all();
  } else if (m.type() == proto::PUSH_ACK) {
    OnAck(m);
  } else if (m.type() == proto::PUSH_RESULT) {
    OnPushResult(std::move(m));
  } else if (m.type() == proto::ERROR) {
    OnError(m);
  } else {
    LOG_EVERY_N(WARNING, 100) << "dropped unexpected " << Describe(m);
  }
}

void Worker::ReturnCredit(InFlight& f) {
  if (f.credit_returned) return;
  f.credit_returned = true;
  queue_.Done(f.op->tensor->parts[f.part].bytes);
}

void Worker::OnAck(const Message& m) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_flight_.find(m.envelope.request_id());
  if (it == in_flight_.end()) {
    NoteLateReply(m);
    return;
  }
  ReturnCredit(it->second);
  // From now on only the sum is missing: ask for it if it does not come in time.
  it->second.resend_at_ms = NowMs() + config_.resend_timeout_ms;
}

void Worker::NoteLateReply(const Message& m) {
  stat_late_replies_++;
  if (config_.resend_timeout_ms > 0) {
    VLOG(1) << "dropped " << Describe(m) << ": answered already (a resend crossed its reply)";
  } else {
    LOG_EVERY_N(WARNING, 100) << "dropped " << Describe(m) << ": no such request in flight";
  }
}

void Worker::OnPushResult(Message&& m) {
  const proto::Envelope& e = m.envelope;
  std::unique_lock<std::mutex> lock(mu_);
  auto it = in_flight_.find(e.request_id());
  if (it == in_flight_.end()) {
    NoteLateReply(m);
    return;
  }
  InFlight f = std::move(it->second);
  in_flight_.erase(it);
  const Tensor& t = *f.op->tensor;
  const PartitionSpec& p = t.parts[f.part];
  std::string error;
  if (e.key() != MakeKey(t.id, p.index) || e.length() != p.bytes ||
      e.dtype() != static_cast<int>(t.dtype) || m.sender() != ServerId(p.server)) {
    error = StrCat(cluster_.table().Describe(m.sender()), " answered the push of ",
                   KeyName(MakeKey(t.id, p.index)), " with ", Describe(m),
                   ", which does not match the request");
  }
  // The copy runs outside the lock. A failed operation's Wait() returns only once no
  // copy is running anywhere (copies_running_), and a failure marks every operation
  // done, so no copy starts after it: a caller that frees its buffers after catching
  // the error never races with us.
  bool deliver = error.empty() && !f.op->done && p.bytes > 0;
  if (deliver) copies_running_++;
  ReturnCredit(f);
  lock.unlock();
  if (deliver) {
    // The output slice belongs to this partition alone until the operation completes.
    std::memcpy(f.op->output + p.offset, m.payload.data(), p.bytes);
    if (f.op->average) {
      // Averages are over the workers whose pushes the sum holds (fewer after a join).
      uint32_t n = e.contributors() > 0 ? e.contributors() : static_cast<uint32_t>(num_workers_);
      Scale(f.op->output + p.offset, 1.0 / n, p.bytes / DataTypeSize(t.dtype), t.dtype);
    }
    stat_bytes_received_ += p.bytes;
    lock.lock();
    copies_running_--;
    cv_.notify_all();
    lock.unlock();
  }
  FinishPartition(f.op, error);
}

void Worker::OnError(const Message& m) {
  const proto::Envelope& e = m.envelope;
  std::unique_lock<std::mutex> lock(mu_);
  auto it = in_flight_.find(e.request_id());
  if (it == in_flight_.end()) {
    LOG(WARNING) << cluster_.table().Describe(m.sender()) << " reported: " << e.error().reason();
    return;
  }
  InFlight f = std::move(it->second);
  in_flight_.erase(it);
  const Tensor& t = *f.op->tensor;
  std::string error = StrCat("push_pull of tensor '", t.name, "' (id ", t.id, ", ",
                             DataTypeName(t.dtype), ShapeString(t.shape), ") failed at ",
                             cluster_.table().Describe(m.sender()), ": ", e.error().reason());
  ReturnCredit(f);
  lock.unlock();
  FinishPartition(f.op, error);
}

void Worker::FinishPartition(const std::shared_ptr<Operation>& op, const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  op->replies_left--;
  if (!error.empty() && !op->done) {
    LOG(ERROR) << error;
    op->error = error;
    op->done = true;
    Tensor& t = *op->tensor;
    if (!t.pending.empty() && t.pending.front() == op) {
      t.pending.pop_front();
      if (!t.pending.empty()) StartOperation(t.pending.front());
    }
    cv_.notify_all();
    return;
  }
  MaybeComplete(op);
}

void Worker::MaybeComplete(const std::shared_ptr<Operation>& op) {
  if (op->done || op->replies_left > 0 || op->releases_left > 0) return;
  op->done = true;
  Tensor& t = *op->tensor;
  CHECK(!t.pending.empty() && t.pending.front() == op) << "operations of a tensor out of order";
  t.pending.pop_front();
  if (!t.pending.empty()) StartOperation(t.pending.front());
  cv_.notify_all();
}

void Worker::FailAll(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.empty()) return;
  failure_ = reason;
  for (auto& [handle, op] : operations_) {
    if (!op->done) {
      op->done = true;
      op->error = reason;
    }
  }
  cv_.notify_all();
}

bool Worker::Poll(Handle handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = operations_.find(handle);
  FERRY_ENFORCE(it != operations_.end(), ErrorCode::kInvalidArgument, "unknown handle ", handle);
  return it->second->done;
}

std::string Worker::DescribeOperation(const Operation& op) const {
  const Tensor& t = *op.tensor;
  std::string s = StrCat("push_pull of tensor '", t.name, "' (id ", t.id, ", ", t.bytes,
                         " bytes in ", t.parts.size(), " partitions)");
  if (!op.started) return s + " is queued behind an earlier push_pull of the same tensor";
  s += StrCat(": ", op.replies_left, " partition(s) without a reply");
  int listed = 0;
  for (const auto& [request, f] : in_flight_) {
    if (f.op.get() != &op || listed++ >= 4) continue;
    s += StrCat("; partition ", f.part, " sent to ",
                cluster_.table().Describe(ServerId(t.parts[f.part].server)));
  }
  if (op.replies_left == 0) s += StrCat("; ZeroMQ still holds ", op.releases_left, " partition(s)");
  return s;
}

bool Worker::WaitFor(Handle handle, int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = operations_.find(handle);
  FERRY_ENFORCE(it != operations_.end(), ErrorCode::kInvalidArgument, "unknown handle ", handle);
  std::shared_ptr<Operation> op = it->second;
  // The operation's deadline runs from the first wait for it, however it is sliced.
  if (op->wait_deadline_ms == 0) op->wait_deadline_ms = NowMs() + config_.op_timeout_ms;
  auto finished = [&] { return op->done && (op->error.empty() || copies_running_ == 0); };
  auto until = Clock::now() + Millis(std::max<int64_t>(0, std::min(timeout_ms, op->wait_deadline_ms - NowMs())));
  cv_.wait_until(lock, until, finished);
  if (!finished()) {
    if (NowMs() < op->wait_deadline_ms) return false;
    throw FerryError(ErrorCode::kTimeout,
                     StrCat("timed out after ", config_.op_timeout_ms,
                            " ms (FERRY_OP_TIMEOUT_MS): ", DescribeOperation(*op)));
  }
  operations_.erase(handle);
  if (!op->error.empty()) {
    ErrorCode code = failure_.empty() ? ErrorCode::kMismatch : ErrorCode::kPeerFailed;
    throw FerryError(code, op->error);
  }
  return true;
}

void Worker::Wait(Handle handle) {
  while (!WaitFor(handle, config_.op_timeout_ms)) {
  }
}

void Worker::PushPull(const std::string& name, const void* input, void* output, DataType dtype,
                      uint64_t count, bool average) {
  Wait(PushPullAsync(name, input, output, dtype, count, average));
}

void Worker::Broadcast(const std::string& name, void* data, DataType dtype, uint64_t count,
                       int root) {
  FERRY_ENFORCE(root >= 0 && root < num_workers_, ErrorCode::kInvalidArgument, "broadcast of '",
                name, "': root rank ", root, " is not a worker rank (0..", num_workers_ - 1, ")");
  FERRY_ENFORCE(!config_.enable_async, ErrorCode::kInvalidArgument, "broadcast of '", name,
                "': not available in asynchronous training (FERRY_ENABLE_ASYNC=1); there the "
                "servers hold the parameters, and every worker's first push_pull of a tensor "
                "returns them");
  // A sum in which every worker but the root contributes zeros: exact for every dtype.
  Buffer zeros;
  const void* input = data;
  if (rank_ != root) {
    zeros = Buffer::Allocate(count * DataTypeSize(dtype));
    std::memset(zeros.data(), 0, zeros.size());
    input = zeros.data();
  }
  PushPull("__broadcast__/" + name, input, data, dtype, count, false);
}

void Worker::Barrier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) throw FerryError(ErrorCode::kPeerFailed, failure_);
  }
  cluster_.Barrier(proto::GROUP_WORKERS);
}

void Worker::WaitForOwnOperations(std::unique_lock<std::mutex>& lock) {
  auto deadline = Clock::now() + Millis(config_.op_timeout_ms);
  // Operations nobody waited for still finish first.
  cv_.wait_until(lock, deadline, [this] {
    if (!failure_.empty()) return true;
    for (const auto& [h, op] : operations_) {
      if (!op->done) return false;
    }
    return true;
  });
  if (!failure_.empty()) throw FerryError(ErrorCode::kPeerFailed, failure_);
}

void Worker::Join() {
  FERRY_ENFORCE(!config_.enable_async, ErrorCode::kInvalidArgument,
                "join: not available in asynchronous training (FERRY_ENABLE_ASYNC=1); no push "
                "waits for other workers, so a worker out of data simply stops pushing");
  {
    std::unique_lock<std::mutex> lock(mu_);
    WaitForOwnOperations(lock);
    join_request_ = next_request_++;
    join_acks_ = 0;
  }
  for (int s = 0; s < num_servers_; ++s) {
    Message m = MakeMessage(proto::JOIN, my_id_);
    m.envelope.set_request_id(join_request_);
    van_.Send(ServerId(s), std::move(m));
  }
  {
    // Every server must hold our JOIN before the others may leave the join barrier.
    std::unique_lock<std::mutex> lock(mu_);
    bool acked = cv_.wait_for(lock, Millis(config_.op_timeout_ms), [this] {
      return join_acks_ == num_servers_ || !failure_.empty();
    });
    if (!failure_.empty()) throw FerryError(ErrorCode::kPeerFailed, failure_);
    FERRY_ENFORCE(acked, ErrorCode::kTimeout, "join: ", num_servers_ - join_acks_, " of ",
                  num_servers_, " servers did not acknowledge within ", config_.op_timeout_ms,
                  " ms");
  }
  LOG(INFO) << "worker " << rank_ << " joined; waiting for the other workers";
  cluster_.Barrier(proto::GROUP_JOIN, config_.join_timeout_ms);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& t : tensors_) t->rounds.assign(t->parts.size(), 0);
  LOG(INFO) << "every worker joined; rounds start over";
}

void Worker::Shutdown() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    WaitForOwnOperations(lock);
  }
  cluster_.Finalize();
  WorkerStats s = stats();
  LOG(INFO) << "worker " << rank_ << " done: " << s.operations << " push_pulls, "
            << s.partitions_pushed << " partitions, " << s.bytes_pushed << " bytes pushed, "
            << s.resends << " pushes sent again, " << s.pulls << " pulls, " << s.late_replies
            << " late replies dropped, " << s.van.injected_drops
            << " messages dropped by fault injection";
}

WorkerStats Worker::stats() const {
  WorkerStats s;
  s.operations = stat_ops_;
  s.partitions_pushed = stat_parts_;
  s.bytes_pushed = stat_bytes_pushed_;
  s.bytes_received = stat_bytes_received_;
  s.send_releases = stat_releases_;
  s.resends = stat_resends_;
  s.pulls = stat_pulls_;
  s.late_replies = stat_late_replies_;
  s.van = van_.stats();
  return s;
}

std::vector<uint64_t> Worker::PlacedBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return placement_->loads();
}

std::string Worker::TensorName(uint32_t tensor_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return tensor_id < tensors_.size() ? tensors_[tensor_id]->name : "?";
}

}  // namespace ferry
