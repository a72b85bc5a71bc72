#include "worker/worker.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "common/transport/fused_push.h"
#include "common/transport/rows_message.h"
#include "common/util/clock.h"
#include "common/util/logging.h"
#include "common/util/status.h"
#include "worker/scheduling/policies.h"

namespace ferry {

// A tensor cut in one layout.
struct Worker::Cut {
  std::vector<PartitionSpec> parts;  // empty: not cut in this layout yet
  std::vector<uint32_t> rounds;      // next round, per partition
};

struct Worker::Tensor {
  uint32_t id = 0;
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  uint64_t count = 0;
  uint64_t bytes = 0;
  uint64_t hash = 0;
  int priority = 0;
  std::vector<Cut> cuts;                           // by layout generation
  std::vector<uint32_t> rows_rounds;  // by server rank: next round of its rows key (lazy)
  std::deque<std::shared_ptr<Operation>> pending;  // front is the running operation
};

// One partition size, and the placement of every tensor cut with it. Cutting in id
// order makes the placement a function of the declarations and the size alone, so
// every worker computes the same, whenever it switches.
struct Worker::Layout {
  Layout(uint64_t bytes, const std::vector<double>& weights)
      : partition_bytes(bytes), placement(weights) {}
  uint64_t partition_bytes;
  Placement placement;
  uint32_t cut = 0;  // tensors 0..cut-1 are cut in this layout
};

struct Worker::Operation {
  Handle handle = 0;
  Tensor* tensor = nullptr;
  const uint8_t* input = nullptr;
  uint8_t* output = nullptr;
  bool average = false;
  int priority = 0;
  uint32_t layout = 0;    // the layout generation its partitions use
  int replies_left = 0;   // partitions whose sum has not arrived
  int releases_left = 0;  // payloads handed to ZeroMQ and not yet released (resends add)
  bool started = false;
  bool done = false;
  std::string error;  // set when done with a failure
  int64_t start_us = 0;
  int64_t wait_deadline_ms = 0;  // set by the first wait: then + FERRY_OP_TIMEOUT_MS
  // Sparse rows (PushPullRowsAsync): `input` is unused; each server gets one ROWS_PUSH.
  bool rows = false;
  uint64_t row_elements = 0;
  uint64_t row_bytes = 0;
  std::vector<Message> row_pushes;  // by server rank, built at the call; sent at the start
  // By server rank: for each row its push carries, the row's index in the caller's
  // list (where its sum goes in `output`). Fixed at the call, read without the lock.
  std::vector<std::vector<uint64_t>> row_positions;
};

// A ROWS_PUSH between its send and its reply.
struct Worker::RowsInFlight {
  std::shared_ptr<Operation> op;
  int server = 0;
  Message push;          // kept for resends: its payload is owned, never borrowed
  bool acked = false;    // the server holds it; only the sums may be missing
  int attempts = 0;      // resends so far
  int64_t resend_at_ms = 0;
};

// A partition between the queue and its reply.
struct Worker::InFlight {
  std::shared_ptr<Operation> op;
  uint32_t part = 0;
  PushTask task;                 // as queued: its credit is returned with it
  uint32_t round = 0;            // the key's round this push belongs to
  bool credit_returned = false;  // the server acknowledged the push (or answered it)
  bool fused = false;            // first sent inside a PUSH_FUSED
  int attempts = 0;              // resends so far
  // No answer by then: resend (see ResendOverdue). kNotOnTheWire while ZeroMQ still
  // queues the push here: the timer starts when its bytes have left (the payload's
  // release), so a deep local queue (fifo, big models, slow links) causes no resends.
  int64_t resend_at_ms = 0;
  int64_t ready_us = 0, sent_us = 0, acked_us = 0;  // for the trace
};

namespace {

constexpr int64_t kNotOnTheWire = std::numeric_limits<int64_t>::max();

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

// How many partitions SplitTensor makes.
uint64_t PartitionCount(uint64_t bytes, size_t element, uint64_t partition_bytes) {
  uint64_t step = partition_bytes - partition_bytes % element;
  return std::max<uint64_t>(1, (bytes + step - 1) / step);
}

PolicyOptions PolicyOptionsOf(const Config& c) {
  PolicyOptions o;
  o.policy = c.scheduling_policy;
  o.fusion_bytes = static_cast<uint64_t>(c.fusion_bytes);
  o.bucket_bytes = static_cast<uint64_t>(c.bucket_bytes);
  o.bucket_timeout_us = c.bucket_timeout_ms * 1000;
  return o;
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
      queue_(MakePolicy(PolicyOptionsOf(config)),
             static_cast<uint64_t>(config.CreditBytesFor(config.InitialPartitionBytes()))),
      scheduling_{config.InitialPartitionBytes(),
                  config.CreditBytesFor(config.InitialPartitionBytes())} {}

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
  for (const auto& s : table.Servers()) {
    server_weights_.push_back(s.weight());
    van_.Connect(s.id(), StrCat("tcp://", s.host(), ":", s.port()), cluster_.routing_id());
  }
  layouts_.push_back(std::make_unique<Layout>(scheduling_.partition_bytes, server_weights_));
  if (!config_.trace_dir.empty()) trace_ = std::make_unique<Trace>(config_.trace_dir, rank_);
  if (config_.autotune) {
    const bool credit = queue_.policy() == SchedulingPolicy::kCredit;
    std::vector<SchedulingChoice> grid = Autotuner::Grid(
        scheduling_.partition_bytes, config_.scheduling_credit, config_.autotune_partition_bytes,
        credit ? config_.autotune_credits : std::vector<int64_t>{1}, 1024,
        config_.max_message_bytes - 4096);
    // Without credit the credit does not matter: each size keeps the configured one.
    if (!credit) {
      for (auto& c : grid) c.credit_bytes = config_.CreditBytesFor(c.partition_bytes);
    }
    tuner_ = std::make_unique<Autotuner>(std::move(grid), config_.autotune_steps);
  }
  sender_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "sender");
    SenderLoop();
  });
  LOG(INFO) << "worker " << rank_ << " of " << num_workers_ << " ready; " << num_servers_
            << " servers; scheduling policy " << queue_.policy_name() << ", "
            << Describe(scheduling_)
            << (config_.autotune
                    ? StrCat("; autotune over ", tuner_->grid().size(), " candidates, ",
                             config_.autotune_steps, " iterations each")
                    : std::string())
            << (trace_ ? "; trace " + trace_->path() : std::string());
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
    FERRY_ENFORCE(d >= 0, ErrorCode::kInvalidArgument, "tensor '", name,
                  "': negative dimension in shape ", ShapeString(shape));
  }
  auto it = tensor_ids_.find(name);
  if (it != tensor_ids_.end()) {
    Tensor& t = *tensors_[it->second];
    FERRY_ENFORCE(t.dtype == dtype && CountOf(t.shape) == CountOf(shape),
                  ErrorCode::kInvalidArgument, "tensor '", name, "' was declared as ",
                  DataTypeName(t.dtype), ShapeString(t.shape), " and is now used as ",
                  DataTypeName(dtype), ShapeString(shape));
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
  uint64_t parts =
      PartitionCount(t->bytes, DataTypeSize(dtype), layouts_[layout_]->partition_bytes);
  FERRY_ENFORCE(parts <= kMaxPartitionsPerTensor, ErrorCode::kInvalidArgument, "tensor '", name,
                "' of ", t->bytes, " bytes would have ", parts, " partitions of ",
                layouts_[layout_]->partition_bytes, " bytes; at most ", kMaxPartitionsPerTensor,
                " are possible: use larger partitions");
  CutTensor(layout_, *t);
  VLOG(1) << "declared tensor '" << name << "' id " << t->id << " " << DataTypeName(dtype)
          << ShapeString(shape) << " in " << parts << " partitions";
  tensor_ids_[name] = static_cast<int>(t->id);
  tensors_.push_back(std::move(t));
  return *tensors_.back();
}

