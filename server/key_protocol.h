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

namespace ferry {

class Summation;

// Why a server refused a message (ferry_refused_messages_total's label reason; the stats
// file's refused.<reason>). Every refusal also counts in rejected_pushes, as do the pushes
// the Van found malformed (their reason is the Van's, "malformed"); stale_epoch_messages
// are exported with reason "stale_epoch" and are not in rejected_pushes.
enum class Refusal {
  kMismatch,         // workers disagree on a key (size, dtype, tensor hash), or a bad round
  kBadMessage,       // malformed: a frame cut wrong, a fused push that does not split
  kNotAWorker,       // the sender is not a worker of this job
  kWrongConnection,  // tensor bytes on the control connection
  kNotYetInCluster,  // before this server's table, and its waiting room is full
  kRetired,          // a key whose tensor every worker retired
  kModeMismatch,     // synchronous vs. asynchronous training (FERRY_ENABLE_ASYNC)
  kCount,
};
const char* RefusalName(Refusal r);  // "mismatch", "bad_message", ...

// The server's counters, bumped by every engine thread and the IO thread. The registry is
// the one record: Server::stats() is its snapshot and FERRY_STATS_FILE writes it, by the
// names registered here.
struct ServerCounters {
  ServerCounters();
  CounterRegistry registry;
  Counter& pushes = registry.Register("pushes");
  Counter& bytes_summed = registry.Register("bytes_summed");
  Counter& rounds = registry.Register("rounds_completed");
  // Sums sent: one per round of a whole key, one per frame of a key pushed in frames.
  Counter& frames_completed = registry.Register("frames_completed");
  // Failed validation (mismatch, stranger, bad round).
  Counter& rejected = registry.Register("rejected_pushes");
  // Resent pushes not added again.
  Counter& duplicates = registry.Register("duplicate_pushes");
  // Sums sent again (a resent push or RESEND_SUM after a lost reply).
  Counter& results_resent = registry.Register("results_resent");
  // Deterministic mode: pushes that waited for a lower rank.
  Counter& pushes_held = registry.Register("pushes_held");
  // Async mode: deltas added to parameters.
  Counter& async_updates = registry.Register("async_updates");
  // GPU: sums that came back from the device, and of those, sums of rounds abandoned
  // meanwhile.
  Counter& device_sums = registry.Register("device_sums");
  Counter& device_sums_dropped = registry.Register("device_sums_dropped");
  // ROWS_PUSH messages handled (PushPullRows), and the rows they carried that were added
  // into a round.
  Counter& rows_pushes = registry.Register("rows_pushes");
  Counter& rows_summed = registry.Register("rows_summed");
  // Pushes summed and answered on the IO thread (FERRY_SERVER_INLINE_BYTES).
  Counter& pushes_inline = registry.Register("pushes_inline");
  // Keys dropped because every worker retired their tensor (a name declared anew).
  Counter& keys_retired = registry.Register("keys_retired");
  // Elastic: messages of an older membership epoch, dropped unanswered (their workers
  // abandoned those operations at the new epoch).
  Counter& stale_epoch = registry.Register("stale_epoch_messages");
  Counter* refused[static_cast<int>(Refusal::kCount)];  // refused.<reason>, in the registry
  PeerBytes workers;  // by rank: pushes received, sums sent (Server sizes it)

  // Counts a refusal: rejected and refused.<reason>.
  void Refuse(Refusal r) {
    rejected++;
    *refused[static_cast<int>(r)] += 1;
  }
};

// A PUSH, ROWS_PUSH or RESEND_SUM of a worker, as the engine thread hands it to a protocol.
struct Request {
  Message message;
  std::string identity;  // the worker's connection on the server's ROUTER
  int rank = -1;         // the sender's worker rank (the server checked it is a worker)

  const proto::Envelope& envelope() const { return message.envelope; }
  PendingReply reply_to() const {
    return PendingReply{message.envelope.sender(), identity, message.envelope.request_id(),
                        message.envelope.priority()};
  }
};

// One answer to one request. kAck: PUSH_ACK (the push arrived; its sum comes later).
// kSum: PUSH_RESULT (a dense key's sum, or its parameters in async mode). kRowsSum:
// ROWS_RESULT (the rows the pusher listed). kError: ERROR with `code` and `reason`.
// kJoinAck: JOIN_ACK (the server's answer to a JOIN, not a protocol's; sum.round: the
// JOIN's position among those the server received).
struct Reply {
  enum class Kind { kAck, kSum, kRowsSum, kError, kJoinAck };
  Kind kind = Kind::kAck;
  std::string identity;
  int worker_id = -1;    // the requester's node id (-1: unknown), for per-peer metrics
  uint64_t request_id = 0;
  uint64_t key = 0;
  int32_t priority = 0;  // the request's; sums are sent most urgent first (van.h, "Order")
  uint64_t offset = 0;   // kAck, kSum: the frame's place in its key (message.h, frames)
  // kSum and kRowsSum: the envelope's fields of a sum.
  struct Sum {
    uint32_t round = 0;
    DataType dtype = DataType::kFloat32;
    uint64_t length = 0;  // a dense key's (or frame's) bytes, the rows' bytes
    uint64_t tensor_hash = 0;
    uint32_t contributors = 0;
    // A frame of a key cut in frames (kSum): the key's bytes and the cut; 0 for whole keys.
    uint64_t key_length = 0;
    uint64_t frame_bytes = 0;
  };
  Sum sum;
  uint64_t row_elements = 0;  // kRowsSum: elements per row
  Buffer payload;             // shared with the key's state (and other replies), no copy
  // kError:
  ErrorCode code = ErrorCode::kInternal;
  std::string reason;
};

// A PUSH_ACK of the frame at `offset` (0 for whole keys).
Reply AckReply(const PendingReply& to, uint64_t key, uint64_t offset = 0);
Reply ErrorReply(const PendingReply& to, uint64_t key, ErrorCode code, std::string reason);
// A kSum (or, with row_elements set after, kRowsSum) reply: `payload` is shared, not
// copied (every reply of a round sends the same bytes).
Reply SumReply(Reply::Kind kind, const PendingReply& to, uint64_t key, const Reply::Sum& sum,
               const Buffer& payload);

// Why a dense push disagrees with the key's definition (verdict kMismatch): the text
// every worker of the key is told.
std::string MismatchReason(const Request& request, const KeyDefinition& definition);

// The one reply builder: the message `reply` stands for, from node `sender`.
Message ToMessage(const Reply& reply, int sender);

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
