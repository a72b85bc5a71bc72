#pragma once

// Server: the summation service. Sums what every worker pushes for a key's round and
// answers each pusher with the sum (no pull request: the sum is the push's reply).
// A push that does not complete its round is acknowledged at once (PUSH_ACK), so the
// worker's scheduling credit covers only its own bytes in flight and never waits on
// another worker (see worker/partition_scheduling/scheduled_queue.h for why that matters).
//
// Threads: the Van's IO thread validates each PUSH and hands it to the engine thread
// that owns the key (EngineForKey: a mixed hash of the key modulo
// FERRY_SERVER_ENGINE_THREADS), so a key's state is touched by one thread only and the
// hot path takes no lock on it. Each engine takes its most urgent work first
// (engine_queue.h). Sums of large partitions are cut into slices that the engine and
// FERRY_SERVER_ENGINE_THREADS - 1 helper threads add at once (sum_pool.h). Engine
// threads reply through the Van. Run()'s thread waits for the end of the job.
//
// Server is the dispatcher: it validates each request at the boundary (a worker of this
// job, the training mode it pushes in), routes it to the protocol of its kind on the
// engine that owns the key, and sends every protocol's reply through one builder
// (ToMessage, key_protocol.h). What a push means is the protocols' business, chosen once
// at start for every engine (key_protocol.h):
//   - RoundProtocol (round_protocol.h): synchronous rounds of dense keys; with
//     FERRY_DETERMINISTIC=1 each round is summed in worker-rank order (key_state.h);
//   - ParamProtocol (param_protocol.h): FERRY_ENABLE_ASYNC=1 keeps parameters instead of
//     sums: a push adds its delta and is answered with the parameters (docs/servers.md);
//   - RowsProtocol (rows_protocol.h): sparse rows (ROWS_PUSH, Worker::PushPullRows), apart
//     from the dense keys; a round's row pushes are held and summed in rank order on the
//     CPU when the round completes (row_key_state.h).
//
// Devices: each engine's dense protocol adds through the engine's Summation
// (summation.h): on the CPU, or with FERRY_SERVER_DEVICE=gpu on a GPU, one GpuSummer per
// engine thread. On a GPU a round's sum arrives after the round completed: the summer's
// on_ready wakes the engine, which runs RunCompletions between work items, and the sum
// goes to the protocol's OnSumReady. Deterministic mode works on both devices (pushes go
// to the device in rank order); asynchronous mode is refused with a GPU
// (CheckServerSettings), although ParamProtocol goes through the same seam. GPU servers
// start no SumPool helper threads.

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/cluster/cluster_client.h"
#include "common/config/config.h"
#include "common/transport/van.h"
#include "common/util/mutex.h"
#include "common/util/status.h"
#include "server/engine_queue.h"
#include "server/stragglers.h"
#include "server/key_protocol.h"
#include "server/sum_pool.h"
#include "server/tensor_retirements.h"
#include "server/summation.h"

namespace ferry {

// Refuses settings a server cannot run with: FERRY_SERVER_DEVICE=gpu with
// FERRY_ENABLE_ASYNC=1 (the GPU engine sums rounds; asynchronous training keeps
// parameters and answers each push at once). Throws FerryError(kInvalidConfig), which
// ferry-server turns into exit code 2.
void CheckServerSettings(const Config& config);

class Server {
 public:
  // With FERRY_SERVER_DEVICE=gpu every engine gets a GpuSummer from `gpu_summers`
  // (default GpuSummer::Create; REQUIRES CheckGpuAvailable passed) before the server
  // joins the cluster. Throws FerryError (kInvalidConfig: CheckServerSettings).
  explicit Server(const Config& config, GpuSummerFactory gpu_summers = nullptr);
  ~Server();

  // Registers, serves until the scheduler ends the job. Returns 0 on an orderly end,
  // 1 when the job failed (the reason is logged).
  int Run();