void Worker::CutTensor(uint32_t gen, Tensor& t) {
  Layout& l = *layouts_[gen];
  CHECK_EQ(l.cut, t.id) << "tensors are cut in declaration order";
  Cut cut;
  cut.parts = SplitTensor(t.bytes, DataTypeSize(t.dtype), l.partition_bytes);
  CHECK_LE(cut.parts.size(), kMaxPartitionsPerTensor);
  for (auto& p : cut.parts) p.server = l.placement.Assign(p.bytes);
  cut.rounds.assign(cut.parts.size(), 0);
  if (t.cuts.size() <= gen) t.cuts.resize(gen + 1);
  t.cuts[gen] = std::move(cut);
  l.cut++;
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
              << tensors_.size()
              << " (declare tensors up front, in forward order, on every worker)";
  }
  Tensor& t = DeclareLocked(name, dtype, {static_cast<int64_t>(count)}, std::nullopt);
  auto op = std::make_shared<Operation>();
  op->handle = next_handle_++;
  op->tensor = &t;
  op->input = static_cast<const uint8_t*>(input);
  op->output = static_cast<uint8_t*>(output);
  op->average = average;
  op->priority = priority ? *priority : t.priority;
  op->layout = layout_;  // constant while any operation is unfinished (ApplyScheduling)
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
  if (op->rows) {
    StartRowsOperation(op);
    return;
  }
  CHECK_EQ(op->layout, layout_) << "the layout changed under an unfinished operation";
  const Cut& cut = t.cuts[op->layout];
  op->replies_left = static_cast<int>(cut.parts.size());
  const int64_t now = NowUs();
  for (uint32_t i = 0; i < cut.parts.size(); ++i) {
    InFlight f;
    f.op = op;
    f.part = i;
    f.task = PushTask{op->priority, 0, cut.parts[i].bytes, cut.parts[i].server, next_cookie_++};
    f.ready_us = now;
    queued_[f.task.cookie] = f;
    queue_.Push(f.task);
  }
}

const PartitionSpec& Worker::PartOf(const InFlight& f) const {
  return f.op->tensor->cuts[f.op->layout].parts[f.part];
}

uint64_t Worker::KeyOf(const InFlight& f) const {
  return MakeLayoutKey(f.op->tensor->id, f.op->layout, PartOf(f).index);
}

