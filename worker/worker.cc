#include "worker/worker.h"

#include <glog/logging.h>
#include <pthread.h>

#include <algorithm>
#include <cstring>

#include "common/util/clock.h"
#include "common/util/logging.h"
#include "common/util/status.h"
#include "worker/reserved_tensor_names.h"
#include "worker/scheduling/policies.h"

namespace ferry {

namespace {

PolicyOptions PolicyOptionsOf(const Config& c) {
  PolicyOptions o;
  o.policy = c.scheduling.policy;
  o.fusion_bytes = static_cast<uint64_t>(c.scheduling.fusion_bytes);
  o.bucket_bytes = static_cast<uint64_t>(c.scheduling.bucket_bytes);
  o.bucket_timeout_us = c.scheduling.bucket_timeout_ms * 1000;
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
             static_cast<uint64_t>(config.scheduling.CreditBytesFor(config.scheduling.InitialPartitionBytes()))),
      table_(config.cluster.op_timeout_ms,
             [this](Handle h) {
               return StrCat("timed out after ", config_.cluster.op_timeout_ms,
                             " ms (FERRY_OP_TIMEOUT_MS): ", DescribeOperation(h));
             }),
      scheduling_{config.scheduling.InitialPartitionBytes(),
                  config.scheduling.CreditBytesFor(config.scheduling.InitialPartitionBytes())} {}

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
  if (!config_.diagnostics.trace_dir.empty()) trace_ = std::make_unique<Trace>(config_.diagnostics.trace_dir, rank_);
  {
    MutexLock lock(mu_);
    catalog_ = std::make_unique<TensorCatalog>(scheduling_.partition_bytes, std::move(weights));
    ctx_.reset(new WorkerContext{config_, van_, cluster_, table_, counters_, trace_.get(), mu_});
    sequencer_ = std::make_unique<Sequencer>(*ctx_);
    ctx_->sequencer = sequencer_.get();
    ctx_->my_id = my_id_;
    ctx_->num_workers = num_workers_;
    ctx_->num_servers = num_servers_;
    dense_ = std::make_unique<DensePushPull>(*ctx_, queue_);
    rows_ = std::make_unique<RowsPushPull>(*ctx_);
  }
  MutexLock step_lock(step_mu_);  // nothing else runs yet: the locks satisfy the analysis
  MutexLock lock(mu_);
  if (config_.scheduling.autotune) {
    const bool credit = queue_.policy() == SchedulingPolicy::kCredit;
    std::vector<SchedulingChoice> grid = Autotuner::Grid(
        scheduling_.partition_bytes, config_.scheduling.credit, config_.scheduling.autotune_partition_bytes,
        credit ? config_.scheduling.autotune_credits : std::vector<int64_t>{1}, 1024,
        config_.transport.max_message_bytes - 4096);
    // Without credit the credit does not matter: each size keeps the configured one.
    if (!credit) {
      for (auto& c : grid) c.credit_bytes = config_.scheduling.CreditBytesFor(c.partition_bytes);
    }
    tuner_ = std::make_unique<Autotuner>(std::move(grid), config_.scheduling.autotune_steps);
  }
  sender_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "sender");
    SenderLoop();
  });
  LOG(INFO) << "worker " << rank_ << " of " << num_workers_ << " ready; " << num_servers_
            << " servers; scheduling policy " << queue_.policy_name() << ", "
            << Describe(scheduling_)
            << (config_.scheduling.autotune
                    ? StrCat("; autotune over ", tuner_->grid().size(), " candidates, ",
                             config_.scheduling.autotune_steps, " iterations each")
                    : std::string())
            << (trace_ ? "; trace " + trace_->path() : std::string());
}

Worker::~Worker() {
  queue_.Close();
  if (sender_.joinable()) sender_.join();
  // After Stop() ZeroMQ holds no payload: every release hook has run while the
  // members they touch are still alive.
  van_.Stop();
  table_.Close();  // completion callbacks use mu_ and the sequencer
}