  int port() const { return port_; }
  // The server's counters now, by the names FERRY_STATS_FILE writes: its registry
  // (ServerCounters, key_protocol.h) in registration order, then split_sums (sums the
  // sum pool cut into slices for several threads).
  CounterValues stats() const;

 private:
  // Member order matters: `summation` is declared after everything its GPU callbacks
  // touch (on_ready locks `mu` and signals `cv` from a CUDA thread until the summer's
  // destructor has waited for its streams; SumReady calls `dense`), so it is destroyed
  // first.
  // Who runs an engine's protocols: its thread, or (CPU engines, FERRY_SERVER_INLINE_BYTES)
  // the IO thread for a small push that arrives while the engine is idle. Either holds
  // run_mu while it does, so the protocols still see one caller at a time; the IO thread
  // only tries (TryLock) and only with the queue empty, so it never waits for an engine
  // and never overtakes a queued (more urgent, or fenced) request.
  struct Engine {
    Mutex mu;    // guards queue, stop and sums_ready
    CondVar cv;  // signalled on a new item, stop, or sums_ready
    Mutex run_mu;  // held while the protocols run (see above); taken after mu, never before
    // Most urgent first; JOINs are fences (rank set on Pop).
    EngineQueue<Request> queue GUARDED_BY(mu);
    bool stop GUARDED_BY(mu) = false;
    bool sums_ready GUARDED_BY(mu) = false;  // GPU: a sum reached host memory since the last look
    std::vector<bool> joined;                // by worker rank; this engine's thread only
    // The membership epoch the engine serves and its live workers (engine thread only;
    // changed by the epoch's fence: HandleEpoch). Requests of older epochs are dropped.
    uint32_t epoch = 0;
    int num_workers = 0;
    // Who retired which tensors (RETIRE); this engine's thread only.
    std::unique_ptr<TensorRetirements> retirements;
    bool failed = false;                     // the summation threw (FailEngine); engine thread only
    // The engine's protocols (key_protocol.h), engine thread only: the dense keys'
    // (RoundProtocol or ParamProtocol, by the training mode) and the rows keys'.
    std::unique_ptr<KeyProtocol> dense;
    std::unique_ptr<KeyProtocol> rows;
    std::unique_ptr<Summation> summation;  // used by this engine's thread only
    std::thread thread;
  };