void Worker::SenderLoop() {
  // With resends on, wake often enough to resend within a quarter of the timeout.
  const int64_t wake_ms = config_.resend_timeout_ms > 0
                              ? std::clamp<int64_t>(config_.resend_timeout_ms / 4, 5, 1000)
                              : 1000;
  while (true) {
    Batch batch;
    bool timed_out = false;
    bool got = queue_.Next(&batch, wake_ms, &timed_out);
    if (config_.resend_timeout_ms > 0) ResendOverdue();
    if (!got) {
      if (timed_out) continue;
      return;  // closed
    }
    SendBatch(batch);
  }
}

namespace {

// PUSH messages for one server, to go as one message: fused if more than one.
struct Pack {
  int server = 0;
  uint64_t bytes = 0;
  std::vector<Message> pushes;
};

}  // namespace

void Worker::SendBatch(const Batch& batch) {
  // Packs per server, in batch order; a pack is full at fuse_bytes or kMaxFusedPushes.
  std::vector<Pack> packs;
  std::vector<size_t> open;  // by server rank: index in packs + 1 of its open pack; 0 none
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t now_us = NowUs();
  for (const PushTask& task : batch.tasks) {
    auto it = queued_.find(task.cookie);
    CHECK(it != queued_.end()) << "task without a partition";
    InFlight f = std::move(it->second);
    queued_.erase(it);
    if (f.op->done) {  // failed while queued: never sent
      queue_.Done(task);
      continue;
    }
    Tensor& t = *f.op->tensor;
    uint64_t request = next_request_++;
    f.round = t.cuts[f.op->layout].rounds[f.part]++;
    f.resend_at_ms = PartOf(f).bytes > 0 ? kNotOnTheWire : NowMs() + config_.resend_timeout_ms;
    f.sent_us = now_us;
    if (open.size() <= static_cast<size_t>(task.server)) open.resize(task.server + 1, 0);
    size_t& slot = open[task.server];
    if (slot == 0 || batch.fuse_bytes == 0 ||
        packs[slot - 1].bytes + task.bytes > batch.fuse_bytes ||
        packs[slot - 1].pushes.size() >= kMaxFusedPushes) {
      packs.push_back(Pack{task.server, 0, {}});
      slot = packs.size();
    }
    packs[slot - 1].bytes += task.bytes;
    packs[slot - 1].pushes.push_back(BuildPush(f, request));
    in_flight_[request] = std::move(f);
  }
  int copies = 0;
  for (const Pack& pack : packs) {
    if (pack.pushes.size() < 2) continue;
    copies++;
    for (const Message& m : pack.pushes) in_flight_[m.envelope.request_id()].fused = true;
  }
  // A fused pack is copied outside the lock; a failed operation's Wait() returns only
  // once no copy runs (copies_running_), so a caller never frees an input we read.
  copies_running_ += copies;
  lock.unlock();
  for (Pack& pack : packs) {
    stat_parts_ += pack.pushes.size();
    stat_bytes_pushed_ += pack.bytes;
    if (pack.pushes.size() == 1) {
      van_.Send(ServerId(pack.server), std::move(pack.pushes.front()));
      continue;
    }
    std::vector<const Message*> parts;
    std::vector<uint64_t> requests;
    for (const Message& m : pack.pushes) {
      parts.push_back(&m);
      requests.push_back(m.envelope.request_id());
    }
    Message fused = MakeFusedPush(my_id_, parts);
    if (!fused.payload.empty()) {
      // The parts' resend timers start once ZeroMQ let go of the fused copy.
      Buffer copy = fused.payload;
      fused.payload = Buffer::Borrow(copy.data(), copy.size(), [this, copy, requests] {
        std::lock_guard<std::mutex> l(mu_);
        for (uint64_t r : requests) StartResendTimer(r);
      });
    }
    stat_fused_messages_++;
    stat_parts_fused_ += pack.pushes.size();
    pack.pushes.clear();  // releases the borrowed inputs: their hooks take mu_
    van_.Send(ServerId(pack.server), std::move(fused));
  }
  if (copies > 0) {
    lock.lock();
    copies_running_ -= copies;
    cv_.notify_all();
  }
}

Message Worker::BuildPush(const InFlight& f, uint64_t request) {
  const Tensor& t = *f.op->tensor;
  const PartitionSpec& p = PartOf(f);
  Message m = MakeMessage(proto::PUSH, my_id_);
  m.envelope.set_request_id(request);
  m.envelope.set_key(KeyOf(f));
  m.envelope.set_round(f.round);
  m.envelope.set_dtype(static_cast<proto::DataTypeProto>(t.dtype));
  m.envelope.set_length(p.bytes);
  m.envelope.set_priority(f.op->priority);
  m.envelope.set_tensor_hash(t.hash);
  m.envelope.set_async_mode(config_.enable_async);
  if (p.bytes > 0) {
    std::shared_ptr<Operation> op = f.op;
    op->releases_left++;
    // Zero copy: ZeroMQ sends straight from the caller's input (or MakeFusedPush
    // copies it); the release hook tells us when it no longer reads it.
    m.payload = Buffer::Borrow(const_cast<uint8_t*>(op->input) + p.offset, p.bytes, [this, op, request] {
      std::lock_guard<std::mutex> l(mu_);
      auto it = in_flight_.find(request);
      // A part of a fused push was copied, not sent: the fused copy starts its timer
      // (above). Its resends go alone (attempts > 0) and start their own.
      if (it != in_flight_.end() && (!it->second.fused || it->second.attempts > 0)) {
        StartResendTimer(request);
      }
      op->releases_left--;
      stat_releases_++;
      MaybeComplete(op);
    });
  }
  return m;
}