int Worker::DeclareTensor(const std::string& name, DataType dtype,
                          const std::vector<int64_t>& shape, std::optional<int> priority) {
  CheckUserTensorName("declaration", name);
  MutexLock lock(mu_);
  return static_cast<int>(catalog_->Declare(name, dtype, shape, priority).id);
}

void Worker::CheckRunning(const char* what, const std::string& name) const {
  if (!failure_.empty()) throw FerryError(ErrorCode::kPeerFailed, failure_);
  FERRY_ENFORCE(!shut_down_, ErrorCode::kShutdown, what, " of '", name, "' after Shutdown()");
}

std::shared_ptr<Operation> Worker::NewOperation(TensorInfo& t, bool average,
                                                std::optional<int> priority,
                                                CompletionCallback done) {
  auto op = std::make_shared<Operation>();
  op->tensor = &t;
  op->average = average;
  op->priority = priority ? *priority : t.priority;
  op->layout = catalog_->layout();  // constant while any operation is unfinished
  if (done) {
    // A deadline the table enforced ends the operation here too (its tensor's next
    // operation may start); the caller hears of it through `done`.
    std::weak_ptr<Operation> weak = op;
    done = [this, weak, done = std::move(done)](Handle h, const Verdict& v) {
      if (!v.ok()) {
        MutexLock lock(mu_);
        if (auto op = weak.lock()) sequencer_->Abandon(op);
      }
      done(h, v);
    };
  }
  op->handle = table_.Add(std::move(done));
  return op;
}

Handle Worker::PushPullAsync(const std::string& name, const void* input, void* output,
                             DataType dtype, uint64_t count, bool average,
                             std::optional<int> priority, CompletionCallback done) {
  CheckUserTensorName("push_pull", name);
  return StartPushPull(name, input, output, dtype, count, average, priority, std::move(done));
}

Handle Worker::StartPushPull(const std::string& name, const void* input, void* output,
                             DataType dtype, uint64_t count, bool average,
                             std::optional<int> priority, CompletionCallback done) {
  FERRY_ENFORCE(count == 0 || (input && output), ErrorCode::kInvalidArgument, "push_pull of '",
                name, "': null buffer");
  MutexLock lock(mu_);
  CheckRunning("push_pull", name);
  FERRY_ENFORCE(!(average && config_.server.async), ErrorCode::kInvalidArgument, "push_pull of '",
                name, "' with average: in asynchronous training (FERRY_ENABLE_ASYNC=1) the reply "
                "is the parameters, not a sum, so there is nothing to average");
  if (!catalog_->Find(name)) {
    LOG(INFO) << "tensor '" << name << "' was not declared; declaring it now as id "
              << catalog_->size()
              << " (declare tensors up front, in forward order, on every worker)";
  }
  TensorInfo& t = catalog_->Declare(name, dtype, {static_cast<int64_t>(count)}, std::nullopt);
  std::shared_ptr<Operation> op = NewOperation(t, average, priority, std::move(done));
  op->input = static_cast<const uint8_t*>(input);
  op->output = static_cast<uint8_t*>(output);
  sequencer_->Submit(op, *dense_);
  counters_.operations++;
  return op->handle;
}

Handle Worker::PushPullRowsAsync(const std::string& name, const int64_t* rows, uint64_t num_rows,
                                 const void* values, void* output, DataType dtype, bool average,
                                 std::optional<int> priority, CompletionCallback done) {
  CheckUserTensorName("push_pull_rows", name);
  FERRY_ENFORCE(num_rows == 0 || (rows && values && output), ErrorCode::kInvalidArgument,
                "push_pull_rows of '", name, "': null buffer");
  MutexLock lock(mu_);
  CheckRunning("push_pull_rows", name);
  FERRY_ENFORCE(!config_.server.async, ErrorCode::kInvalidArgument, "push_pull_rows of '", name,
                "': sparse rows need synchronous training (FERRY_ENABLE_ASYNC=0)");
  TensorInfo* found = catalog_->Find(name);
  FERRY_ENFORCE(found, ErrorCode::kInvalidArgument, "push_pull_rows of '", name,
                "': declare the tensor first (DeclareTensor) with its shape [rows, ...]");
  TensorInfo& t = *found;
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
  // Plan before the operation exists: a refused call leaves no handle behind.
  std::unique_ptr<RowsPlan> plan = rows_->Plan(t, catalog_->layout(),
                                               priority ? *priority : t.priority, rows,
                                               num_rows, values);
  std::shared_ptr<Operation> op = NewOperation(t, average, priority, std::move(done));
  op->output = static_cast<uint8_t*>(output);
  op->rows = std::move(plan);
  sequencer_->Submit(op, *rows_);
  counters_.rows_operations++;
  counters_.rows_pushed += num_rows;
  return op->handle;
}