  void OnMessage(Message&& m, const Origin& origin);  // IO thread
  // IO thread, the Van's on_invalid: a data message (PUSH, PUSH_FUSED, ROWS_PUSH,
  // RESEND_SUM) from a worker of this job that ValidateMessage refused (a frame cut wrong,
  // say) is counted rejected and answered with an ERROR (kBadMessage, `why`'s reason, which
  // names key, round and offset for a frame), so the worker fails the operation saying why
  // instead of waiting out its deadline. Anything else, and anything from a stranger, stays
  // dropped unanswered; the Van counted and logged it either way.
  void OnInvalid(const Message& m, const Status& why, const Origin& origin);
  // IO thread: whether `m` came from a worker of this job on that worker's own connection
  // (data or control lane). False before this server has its node table.
  bool FromMemberWorker(const Message& m, const Origin& origin) const;
  // Answers a refused data message with ERROR kBadMessage and `reason`, without logging:
  // each push a PUSH_FUSED lists under its own request id and key (the envelope's request
  // id when the list is empty or too long), any other message under its request id and
  // key. Requests without an id (0) get nothing.
  void ReplyRefused(const Message& m, const std::string& identity, const std::string& reason);
  // IO thread: runs a small push on its idle engine at once (see Engine); false if the
  // push must be queued instead (it is then untouched).
  bool TryDispatchInline(Engine* engine, Request& request);
  // IO thread: splits a PUSH_FUSED into its pushes (zero-copy slices of its frame) and
  // dispatches each as if it had arrived alone.
  void DispatchFusedPush(Message&& fused, const Origin& origin);
  void OnJoin(const Message& m, const std::string& identity);  // IO thread
  // IO thread: a copy of `request` into every engine's queue: as a fence (behind every
  // request queued before it: JOIN, an epoch's table), or as the least urgent work (RETIRE).
  void ToEveryEngine(const Request& request, bool fence);
  // IO thread, the membership callback (elastic): a new epoch's table. Every engine gets
  // a fence (behind every request of the old epoch already queued) that runs HandleEpoch.
  void OnMembership(const NodeTable& table);
  // Engine thread: the engine serves `table`'s epoch: every key restarts at round 0 for
  // the live workers (KeyProtocol::Restart, kNewEpoch); joins and retirements in progress
  // are forgotten (ranks were renumbered).
  void HandleEpoch(Engine* engine, const proto::NodeTable& table);
  // IO thread: a RETIRE goes to every engine (each holds some of the tensor's keys), as
  // the least urgent work: the retiring worker has nothing of the tensor in flight.
  void OnRetire(const Message& m, const std::string& identity);
  // Sets up an engine: its Summation (CPU, or a GpuSummer whose on_ready wakes it) and
  // its protocols, by the configured mode.
  void MakeEngine(Engine* engine, const GpuSummerFactory& gpu_summers);
  void EngineLoop(Engine* engine);
  // Runs what the engine loop took (ready GPU sums, then `work` if any).
  void RunEngineWork(Engine* engine, bool sums_ready, Request* work) REQUIRES(engine->run_mu);
  // Dispatch, and a summation failure handled (FailEngine; the push is answered).
  void DispatchOnEngine(Engine* engine, Request& work) REQUIRES(engine->run_mu);
  // Engine thread: routes one request to its protocol (after the boundary checks).
  void Dispatch(Engine* engine, Request& request);
  // A worker joined: rounds that waited only for it complete without it. Once every
  // worker joined, the join is over: every key restarts at round 0.
  void HandleJoin(Engine* engine, int rank);
  // `rank` retired `tensor`: open rounds of it are refused (the first retirement), and
  // the tensor's keys go once every worker retired it or joined.
  void HandleRetire(Engine* engine, int rank, uint32_t tensor);
  // Drops the keys of every tensor whose retirement is complete, given `joined`.
  void RetireComplete(Engine* engine, const std::vector<bool>& joined);
  // Empty if `request` may proceed; else why it is refused (a tensor some worker retired).
  std::string RetiredRefusal(const Engine& engine, const Request& request) const;
  // The engine's summation threw (GPU: a failed CUDA call, a GPU past its deadline):
  // every key of the engine fails with the reason (the pushers waiting are told), and
  // the server leaves the job (there is no CPU fallback).
  void FailEngine(Engine* engine, const std::string& reason);
  // Sends one reply (any thread: the Van queues it for the IO thread).
  void SendReply(const Reply& reply);
  void ReplyError(const std::string& identity, uint64_t request_id, uint64_t key, ErrorCode code,
                  const std::string& reason);
  void StopEngines();
  // The heartbeat's metrics (ClusterClient::SetMetricsReporter): counters_ only.
  void ReportMetrics(proto::MetricsSnapshot* out) const;

  const Config& config_;
  Van van_;
  int port_ = 0;
  ClusterClient cluster_;
  std::vector<std::unique_ptr<Engine>> engines_;
  SumPool sum_pool_;  // helpers for the engines' large sums
  static constexpr size_t kMaxEarlyPushes = 65536;
  std::vector<bool> joined_;  // IO thread only: who joined in the current join
  // IO thread only: requests ahead of this server's node table (none yet, or an older
  // epoch than the sender's), served once the table is here.
  std::vector<std::pair<Message, Origin>> early_pushes_;
  int num_workers_ = 0;
  int num_servers_ = 0;
  ServerCounters counters_;  // atomics: every thread
  // Late pushes by rank (FERRY_BACKUP_WORKERS; atomics: every engine thread).
  Stragglers stragglers_{std::max(config_.cluster.num_workers, config_.cluster.max_workers),
                         &counters_};
};

}  // namespace ferry