void Worker::StartResendTimer(uint64_t request) {
  auto it = in_flight_.find(request);
  if (it == in_flight_.end() || it->second.resend_at_ms != kNotOnTheWire) return;
  it->second.resend_at_ms = NowMs() + ResendDelayMs(it->second.attempts);
}

int64_t Worker::ResendDelayMs(int attempts) const {
  // Back off: the timeout doubles per attempt, up to 32x.
  return config_.resend_timeout_ms * (int64_t{1} << std::min(attempts, 5));
}

void Worker::ResendOverdue() {
  std::vector<std::pair<int, Message>> out;  // (server rank, message)
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = NowMs();
    for (auto& [request, f] : in_flight_) {
      if (f.op->done || now < f.resend_at_ms) continue;
      f.attempts++;
      // Back off: the timeout doubles per attempt, up to 32x. A resent payload starts
      // its timer when ZeroMQ has sent it (StartResendTimer from its release).
      const bool payload = !f.credit_returned && PartOf(f).bytes > 0;
      f.resend_at_ms = payload ? kNotOnTheWire : now + ResendDelayMs(f.attempts);
      const Tensor& t = *f.op->tensor;
      const PartitionSpec& p = PartOf(f);
      if (f.credit_returned) {
        // The server has the push; only its sum may have been lost.
        Message pull = MakeMessage(proto::PULL, my_id_);
        pull.envelope.set_request_id(request);
        pull.envelope.set_key(KeyOf(f));
        pull.envelope.set_round(f.round);
        out.emplace_back(p.server, std::move(pull));
        stat_pulls_++;
      } else {
        // Resends go alone (a fused push's parts each resend on their own timer).
        out.emplace_back(p.server, BuildPush(f, request));
        stat_resends_++;
      }
      LOG_EVERY_N(WARNING, 100) << "no answer from "
                                << cluster_.table().Describe(ServerId(p.server)) << " for "
                                << KeyName(KeyOf(f)) << " of tensor '" << t.name << "' round "
                                << f.round << "; sending "
                                << (f.credit_returned ? "a PULL for its sum" : "the push again")
                                << " (attempt " << f.attempts << "; " << google::COUNTER
                                << " resends so far)";
    }
    ResendOverdueRows(now, &out);
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
    if (!OnRowsAck(m)) OnAck(m);
  } else if (m.type() == proto::PUSH_RESULT) {
    OnPushResult(std::move(m));
  } else if (m.type() == proto::ROWS_RESULT) {
    OnRowsResult(std::move(m));
  } else if (m.type() == proto::ERROR) {
    if (!OnRowsError(m)) OnError(m);
  } else {
    LOG_EVERY_N(WARNING, 100) << "dropped unexpected " << Describe(m);
  }
}

void Worker::ReturnCredit(InFlight& f) {
  if (f.credit_returned) return;
  f.credit_returned = true;
  queue_.Done(f.task);
}