void Worker::SenderLoop() {
  // With resends on, wake often enough to resend within a quarter of the timeout.
  const int64_t wake_ms = config_.transport.resend_timeout_ms > 0
                              ? std::clamp<int64_t>(config_.transport.resend_timeout_ms / 4, 5, 1000)
                              : 1000;
  while (true) {
    Batch batch;
    bool timed_out = false;
    bool got = queue_.Next(&batch, wake_ms, &timed_out);
    if (config_.transport.resend_timeout_ms > 0) ResendOverdue();
    if (!got) {
      if (timed_out) continue;
      return;  // closed
    }
    dense_->SendBatch(batch);
  }
}

void Worker::ResendOverdue() {
  std::vector<std::pair<int, Message>> out;  // (server rank, message)
  {
    MutexLock lock(mu_);
    const int64_t now = NowMs();
    dense_->ResendOverdue(now, &out);
    rows_->ResendOverdue(now, &out);
  }
  for (auto& [server, m] : out) van_.Send(ServerId(server), std::move(m));
}

void Worker::OnMessage(Message&& m, const Origin& origin) {
  if (cluster_.HandleMessage(m, origin)) return;
  if (origin.inbound || !cluster_.table().IsServer(origin.peer) || m.sender() != origin.peer) {
    LOG_EVERY_N(WARNING, 100) << "dropped " << Describe(m) << ": not from a server connection";
    return;
  }
  switch (m.type()) {
    case proto::JOIN_ACK: {
      MutexLock lock(mu_);
      if (m.envelope.request_id() == join_request_) join_acks_++;
      cv_.NotifyAll();
      break;
    }
    case proto::PUSH_ACK:
      if (!rows_->OnAck(m)) dense_->OnAck(m);
      break;
    case proto::PUSH_RESULT:
      dense_->OnResult(std::move(m));
      break;
    case proto::ROWS_RESULT:
      rows_->OnResult(std::move(m));
      break;
    case proto::ERROR:
      if (!rows_->OnError(m)) dense_->OnError(m);
      break;
    default:
      LOG_EVERY_N(WARNING, 100) << "dropped unexpected " << Describe(m);
  }
}

void Worker::FailAll(const std::string& reason) {
  MutexLock lock(mu_);
  if (!failure_.empty()) return;
  failure_ = reason;
  if (sequencer_) sequencer_->FailAll();
  table_.FailAll(reason);
  cv_.NotifyAll();
}

bool Worker::Poll(Handle handle) { return table_.Poll(handle); }

std::string Worker::DescribeOperation(Handle handle) {
  MutexLock lock(mu_);
  const Operation* op = sequencer_->Find(handle);
  if (!op) return StrCat("operation ", handle, " (finished; a copy of its data is still running)");
  return op->rows ? rows_->Describe(*op) : dense_->Describe(*op);
}

bool Worker::WaitFor(Handle handle, int64_t timeout_ms) {
  return table_.WaitFor(handle, timeout_ms);
}

void Worker::Wait(Handle handle) { table_.Wait(handle); }

