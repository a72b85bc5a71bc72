#include "worker/worker.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstring>

#include "common/util/clock.h"
#include "common/util/logging.h"
#include "common/util/status.h"
#include "worker/local/local_group.h"
#include "worker/reserved_tensor_names.h"
#include "worker/worker_reports.h"
#include "worker/partition_scheduling/policies.h"

namespace ferry {

namespace {

// A worker's Van: the role's options; its sends scheduled on their links (van.h, Links)
// under the policies that do (scheduling_policy.h), with trirace's watermark on sends.
VanOptions WorkerVanOptions(const Config& config) {
  VanOptions o = VanOptionsFor("worker", config);
  o.link_scheduling = SchedulesLinks(config.scheduling.policy);
  const Config::Scheduling::SendsTransport& t = config.scheduling.trirace_on_sends;
  o.watermark_bytes_from_first_send = static_cast<uint64_t>(t.watermark_bytes);
  o.tcp_notsent_lowat_from_first_send = static_cast<int>(t.tcp_notsent_lowat);
  return o;
}

// How long a worker waits at start for its shared-memory lanes' probes (Van::WaitForLanes).
constexpr int kLaneProbeMs = 2000;

// The stall check's label of an operation on tensor `name` (operation_table.h, "Labels"):
// what the user called, on the name the user gave (a broadcast's vote and data both count
// as the broadcast).
std::string OperationLabel(const char* what, const std::string& name) {
  static const std::string kPrefixes[] = {ReservedTensorName(reserved::kBroadcast) + "/",
                                          ReservedTensorName(reserved::kBroadcastVote) + "/"};
  for (const std::string& prefix : kPrefixes) {
    if (name.compare(0, prefix.size(), prefix) == 0) {
      return StrCat("broadcast of '", name.substr(prefix.size()), "'");
    }
  }
  return StrCat(what, " of '", name, "'");
}

// Empty if every worker took part in broadcast `name` with the same root, dtype and count
// (`votes`: 3 per rank, each value + 1, 0 for a worker that took no part); else why not.
std::string BroadcastDisagreement(const std::string& name, const std::vector<int64_t>& votes,
                                  int workers) {
  auto vote = [&](int r, int i) { return votes[3 * static_cast<size_t>(r) + i] - 1; };
  auto describe = [&](int r) {
    return StrCat("rank ", r, ": root ", vote(r, 0), ", ",
                  DataTypeName(static_cast<DataType>(vote(r, 1))), "[", vote(r, 2), "]");
  };
  auto took_part = [&](int r) { return votes[3 * static_cast<size_t>(r)] != 0; };
  int first = 0;
  while (first < workers && !took_part(first)) ++first;
  if (first == workers) return "";  // only this worker's own vote is missing: cannot happen
  for (int r = first + 1; r < workers; ++r) {
    if (!took_part(r)) continue;
    if (vote(r, 0) != vote(first, 0) || vote(r, 1) != vote(first, 1) ||
        vote(r, 2) != vote(first, 2)) {
      return StrCat("broadcast of '", name, "': the workers disagree (", describe(first), "; ",
                    describe(r), "); every worker must broadcast a tensor with the same root "
                    "rank, dtype and shape");
    }
  }
  std::string joined;
  for (int r = 0; r < workers; ++r) {
    if (!took_part(r)) joined += StrCat(joined.empty() ? "" : ", ", r);
  }
  if (!joined.empty()) {
    return StrCat("broadcast of '", name, "': rank(s) ", joined, " have joined (join()); a ",
                  "broadcast needs every worker while none has joined, as in Horovod (\"Broadcast ",
                  "is not supported with Join\")");
  }
  return "";
}

}  // namespace

std::unique_ptr<Worker> Worker::Create(const Config& config) {
  std::unique_ptr<Worker> w(new Worker(config));
  w->Start();
  return w;
}

Worker::Worker(const Config& config)
    : Collective(config.cluster.op_timeout_ms,
                 [this](Handle h) {
                   MutexLock lock(ctx_.mu);
                   std::string what = p2p_ ? p2p_->DescribeHandle(h) : "";
                   if (what.empty()) what = sequencer_->Describe(h);
                   return StrCat("timed out after ", config_.cluster.op_timeout_ms,
                                 " ms (FERRY_OP_TIMEOUT_MS): ", what);
                 }),
      config_(config),
      van_(WorkerVanOptions(config)),
      // Workers listen too, for other workers' point-to-point sends (point_to_point.h).
      cluster_(config_, &van_, van_.Bind(config_.transport.bind_host, config_.transport.node_port)),
      queue_(MakePolicy(PolicyOptionsOf(config.scheduling)),
             static_cast<uint64_t>(
                 config.scheduling.CreditBytesFor(config.scheduling.InitialPartitionBytes()))) {}

void Worker::Start() {
  KeepLargeBuffersInHeap();
  counters_.servers.Resize(config_.cluster.num_servers);  // before any thread counts
  van_.Start([this](Message&& m, const Origin& o) { OnMessage(std::move(m), o); });
  cluster_.SetFailureCallback([this](const std::string& reason) {
    if (MembershipEpochs* epochs = this->epochs()) epochs->FailForGood(reason);
  });
  cluster_.SetMembershipCallback([this](const NodeTable& table) {
    if (MembershipEpochs* epochs = this->epochs()) epochs->OnMembership(table);
  });
  cluster_.SetStallReporter([this](int64_t report_after_ms, const std::vector<std::string>& labels,
                                   proto::StallReport* report) {
    ReportStalls(table_, report_after_ms, labels, report);
  });
  cluster_.SetMetricsReporter(
      [this](proto::MetricsSnapshot* out) { ReportMetrics(counters_, queue_, out); });
  cluster_.Register();
  const NodeTable& table = cluster_.table();  // one membership for the whole start
  ctx_.my_id = cluster_.my_id();
  ctx_.num_servers = table.num_servers();
  {
    MutexLock lock(ctx_.mu);
    MembershipEpochs::TakeMembership(ctx_, table);
  }
  std::vector<double> weights = MembershipEpochs::ConnectServers(ctx_, table);
  // The shared-memory lane to each server on this host, before the first push takes a
  // connection (a probe is a few messages on this host: milliseconds).
  if (!van_.WaitForLanes(kLaneProbeMs)) {
    LOG(WARNING) << "the shared-memory lane's probe did not finish within " << kLaneProbeMs
                 << " ms; tensor bytes go over TCP until it does";
  }
  if (!config_.diagnostics.trace_dir.empty())
    trace_ = std::make_unique<Trace>(config_.diagnostics.trace_dir, ctx_.rank);
  ctx_.trace = trace_.get();
  {
    MutexLock lock(ctx_.mu);
    catalog_ = std::make_unique<TensorCatalog>(config_.scheduling.InitialPartitionBytes(),
                                               weights, config_.server.async);
    if (const proto::CatalogSnapshot* joined = cluster_.joined_catalog()) {
      // A worker joining a running job: rank 0's declarations, cuts and placements.
      catalog_->Load(*joined);
      LOG(INFO) << "joined a running job at membership epoch " << table.proto().epoch()
                << " with rank 0's catalog of " << joined->tensors_size() << " tensors";
    }
    sets_ = std::make_unique<ProcessSets>(config_.scheduling.InitialPartitionBytes(), weights);
    sequencer_ = std::make_unique<Sequencer>(
        ctx_, [this](uint32_t id) -> TensorCatalog& {
          ctx_.mu.AssertHeld();  // the sequencer's callers hold it
          return CatalogOfId(id);
        },
                                             [this](uint32_t id) { RetireOnServers(id); });
    ctx_.sequencer = sequencer_.get();
    dense_ = std::make_unique<DensePushPull>(ctx_, queue_);
    rows_ = std::make_unique<RowsPushPull>(ctx_);
    p2p_ = std::make_unique<PointToPoint>(ctx_);
    kinds_ = std::make_unique<OperationKinds>();
    kinds_->Add(p2p_.get(), proto::P2P_ACK);  // knows its request ids: asked first
    kinds_->Add(rows_.get(), proto::ROWS_RESULT);  // knows its request ids: asked first
    kinds_->Add(dense_.get(), proto::PUSH_RESULT);
    join_ = std::make_unique<JoinProtocol>(ctx_, *catalog_);
    epochs_ = std::make_unique<MembershipEpochs>(
        ctx_, MembershipEpochs::Parts{*catalog_, *sequencer_, *kinds_, *join_},
        [this](int32_t* value) {
          Wait(StartPushPull(ReservedTensorName(reserved::kHostsUpdated), value, value,
                             DataType::kInt32, 1, false, std::nullopt, nullptr));
        });
  }
  // The parts keep a reference; they take ctx_.mu to use it.
  scheduling_ = std::make_unique<SchedulingControl>(
      ctx_, *catalog_.get(), *sets_.get(), queue_, [this](std::vector<double>& values) {
        Wait(StartPushPull(ReservedTensorName(reserved::kAutotune), values.data(), values.data(),
                           DataType::kFloat64, values.size(), false, std::nullopt, nullptr));
      });
  sender_ = std::make_unique<Sender>(ctx_, queue_, *dense_, *kinds_);
  // An epoch that came while this worker started (its callback found no part yet).
  if (cluster_.epoch() != ctx_.epoch.load()) epochs_->OnMembership(cluster_.table());
  LOG(INFO) << "worker " << ctx_.rank << " of " << ctx_.num_workers << " ready; "
            << ctx_.num_servers << " servers; scheduling policy " << queue_.policy_name() << ", "
            << Describe(scheduling_->current()) << scheduling_->DescribePlan()
            << (trace_ ? "; trace " + trace_->path() : std::string());
}

MembershipEpochs* Worker::epochs() {
  MutexLock lock(ctx_.mu);
  return epochs_.get();
}

OperationKinds* Worker::kinds() {
  MutexLock lock(ctx_.mu);
  return kinds_.get();
}

Worker::~Worker() {
  cluster_.SetMetricsReporter(nullptr);  // reads counters_ and queue_, which go first
  // The shutdown order of local_nccl.h: no device round starts a push_pull after this.
  LocalNccl* nccl = nullptr;
  {
    MutexLock lock(ctx_.mu);
    nccl = nccl_.get();
  }
  if (nccl != nullptr) nccl->Stop();
  sender_.reset();  // closes the queue, joins the sender thread
  // After Stop() ZeroMQ holds no payload: every release hook has run while the
  // members they touch are still alive.
  van_.Stop();
  table_.Close();  // completion callbacks use ctx_.mu and the sequencer
  MutexLock lock(ctx_.mu);
  nccl_.reset();  // before the parts its push_pulls run through
}

int Worker::DeclareTensor(const std::string& name, DataType dtype,
                          const std::vector<int64_t>& shape, std::optional<int> priority) {
  CheckUserTensorName("declaration", name);
  MutexLock lock(ctx_.mu);
  ctx_.CheckRunning("declaration", name);
  return static_cast<int>(Declare(name, dtype, shape, priority)->id);
}

std::shared_ptr<TensorInfo> Worker::Declare(const std::string& name, DataType dtype,
                                            const std::vector<int64_t>& shape,
                                            std::optional<int> priority) {
  std::shared_ptr<TensorInfo> superseded;
  const int set = sets_->SetOf(name);
  std::shared_ptr<TensorInfo> t =
      set ? sets_->Declare(set, ctx_.rank, name, dtype, shape, priority, &superseded)
          : catalog_->Declare(name, dtype, shape, priority, &superseded);
  if (superseded) {
    counters_.redeclarations++;
    sequencer_->Superseded(superseded);
  }
  return t;
}


void Worker::RetireOnServers(uint32_t tensor_id) {
  ctx_.mu.AssertHeld();  // the sequencer's caller holds it
  for (int s = 0; s < ctx_.num_servers; ++s) {
    if (!ctx_.live_servers[s]) continue;
    Message m = ctx_.NewMessage(proto::RETIRE);
    m.envelope.set_key(MakeKey(tensor_id, 0));
    van_.Send(ServerId(s), std::move(m));
  }
}

std::shared_ptr<Operation> Worker::NewOperation(const std::shared_ptr<TensorInfo>& tensor,
                                                bool average,
                                                std::optional<int> priority,
                                                CompletionCallback done,
                                                const std::string& label) {
  const TensorInfo& t = *tensor;
  auto op = std::make_shared<Operation>();
  op->tensor = tensor;
  op->average = average;
  op->priority = priority ? *priority : t.priority;
  op->layout = CatalogOfId(t.id).layout();  // constant while any operation is unfinished
  if (done) {
    // A deadline the table enforced ends the operation here too (its tensor's next
    // operation may start); the caller hears of it through `done`.
    std::weak_ptr<Operation> weak = op;
    done = [this, weak, done = std::move(done)](Handle h, const Verdict& v) {
      if (!v.ok()) {
        {
          MutexLock lock(ctx_.mu);
          if (auto op = weak.lock()) sequencer_->Abandon(op);
        }
        dense_->SendReady();  // the tensor's next operation may have started
      }
      done(h, v);
    };
  }
  op->handle = table_.Add(std::move(done), label);
  return op;
}

Handle Worker::PushPullAsync(const std::string& name, const void* input, void* output,
                             DataType dtype, uint64_t count, bool average,
                             std::optional<int> priority, CompletionCallback done) {
  CheckUserTensorName("push_pull", name);
  return StartPushPull(name, input, output, dtype, count, average, priority, std::move(done));
}

void Worker::CheckReduceOp(const std::string& name, ReduceOp op, bool average) const {
  FERRY_ENFORCE(IsValidReduceOp(static_cast<int>(op)), ErrorCode::kInvalidArgument, "reduce of '",
                name, "': unknown reduce op ", static_cast<int>(op));
  FERRY_ENFORCE(op == ReduceOp::kSum || !average, ErrorCode::kInvalidArgument, "reduce of '",
                name, "' by ", ReduceOpName(op), ": only a sum can be averaged");
  FERRY_ENFORCE(op == ReduceOp::kSum || !config_.server.async, ErrorCode::kInvalidArgument,
                "reduce of '", name, "' by ", ReduceOpName(op),
                ": not available in asynchronous training (FERRY_ENABLE_ASYNC=1)");
}

Handle Worker::StartPushPull(const std::string& name, const void* input, void* output,
                             DataType dtype, uint64_t count, bool average,
                             std::optional<int> priority, CompletionCallback done,
                             ReduceOp reduce, std::vector<PartitionSpec>* staged,
                             std::function<void(uint32_t)> part_summed, bool sit_out) {
  FERRY_ENFORCE(count == 0 || ((input || sit_out) && output), ErrorCode::kInvalidArgument,
                "push_pull of '", name, "': null buffer");
  const Handle handle = SubmitPushPull(name, input, output, dtype, count, average, priority,
                                       std::move(done), reduce, staged, std::move(part_summed),
                                       sit_out);
  dense_->SendReady();  // from this thread: no hand-off to the sender thread
  return handle;
}

Handle Worker::PushPullStagedAsync(const std::string& name, const void* input, void* output,
                                   DataType dtype, uint64_t count, bool average,
                                   std::vector<PartitionSpec>* parts,
                                   std::optional<int> priority, CompletionCallback done,
                                   std::function<void(uint32_t)> part_summed,
                                   ReduceOp reduce) {
  CheckUserTensorName("push_pull", name);
  FERRY_ENFORCE(parts != nullptr, ErrorCode::kInvalidArgument, "staged push_pull of '", name,
                "': no vector for the partitions");
  CheckReduceOp(name, reduce, average);
  return StartPushPull(name, input, output, dtype, count, average, priority, std::move(done),
                       reduce, parts, std::move(part_summed));
}

void Worker::ReleasePartition(Handle handle, uint32_t part) {
  {
    MutexLock lock(ctx_.mu);
    auto it = staged_.find(handle);
    FERRY_ENFORCE(it != staged_.end() && part < it->second->released.size() &&
                      !it->second->released[part],
                  ErrorCode::kInvalidArgument, "release of partition ", part, " of operation ",
                  handle, ": not a staged operation with that partition, or released already");
    const std::shared_ptr<Operation> op = it->second;
    dense_->ReleasePart(op, part);
    ctx_.counters.partitions_staged.Add(1);
    if (op->releases_pending == 0) staged_.erase(it);
  }
  dense_->SendReady();
}

Handle Worker::SubmitPushPull(const std::string& name, const void* input, void* output,
                              DataType dtype, uint64_t count, bool average,
                              std::optional<int> priority, CompletionCallback done,
                              ReduceOp reduce, std::vector<PartitionSpec>* staged,
                              std::function<void(uint32_t)> part_summed, bool sit_out) {
  MutexLock lock(ctx_.mu);
  ctx_.CheckRunning("push_pull", name);
  FERRY_ENFORCE(!(average && config_.server.async), ErrorCode::kInvalidArgument, "push_pull of '",
                name,
                "' with average: in asynchronous training (FERRY_ENABLE_ASYNC=1) the reply "
                "is the parameters, not a sum, so there is nothing to average");
  if (!CatalogOf(name).Find(name)) {
    // Ferry's own tensors (a broadcast's vote and data) are declared at first use by
    // design: only a user's tensor is worth a line at INFO.
    const std::string line =
        StrCat("tensor '", name, "' was not declared; declaring it now as id ",
               CatalogOf(name).next_id(), " (declare tensors up front, in forward order, on every worker)");
    if (IsReservedTensorName(name)) {
      VLOG(1) << line;
    } else {
      LOG(INFO) << line;
    }
  }
  std::shared_ptr<TensorInfo> t =
      Declare(name, dtype, {static_cast<int64_t>(count)}, std::nullopt);
  std::shared_ptr<Operation> op =
      NewOperation(t, average, priority, std::move(done), OperationLabel("push_pull", name));
  op->reduce = reduce;
  op->sit_out = sit_out;
  if (!sit_out) op->compression = CompressionOf(*t, reduce);
  op->input = static_cast<const uint8_t*>(input);
  op->output = static_cast<uint8_t*>(output);
  op->part_summed = std::move(part_summed);
  if (staged) {
    *staged = t->cuts[op->layout].parts;
    op->released.assign(staged->size(), false);
    op->releases_pending = static_cast<uint32_t>(staged->size());
    if (!staged->empty()) staged_[op->handle] = op;
  }
  sequencer_->Submit(op, *dense_);
  counters_.operations++;
  return op->handle;
}

CompressionSpec Worker::CompressionOf(const TensorInfo& t, ReduceOp reduce) const {
  // Ferry's own tensors (a broadcast's, the control values) and other reductions than
  // the sum travel raw, and so do integer tensors and those under the minimum size,
  // whoever chose the compressor.
  if (reduce != ReduceOp::kSum || IsReservedTensorName(t.name) || !IsFloatingPoint(t.dtype) ||
      t.bytes < static_cast<uint64_t>(config_.compression.min_bytes)) {
    return CompressionSpec();
  }
  return t.compression ? *t.compression : config_.compression.spec;
}

void Worker::SetCompression(const std::string& name, const std::string& text) {
  CheckUserTensorName("compression", name);
  CompressionSpec spec;
  Status parsed = CompressionSpec::Parse(text, &spec);
  FERRY_ENFORCE(parsed.ok(), ErrorCode::kInvalidArgument, "compression of tensor '", name,
                "': ", parsed.message());
  FERRY_ENFORCE(spec.none() || !config_.server.async, ErrorCode::kInvalidArgument,
                "compression of tensor '", name, "': not in asynchronous training "
                "(FERRY_ENABLE_ASYNC=1)");
  MutexLock lock(ctx_.mu);
  ctx_.CheckRunning("compression", name);
  std::shared_ptr<TensorInfo> t = CatalogOf(name).Find(name);
  FERRY_ENFORCE(t, ErrorCode::kInvalidArgument, "compression of tensor '", name,
                "': declare the tensor first");
  FERRY_ENFORCE(spec.none() || IsFloatingPoint(t->dtype), ErrorCode::kInvalidArgument,
                "compression of tensor '", name, "' (", DataTypeName(t->dtype),
                "): only floating-point tensors are compressed");
  if (text.find_first_not_of(" \t") == std::string::npos) {
    t->compression.reset();  // "": FERRY_COMPRESSION decides again
  } else {
    t->compression = spec;
  }
}

Handle Worker::PushPullRowsAsync(const std::string& name, const int64_t* rows, uint64_t num_rows,
                                 const void* values, void* output, DataType dtype, bool average,
                                 std::optional<int> priority, CompletionCallback done) {
  CheckUserTensorName("push_pull_rows", name);
  FERRY_ENFORCE(num_rows == 0 || (rows && values && output), ErrorCode::kInvalidArgument,
                "push_pull_rows of '", name, "': null buffer");
  MutexLock lock(ctx_.mu);
  ctx_.CheckRunning("push_pull_rows", name);
  FERRY_ENFORCE(!config_.server.async, ErrorCode::kInvalidArgument, "push_pull_rows of '", name,
                "': sparse rows need synchronous training (FERRY_ENABLE_ASYNC=0)");
  FERRY_ENFORCE(!sets_->SetOf(name), ErrorCode::kInvalidArgument, "push_pull_rows of '", name,
                "': sparse rows are summed over every worker, not within a process set");
  std::shared_ptr<TensorInfo> found = catalog_->Find(name);
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
  std::shared_ptr<Operation> op = NewOperation(found, average, priority, std::move(done),
                                               OperationLabel("push_pull_rows", name));
  op->output = static_cast<uint8_t*>(output);
  op->rows = std::move(plan);
  sequencer_->Submit(op, *rows_);
  counters_.rows_operations++;
  counters_.rows_pushed += num_rows;
  return op->handle;
}

void Worker::OnMessage(Message&& m, const Origin& origin) {
  if (cluster_.HandleMessage(m, origin)) return;
  if (m.type() == proto::P2P_SEND || m.type() == proto::P2P_ACK) {
    OnPointToPoint(std::move(m), origin);
    return;
  }
  if (origin.inbound || !cluster_.table().IsServer(origin.peer) || m.sender() != origin.peer) {
    LOG_EVERY_N(WARNING, 100) << "dropped " << Describe(m) << ": not from a server connection";
    return;
  }
  switch (m.type()) {
    case proto::JOIN_ACK:
      join_->OnAck(m);
      break;
    case proto::PUSH_ACK:
    case proto::PUSH_RESULT:
    case proto::ROWS_RESULT:
    case proto::ERROR:
      NoteReplyDelay(counters_, m);
      // Every sum that arrived, late and duplicate ones too: what the server counts as sent.
      counters_.servers.AddReceived(cluster_.table().node(origin.peer).rank(), m.payload.size());
      if (OperationKinds* kinds = this->kinds(); kinds == nullptr) {
        LOG_EVERY_N(WARNING, 100) << "dropped " << Describe(m) << ": before the worker started";
      } else {
        if (!kinds->OnReply(m)) {
          LOG_EVERY_N(WARNING, 100) << "dropped unexpected " << Describe(m);
        }
        // What the reply let out (its credit, the tensor's next operation, releases the
        // handler drained) goes from here, claimed or not.
        dense_->SendReady();
      }
      break;
    default:
      LOG_EVERY_N(WARNING, 100) << "dropped unexpected " << Describe(m);
  }
}




void Worker::Broadcast(const std::string& name, void* data, DataType dtype, uint64_t count,
                       int root) {
  CheckUserTensorName("broadcast", name);
  const int workers = ctx_.num_workers;
  const int rank = ctx_.rank;
  FERRY_ENFORCE(root >= 0 && root < workers, ErrorCode::kInvalidArgument, "broadcast of '",
                name, "': root rank ", root, " is not a worker rank (0..", workers - 1, ")");
  FERRY_ENFORCE(!config_.server.async, ErrorCode::kInvalidArgument, "broadcast of '", name,
                "': not available in asynchronous training (FERRY_ENABLE_ASYNC=1); there the "
                "servers hold the parameters, and every worker's first push_pull of a tensor "
                "returns them");
  // First the vote: each worker writes (root, dtype, count) + 1 into its own slot, so
  // every worker learns what every other one asked for (0: it took no part: joined). Only
  // if they agree comes the data: a sum in which every worker but the root contributes
  // zeros, exact for every dtype. (Declaring the data tensor with disagreeing sizes would
  // also set the workers' placements apart for every later tensor.)
  std::vector<int64_t> vote(3 * static_cast<size_t>(workers), 0);
  vote[3 * rank] = root + 1;
  vote[3 * rank + 1] = static_cast<int64_t>(dtype) + 1;
  vote[3 * rank + 2] = static_cast<int64_t>(count) + 1;
  Wait(StartPushPull(ReservedTensorName(reserved::kBroadcastVote, name), vote.data(), vote.data(),
                     DataType::kInt64, vote.size(), false, std::nullopt, nullptr));
  const std::string disagreement = BroadcastDisagreement(name, vote, workers);
  FERRY_ENFORCE(disagreement.empty(), ErrorCode::kMismatch, disagreement);
  Buffer zeros;
  const void* input = data;
  if (rank != root) {
    zeros = Buffer::Allocate(count * DataTypeSize(dtype));
    std::memset(zeros.data(), 0, zeros.size());
    input = zeros.data();
  }
  Wait(StartPushPull(ReservedTensorName(reserved::kBroadcast, name), input, data, dtype, count,
                     false, std::nullopt, nullptr));
}

void Worker::Barrier() {
  {
    MutexLock lock(ctx_.mu);
    ctx_.ThrowIfFailed();
  }
  cluster_.Barrier(proto::GROUP_WORKERS, 0, nullptr, ctx_.epoch.load());
}

void Worker::PushPullDevice(const std::string& name, const void* input, void* output,
                            DataType dtype, uint64_t count, bool average, void* stream) {
  CheckUserTensorName("push_pull", name);
  const DeviceTensor t = CheckedDeviceTensor(name, input, output, dtype, count, average, stream);
  uint64_t ticket = 0;
  LocalNccl* nccl = nullptr;  // made once, never replaced while the Worker lives
  {
    // This process is its own root: the order of its calls is the order of GOs.
    MutexLock lock(ctx_.mu);
    ctx_.CheckRunning("push_pull", name);
    if (!nccl_) {
      nccl_ = LocalNccl::Create(
          0, 1, config_.cluster.op_timeout_ms, 0,
          [this](const DeviceTensor& d, void* host, LocalNccl::MachineDone done) {
            PushPullAsync(d.name, host, host, d.dtype, d.count, d.average, std::nullopt,
                          [done = std::move(done)](Handle, const Verdict& v) { done(v.error); });
          },
          nullptr, [](const std::string&) {});
    }
    nccl = nccl_.get();
    ticket = nccl->Submit(t);
    nccl->Go(name);
  }
  nccl->Wait(ticket);
}

void Worker::Shutdown() {
  if (!epochs_->BeginShutdown()) return;
  cluster_.Finalize();
  LOG(INFO) << "worker " << ctx_.rank << " done: " << Summary(counters_, queue_, van_.stats());
  if (trace_) trace_->Close();
  Status written = WriteStatsFile(config_.diagnostics.stats_file, "worker", ctx_.rank, Counters());
  if (!written.ok()) LOG(ERROR) << written.message();
}

}  // namespace ferry