void Worker::OnAck(const Message& m) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_flight_.find(m.envelope.request_id());
  if (it == in_flight_.end()) {
    NoteLateReply(m);
    return;
  }
  ReturnCredit(it->second);
  if (it->second.acked_us == 0) it->second.acked_us = NowUs();
  // From now on only the sum is missing: ask for it if it does not come in time. A PULL
  // for a sum that other workers still hold up is acknowledged again: keep backing off,
  // or a straggler makes every other worker PULL each partition every timeout.
  it->second.resend_at_ms = NowMs() + ResendDelayMs(it->second.attempts);
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
  const int64_t result_us = NowUs();
  const Tensor& t = *f.op->tensor;
  const PartitionSpec p = PartOf(f);  // a copy: used after the lock is let go
  std::string error;
  if (e.key() != KeyOf(f) || e.length() != p.bytes || e.dtype() != static_cast<int>(t.dtype) ||
      m.sender() != ServerId(p.server)) {
    error = StrCat(cluster_.table().Describe(m.sender()), " answered the push of ",
                   KeyName(KeyOf(f)), " with ", Describe(m), ", which does not match the request");
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
  if (trace_ && error.empty()) {
    trace_->Partition(PartitionTimes{t.name, f.part, e.key(), p.server, p.bytes, f.op->priority,
                                     f.round, f.fused, f.ready_us, f.sent_us, f.acked_us, result_us,
                                     NowUs()});
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
  if (op.rows) {
    std::string s = StrCat("push_pull_rows of tensor '", t.name, "' (id ", t.id, ")");
    if (!op.started) return s + " is queued behind an earlier operation on the same tensor";
    s += StrCat(": ", op.replies_left, " server(s) without a reply");
    for (const auto& [request, f] : rows_in_flight_) {
      if (f.op.get() != &op) continue;
      s += StrCat("; ", cluster_.table().Describe(ServerId(f.server)),
                  f.acked ? " holds its rows, waiting for other workers"
                          : " has not acknowledged its rows");
    }
    return s;
  }
  const std::vector<PartitionSpec>& parts = t.cuts[op.layout].parts;
  std::string s = StrCat("push_pull of tensor '", t.name, "' (id ", t.id, ", ", t.bytes,
                         " bytes in ", parts.size(), " partitions)");
  if (!op.started) return s + " is queued behind an earlier push_pull of the same tensor";
  s += StrCat(": ", op.replies_left, " partition(s) without a reply");
  int listed = 0;
  for (const auto& [request, f] : in_flight_) {
    if (f.op.get() != &op || listed++ >= 4) continue;
    s += StrCat("; partition ", f.part, " sent to ",
                cluster_.table().Describe(ServerId(parts[f.part].server)));
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
  auto until = Clock::now() +
               Millis(std::max<int64_t>(0, std::min(timeout_ms, op->wait_deadline_ms - NowMs())));
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

void Worker::PushPullRows(const std::string& name, const int64_t* rows, uint64_t num_rows,
                          const void* values, void* output, DataType dtype, bool average) {
  Wait(PushPullRowsAsync(name, rows, num_rows, values, output, dtype, average));
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

void Worker::StepBoundary() {
  std::lock_guard<std::mutex> step_lock(step_mu_);
  Autotuner::Action action;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!failure_.empty()) throw FerryError(ErrorCode::kPeerFailed, failure_);
    const int64_t now = NowUs();
    const double ms = last_step_us_ > 0 ? (now - last_step_us_) / 1000.0 : -1.0;
    steps_++;
    if (trace_) {
      trace_->Instant(StrCat("step ", steps_), now,
                      ms < 0 ? std::string("{}") : StrCat("{\"iteration_ms\":", ms, "}"));
    }
    if (tuner_) action = tuner_->OnStep(ms);
    if (action.kind == Autotuner::Action::kSwitch) {
      // Partitions change only with nothing in flight (with ferry.torch's CrossBarrier
      // this iteration's pushes may still be on their way: the switch waits for them).
      WaitForQuiet(lock, "StepBoundary");
      ApplyScheduling(action.choice, StrCat("autotune candidate at iteration ", steps_));
    }
  }
  if (action.kind == Autotuner::Action::kDecide) FinishAutotune();
  last_step_us_ = NowUs();  // after the decision's push_pull, which is no iteration's time
}

void Worker::FinishAutotune() {
  // Every worker sums every worker's scores, so every worker picks the same candidate.
  std::vector<double> summed = tuner_->scores();
  PushPull("__ferry__/autotune", summed.data(), summed.data(), DataType::kFloat64, summed.size(),
           false);
  const size_t best = tuner_->Decide(summed);
  const SchedulingChoice choice = tuner_->grid()[best];
  std::string table;
  const double scored = static_cast<double>(num_workers_) * (tuner_->steps() - 1);
  for (size_t i = 0; i < summed.size(); ++i) {
    table += StrCat(i ? "; " : "", Describe(tuner_->grid()[i]), ": ", summed[i] / scored, " ms");
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    WaitForQuiet(lock, "autotune");
    ApplyScheduling(choice, "autotune chose it");
  }
  LOG(INFO) << "autotune: chose " << Describe(choice) << " (candidate " << best << " of "
            << summed.size() << ") after " << steps_ << " iterations; mean iteration per "
            << "candidate over all workers: " << table;
  tuner_.reset();
}

void Worker::SetScheduling(int64_t partition_bytes, int64_t credit_bytes) {
  FERRY_ENFORCE(partition_bytes >= 1024 && partition_bytes <= config_.max_message_bytes - 4096,
                ErrorCode::kInvalidArgument, "SetScheduling: partition size ", partition_bytes,
                " bytes is outside 1024..", config_.max_message_bytes - 4096,
                " (FERRY_MAX_MESSAGE_BYTES - 4096)");
  FERRY_ENFORCE(credit_bytes >= 1, ErrorCode::kInvalidArgument, "SetScheduling: credit of ",
                credit_bytes, " bytes; it must be at least 1");
  std::unique_lock<std::mutex> lock(mu_);
  WaitForQuiet(lock, "SetScheduling");
  ApplyScheduling(SchedulingChoice{partition_bytes, credit_bytes}, "SetScheduling");
}

SchedulingChoice Worker::scheduling() const {
  std::lock_guard<std::mutex> lock(mu_);
  return scheduling_;
}

void Worker::ApplyScheduling(const SchedulingChoice& choice, const std::string& why) {
  for (const auto& [handle, op] : operations_) {
    CHECK(op->done) << "scheduling changed with an operation unfinished";
  }
  const uint64_t bytes = static_cast<uint64_t>(choice.partition_bytes);
  uint32_t gen = 0;
  while (gen < layouts_.size() && layouts_[gen]->partition_bytes != bytes) gen++;
  if (gen == layouts_.size()) {
    FERRY_ENFORCE(layouts_.size() < kMaxLayouts, ErrorCode::kInvalidArgument,
                  "cannot cut tensors with a ", kMaxLayouts + 1, "th partition size (", bytes,
                  " bytes): keys hold ", kMaxLayouts, " layouts");
    layouts_.push_back(std::make_unique<Layout>(bytes, server_weights_));
  }
  Layout& l = *layouts_[gen];
  for (uint32_t id = l.cut; id < tensors_.size(); ++id) {  // refuse before cutting any
    const Tensor& t = *tensors_[id];
    FERRY_ENFORCE(PartitionCount(t.bytes, DataTypeSize(t.dtype), bytes) <= kMaxPartitionsPerTensor,
                  ErrorCode::kInvalidArgument, "tensor '", t.name, "' of ", t.bytes,
                  " bytes would have more than ", kMaxPartitionsPerTensor, " partitions of ", bytes,
                  " bytes");
  }
  while (l.cut < tensors_.size()) CutTensor(gen, *tensors_[l.cut]);
  layout_ = gen;
  scheduling_ = choice;
  queue_.SetCredit(static_cast<uint64_t>(choice.credit_bytes));
  LOG(INFO) << "scheduling (" << why << "): " << Describe(choice) << "; layout " << gen;
  if (trace_) {
    trace_->Instant("scheduling", NowUs(),
                    StrCat("{\"partition_bytes\":", choice.partition_bytes,
                           ",\"credit_bytes\":", choice.credit_bytes, ",\"layout\":", gen, "}"));
  }
}

bool Worker::WaitForOwnOperations(std::unique_lock<std::mutex>& lock) {
  auto deadline = Clock::now() + Millis(config_.op_timeout_ms);
  // Operations nobody waited for still finish first.
  bool finished = cv_.wait_until(lock, deadline, [this] {
    if (!failure_.empty()) return true;
    for (const auto& [h, op] : operations_) {
      if (!op->done) return false;
    }
    return true;
  });
  if (!failure_.empty()) throw FerryError(ErrorCode::kPeerFailed, failure_);
  return finished;
}

void Worker::WaitForQuiet(std::unique_lock<std::mutex>& lock, const char* what) {
  FERRY_ENFORCE(WaitForOwnOperations(lock), ErrorCode::kTimeout, what, ": this worker's ",
                "push_pulls did not finish within ", config_.op_timeout_ms,
                " ms (FERRY_OP_TIMEOUT_MS)");
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
    bool acked = cv_.wait_for(lock, Millis(config_.op_timeout_ms),
                              [this] { return join_acks_ == num_servers_ || !failure_.empty(); });
    if (!failure_.empty()) throw FerryError(ErrorCode::kPeerFailed, failure_);
    FERRY_ENFORCE(acked, ErrorCode::kTimeout, "join: ", num_servers_ - join_acks_, " of ",
                  num_servers_, " servers did not acknowledge within ", config_.op_timeout_ms,
                  " ms");
  }
  LOG(INFO) << "worker " << rank_ << " joined; waiting for the other workers";
  cluster_.Barrier(proto::GROUP_JOIN, config_.join_timeout_ms);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& t : tensors_) {
    for (Cut& cut : t->cuts) cut.rounds.assign(cut.parts.size(), 0);
    t->rows_rounds.assign(t->rows_rounds.size(), 0);
  }
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
            << " messages dropped by fault injection, " << s.fused_messages << " fused messages of "
            << s.partitions_fused << " partitions, " << s.rows_operations << " push_pull_rows of "
            << s.rows_pushed << " rows; at most " << queue_.max_in_flight_bytes()
            << " bytes in flight";
  if (trace_) trace_->Close();
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
  s.fused_messages = stat_fused_messages_;
  s.partitions_fused = stat_parts_fused_;
  s.rows_operations = stat_rows_ops_;
  s.rows_pushed = stat_rows_pushed_;
  s.rows_bytes_pushed = stat_rows_bytes_pushed_;
  s.rows_bytes_received = stat_rows_bytes_received_;
  s.van = van_.stats();
  return s;
}

