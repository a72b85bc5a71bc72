#pragma once

// Server: the summation service. Sums what every worker pushes for a key's round and
// answers each pusher with the sum (no pull request: the sum is the push's reply).
// A push that does not complete its round is acknowledged at once (PUSH_ACK), so the
// worker's scheduling credit covers only its own bytes in flight and never waits on
// another worker (see worker/scheduling/scheduled_queue.h for why that matters).
//
// Threads: the Van's IO thread validates each PUSH and hands it to the engine thread
// that owns the key (EngineForKey: a mixed hash of the key modulo
// FERRY_SERVER_ENGINE_THREADS), so a key's state is touched by one thread only and the
// hot path takes no lock on it. Each engine takes its most urgent work first
// (engine_queue.h). Sums of large partitions are cut into slices that the engine and
// FERRY_SERVER_ENGINE_THREADS - 1 helper threads add at once (sum_pool.h). Engine
// threads reply through the Van. Run()'s thread waits for the end of the job.
//
// Modes: FERRY_DETERMINISTIC=1 sums each round in worker-rank order (key_state.h);
// FERRY_ENABLE_ASYNC=1 keeps parameters instead of sums: a push adds its delta and is
// answered at once with the parameters (key_state.h, docs/servers.md).
//
// Devices: each engine adds through its Summation (summation.h): on the CPU, or with
// FERRY_SERVER_DEVICE=gpu on a GPU, one GpuSummer per engine thread. On a GPU a round's
// sum arrives after the round completed: the summer's on_ready wakes the engine, which
// runs RunCompletions between work items, and the sum goes out from OnSumReady (the key
// is `summing` meanwhile: key_state.h). Deterministic mode works on both devices (pushes
// go to the device in rank order); asynchronous mode is CPU only (CheckServerSettings).
// GPU servers start no SumPool helper threads.
//
// Sparse rows (ROWS_PUSH, Worker::PushPullRows): each engine also owns rows keys (one per
// tensor), apart from the dense keys; a round's row pushes are held and summed in rank
// order on the CPU when the round completes (row_key_state.h, docs/servers.md).

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/cluster/cluster_client.h"
#include "common/config/config.h"
#include "common/transport/van.h"
#include "common/util/status.h"
#include "server/engine_queue.h"
#include "server/key_state.h"
#include "server/row_key_state.h"
#include "server/sum_pool.h"
#include "server/summation.h"

namespace ferry {

struct ServerStats {
  uint64_t pushes = 0;
  uint64_t bytes_summed = 0;
  uint64_t rounds_completed = 0;
  uint64_t rejected_pushes = 0;   // failed validation (mismatch, stranger, bad round)
  uint64_t duplicate_pushes = 0;  // resent pushes not added again
  uint64_t results_resent = 0;    // sums sent again (a resent push or PULL after a lost reply)
  uint64_t pushes_held = 0;       // deterministic mode: pushes that waited for a lower rank
  uint64_t split_sums = 0;        // sums cut into slices for several threads
  uint64_t async_updates = 0;     // async mode: deltas added to parameters
  uint64_t device_sums = 0;       // GPU: sums that came back from the device
  uint64_t device_sums_dropped = 0;  // GPU: of those, sums of rounds abandoned meanwhile
  uint64_t rows_pushes = 0;       // ROWS_PUSH messages handled (PushPullRows)
  uint64_t rows_summed = 0;       // rows they carried that were added into a round
};

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
  ServerStats stats() const;

 private:
  struct Work {
    Message message;           // a PUSH, or a JOIN (then only the sender matters)
    std::string identity;
  };
  // Member order matters: `summation` is declared after everything its GPU callbacks
  // touch (on_ready locks `mu` and signals `cv` from a CUDA thread until the summer's
  // destructor has waited for its streams), so it is destroyed first.
  struct Engine {
    std::mutex mu;                // guards queue, stop and sums_ready
    std::condition_variable cv;   // signalled on a new item, stop, or sums_ready
    EngineQueue<Work> queue;      // most urgent first; JOINs are fences
    bool stop = false;
    bool sums_ready = false;      // GPU: a sum reached host memory since the last look
    std::unordered_map<uint64_t, KeyState> keys;  // owned by this engine's thread only
    std::unordered_map<uint64_t, RowKeyState> row_keys;  // sparse rows; this thread only
    std::vector<bool> joined;  // by worker rank; this engine's thread only
    int sums_in_flight = 0;    // GPU: Finishes whose sum has not arrived; engine thread only
    bool failed = false;       // the summation threw (FailEngine); engine thread only
    std::unique_ptr<Summation> summation;  // used by this engine's thread only
    std::thread thread;
  };

