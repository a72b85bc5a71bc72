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
#include "server/sum_pool.h"

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
};

class Server {
 public:
  explicit Server(const Config& config);
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
  struct Engine {
    std::mutex mu;                // guards queue and stop
    std::condition_variable cv;   // signalled on a new item or stop
    EngineQueue<Work> queue;      // most urgent first; JOINs are fences
    bool stop = false;
    std::unordered_map<uint64_t, KeyState> keys;  // owned by this engine's thread only
    std::vector<bool> joined;  // by worker rank; this engine's thread only
    std::thread thread;
  };

  void OnMessage(Message&& m, const Origin& origin);  // IO thread
  // IO thread: splits a PUSH_FUSED into its pushes (zero-copy slices of its frame) and
  // dispatches each as if it had arrived alone.
  void DispatchFusedPush(Message&& fused, const Origin& origin);
  void EngineLoop(Engine* engine);
  void HandlePush(Engine* engine, Work& work);
  // Adds an accepted push of the current round (in rank order when deterministic) and
  // answers it: the sum if it completed the round, an acknowledgement otherwise.
  void Accumulate(Engine* engine, Work& work, KeyState& state, int rank);
  // dst += src over the key's elements (split across threads when large).
  void AddPush(const KeyState& state, Buffer& dst, const Buffer& src);
  // Async mode: classifies the push, applies its delta (or initial parameters) once,
  // and answers with the parameters.
  void HandleAsyncPush(Work& work, KeyState& state, int rank);
  // Replies to a push refused by Classify/ClassifyAsync (every verdict but kAccumulate).
  void RefusePush(Work& work, KeyState& state, int rank, PushVerdict verdict);
  // A worker joined: rounds that waited only for it complete without it. Once every
  // worker joined, the join is over: every key restarts at round 0.
  void HandleJoin(Engine* engine, int rank);
  void OnJoin(const Message& m, const std::string& identity);  // IO thread
  // A PULL: a worker whose push was acknowledged asks for the round's sum again.
  void HandlePull(Engine* engine, Work& work);
  void HandleAsyncPull(Engine* engine, Work& work, int rank);
  void ResendResult(const std::string& identity, uint64_t request_id, uint64_t key,
                    const KeyState& state);
  void SendResult(const std::string& identity, uint64_t request_id, uint64_t key,
                  const KeyState& state, uint32_t round, const Buffer& sum,
                  uint32_t contributors);
  void CompleteRound(uint64_t key, KeyState& state);
  void FailKey(uint64_t key, KeyState& state, const std::string& reason);
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
      results_resent_{0}, pushes_held_{0}, async_updates_{0};
};

}  // namespace ferry