std::vector<uint64_t> Worker::PlacedBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return layouts_[layout_]->placement.loads();
}

std::string Worker::TensorName(uint32_t tensor_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return tensor_id < tensors_.size() ? tensors_[tensor_id]->name : "?";
}

// ---- Sparse rows (PushPullRows) ----

namespace {

// The server rank owning the row that starts at byte `row_offset`: the server of the
// partition holding that byte in the dense placement. REQUIRES: parts sorted by
// offset, covering the tensor, row_offset inside it.
int ServerOfRow(const std::vector<PartitionSpec>& parts, uint64_t row_offset) {
  auto it = std::upper_bound(parts.begin(), parts.end(), row_offset,
                             [](uint64_t at, const PartitionSpec& p) { return at < p.offset; });
  return std::prev(it)->server;
}

}  // namespace

Handle Worker::PushPullRowsAsync(const std::string& name, const int64_t* rows, uint64_t num_rows,
                                 const void* values, void* output, DataType dtype, bool average,
                                 std::optional<int> priority) {
  FERRY_ENFORCE(num_rows == 0 || (rows && values && output), ErrorCode::kInvalidArgument,
                "push_pull_rows of '", name, "': null buffer");
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.empty()) throw FerryError(ErrorCode::kPeerFailed, failure_);
  FERRY_ENFORCE(!shut_down_, ErrorCode::kShutdown, "push_pull_rows of '", name,
                "' after Shutdown()");
  FERRY_ENFORCE(!config_.enable_async, ErrorCode::kInvalidArgument, "push_pull_rows of '", name,
                "': sparse rows need synchronous training (FERRY_ENABLE_ASYNC=0)");
  auto id = tensor_ids_.find(name);
  FERRY_ENFORCE(id != tensor_ids_.end(), ErrorCode::kInvalidArgument, "push_pull_rows of '",
                name, "': declare the tensor first (DeclareTensor) with its shape [rows, ...]");
  Tensor& t = *tensors_[id->second];
  FERRY_ENFORCE(t.dtype == dtype, ErrorCode::kInvalidArgument, "push_pull_rows of tensor '", name,
                "' with ", DataTypeName(dtype), " values, but it was declared as ",
                DataTypeName(t.dtype), ShapeString(t.shape));
  FERRY_ENFORCE(!t.shape.empty() && t.shape[0] > 0 && t.count > 0, ErrorCode::kInvalidArgument,
                "push_pull_rows of tensor '", name, "' declared as ", ShapeString(t.shape),
                ": it needs at least one row of at least one element");
  const uint64_t total_rows = static_cast<uint64_t>(t.shape[0]);
  for (uint64_t j = 0; j < num_rows; ++j) {
    FERRY_ENFORCE(rows[j] >= 0 && static_cast<uint64_t>(rows[j]) < total_rows,
                  ErrorCode::kInvalidArgument, "push_pull_rows of tensor '", name, "' ",
                  DataTypeName(t.dtype), ShapeString(t.shape), ": row id ", rows[j],
                  " (position ", j, " of ", num_rows, ") is outside its rows 0..",
                  total_rows - 1);
  }
  auto op = std::make_shared<Operation>();
  op->handle = next_handle_++;
  op->tensor = &t;
  op->output = static_cast<uint8_t*>(output);
  op->average = average;
  op->priority = priority ? *priority : t.priority;
  op->layout = layout_;
  op->start_us = NowUs();
  op->rows = true;
  op->row_elements = t.count / total_rows;
  op->row_bytes = op->row_elements * DataTypeSize(dtype);
  BuildRowPushes(*op, rows, num_rows, values);
  operations_[op->handle] = op;
  t.pending.push_back(op);
  if (t.pending.size() == 1) StartOperation(op);
  stat_rows_ops_++;
  stat_rows_pushed_ += num_rows;
  return op->handle;
}