  void OnMessage(Message&& m, const Origin& origin);  // IO thread
  // IO thread: splits a PUSH_FUSED into its pushes (zero-copy slices of its frame) and
  // dispatches each as if it had arrived alone.
  void DispatchFusedPush(Message&& fused, const Origin& origin);
  // The engine's Summation: CPU, or a GpuSummer whose on_ready wakes `engine`.
  std::unique_ptr<Summation> MakeSummation(Engine* engine, const GpuSummerFactory& gpu_summers);
  void EngineLoop(Engine* engine);
  void HandlePush(Engine* engine, Work& work);
  // Adds an accepted push of the current round (in rank order when deterministic) and
  // answers it: the sum if it completed the round, an acknowledgement otherwise.
  void Accumulate(Engine* engine, Work& work, KeyState& state, int rank);
  // Async mode: dst += src over the key's elements (split across threads when large).
  void AddPush(const KeyState& state, Buffer& dst, const Buffer& src);
  // Async mode: classifies the push, applies its delta (or initial parameters) once,
  // and answers with the parameters.
  void HandleAsyncPush(Engine* engine, Work& work, KeyState& state, int rank);
  // Replies to a push refused by Classify/ClassifyAsync (every verdict but kAccumulate).
  void RefusePush(Engine* engine, Work& work, KeyState& state, int rank, PushVerdict verdict);
  // A worker joined: rounds that waited only for it complete without it. Once every
  // worker joined, the join is over: every key restarts at round 0.
  void HandleJoin(Engine* engine, int rank);
  void OnJoin(const Message& m, const std::string& identity);  // IO thread
  // Sparse rows (ROWS_PUSH, row_key_state.h): classifies, checks the row ids, holds the
  // push, and answers: the rows' sums if it completed the round, an acknowledgement
  // otherwise. Sums are always on the CPU, in rank order.
  void HandleRowsPush(Engine* engine, Work& work);
  void RefuseRowsPush(Work& work, RowKeyState& state, int rank, PushVerdict verdict);
  // A PULL with a rows body: resends the sums of a rows push that was acknowledged.
  void HandleRowsPull(Engine* engine, Work& work, int rank);
  // Sums the round and answers every pusher with exactly the rows it listed.
  void SendRowsRound(uint64_t key, RowKeyState& state);
  void SendRowsResult(const std::string& identity, uint64_t request_id, uint64_t key,
                      const RowKeyState& state, uint32_t round, const Buffer& values,
                      uint32_t contributors);
  // The key fails for good: every pusher waiting is told `reason`.
  void FailRowKey(uint64_t key, RowKeyState& state, const std::string& reason);
  // A PULL: a worker whose push was acknowledged asks for the round's sum again.
  void HandlePull(Engine* engine, Work& work);
  void HandleAsyncPull(Engine* engine, Work& work, int rank);
  void ResendResult(const std::string& identity, uint64_t request_id, uint64_t key,
                    const KeyState& state);
  void SendResult(const std::string& identity, uint64_t request_id, uint64_t key,
                  const KeyState& state, uint32_t round, const Buffer& sum,
                  uint32_t contributors);
  // The round is complete: ends it on the device; sends the sum now (CPU) or once it
  // arrives (GPU: the key is `summing` until OnSumReady).
  void CompleteRound(Engine* engine, uint64_t key, KeyState& state);
  // GPU: a Finish's sum arrived (engine thread, from RunCompletions). Sends it unless
  // the round was abandoned meanwhile (generation changed).
  void OnSumReady(Engine* engine, uint64_t key, uint64_t generation, Buffer sum);
  // Answers every pusher of the round with `state.sum` and moves the key to the next round.
  void SendRound(uint64_t key, KeyState& state);
  void FailKey(Engine* engine, uint64_t key, KeyState& state, const std::string& reason);
  // FailKey without the log line (for many keys at once); the pushers waiting get `code`.
  void DropKey(Engine* engine, uint64_t key, KeyState& state, ErrorCode code,
               const std::string& reason);
  // The engine's summation threw (GPU: a failed CUDA call, a GPU past its deadline):
  // every key of the engine fails with the reason (the pushers waiting are told), and
  // the server leaves the job (there is no CPU fallback).
  void FailEngine(Engine* engine, const std::string& reason);
  // Tells a worker its push arrived, so it can return the push's credit (the sum
  // comes later, once every worker pushed).
  void Acknowledge(const std::string& identity, uint64_t request_id, uint64_t key);
  void ReplyError(const std::string& identity, uint64_t request_id, uint64_t key,
                  ErrorCode code, const std::string& reason);
  void StopEngines();

  const Config& config_;
  Van van_;
  int port_ = 0;
  ClusterClient cluster_;
  std::vector<std::unique_ptr<Engine>> engines_;
  SumPool sum_pool_;  // helpers for the engines' large sums
  static constexpr size_t kMaxEarlyPushes = 65536;
  std::vector<bool> joined_;  // IO thread only: who joined in the current join
  std::vector<std::pair<Message, Origin>> early_pushes_;  // IO thread only
  int num_workers_ = 0;
  int num_servers_ = 0;

  std::atomic<uint64_t> pushes_{0}, bytes_summed_{0}, rounds_{0}, rejected_{0}, duplicates_{0},
      results_resent_{0}, pushes_held_{0}, async_updates_{0}, device_sums_{0},
      device_sums_dropped_{0}, rows_pushes_{0}, rows_summed_{0};
};

}  // namespace ferry
