#pragma once

// ParamProtocol: asynchronous training's dense keys (FERRY_ENABLE_ASYNC=1; KeyProtocol,
// key_protocol.h). The server keeps each key's parameters, not a round's sum: there are
// no rounds to complete, and every push is answered with the parameters (PUSH_RESULT,
// contributors 1) as soon as its delta is applied. No PUSH_ACK, no JOIN (the server
// refuses JOINs in asynchronous training).
//
// Updates go through the engine's Summation (summation.h) like a round of two pushes:
// the delta's received frame opens the sum and the old parameters are added into it
// (new = delta + old), so the old buffer, possibly still on the wire in replies, is never
// written again. When the sum comes later (a Summation whose Finish returns false, as on a
// GPU) the key is `updating`: the pusher is answered from OnSumReady, and requests that
// arrive meanwhile wait in order in ParamState::queued.
//
// Owns the ParamState of every dense key of its engine. Threads: the engine thread only;
// no lock.

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "server/key_protocol.h"
#include "server/key_state.h"

namespace ferry {

// One key's parameters in asynchronous training. Each worker numbers its pushes of a key
// (0, 1, 2, ... in order, one at a time) and `next_round[rank]` is the round of its next
// push, so a resent push (round below next_round) is answered without being applied
// again. Round 0 carries the worker's initial parameters: the first to arrive sets them,
// later ones are not added; each later push is a delta.
struct ParamState : KeyDefinition {
  Buffer params;  // the key's parameters (set by the first push)
  bool has_params = false;
  std::vector<uint32_t> next_round;  // by rank: the round of its next push
  std::string failure;               // non-empty: the key is failed for good
  uint64_t generation = 0;           // bumped when an update is abandoned (a failed key)
  bool updating = false;             // an update's sum is on its way (see above)
  PendingReply updater;              // updating: the pusher answered when it arrives
  uint32_t update_round = 0;         // updating: that push's round
  std::deque<Request> queued;        // updating: requests that came meanwhile, in order

  // Defines the key on its first push (num_workers sizes next_round), then: kAccumulate
  // (the worker's next round), kDuplicate (a round already applied: a resend), kAhead (a
  // round after the next: protocol error), kMismatch or kFailed.
  PushVerdict Classify(int rank, uint32_t push_round, uint64_t push_length, DataType push_dtype,
                       uint64_t push_hash, int num_workers);
  // `rank`'s push of its next round was applied.
  void Record(int rank) { next_round[rank]++; }
};

class ParamProtocol : public KeyProtocolOf<ParamState> {
 public:
  explicit ParamProtocol(ProtocolContext context);

  void Push(Request& request) override;
  void Pull(const Request& request) override;
  // Never called: the server refuses JOINs in asynchronous training (Server::OnJoin).
  void Join() override {}
  void Restart(RestartCause) override {}
  void FailAll(const std::string& why) override;
  // Parameters have no rounds; workers never re-declare in asynchronous training
  // (TensorCatalog's fixed layouts), so a retirement only drops the keys.
  void RefuseOpenRounds(uint32_t, const std::string&) override {}
  void Retire(uint32_t tensor, const std::string&) override {
    EraseTensor(tensor, [](uint64_t, ParamState&) {});
  }
  void OnSumReady(uint64_t key, uint64_t generation, Buffer sum) override;
  int sums_in_flight() const override { return sums_in_flight_; }

 private:
  // Replies to a push Classify did not accept (every verdict but kAccumulate).
  void Refuse(const Request& request, ParamState& state, PushVerdict verdict);
  // A PUSH_RESULT of the key's parameters for `round`.
  Reply Result(const PendingReply& to, uint64_t key, const ParamState& state, uint32_t round) const;
  // Serves the requests queued during an update until none is left or another update
  // is on its way.
  void Drain(ParamState& state);
  // The key fails for good: its parameters are dropped and every request waiting on it
  // (an update's pusher, queued requests) is told `reason` with `code`.
  void DropKey(uint64_t key, ParamState& state, ErrorCode code, const std::string& reason);

  int sums_in_flight_ = 0;  // updates whose sum has not arrived
};

}  // namespace ferry