void Worker::BuildRowPushes(Operation& op, const int64_t* rows, uint64_t num_rows,
                            const void* values) {
  const Tensor& t = *op.tensor;
  const std::vector<PartitionSpec>& parts = t.cuts[op.layout].parts;
  op.row_positions.assign(num_servers_, {});
  for (uint64_t j = 0; j < num_rows; ++j) {
    const uint64_t row = static_cast<uint64_t>(rows[j]);
    op.row_positions[ServerOfRow(parts, row * op.row_bytes)].push_back(j);
  }
  const uint64_t limit = static_cast<uint64_t>(config_.max_message_bytes);
  for (int s = 0; s < num_servers_; ++s) {
    const std::vector<uint64_t>& positions = op.row_positions[s];
    const uint64_t n = positions.size();
    uint64_t bytes = 0;
    FERRY_ENFORCE(RowsPayloadBytes(n, op.row_elements, t.dtype, true, &bytes) && bytes <= limit,
                  ErrorCode::kInvalidArgument, "push_pull_rows of tensor '", t.name, "': ", n,
                  " rows for server ", s, " make a message of more than ", limit,
                  " bytes (FERRY_MAX_MESSAGE_BYTES); push fewer rows per call");
    Message m = MakeMessage(proto::ROWS_PUSH, my_id_);
    m.envelope.set_key(RowsKey(t.id, static_cast<uint32_t>(s)));
    m.envelope.set_dtype(static_cast<proto::DataTypeProto>(t.dtype));
    m.envelope.set_length(bytes);
    m.envelope.set_priority(op.priority);
    m.envelope.set_tensor_hash(t.hash);
    proto::RowsHeader* h = m.envelope.mutable_rows();
    h->set_num_rows(n);
    h->set_row_elements(op.row_elements);
    h->set_total_rows(static_cast<uint64_t>(t.shape[0]));
    if (n > 0) {
      // Owned, never borrowed: sending and resending it runs no hook that takes mu_.
      m.payload = Buffer::Allocate(bytes);
      int64_t* ids = static_cast<int64_t*>(m.payload.data());
      uint8_t* dst = m.payload.bytes() + n * sizeof(int64_t);
      const uint8_t* src = static_cast<const uint8_t*>(values);
      for (uint64_t k = 0; k < n; ++k) {
        ids[k] = rows[positions[k]];
        std::memcpy(dst + k * op.row_bytes, src + positions[k] * op.row_bytes, op.row_bytes);
      }
    }
    op.row_pushes.push_back(std::move(m));
  }
}

void Worker::StartRowsOperation(const std::shared_ptr<Operation>& op) {
  Tensor& t = *op->tensor;
  if (t.rows_rounds.empty()) t.rows_rounds.assign(num_servers_, 0);
  op->replies_left = num_servers_;
  const int64_t resend_at = config_.resend_timeout_ms > 0 ? NowMs() + config_.resend_timeout_ms
                                                          : kNotOnTheWire;
  for (int s = 0; s < num_servers_; ++s) {
    // Every server gets a push each round, also with no rows: its round completes only
    // once every worker pushed it.
    Message m = std::move(op->row_pushes[s]);
    const uint64_t request = next_request_++;
    m.envelope.set_request_id(request);
    m.envelope.set_round(t.rows_rounds[s]++);
    stat_rows_bytes_pushed_ += m.payload.size();
    rows_in_flight_[request] = RowsInFlight{op, s, m, false, 0, resend_at};
    // Under mu_: safe because the payload is owned (BuildRowPushes), so the Van runs no
    // release hook of ours; Send never blocks.
    van_.Send(ServerId(s), std::move(m));
  }
  op->row_pushes.clear();
}