Handle Worker::WaitAny(const std::vector<Handle>& handles, int64_t timeout_ms) {
  return table_.WaitAny(handles, timeout_ms);
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
  CheckUserTensorName("broadcast", name);
  FERRY_ENFORCE(root >= 0 && root < num_workers_, ErrorCode::kInvalidArgument, "broadcast of '",
                name, "': root rank ", root, " is not a worker rank (0..", num_workers_ - 1, ")");
  FERRY_ENFORCE(!config_.server.async, ErrorCode::kInvalidArgument, "broadcast of '", name,
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
  Wait(StartPushPull(ReservedTensorName(reserved::kBroadcast, name), input, data, dtype, count,
                     false, std::nullopt, nullptr));
}

void Worker::Barrier() {
  {
    MutexLock lock(mu_);
    if (!failure_.empty()) throw FerryError(ErrorCode::kPeerFailed, failure_);
  }
  cluster_.Barrier(proto::GROUP_WORKERS);
}

void Worker::StepBoundary() {
  MutexLock step_lock(step_mu_);
  Autotuner::Action action;
  {
    MutexLock lock(mu_);
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
      WaitForQuiet("StepBoundary");
      ApplyScheduling(action.choice, StrCat("autotune candidate at iteration ", steps_));
    }
  }
  if (action.kind == Autotuner::Action::kDecide) FinishAutotune();
  last_step_us_ = NowUs();  // after the decision's push_pull, which is no iteration's time
}

void Worker::FinishAutotune() {
  // Every worker sums every worker's scores, so every worker picks the same candidate.
  std::vector<double> summed = tuner_->scores();
  Wait(StartPushPull(ReservedTensorName(reserved::kAutotune), summed.data(), summed.data(),
                     DataType::kFloat64, summed.size(), false, std::nullopt, nullptr));
  const size_t best = tuner_->Decide(summed);
  const SchedulingChoice choice = tuner_->grid()[best];
  std::string table;
  const double scored = static_cast<double>(num_workers_) * (tuner_->steps() - 1);
  for (size_t i = 0; i < summed.size(); ++i) {
    table += StrCat(i ? "; " : "", Describe(tuner_->grid()[i]), ": ", summed[i] / scored, " ms");
  }
  {
    MutexLock lock(mu_);
    WaitForQuiet("autotune");
    ApplyScheduling(choice, "autotune chose it");
  }
  LOG(INFO) << "autotune: chose " << Describe(choice) << " (candidate " << best << " of "
            << summed.size() << ") after " << steps_ << " iterations; mean iteration per "
            << "candidate over all workers: " << table;
  tuner_.reset();
}

void Worker::SetScheduling(int64_t partition_bytes, int64_t credit_bytes) {
  FERRY_ENFORCE(partition_bytes >= 1024 && partition_bytes <= config_.transport.max_message_bytes - 4096,
                ErrorCode::kInvalidArgument, "SetScheduling: partition size ", partition_bytes,
                " bytes is outside 1024..", config_.transport.max_message_bytes - 4096,
                " (FERRY_MAX_MESSAGE_BYTES - 4096)");
  FERRY_ENFORCE(credit_bytes >= 1, ErrorCode::kInvalidArgument, "SetScheduling: credit of ",
                credit_bytes, " bytes; it must be at least 1");
  MutexLock lock(mu_);
  WaitForQuiet("SetScheduling");
  ApplyScheduling(SchedulingChoice{partition_bytes, credit_bytes}, "SetScheduling");
}

SchedulingChoice Worker::scheduling() const {
  MutexLock lock(mu_);
  return scheduling_;
}

void Worker::ApplyScheduling(const SchedulingChoice& choice, const std::string& why) {
  CHECK(!sequencer_->AnyUnfinished()) << "scheduling changed with an operation unfinished";
  const uint32_t gen = catalog_->SwitchPartitionBytes(static_cast<uint64_t>(choice.partition_bytes));
  scheduling_ = choice;
  queue_.SetCredit(static_cast<uint64_t>(choice.credit_bytes));
  LOG(INFO) << "scheduling (" << why << "): " << Describe(choice) << "; layout " << gen;
  if (trace_) {
    trace_->Instant("scheduling", NowUs(),
                    StrCat("{\"partition_bytes\":", choice.partition_bytes,
                           ",\"credit_bytes\":", choice.credit_bytes, ",\"layout\":", gen, "}"));
  }
}

