#include "server/server.h"

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/transport/fused_push.h"
#include "common/transport/rows_message.h"
#include "common/util/logging.h"
#include "common/util/status.h"

namespace ferry {

namespace {

// GPU: how long an engine with sums in flight sleeps without a wake-up before it looks
// for finished sums itself. on_ready wakes it at once; this is only the safety net.
constexpr std::chrono::milliseconds kSumPollInterval{50};

}  // namespace

void CheckServerSettings(const Config& config) {
  FERRY_ENFORCE(!(config.server_device == ServerDevice::kGpu && config.enable_async),
                ErrorCode::kInvalidConfig,
                "FERRY_SERVER_DEVICE=gpu with FERRY_ENABLE_ASYNC=1: asynchronous training is "
                "not supported on the GPU engine (it sums rounds; asynchronous training keeps "
                "parameters and answers every push at once); set FERRY_SERVER_DEVICE=cpu");
}

Server::Server(const Config& config, GpuSummerFactory gpu_summers)
    : config_(config),
      van_(VanOptionsFor("server", config)),
      port_(van_.Bind(config.bind_host, config.node_port)),
      cluster_(config, &van_, port_),
      // GPU engines never sum on the CPU (asynchronous mode, the pool's other user, is
      // refused with a GPU): no helper threads.
      sum_pool_(config.server_device == ServerDevice::kGpu ? 0 : config.server_engine_threads - 1,
                config.server_split_bytes) {
  CheckServerSettings(config);
  num_workers_ = config.num_workers;
  num_servers_ = config.num_servers;
  if (config.server_device == ServerDevice::kGpu && !gpu_summers) gpu_summers = GpuSummer::Create;
  for (int i = 0; i < config.server_engine_threads; ++i) {
    engines_.push_back(std::make_unique<Engine>());
    Engine* e = engines_.back().get();
    e->joined.assign(num_workers_, false);
    e->summation = MakeSummation(e, gpu_summers);
  }
  joined_.assign(num_workers_, false);
}

std::unique_ptr<Summation> Server::MakeSummation(Engine* engine,
                                                 const GpuSummerFactory& gpu_summers) {
  if (config_.server_device == ServerDevice::kCpu) return MakeCpuSummation(&sum_pool_);
  GpuSummerOptions options;
  options.device = config_.server_gpu;
  options.streams = config_.server_gpu_streams;
  // Runs on a CUDA thread. Sets the flag under the engine's mutex, so the wake-up cannot
  // fall between the engine's look at its predicate and its wait. The engine thread
  // never holds `mu` while it calls into the summer, so this never waits on the GPU.
  options.on_ready = [engine] {
    {
      std::lock_guard<std::mutex> lock(engine->mu);
      engine->sums_ready = true;
    }
    engine->cv.notify_one();
  };
  return MakeGpuSummation(gpu_summers(options),
                          [this, engine](uint64_t key, uint64_t generation, Buffer sum) {
                            OnSumReady(engine, key, generation, std::move(sum));
                          });
}

Server::~Server() {
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
  LOG(INFO) << "server listening on " << config_.bind_host << ":" << port_ << " with "
            << engines_.size() << " engine threads; sums of " << config_.server_split_bytes
            << " bytes and more split across threads"
            << (config_.deterministic ? "; deterministic: rounds summed in worker-rank order" : "")
            << (config_.enable_async ? "; asynchronous: pushes update the parameters at once" : "")
            << (config_.server_device == ServerDevice::kGpu
                    ? StrCat("; sums on GPU ", config_.server_gpu, " with ",
                             config_.server_gpu_streams, " CUDA streams per engine thread")
                    : std::string());
  int code = 0;
  try {
    cluster_.Register();
    SetLogNodeName(StrCat("server ", cluster_.my_rank()));
    cluster_.WaitForShutdown();
  } catch (const FerryError& e) {
    LOG(ERROR) << "server stops: " << e.what();
    code = 1;
  }
  StopEngines();
  ServerStats s = stats();
  LOG(INFO) << "server done: " << s.pushes << " pushes, " << s.rounds_completed << " rounds, "
            << s.bytes_summed << " bytes summed, " << s.rejected_pushes << " rejected, "
            << s.duplicate_pushes << " duplicates dropped, " << s.results_resent
            << " sums sent again, " << s.pushes_held << " pushes held for rank order, "
            << s.split_sums << " sums split, " << s.async_updates << " async updates, "
            << s.rows_pushes << " rows pushes of " << s.rows_summed << " rows, "
            << van_.stats().injected_drops << " messages dropped by fault injection"
            << (config_.server_device == ServerDevice::kGpu
                    ? StrCat(", ", s.device_sums, " sums from the GPU (", s.device_sums_dropped,
                             " of abandoned rounds dropped)")
                    : std::string());
  van_.Stop();
  return code;
}

ServerStats Server::stats() const {
  ServerStats s;
  s.pushes = pushes_;
  s.bytes_summed = bytes_summed_;
  s.rounds_completed = rounds_;
  s.rejected_pushes = rejected_;
  s.duplicate_pushes = duplicates_;
  s.results_resent = results_resent_;
  s.pushes_held = pushes_held_;
  s.split_sums = sum_pool_.split_sums();
  s.async_updates = async_updates_;
  s.device_sums = device_sums_;
  s.device_sums_dropped = device_sums_dropped_;
  s.rows_pushes = rows_pushes_;
  s.rows_summed = rows_summed_;
  return s;
}

void Server::StopEngines() {
  for (auto& e : engines_) {
    {
      std::lock_guard<std::mutex> lock(e->mu);
      e->stop = true;
    }
    e->cv.notify_all();
  }
  for (auto& e : engines_) {
    if (e->thread.joinable()) e->thread.join();
  }
}

void Server::OnMessage(Message&& m, const Origin& origin) {
  if (cluster_.HandleMessage(m, origin)) {
    // Pushes that beat our own node table (the scheduler sends the tables to all
    // nodes at once) are served as soon as it is here.
    if (cluster_.my_id() >= 0 && !early_pushes_.empty()) {
      auto early = std::move(early_pushes_);
      early_pushes_.clear();
      for (auto& [message, from] : early) OnMessage(std::move(message), from);
    }
    return;
  }
  if (!origin.inbound || (m.type() != proto::PUSH && m.type() != proto::PULL &&
                          m.type() != proto::JOIN && m.type() != proto::PUSH_FUSED &&
                          m.type() != proto::ROWS_PUSH)) {
    LOG_EVERY_N(WARNING, 100) << "dropped unexpected " << Describe(m);
    return;
  }
  if (cluster_.my_id() < 0) {
    if (early_pushes_.size() < kMaxEarlyPushes) {
      early_pushes_.emplace_back(std::move(m), origin);
    } else {
      rejected_++;
      LOG_EVERY_N(WARNING, 100) << "dropped " << Describe(m) << ": not yet part of a cluster";
    }
    return;
  }
  const NodeTable& table = cluster_.table();
  if (!table.IsWorker(m.sender()) ||
      origin.identity != table.node(m.sender()).routing_id()) {
    rejected_++;
    LOG_EVERY_N(WARNING, 100) << "dropped " << Describe(m)
                              << ": the sender is not a worker of this job";
    ReplyError(origin.identity, m.envelope.request_id(), m.envelope.key(),
               ErrorCode::kBadMessage, "push refused: the sender is not a worker of this job");
    return;
  }
  if (m.type() == proto::JOIN) {
    OnJoin(m, origin.identity);
    return;
  }
  if (m.type() == proto::PUSH_FUSED) {
    DispatchFusedPush(std::move(m), origin);
    return;
  }
  // The arrival order of pushes, for tests of the workers' scheduling (TRACE level).
  VLOG(2) << "arrived " << Describe(m) << " priority " << m.envelope.priority();
  Engine* e = engines_[EngineForKey(m.envelope.key(), static_cast<int>(engines_.size()))].get();
  {
    std::lock_guard<std::mutex> lock(e->mu);
    const int32_t priority = m.envelope.priority();
    e->queue.Push(Work{std::move(m), origin.identity}, priority);
  }
  e->cv.notify_one();
}

void Server::DispatchFusedPush(Message&& fused, const Origin& origin) {
  std::vector<Message> pushes;
  std::string error = SplitFusedPush(fused, &pushes).message();
  if (!error.empty()) {  // the Van validated it already; this is a second line of defence
    rejected_++;
    LOG_EVERY_N(WARNING, 100) << "dropped " << Describe(fused) << ": " << error;
    ReplyError(origin.identity, fused.envelope.request_id(), 0, ErrorCode::kBadMessage,
               "fused push refused: " + error);
    return;
  }
  // Each part is an ordinary push from here on, in the order the worker packed them.
  for (Message& push : pushes) OnMessage(std::move(push), origin);
}

void Server::EngineLoop(Engine* engine) {
  // CPU engines never set sums_ready nor have sums in flight: for them this is a plain
  // wait for the next work item, as it always was.
  auto woken = [engine] { return engine->stop || engine->sums_ready || !engine->queue.empty(); };
  while (true) {
    Work work;
    bool have_work = false;
    bool sums_ready = false;
    {
      std::unique_lock<std::mutex> lock(engine->mu);
      if (engine->sums_in_flight == 0) {
        engine->cv.wait(lock, woken);
      } else if (!engine->cv.wait_for(lock, kSumPollInterval, woken)) {
        engine->sums_ready = true;  // no wake-up for a while: look anyway
      }
      if (engine->stop) return;
      // Cleared before RunCompletions: a sum that arrives during it sets the flag again.
      sums_ready = std::exchange(engine->sums_ready, false);
      if (!engine->queue.empty()) {
        work = engine->queue.Pop();
        have_work = true;
      }
    }
    // Nothing on the CPU path throws FerryError; a GPU failure does (FailEngine).
    if (sums_ready && !engine->failed) {  // sums first: they release waiting workers
      try {
        engine->summation->RunCompletions();
      } catch (const FerryError& e) {
        FailEngine(engine, e.what());
      }
    }
    if (!have_work) continue;
    try {
      if (work.message.type() == proto::JOIN) {
        HandleJoin(engine, cluster_.table().node(work.message.sender()).rank());
      } else if (work.message.type() == proto::PULL) {
        HandlePull(engine, work);
      } else if (work.message.type() == proto::ROWS_PUSH) {
        HandleRowsPush(engine, work);
      } else {
        HandlePush(engine, work);
      }
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
}

void Server::HandlePush(Engine* engine, Work& work) {
  const proto::Envelope& e = work.message.envelope;
  const uint64_t key = e.key();
  const int rank = cluster_.table().node(e.sender()).rank();
  const DataType dtype = static_cast<DataType>(e.dtype());
  KeyState& state = engine->keys[key];
  pushes_++;
  if (e.async_mode() != config_.enable_async) {
    rejected_++;
    ReplyError(work.identity, e.request_id(), key, ErrorCode::kInvalidArgument,
               StrCat("worker ", rank, " pushed ", KeyName(key), " in ",
                      e.async_mode() ? "asynchronous" : "synchronous", " mode but this server runs ",
                      config_.enable_async ? "asynchronous" : "synchronous",
                      " training; set FERRY_ENABLE_ASYNC alike on every node"));
    return;
  }
  if (config_.enable_async) {
    HandleAsyncPush(engine, work, state, rank);
    return;
  }
  if (engine->joined[rank]) {
    rejected_++;
    ReplyError(work.identity, e.request_id(), key, ErrorCode::kBadMessage,
               StrCat("worker ", rank, " pushed ", KeyName(key), " after joining; a worker may "
                      "push again only once every worker has joined"));
    return;
  }
  PushVerdict verdict =
      state.Classify(rank, e.round(), e.length(), dtype, e.tensor_hash(), num_workers_);
  if (verdict == PushVerdict::kAccumulate) {
    Accumulate(engine, work, state, rank);
  } else {
    RefusePush(engine, work, state, rank, verdict);
  }
}

void Server::RefusePush(Engine* engine, Work& work, KeyState& state, int rank,
                        PushVerdict verdict) {
  const proto::Envelope& e = work.message.envelope;
  const uint64_t key = e.key();
  const DataType dtype = static_cast<DataType>(e.dtype());
  switch (verdict) {
    case PushVerdict::kFailed:
      rejected_++;
      ReplyError(work.identity, e.request_id(), key, ErrorCode::kMismatch, state.failure);
      return;
    case PushVerdict::kMismatch: {
      rejected_++;
      std::string reason = StrCat(
          "workers disagree on ", KeyName(key), ": worker ", rank, " pushed ", e.length(),
          " bytes of ", DataTypeName(dtype), " (tensor hash ", std::hex, e.tensor_hash(),
          std::dec, ") but worker ", state.defined_by_rank, " pushed ", state.length,
          " bytes of ", DataTypeName(state.dtype), " (tensor hash ", std::hex, state.tensor_hash,
          std::dec, "); declare the same tensors (name, dtype, shape) in the same order on "
          "every worker");
      ReplyError(work.identity, e.request_id(), key, ErrorCode::kMismatch, reason);
      FailKey(engine, key, state, reason);
      return;
    }
    case PushVerdict::kDuplicate:
      duplicates_++;
      VLOG(1) << "dropped a duplicate push of " << KeyName(key) << " round " << e.round()
              << " from worker " << rank;
      if (config_.enable_async) {  // applied already: answer with the parameters
        SendResult(work.identity, e.request_id(), key, state, e.round(), state.sum, 1);
      } else {
        Acknowledge(work.identity, e.request_id(), key);
      }
      return;
    case PushVerdict::kPrevious:
      duplicates_++;
      ResendResult(work.identity, e.request_id(), key, state);
      return;
    case PushVerdict::kStale:
      rejected_++;
      ReplyError(work.identity, e.request_id(), key, ErrorCode::kBadMessage,
                 StrCat("push of ", KeyName(key), " for round ", e.round(),
                        " but the key is at round ", state.round,
                        ": only the previous round's sum is kept for resends"));
      return;
    case PushVerdict::kAhead:
      rejected_++;
      ReplyError(work.identity, e.request_id(), key, ErrorCode::kBadMessage,
                 StrCat("push of ", KeyName(key), " for round ", e.round(), " but ",
                        config_.enable_async
                            ? StrCat("worker ", rank, "'s next round is ", state.next_round[rank])
                            : StrCat("the key is at round ", state.round),
                        " (a worker may push a round only after receiving the previous one)"));
      return;
    case PushVerdict::kAccumulate:
      break;
  }
}

void Server::Accumulate(Engine* engine, Work& work, KeyState& state, int rank) {
  const proto::Envelope& e = work.message.envelope;
  const uint64_t key = e.key();
  // A summing round has every worker recorded or joined, and joined workers' pushes are
  // refused before Classify: a push of it can only be a duplicate.
  CHECK(!state.summing) << KeyName(key) << ": a push accepted into a round already summing";
  // Acknowledge first, every push, the one completing the round too: the ack returns the
  // worker's credit, so it must not wait for the summation nor travel behind the sum.
  // (When the sum doubled as the last push's ack, credit 1 became stop-and-wait: 2.4x
  // LB1 with 1 MiB partitions, 2.8x with 4 MiB; docs/benchmarks.md.)
  Acknowledge(work.identity, e.request_id(), key);
  Summation& summation = *engine->summation;
  if (config_.deterministic) {
    state.held[rank] = std::move(work.message.payload);  // summed when its turn comes
  } else {
    summation.Add(key, state, std::move(work.message.payload));
  }
  bytes_summed_ += state.length;
  const bool complete =
      state.Record(rank, PendingReply{e.sender(), work.identity, e.request_id()}, engine->joined);
  if (config_.deterministic) {
    state.TakeInRankOrder(engine->joined,
                          [&](Buffer push) { summation.Add(key, state, std::move(push)); });
    if (state.next_rank <= rank) pushes_held_++;  // waits for a lower rank
  }
  if (complete) CompleteRound(engine, key, state);
}

void Server::AddPush(const KeyState& state, Buffer& dst, const Buffer& src) {
  sum_pool_.SumInto(dst.data(), src.data(), state.length / DataTypeSize(state.dtype), state.dtype);
}

void Server::HandleAsyncPush(Engine* engine, Work& work, KeyState& state, int rank) {
  const proto::Envelope& e = work.message.envelope;
  PushVerdict verdict = state.ClassifyAsync(rank, e.round(), e.length(),
                                            static_cast<DataType>(e.dtype()), e.tensor_hash(),
                                            num_workers_);
  if (verdict != PushVerdict::kAccumulate) {
    RefusePush(engine, work, state, rank, verdict);  // a resend is answered with the parameters
    return;
  }
  Buffer& push = work.message.payload;
  if (!state.has_params) {
    state.sum = std::move(push);  // the first push of the key: the initial parameters
    state.has_params = true;
  } else if (e.round() > 0) {
    // new = delta + old, in the delta's frame: the old parameters may still be on the
    // wire in replies and are never written again.
    if (!push.empty()) {
      AddPush(state, push, state.sum);
      state.sum = std::move(push);
    }
    async_updates_++;
  }  // else: another worker's initial values; the key has its parameters already
  bytes_summed_ += state.length;
  state.RecordAsync(rank);
  SendResult(work.identity, e.request_id(), e.key(), state, e.round(), state.sum, 1);
}

void Server::HandlePull(Engine* engine, Work& work) {
  const proto::Envelope& e = work.message.envelope;
  const uint64_t key = e.key();
  const int rank = cluster_.table().node(e.sender()).rank();
  if (e.body_case() == proto::Envelope::kRows) {
    HandleRowsPull(engine, work, rank);
    return;
  }
  if (config_.enable_async) {
    HandleAsyncPull(engine, work, rank);
    return;
  }
  auto it = engine->keys.find(key);
  PushVerdict verdict = it == engine->keys.end() ? PushVerdict::kStale
                                                 : it->second.ClassifyPull(rank, e.round());
  switch (verdict) {
    case PushVerdict::kPrevious:
      ResendResult(work.identity, e.request_id(), key, it->second);
      return;
    case PushVerdict::kDuplicate:  // still waiting for other workers: say so again
      Acknowledge(work.identity, e.request_id(), key);
      return;
    case PushVerdict::kFailed:
      ReplyError(work.identity, e.request_id(), key, ErrorCode::kMismatch, it->second.failure);
      return;
    default:
      rejected_++;
      ReplyError(work.identity, e.request_id(), key, ErrorCode::kBadMessage,
                 StrCat("worker ", rank, " asked for the sum of ", KeyName(key), " round ",
                        e.round(), " but this server has no record of its push",
                        it == engine->keys.end() ? std::string()
                                                 : StrCat(" (the key is at round ", it->second.round, ")")));
  }
}

void Server::HandleAsyncPull(Engine* engine, Work& work, int rank) {
  // Workers PULL only after an acknowledgement, which async mode never sends; answer
  // all the same while the push is on record: the parameters hold it.
  const proto::Envelope& e = work.message.envelope;
  auto it = engine->keys.find(e.key());
  if (it != engine->keys.end() && it->second.has_params && it->second.failure.empty() &&
      e.round() < it->second.next_round[rank]) {
    results_resent_++;
    SendResult(work.identity, e.request_id(), e.key(), it->second, e.round(), it->second.sum, 1);
    return;
  }
  rejected_++;
  ReplyError(work.identity, e.request_id(), e.key(), ErrorCode::kBadMessage,
             StrCat("worker ", rank, " asked for the parameters of ", KeyName(e.key()),
                    " after round ", e.round(), " but this server has no record of that push"));
}

void Server::ResendResult(const std::string& identity, uint64_t request_id, uint64_t key,
                          const KeyState& state) {
  results_resent_++;
  VLOG(1) << "sending the sum of " << KeyName(key) << " round " << state.round - 1
          << " again for request " << request_id;
  SendResult(identity, request_id, key, state, state.round - 1, state.last_sum,
             state.last_contributors);
}

void Server::SendResult(const std::string& identity, uint64_t request_id, uint64_t key,
                        const KeyState& state, uint32_t round, const Buffer& sum,
                        uint32_t contributors) {
  Message reply = MakeMessage(proto::PUSH_RESULT, cluster_.my_id());
  reply.envelope.set_request_id(request_id);
  reply.envelope.set_key(key);
  reply.envelope.set_round(round);
  reply.envelope.set_dtype(static_cast<proto::DataTypeProto>(state.dtype));
  reply.envelope.set_length(state.length);
  reply.envelope.set_tensor_hash(state.tensor_hash);
  reply.envelope.set_contributors(contributors);
  reply.payload = sum;  // shared: every reply sends the same bytes
  van_.Reply(identity, std::move(reply));
}

void Server::OnJoin(const Message& m, const std::string& identity) {
  int rank = cluster_.table().node(m.sender()).rank();
  if (config_.enable_async) {
    rejected_++;
    ReplyError(identity, m.envelope.request_id(), 0, ErrorCode::kInvalidArgument,
               StrCat("worker ", rank, " joined, but in asynchronous training no push waits for "
                      "other workers: there is nothing to join"));
    return;
  }
  // Every engine sees the JOIN after the pushes this worker sent before it (same
  // connection, queued in order, and a JOIN is a fence in the engine's queue: see
  // engine_queue.h), so a round it already pushed still counts it.
  for (auto& e : engines_) {
    {
      std::lock_guard<std::mutex> lock(e->mu);
      e->queue.PushFence(Work{Message(m), identity});
    }
    e->cv.notify_one();
  }
  joined_[rank] = true;
  bool all = std::find(joined_.begin(), joined_.end(), false) == joined_.end();
  LOG(INFO) << "worker " << rank << " joined"
            << (all ? "; every worker has joined: keys restart at round 0" : "");
  if (all) joined_.assign(num_workers_, false);
  Message ack = MakeMessage(proto::JOIN_ACK, cluster_.my_id());
  ack.envelope.set_request_id(m.envelope.request_id());
  van_.Reply(identity, std::move(ack));
}

void Server::HandleJoin(Engine* engine, int rank) {
  engine->joined[rank] = true;
  if (std::find(engine->joined.begin(), engine->joined.end(), false) == engine->joined.end()) {
    // Every worker joined: nobody pushes until they all leave Join(), and then every
    // worker restarts its rounds at 0.
    engine->joined.assign(num_workers_, false);
    for (auto& [key, state] : engine->keys) {
      // Only a worker pushing after its own JOIN leaves pushes waiting (a summing round
      // too: its pushers get the sum only once it arrived, and join only after that).
      if (!state.waiting.empty()) {
        FailKey(engine, key, state,
                StrCat(KeyName(key), " had pushes waiting when every worker had joined"));
      }
      engine->summation->Reset(key);  // no open round may carry over into round 0
      state.Restart(num_workers_);    // new generation: a sum still on its way is dropped
    }
    for (auto& [key, state] : engine->row_keys) {
      if (state.failure.empty() && state.Contributors() > 0) {
        FailRowKey(key, state,
                   StrCat(RowsKeyName(key), " had pushes waiting when every worker had joined"));
      }
      state.Restart(num_workers_);
    }
    return;
  }
  for (auto& [key, state] : engine->row_keys) {
    if (state.failure.empty() && state.defined && state.Complete(engine->joined)) {
      SendRowsRound(key, state);
    }
  }
  for (auto& entry : engine->keys) {
    const uint64_t key = entry.first;
    KeyState& state = entry.second;
    if (config_.deterministic && state.defined && state.failure.empty()) {
      // A push held for this rank's turn may go now. (A failed key holds nothing.)
      state.TakeInRankOrder(engine->joined, [&](Buffer push) {
        engine->summation->Add(key, state, std::move(push));
      });
    }
    if (state.Complete(engine->joined)) CompleteRound(engine, key, state);
  }
}

void Server::CompleteRound(Engine* engine, uint64_t key, KeyState& state) {
  if (engine->summation->Finish(key, state)) {
    SendRound(key, state);  // the sum is in state.sum now
    return;
  }
  // The sum comes to OnSumReady. Until then the key stays at this round with every
  // pusher recorded: resent pushes and PULLs of it are acknowledged again.
  state.summing = true;
  engine->sums_in_flight++;
}

void Server::OnSumReady(Engine* engine, uint64_t key, uint64_t generation, Buffer sum) {
  engine->sums_in_flight--;
  device_sums_++;
  auto it = engine->keys.find(key);  // keys are never erased; looked up, never held
  if (it == engine->keys.end() || it->second.generation != generation) {
    // The round was abandoned (the key failed, or every worker joined) after Finish:
    // nobody waits for this sum. Dropping it returns its pinned block to the pool.
    device_sums_dropped_++;
    return;
  }
  KeyState& state = it->second;
  // Only FailKey and Restart end a summing round, and both change the generation.
  CHECK(state.summing) << KeyName(key) << ": a sum arrived for a round that is not summing";
  state.summing = false;
  state.sum = std::move(sum);
  SendRound(key, state);
}

void Server::SendRound(uint64_t key, KeyState& state) {
  for (const PendingReply& p : state.waiting) {
    SendResult(p.identity, p.request_id, key, state, state.round, state.sum,
               static_cast<uint32_t>(state.waiting.size()));
  }
  state.NextRound(num_workers_);
  rounds_++;
}

void Server::FailKey(Engine* engine, uint64_t key, KeyState& state, const std::string& reason) {
  LOG(ERROR) << reason;
  DropKey(engine, key, state, ErrorCode::kMismatch, reason);
}

void Server::DropKey(Engine* engine, uint64_t key, KeyState& state, ErrorCode code,
                     const std::string& reason) {
  state.failure = reason;
  for (const PendingReply& p : state.waiting) {
    ReplyError(p.identity, p.request_id, key, code, reason);
  }
  state.waiting.clear();
  state.sum = Buffer();
  state.held.assign(state.held.size(), Buffer());
  // A sum still on its way answers nobody now (OnSumReady drops it), and the device
  // keeps no open round for the key.
  state.summing = false;
  state.generation++;
  engine->summation->Reset(key);
}

void Server::FailEngine(Engine* engine, const std::string& reason) {
  const std::string why = StrCat("the server's summation failed: ", reason);
  if (!engine->failed) {
    LOG(ERROR) << why << "; every key of this engine fails, and the server leaves the job";
  }
  // No more completions are looked for (a broken GPU would throw every time), so the
  // engine waits for work alone again; sums still on their way are never delivered.
  engine->failed = true;
  engine->sums_in_flight = 0;
  for (auto& [key, state] : engine->keys) {
    if (state.failure.empty()) {
      DropKey(engine, key, state, ErrorCode::kInternal, StrCat(KeyName(key), ": ", why));
    }
  }
  cluster_.Fail(why);
}

void Server::Acknowledge(const std::string& identity, uint64_t request_id, uint64_t key) {
  Message m = MakeMessage(proto::PUSH_ACK, cluster_.my_id());
  m.envelope.set_request_id(request_id);
  m.envelope.set_key(key);
  van_.Reply(identity, std::move(m));
}

void Server::ReplyError(const std::string& identity, uint64_t request_id, uint64_t key,
                        ErrorCode code, const std::string& reason) {
  LOG_EVERY_N(WARNING, 100) << "refused request " << request_id << ": " << reason;
  Message m = MakeMessage(proto::ERROR, cluster_.my_id());
  m.envelope.set_request_id(request_id);
  m.envelope.set_key(key);
  m.envelope.mutable_error()->set_code(static_cast<int>(code));
  m.envelope.mutable_error()->set_reason(reason);
  van_.Reply(identity, std::move(m));
}

void Server::HandleRowsPush(Engine* engine, Work& work) {
  const proto::Envelope& e = work.message.envelope;
  const uint64_t key = e.key();
  const int rank = cluster_.table().node(e.sender()).rank();
  rows_pushes_++;
  if (config_.enable_async || engine->joined[rank]) {
    rejected_++;
    ReplyError(work.identity, e.request_id(), key, ErrorCode::kInvalidArgument,
               StrCat("worker ", rank, " pushed ", RowsKeyName(key),
                      config_.enable_async
                          ? " but sparse rows need synchronous training (FERRY_ENABLE_ASYNC=0)"
                          : " after joining; a worker may push again only once every worker "
                            "has joined"));
    return;
  }
  RowKeyState& state = engine->row_keys[key];
  const proto::RowsHeader& h = e.rows();
  PushVerdict verdict = state.Classify(rank, e.round(), h.total_rows(), h.row_elements(),
                                       static_cast<DataType>(e.dtype()), e.tensor_hash(),
                                       num_workers_);
  if (verdict != PushVerdict::kAccumulate) {
    RefuseRowsPush(work, state, rank, verdict);
    return;
  }
  AlignRowsPayload(work.message);
  std::string bad = state.CheckRowIds(RowIdsOf(work.message), h.num_rows());
  if (!bad.empty()) {
    // The round can never complete without this worker's push: fail the key, so the
    // other workers waiting on it get the reason instead of a timeout.
    rejected_++;
    std::string reason = StrCat("worker ", rank, " pushed ", RowsKeyName(key), " round ",
                                e.round(), ": ", bad);
    ReplyError(work.identity, e.request_id(), key, ErrorCode::kInvalidArgument, reason);
    FailRowKey(key, state, reason);
    return;
  }
  rows_summed_ += h.num_rows();
  RowsPush push{std::move(work.message.payload), h.num_rows(),
                PendingReply{e.sender(), work.identity, e.request_id()}};
  if (state.Record(rank, std::move(push), engine->joined)) {
    SendRowsRound(key, state);  // the rows' sums double as this push's acknowledgement
  } else {
    Acknowledge(work.identity, e.request_id(), key);
  }
}

void Server::RefuseRowsPush(Work& work, RowKeyState& state, int rank, PushVerdict verdict) {
  const proto::Envelope& e = work.message.envelope;
  const uint64_t key = e.key();
  switch (verdict) {
    case PushVerdict::kFailed:
      rejected_++;
      ReplyError(work.identity, e.request_id(), key, ErrorCode::kMismatch, state.failure);
      return;
    case PushVerdict::kMismatch: {
      rejected_++;
      const proto::RowsHeader& h = e.rows();
      std::string reason = StrCat(
          "workers disagree on ", RowsKeyName(key), ": worker ", rank, " pushed rows of ",
          h.row_elements(), " ", DataTypeName(static_cast<DataType>(e.dtype())),
          " elements of a tensor of ", h.total_rows(), " rows (tensor hash ", std::hex,
          e.tensor_hash(), std::dec, ") but worker ", state.defined_by_rank, " pushed rows of ",
          state.row_elements, " ", DataTypeName(state.dtype), " elements of a tensor of ",
          state.total_rows, " rows (tensor hash ", std::hex, state.tensor_hash, std::dec,
          "); declare the same tensors (name, dtype, shape) in the same order on every worker");
      ReplyError(work.identity, e.request_id(), key, ErrorCode::kMismatch, reason);
      FailRowKey(key, state, reason);
      return;
    }
    case PushVerdict::kDuplicate:
      duplicates_++;
      Acknowledge(work.identity, e.request_id(), key);
      return;
    case PushVerdict::kPrevious:
      duplicates_++;
      results_resent_++;
      SendRowsResult(work.identity, e.request_id(), key, state, state.round - 1,
                     state.last_results[rank], state.last_contributors);
      return;
    default:  // kStale, kAhead
      rejected_++;
      ReplyError(work.identity, e.request_id(), key, ErrorCode::kBadMessage,
                 StrCat("push of ", RowsKeyName(key), " for round ", e.round(),
                        " but the key is at round ", state.round,
                        " (a worker may push a round only after receiving the previous one)"));
      return;
  }
}

void Server::SendRowsRound(uint64_t key, RowKeyState& state) {
  std::vector<Buffer> results = state.SumRound();
  const uint32_t contributors = static_cast<uint32_t>(state.Contributors());
  for (size_t r = 0; r < state.pushed.size(); ++r) {
    if (!state.pushed[r]) continue;
    const PendingReply& p = state.pushes[r].reply;
    SendRowsResult(p.identity, p.request_id, key, state, state.round, results[r], contributors);
  }
  state.NextRound(std::move(results), num_workers_);
  rounds_++;
}

void Server::SendRowsResult(const std::string& identity, uint64_t request_id, uint64_t key,
                            const RowKeyState& state, uint32_t round, const Buffer& values,
                            uint32_t contributors) {
  Message reply = MakeMessage(proto::ROWS_RESULT, cluster_.my_id());
  reply.envelope.set_request_id(request_id);
  reply.envelope.set_key(key);
  reply.envelope.set_round(round);
  reply.envelope.set_dtype(static_cast<proto::DataTypeProto>(state.dtype));
  reply.envelope.set_length(values.size());
  reply.envelope.set_tensor_hash(state.tensor_hash);
  reply.envelope.set_contributors(contributors);
  proto::RowsHeader* h = reply.envelope.mutable_rows();
  const uint64_t row_bytes = state.row_elements * DataTypeSize(state.dtype);
  h->set_num_rows(values.size() / row_bytes);
  h->set_row_elements(state.row_elements);
  reply.payload = values;  // shared with last_results, kept for resends
  van_.Reply(identity, std::move(reply));
}

void Server::HandleRowsPull(Engine* engine, Work& work, int rank) {
  const proto::Envelope& e = work.message.envelope;
  const uint64_t key = e.key();
  auto it = engine->row_keys.find(key);
  if (it != engine->row_keys.end() && it->second.defined) {
    RowKeyState& state = it->second;
    if (!state.failure.empty()) {
      ReplyError(work.identity, e.request_id(), key, ErrorCode::kMismatch, state.failure);
      return;
    }
    if (e.round() == state.round && state.pushed[rank]) {  // still waiting for others
      Acknowledge(work.identity, e.request_id(), key);
      return;
    }
    if (e.round() + 1 == state.round && state.has_last && state.answered_last[rank]) {
      results_resent_++;
      SendRowsResult(work.identity, e.request_id(), key, state, e.round(),
                     state.last_results[rank], state.last_contributors);
      return;
    }
  }
  rejected_++;
  ReplyError(work.identity, e.request_id(), key, ErrorCode::kBadMessage,
             StrCat("worker ", rank, " asked for the sums of ", RowsKeyName(key), " round ",
                    e.round(), " but this server has no record of its push"));
}

void Server::FailRowKey(uint64_t key, RowKeyState& state, const std::string& reason) {
  LOG(ERROR) << reason;
  state.failure = reason;
  for (size_t r = 0; r < state.pushed.size(); ++r) {
    if (!state.pushed[r]) continue;
    const PendingReply& p = state.pushes[r].reply;
    ReplyError(p.identity, p.request_id, key, ErrorCode::kMismatch, reason);
  }
  state.DropPushes();
}

}  // namespace ferry