bool Worker::OnRowsAck(const Message& m) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rows_in_flight_.find(m.envelope.request_id());
  if (it == rows_in_flight_.end()) return false;
  it->second.acked = true;
  // From now on only the sums are missing: ask for them if they do not come in time,
  // backing off (a PULL while other workers still hold the round up is acknowledged
  // again, as in OnAck).
  if (config_.resend_timeout_ms > 0) {
    it->second.resend_at_ms = NowMs() + ResendDelayMs(it->second.attempts);
  }
  return true;
}

void Worker::ResendOverdueRows(int64_t now_ms, std::vector<std::pair<int, Message>>* out) {
  for (auto it = rows_in_flight_.begin(); it != rows_in_flight_.end();) {
    const uint64_t request = it->first;
    RowsInFlight& f = it->second;
    if (f.op->done) {  // failed (another server's error): nobody waits for this reply
      it = rows_in_flight_.erase(it);
      continue;
    }
    ++it;
    if (now_ms < f.resend_at_ms) continue;
    f.attempts++;
    f.resend_at_ms = now_ms + ResendDelayMs(f.attempts);
    if (f.acked) {
      // The server holds the rows: a header-only PULL (with the rows body, which marks a
      // rows key) asks for the sums again.
      Message pull = MakeMessage(proto::PULL, my_id_);
      pull.envelope.set_request_id(request);
      pull.envelope.set_key(f.push.envelope.key());
      pull.envelope.set_round(f.push.envelope.round());
      *pull.envelope.mutable_rows() = f.push.envelope.rows();
      out->emplace_back(f.server, std::move(pull));
      stat_pulls_++;
    } else {
      out->emplace_back(f.server, f.push);  // shares the payload; the server deduplicates
      stat_resends_++;
    }
    LOG_EVERY_N(WARNING, 100) << "no answer from " << cluster_.table().Describe(ServerId(f.server))
                              << " for " << RowsKeyName(f.push.envelope.key()) << " round "
                              << f.push.envelope.round() << "; sending "
                              << (f.acked ? "a PULL for its sums" : "the rows again")
                              << " (attempt " << f.attempts << ")";
  }
}

void Worker::OnRowsResult(Message&& m) {
  const proto::Envelope& e = m.envelope;
  std::unique_lock<std::mutex> lock(mu_);
  auto it = rows_in_flight_.find(e.request_id());
  if (it == rows_in_flight_.end()) {
    NoteLateReply(m);
    return;
  }
  RowsInFlight f = std::move(it->second);
  rows_in_flight_.erase(it);
  const std::shared_ptr<Operation> op = f.op;
  const Tensor& t = *op->tensor;
  const std::vector<uint64_t>& positions = op->row_positions[f.server];
  std::string error;
  if (m.sender() != ServerId(f.server) || e.key() != f.push.envelope.key() ||
      e.dtype() != static_cast<int>(t.dtype) || e.rows().num_rows() != positions.size() ||
      e.rows().row_elements() != op->row_elements) {
    error = StrCat(cluster_.table().Describe(m.sender()), " answered the rows of tensor '",
                   t.name, "' with ", Describe(m), ", which does not match the request");
  }
  // The copy runs outside the lock, as in OnPushResult (copies_running_).
  const bool deliver = error.empty() && !op->done && !positions.empty();
  if (deliver) copies_running_++;
  lock.unlock();
  if (deliver) {
    // Rows of different servers go to disjoint rows of `output` (each position once).
    const uint32_t n = e.contributors() > 0 ? e.contributors() : static_cast<uint32_t>(num_workers_);
    for (size_t j = 0; j < positions.size(); ++j) {
      uint8_t* dst = op->output + positions[j] * op->row_bytes;
      std::memcpy(dst, m.payload.bytes() + j * op->row_bytes, op->row_bytes);
      if (op->average) Scale(dst, 1.0 / n, op->row_elements, t.dtype);
    }
    stat_rows_bytes_received_ += m.payload.size();
    lock.lock();
    copies_running_--;
    cv_.notify_all();
    lock.unlock();
  }
  FinishPartition(op, error);
}

bool Worker::OnRowsError(const Message& m) {
  const proto::Envelope& e = m.envelope;
  std::unique_lock<std::mutex> lock(mu_);
  auto it = rows_in_flight_.find(e.request_id());
  if (it == rows_in_flight_.end()) return false;
  const std::shared_ptr<Operation> op = it->second.op;
  rows_in_flight_.erase(it);
  const Tensor& t = *op->tensor;
  std::string error = StrCat("push_pull_rows of tensor '", t.name, "' (id ", t.id, ", ",
                             DataTypeName(t.dtype), ShapeString(t.shape), ") failed at ",
                             cluster_.table().Describe(m.sender()), ": ", e.error().reason());
  lock.unlock();
  FinishPartition(op, error);
  return true;
}

}  // namespace ferry