bool Worker::WaitForOwnOperations() {
  // Operations nobody waited for still finish first.
  const int64_t deadline = NowMs() + config_.cluster.op_timeout_ms;
  while (failure_.empty() && sequencer_->AnyUnfinished()) {
    const int64_t left = deadline - NowMs();
    if (left <= 0) return false;
    MutexUnlock unlocked(mu_);  // the operations finish under mu_
    table_.WaitAll(left);
  }
  if (!failure_.empty()) throw FerryError(ErrorCode::kPeerFailed, failure_);
  return true;
}

void Worker::WaitForQuiet(const char* what) {
  FERRY_ENFORCE(WaitForOwnOperations(), ErrorCode::kTimeout, what, ": this worker's ",
                "push_pulls did not finish within ", config_.cluster.op_timeout_ms,
                " ms (FERRY_OP_TIMEOUT_MS)");
}

void Worker::Join() {
  FERRY_ENFORCE(!config_.server.async, ErrorCode::kInvalidArgument,
                "join: not available in asynchronous training (FERRY_ENABLE_ASYNC=1); no push "
                "waits for other workers, so a worker out of data simply stops pushing");
  uint64_t request = 0;
  {
    MutexLock lock(mu_);
    WaitForOwnOperations();
    ctx_->mu.AssertHeld();  // the same lock as mu_
    request = join_request_ = ctx_->next_request++;
    join_acks_ = 0;
  }
  for (int s = 0; s < num_servers_; ++s) {
    Message m = MakeMessage(proto::JOIN, my_id_);
    m.envelope.set_request_id(request);
    van_.Send(ServerId(s), std::move(m));
  }
  {
    // Every server must hold our JOIN before the others may leave the join barrier.
    MutexLock lock(mu_);
    bool acked = cv_.WaitFor(mu_, Millis(config_.cluster.op_timeout_ms),
                              [this]() REQUIRES(mu_) {
                                return join_acks_ == num_servers_ || !failure_.empty();
                              });
    if (!failure_.empty()) throw FerryError(ErrorCode::kPeerFailed, failure_);
    FERRY_ENFORCE(acked, ErrorCode::kTimeout, "join: ", num_servers_ - join_acks_, " of ",
                  num_servers_, " servers did not acknowledge within ", config_.cluster.op_timeout_ms,
                  " ms");
  }
  LOG(INFO) << "worker " << rank_ << " joined; waiting for the other workers";
  cluster_.Barrier(proto::GROUP_JOIN, config_.cluster.join_timeout_ms);
  MutexLock lock(mu_);
  catalog_->ResetRounds();
  LOG(INFO) << "every worker joined; rounds start over";
}

void Worker::Shutdown() {
  {
    MutexLock lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    WaitForOwnOperations();
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
  WriteStats();
}

CounterValues Worker::Counters() const {
  CounterValues values = counters_.registry.Snapshot();
  for (auto& v : VanCounterValues(van_.stats())) values.push_back(std::move(v));
  return values;
}

void Worker::WriteStats() const {
  Status s = WriteStatsFile(config_.diagnostics.stats_file, "worker", rank_, Counters());
  if (!s.ok()) LOG(ERROR) << s.message();
}

WorkerStats Worker::stats() const {
  WorkerStats s;
  s.operations = counters_.operations;
  s.partitions_pushed = counters_.partitions_pushed;
  s.bytes_pushed = counters_.bytes_pushed;
  s.bytes_received = counters_.bytes_received;
  s.send_releases = counters_.send_releases;
  s.resends = counters_.resends;
  s.pulls = counters_.pulls;
  s.late_replies = counters_.late_replies;
  s.fused_messages = counters_.fused_messages;
  s.partitions_fused = counters_.partitions_fused;
  s.rows_operations = counters_.rows_operations;
  s.rows_pushed = counters_.rows_pushed;
  s.rows_bytes_pushed = counters_.rows_bytes_pushed;
  s.rows_bytes_received = counters_.rows_bytes_received;
  s.van = van_.stats();
  return s;
}

std::vector<uint64_t> Worker::PlacedBytes() const {
  MutexLock lock(mu_);
  return catalog_->PlacedBytes();
}

std::string Worker::TensorName(uint32_t tensor_id) const {
  MutexLock lock(mu_);
  return catalog_->NameOf(tensor_id);
}

}  // namespace ferry
