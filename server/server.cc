#include "server/server.h"

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "common/metrics/series.h"
#include "common/transport/fused_push.h"
#include "common/transport/rows_message.h"
#include "common/util/logging.h"
#include "common/util/status.h"
#include "server/param_protocol.h"
#include "server/round_protocol.h"
#include "server/rows_protocol.h"

namespace ferry {

namespace {

// GPU: how long an engine with sums in flight sleeps without a wake-up before it looks
// for finished sums itself. on_ready wakes it at once; this is only the safety net.
constexpr std::chrono::milliseconds kSumPollInterval{50};

// The server's Van: VanOptionsFor's, with the server's answer to invalid messages.
VanOptions ServerVanOptions(
    const Config& config,
    std::function<void(const Message&, const Status&, const Origin&)> on_invalid) {
  VanOptions o = VanOptionsFor("server", config);
  o.on_invalid = std::move(on_invalid);
  return o;
}

bool IsDataRequest(proto::MessageType t) {
  return t == proto::PUSH || t == proto::PUSH_FUSED || t == proto::ROWS_PUSH ||
         t == proto::RESEND_SUM;
}

}  // namespace

void CheckServerSettings(const Config& config) {
  FERRY_ENFORCE(!(config.server.device == ServerDevice::kGpu && config.server.async),
                ErrorCode::kInvalidConfig,
                "FERRY_SERVER_DEVICE=gpu with FERRY_ENABLE_ASYNC=1: asynchronous training is "
                "not supported on the GPU engine (it sums rounds; asynchronous training keeps "
                "parameters and answers every push at once); set FERRY_SERVER_DEVICE=cpu");
}

Server::Server(const Config& config, GpuSummerFactory gpu_summers)
    : config_(config),
      // The Van calls on_invalid only on its IO thread, after Start (Run).
      van_(ServerVanOptions(config, [this](const Message& m, const Status& why,
                                           const Origin& o) { OnInvalid(m, why, o); })),
      port_(van_.Bind(config.transport.bind_host, config.transport.node_port)),
      cluster_(config, &van_, port_),
      // GPU engines never add dense keys on the CPU (both dense protocols go through the
      // GPU summation; rows are summed by the engine thread alone): no helper threads.
      sum_pool_(config.server.device == ServerDevice::kGpu ? 0 : config.server.engine_threads - 1,
                config.server.split_bytes) {
  CheckServerSettings(config);
  num_workers_ = config.cluster.num_workers;
  num_servers_ = config.cluster.num_servers;
  if (config.server.device == ServerDevice::kGpu && !gpu_summers) gpu_summers = GpuSummer::Create;
  for (int i = 0; i < config.server.engine_threads; ++i) {
    engines_.push_back(std::make_unique<Engine>());
    Engine* e = engines_.back().get();
    e->joined.assign(num_workers_, false);
    e->num_workers = num_workers_;
    e->retirements = std::make_unique<TensorRetirements>(num_workers_);
    MakeEngine(e, gpu_summers);
  }
  joined_.assign(num_workers_, false);
  counters_.workers.Resize(std::max(config.cluster.num_workers, config.cluster.max_workers));
  cluster_.SetMetricsReporter([this](proto::MetricsSnapshot* out) { ReportMetrics(out); });
}

void Server::ReportMetrics(proto::MetricsSnapshot* out) const {
  metrics::AddRegistry(out, counters_.registry);
  metrics::AddPeerBytes(out, counters_.workers, "worker-");
  stragglers_.Report(out);
}

void Server::MakeEngine(Engine* engine, const GpuSummerFactory& gpu_summers) {
  if (config_.server.device == ServerDevice::kCpu) {
    engine->summation =
        MakeCpuSummation(&sum_pool_, [this](uint64_t bytes) { return van_.AllocateShared(bytes); });
  } else {
    GpuSummerOptions options;
    options.device = config_.server.gpu;
    options.streams = config_.server.gpu_streams;
    // Pushes into pinned staging by the sum pool's threads (large ones split).
    options.copy = [this](void* dst, const void* src, size_t bytes) {
      sum_pool_.Copy(dst, src, bytes);
    };
    // Runs on a CUDA thread. Sets the flag under the engine's mutex, so the wake-up cannot
    // fall between the engine's look at its predicate and its wait. The engine thread
    // never holds `mu` while it calls into the summer, so this never waits on the GPU.
    options.on_ready = [engine] {
      {
        MutexLock lock(engine->mu);
        engine->sums_ready = true;
      }
      engine->cv.NotifyOne();
    };
    engine->summation = MakeGpuSummation(
        gpu_summers(options), [engine](uint64_t key, uint64_t generation, Buffer sum) {
          engine->dense->OnSumReady(key, generation, std::move(sum));
        });
  }
  // The mode is chosen here, once: the handlers never ask which one runs.
  ProtocolContext context;
  context.num_workers = &engine->num_workers;
  context.joined = &engine->joined;
  context.summation = engine->summation.get();
  context.counters = &counters_;
  context.reply = [this](const Reply& reply) { SendReply(reply); };
  context.max_message_bytes = static_cast<uint64_t>(config_.transport.max_message_bytes);
  context.backup_workers = config_.server.backup_workers;
  context.stragglers = &stragglers_;
  if (config_.server.async) {
    engine->dense = std::make_unique<ParamProtocol>(context);
  } else {
    engine->dense = std::make_unique<RoundProtocol>(context, config_.server.deterministic);
  }
  engine->rows = std::make_unique<RowsProtocol>(context, config_.server.async);
}

Server::~Server() {
  cluster_.SetMetricsReporter(nullptr);  // reads counters_, which go before cluster_
  StopEngines();
  van_.Stop();
}

int Server::Run() {
  KeepLargeBuffersInHeap();
  for (size_t i = 0; i < engines_.size(); ++i) {
    Engine* e = engines_[i].get();
    e->thread = std::thread([this, e, i] {
      pthread_setname_np(pthread_self(), ("engine-" + std::to_string(i)).c_str());
      EngineLoop(e);
    });
  }
  van_.Start([this](Message&& m, const Origin& o) { OnMessage(std::move(m), o); });
  LOG(INFO) << "server listening on " << config_.transport.bind_host << ":" << port_ << " with "
            << engines_.size() << " engine threads; sums of " << config_.server.split_bytes
            << " bytes and more split across threads"
            << (config_.server.deterministic ? "; deterministic: rounds summed in worker-rank order"
                                             : "")
            << (config_.server.async ? "; asynchronous: pushes update the parameters at once" : "")
            << (config_.server.backup_workers > 0
                    ? StrCat("; backup workers: averaged rounds close without the last ",
                             config_.server.backup_workers, " worker(s)")
                    : std::string())
            << (config_.server.device == ServerDevice::kGpu
                    ? StrCat("; sums on GPU ", config_.server.gpu, " with ",
                             config_.server.gpu_streams, " CUDA streams per engine thread")
                    : std::string());
  int code = 0;
  cluster_.SetMembershipCallback([this](const NodeTable& table) { OnMembership(table); });
  try {
    cluster_.Register();
    SetLogNodeName(StrCat("server ", cluster_.my_rank()));
    cluster_.WaitForShutdown();
  } catch (const FerryError& e) {
    if (e.code() == ErrorCode::kShutdown && cluster_.my_id() < 0) {  // a spare never needed
      LOG(INFO) << "spare server done: " << e.what();  // never needed: a clean end
    } else {
      LOG(ERROR) << "server stops: " << e.what();
      code = 1;
    }
  }
  StopEngines();
  const ServerCounters& c = counters_;
  LOG(INFO) << "server done: " << c.pushes.value() << " pushes, " << c.rounds.value() << " rounds, "
            << c.bytes_summed.value() << " bytes summed, " << c.rejected.value() << " rejected, "
            << c.duplicates.value() << " duplicates dropped, " << c.results_resent.value()
            << " sums sent again, " << c.pushes_held.value() << " pushes held for rank order, "
            << sum_pool_.split_sums() << " sums split, " << c.async_updates.value()
            << " async updates, " << c.rows_pushes.value() << " rows pushes of "
            << c.rows_summed.value() << " rows, " << van_.stats().injected_drops
            << " messages dropped by fault injection"
            << (config_.server.device == ServerDevice::kGpu
                    ? StrCat(", ", c.device_sums.value(), " sums from the GPU (",
                             c.device_sums_dropped.value(), " of abandoned rounds dropped)")
                    : std::string());
  CounterValues values = stats();
  for (auto& v : VanCounterValues(van_.stats())) values.push_back(std::move(v));
  Status written =
      WriteStatsFile(config_.diagnostics.stats_file, "server", cluster_.my_rank(), values);
  if (!written.ok()) LOG(ERROR) << written.message();
  van_.Stop();
  return code;
}

CounterValues Server::stats() const {
  CounterValues values = counters_.registry.Snapshot();
  values.emplace_back("split_sums", sum_pool_.split_sums());
  return values;
}

void Server::StopEngines() {
  for (auto& e : engines_) {
    {
      MutexLock lock(e->mu);
      e->stop = true;
    }
    e->cv.NotifyAll();
  }
  for (auto& e : engines_) {
    if (e->thread.joinable()) e->thread.join();
  }
}

void Server::OnMessage(Message&& m, const Origin& origin) {
  if (cluster_.HandleMessage(m, origin)) {
    // Requests that beat our own node table (the scheduler sends the tables to all
    // nodes at once) are served as soon as it is here.
    if (cluster_.my_id() >= 0 && !early_pushes_.empty()) {
      auto early = std::move(early_pushes_);
      early_pushes_.clear();
      for (auto& [message, from] : early) OnMessage(std::move(message), from);
    }
    return;
  }
  if (!origin.inbound ||
      (m.type() != proto::PUSH && m.type() != proto::RESEND_SUM && m.type() != proto::JOIN &&
       m.type() != proto::PUSH_FUSED && m.type() != proto::ROWS_PUSH &&
       m.type() != proto::RETIRE)) {
    FERRY_LOG_EVERY_T(WARNING, 1) << "dropped unexpected " << Describe(m);
    return;
  }
  if (m.envelope.epoch() < cluster_.epoch()) {
    // Its worker abandoned the operation at the new epoch (or died): nobody waits for it.
    counters_.stale_epoch++;
    VLOG(1) << "dropped " << Describe(m) << " of membership epoch " << m.envelope.epoch()
            << " (this server serves epoch " << cluster_.epoch() << ")";
    return;
  }
  if (cluster_.my_id() < 0 || m.envelope.epoch() > cluster_.epoch()) {
    if (early_pushes_.size() < kMaxEarlyPushes) {
      early_pushes_.emplace_back(std::move(m), origin);
    } else {
      counters_.Refuse(Refusal::kNotYetInCluster);
      FERRY_LOG_EVERY_T(WARNING, 1) << "dropped " << Describe(m) << ": not yet part of a cluster";
    }
    return;
  }
  if (!FromMemberWorker(m, origin)) {
    counters_.Refuse(Refusal::kNotAWorker);
    FERRY_LOG_EVERY_T(WARNING, 1) << "dropped " << Describe(m)
                                  << ": the sender is not a worker of this job";
    ReplyError(origin.identity, m.envelope.request_id(), m.envelope.key(), ErrorCode::kBadMessage,
               "push refused: the sender is not a worker of this job");
    return;
  }
  if (IsControlIdentity(origin.identity) && !IsControlMessage(m.type())) {
    // A JOIN must stay behind the pushes sent before it, and tensor bytes must not block
    // the control connection: neither belongs there.
    counters_.Refuse(Refusal::kWrongConnection);
    FERRY_LOG_EVERY_T(WARNING, 1) << "dropped " << Describe(m) << ": it came on the control connection";
    ReplyError(origin.identity, m.envelope.request_id(), m.envelope.key(), ErrorCode::kBadMessage,
               StrCat(MessageTypeName(m.type()), " refused: it belongs on the data connection, "
                                                 "not the control connection"));
    return;
  }
  if (m.type() == proto::JOIN) {
    OnJoin(m, origin.identity);
    return;
  }
  if (m.type() == proto::RETIRE) {
    OnRetire(m, origin.identity);
    return;
  }
  if (m.type() == proto::PUSH_FUSED) {
    DispatchFusedPush(std::move(m), origin);
    return;
  }
  // The arrival order of pushes, for tests of the workers' scheduling (TRACE level).
  VLOG(2) << "arrived " << Describe(m) << " priority " << m.envelope.priority();
  Engine* e = engines_[EngineForKey(m.envelope.key(), static_cast<int>(engines_.size()))].get();
  const int rank = cluster_.table().node(m.sender()).rank();  // of the message's epoch
  if (m.type() == proto::PUSH || m.type() == proto::ROWS_PUSH) {
    counters_.workers.AddReceived(rank, m.envelope.length());
  }
  Request request{std::move(m), origin.identity, rank};
  if (TryDispatchInline(e, request)) return;
  {
    MutexLock lock(e->mu);
    const int32_t priority = request.message.envelope.priority();
    e->queue.Push(std::move(request), priority);
  }
  e->cv.NotifyOne();
}

bool Server::FromMemberWorker(const Message& m, const Origin& origin) const {
  if (!origin.inbound || cluster_.my_id() < 0) return false;
  const NodeTable& table = cluster_.table();
  return table.IsWorker(m.sender()) &&
         DataIdentity(origin.identity) == table.node(m.sender()).routing_id();
}

void Server::OnInvalid(const Message& m, const Status& why, const Origin& origin) {
  if (!IsDataRequest(m.type()) || !FromMemberWorker(m, origin)) return;
  counters_.rejected++;  // its reason is the Van's: ferry_refused_messages_total{reason="malformed"}
  ReplyRefused(m, origin.identity, why.message());
}

void Server::ReplyRefused(const Message& m, const std::string& identity,
                          const std::string& reason) {
  // Not SendReply: whoever refused the message logged it already.
  auto refuse = [&](uint64_t request_id, uint64_t key) {
    if (request_id == 0) return;
    PendingReply to{-1, identity, request_id};
    van_.Reply(identity,
               ToMessage(ErrorReply(to, key, ErrorCode::kBadMessage, reason), cluster_.my_id()));
  };
  const auto& pushes = m.envelope.fused_push().pushes();
  if (m.type() != proto::PUSH_FUSED || pushes.empty() ||
      static_cast<size_t>(pushes.size()) > kMaxFusedPushes) {
    refuse(m.envelope.request_id(), m.type() == proto::PUSH_FUSED ? 0 : m.envelope.key());
    return;
  }
  for (const proto::SubPush& push : pushes) refuse(push.request_id(), push.key());
}

bool Server::TryDispatchInline(Engine* engine, Request& request) {
  if (request.message.type() != proto::PUSH || config_.server.device != ServerDevice::kCpu ||
      request.message.payload.size() > static_cast<uint64_t>(config_.server.inline_bytes)) {
    return false;
  }
  {
    MutexLock lock(engine->mu);
    if (engine->stop || !engine->queue.empty()) return false;
    if (!engine->run_mu.TryLock()) return false;  // the engine thread is running it
  }
  // The engine is idle and cannot start anything: only this thread queues its work.
  counters_.pushes_inline++;
  DispatchOnEngine(engine, request);
  engine->run_mu.Unlock();
  return true;
}

void Server::DispatchFusedPush(Message&& fused, const Origin& origin) {
  std::vector<Message> pushes;
  std::string error = SplitFusedPush(fused, &pushes).message();
  if (!error.empty()) {  // the Van validated it already; this is a second line of defence
    counters_.Refuse(Refusal::kBadMessage);
    FERRY_LOG_EVERY_T(WARNING, 1) << "dropped " << Describe(fused) << ": " << error;
    ReplyRefused(fused, origin.identity, "fused push refused: " + error);
    return;
  }
  // Each part is an ordinary push from here on, in the order the worker packed them.
  for (Message& push : pushes) OnMessage(std::move(push), origin);
}

void Server::EngineLoop(Engine* engine) {
  // CPU engines never set sums_ready nor have sums in flight: for them this is a plain
  // wait for the next work item, as it always was.
  auto woken = [engine]() REQUIRES(engine->mu) {
    return engine->stop || engine->sums_ready || !engine->queue.empty();
  };
  while (true) {
    Request work;
    bool have_work = false;
    bool sums_ready = false;
    {
      MutexLock lock(engine->mu);
      if (engine->dense->sums_in_flight() == 0) {
        engine->cv.Wait(engine->mu, woken);
      } else if (!engine->cv.WaitFor(engine->mu, kSumPollInterval, woken)) {
        engine->sums_ready = true;  // no wake-up for a while: look anyway
      }
      if (engine->stop) return;
      // Cleared before RunCompletions: a sum that arrives during it sets the flag again.
      sums_ready = std::exchange(engine->sums_ready, false);
      if (!engine->queue.empty()) {
        work = engine->queue.Pop();
        have_work = true;
      }
      // Taken before mu is let go: from the pop to the end of the run the engine never
      // looks idle to TryDispatchInline, so nothing overtakes what was popped (a JOIN's
      // fence above all). The IO thread only tries run_mu, so this cannot deadlock.
      engine->run_mu.Lock();
    }
    RunEngineWork(engine, sums_ready, have_work ? &work : nullptr);
    engine->run_mu.Unlock();
  }
}

void Server::RunEngineWork(Engine* engine, bool sums_ready, Request* work) {
  // Nothing on the CPU path throws FerryError; a GPU failure does (FailEngine).
  if (sums_ready && !engine->failed) {  // sums first: they release waiting workers
    try {
      engine->summation->RunCompletions();
    } catch (const FerryError& e) {
      FailEngine(engine, e.what());
    }
  }
  if (work) DispatchOnEngine(engine, *work);
}

void Server::DispatchOnEngine(Engine* engine, Request& work) {
  try {
    Dispatch(engine, work);
  } catch (const FerryError& e) {
    FailEngine(engine, e.what());
    if (work.message.type() == proto::PUSH) {
      // The push being added when the GPU failed is in no round's `waiting` (or, if
      // it is, it was answered already and the worker ignores a second answer).
      const proto::Envelope& env = work.message.envelope;
      ReplyError(work.identity, env.request_id(), env.key(), ErrorCode::kInternal,
                 StrCat(KeyName(env.key()), ": the server's summation failed: ", e.what()));
    }
  }
}

void Server::Dispatch(Engine* engine, Request& request) {
  const proto::Envelope& e = request.envelope();
  if (request.message.type() == proto::NODE_TABLE) {
    HandleEpoch(engine, e.node_table());
    return;
  }
  if (e.epoch() < engine->epoch) {  // queued before the epoch's fence, handled after it
    counters_.stale_epoch++;
    return;
  }
  if (request.message.type() == proto::RETIRE) {
    HandleRetire(engine, request.rank, KeyTensor(e.key()));
    return;
  }
  if (request.message.type() != proto::JOIN && !engine->retirements->empty()) {
    if (std::string why = RetiredRefusal(*engine, request); !why.empty()) {
      counters_.Refuse(Refusal::kRetired);
      ReplyError(request.identity, e.request_id(), e.key(), ErrorCode::kMismatch,
                 StrCat(KeyName(e.key()), ": ", why));
      return;
    }
  }
  switch (request.message.type()) {
    case proto::JOIN:
      HandleJoin(engine, request.rank);
      return;
    case proto::RESEND_SUM:
      (e.body_case() == proto::Envelope::kRows ? engine->rows : engine->dense)->Pull(request);
      return;
    case proto::ROWS_PUSH:
      engine->rows->Push(request);
      return;
    default:  // PUSH (OnMessage lets no other type through)
      break;
  }
  counters_.pushes++;
  if (e.async_mode() != config_.server.async) {
    counters_.Refuse(Refusal::kModeMismatch);
    ReplyError(
        request.identity, e.request_id(), e.key(), ErrorCode::kInvalidArgument,
        StrCat("worker ", request.rank, " pushed ", KeyName(e.key()), " in ",
               e.async_mode() ? "asynchronous" : "synchronous", " mode but this server runs ",
               config_.server.async ? "asynchronous" : "synchronous",
               " training; set FERRY_ENABLE_ASYNC alike on every node"));
    return;
  }
  if (static_cast<int>(e.backup_workers()) != config_.server.backup_workers) {
    counters_.Refuse(Refusal::kModeMismatch);
    ReplyError(request.identity, e.request_id(), e.key(), ErrorCode::kInvalidArgument,
               StrCat("worker ", request.rank, " pushed ", KeyName(e.key()),
                      " with FERRY_BACKUP_WORKERS=", e.backup_workers(),
                      " but this server runs with FERRY_BACKUP_WORKERS=",
                      config_.server.backup_workers,
                      "; set FERRY_BACKUP_WORKERS alike on every worker and server"));
    return;
  }
  engine->dense->Push(request);
}

void Server::FailEngine(Engine* engine, const std::string& reason) {
  const std::string why = StrCat("the server's summation failed: ", reason);
  if (!engine->failed) {
    LOG(ERROR) << why << "; every key of this engine fails, and the server leaves the job";
  }
  // No more completions are looked for (a broken GPU would throw every time), so the
  // engine waits for work alone again; sums still on their way are never delivered.
  engine->failed = true;
  engine->dense->FailAll(why);
  engine->rows->FailAll(why);
  cluster_.Fail(why);
}

void Server::SendReply(const Reply& reply) {
  if (reply.kind == Reply::Kind::kError) {
    FERRY_LOG_EVERY_T(WARNING, 1) << "refused request " << reply.request_id << ": " << reply.reason;
  }
  if ((reply.kind == Reply::Kind::kSum || reply.kind == Reply::Kind::kRowsSum) &&
      reply.worker_id >= 0) {
    const NodeTable& table = cluster_.table();
    if (table.IsWorker(reply.worker_id)) {
      counters_.workers.AddSent(table.node(reply.worker_id).rank(), reply.payload.size());
    }
  }
  van_.Reply(reply.identity, ToMessage(reply, cluster_.my_id()));
}

void Server::ReplyError(const std::string& identity, uint64_t request_id, uint64_t key,
                        ErrorCode code, const std::string& reason) {
  SendReply(ErrorReply(PendingReply{-1, identity, request_id}, key, code, reason));
}

}  // namespace ferry
