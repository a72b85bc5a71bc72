#pragma once

// KeyProtocol: what a server does with the pushes and pulls of one kind of key. One
// implementation per mode, chosen once when the server starts (Server's constructor):
//   - RoundProtocol (round_protocol.h): dense keys, synchronous rounds, summed in arrival
//     order or, with FERRY_DETERMINISTIC=1, in worker-rank order;
//   - ParamProtocol (param_protocol.h): dense keys, FERRY_ENABLE_ASYNC=1: the server keeps
//     parameters and every push updates them at once;
//   - RowsProtocol (rows_protocol.h): sparse rows (ROWS_PUSH), synchronous rounds.
// Each engine thread owns one dense protocol (RoundProtocol or ParamProtocol) and one
// RowsProtocol, each with the state of the keys that hash to that engine.
//
// The protocol decides; it never touches the network. Its verdicts go out as Replies
// through ProtocolContext::reply, and the server turns each into a message with one
// builder (ToMessage), so tests drive a protocol with messages and read its replies.
//
// Threads: one engine thread calls everything of a protocol (and the Summation's
// SumReady, which it forwards to OnSumReady); no method takes a lock. The Request's
// sender was validated by the server (a worker of this job, and its rank) before.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/reduce/reduce.h"
#include "common/transport/buffer.h"
#include "common/transport/message.h"
#include "common/util/counters.h"
#include "common/util/status.h"
#include "server/key_state.h"
#include "server/requests.h"
#include "server/server_counters.h"

namespace ferry {

class Stragglers;
class Summation;

// What a protocol works with; everything outlives the protocol.
struct ProtocolContext {
  // The engine's live workers (it changes at a membership epoch, before Restart).
  const int* num_workers = nullptr;
  // The engine's: by rank, the workers that joined in the current join (Server::HandleJoin
  // updates it before it calls Join or Restart).
  const std::vector<bool>* joined = nullptr;
  Summation* summation = nullptr;  // the engine's (dense protocols add through it)
  ServerCounters* counters = nullptr;
  std::function<void(const Reply&)> reply;  // sends one reply (the server: through the Van)
  // The largest message (FERRY_MAX_MESSAGE_BYTES): what a compressed push may stand for.
  uint64_t max_message_bytes = 1ull << 32;
  // FERRY_BACKUP_WORKERS (server/stragglers.h), and the server's record of late pushes
  // (set when backup_workers > 0).
  int backup_workers = 0;
  Stragglers* stragglers = nullptr;
};

class KeyProtocol {
 public:
  explicit KeyProtocol(ProtocolContext context) : context_(std::move(context)) {}
  virtual ~KeyProtocol() = default;

  // A PUSH (dense protocols) or ROWS_PUSH (RowsProtocol); its payload may be taken.
  // Every push gets at least one reply, now or later. GPU: may throw FerryError (the
  // summation failed; the server then calls FailAll).
  virtual void Push(Request& request) = 0;
  // A RESEND_SUM: a worker whose push was acknowledged asks for its result again.
  virtual void Pull(const Request& request) = 0;
  // A worker joined (*joined changed), not yet every worker: rounds that waited only
  // for it complete without it.
  virtual void Join() = 0;
  // Every key restarts at round 0 (*num_workers workers), for `cause`: kAllJoined (every
  // worker joined): a key with pushes waiting fails (someone pushed after its own JOIN);
  // kNewEpoch (a membership epoch): pushes waiting, open sums and the last sums are dropped
  // unanswered (their workers abandoned those operations); no key fails.
  enum class RestartCause { kAllJoined, kNewEpoch };
  virtual void Restart(RestartCause cause) = 0;
  // The engine's summation failed for good: every key fails with "KEY: why", and the
  // pushers waiting are told (kInternal).
  virtual void FailAll(const std::string& why) = 0;
  // Some worker retired `tensor` (RETIRE, tensor_retirements.h) while others still push
  // it: a round of its keys waiting for pushes can never complete; the key fails and its
  // pushers are told "KEY: reason" (kMismatch). Keys with no round open are left alone.
  virtual void RefuseOpenRounds(uint32_t tensor, const std::string& reason) = 0;
  // Every worker retired `tensor` (or joined): its keys are dropped, after refusing any
  // round still open as RefuseOpenRounds does.
  virtual void Retire(uint32_t tensor, const std::string& reason) = 0;
  // A sum this protocol ended with Summation::Finish arrived (GPU, from RunCompletions).
  virtual void OnSumReady(uint64_t key, uint64_t generation, Buffer sum) = 0;
  // Sums ended with Finish that have not arrived yet (0 on the CPU).
  virtual int sums_in_flight() const = 0;
  // Whether a PUSH is for a round already closed, so that it is answered at once from its
  // sum whatever happened to the tensor since (another worker retired it: a late worker's
  // last push, backup workers). False by default.
  virtual bool ForClosedRound(const Request& request) const {
    (void)request;
    return false;
  }

 protected:
  // Counts `request` rejected and answers it with ERROR `code` and `reason`.
  void Reject(const Request& request, ErrorCode code, std::string reason) const;
  // The refusals every protocol shares for a push Classify did not accept, each counted
  // rejected and answered with ERROR kMismatch. kFailed: the key's `failure`. kMismatch:
  // the reason `mismatch()` returns, then `fail_key(reason)` fails the key for good.
  // Returns false (and does nothing) for every other verdict.
  template <typename Mismatch, typename FailKey>
  bool RefuseBrokenKey(const Request& request, PushVerdict verdict, const std::string& failure,
                       Mismatch&& mismatch, FailKey&& fail_key) const {
    if (verdict == PushVerdict::kFailed) {
      Reject(request, ErrorCode::kMismatch, failure);
      return true;
    }
    if (verdict != PushVerdict::kMismatch) return false;
    const std::string reason = mismatch();
    Reject(request, ErrorCode::kMismatch, reason);
    fail_key(reason);
    return true;
  }

  const ProtocolContext context_;
};

// A protocol that keeps one `State` for each key it has seen.
template <typename State>
class KeyProtocolOf : public KeyProtocol {
 public:
  using KeyProtocol::KeyProtocol;

  // The key's state, or null before its first push (tests).
  const State* Find(uint64_t key) const {
    auto it = keys_.find(key);
    return it == keys_.end() ? nullptr : &it->second;
  }
  size_t key_count() const { return keys_.size(); }

 protected:
  // Calls `fn(key, state)` for every key of `tensor` (a scan: retirements are rare).
  template <typename Fn>
  void ForEachKeyOf(uint32_t tensor, Fn&& fn) {
    for (auto& [key, state] : keys_) {
      if (KeyTensor(key) == tensor) fn(key, state);
    }
  }
  // Erases every key of `tensor` (a scan: retirements are rare), after `drop(key, state)`.
  template <typename Drop>
  void EraseTensor(uint32_t tensor, Drop&& drop) {
    for (auto it = keys_.begin(); it != keys_.end();) {
      if (KeyTensor(it->first) != tensor) {
        ++it;
        continue;
      }
      drop(it->first, it->second);
      it = keys_.erase(it);
      context_.counters->keys_retired++;
    }
  }

  std::unordered_map<uint64_t, State> keys_;  // erased only when their tensor is retired
};

}  // namespace ferry
