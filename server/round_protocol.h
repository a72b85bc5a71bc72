#pragma once

// RoundProtocol: synchronous training's dense keys (KeyProtocol, key_protocol.h). Every
// worker pushes each round of a key once; the round's sum answers every pusher. Each push
// is acknowledged (PUSH_ACK) before it is added, the one completing the round too, so a
// worker's scheduling credit never waits on a sum (docs/benchmarks.md).
//
// Sums go through the engine's Summation (summation.h): in arrival order or, when
// `deterministic` (FERRY_DETERMINISTIC=1), in worker-rank order (pushes wait in
// KeyState::held for their turn). On a GPU a round's sum arrives after the round
// completed (OnSumReady); the key is `summing` meanwhile (key_state.h).
//
// Owns the KeyState of every dense key of its engine. Threads: the engine thread only;
// no lock.

#include <cstdint>
#include <string>

#include "server/key_protocol.h"
#include "server/key_state.h"

namespace ferry {

class RoundProtocol : public KeyProtocolOf<KeyState> {
 public:
  RoundProtocol(ProtocolContext context, bool deterministic);

  void Push(Request& request) override;
  void Pull(const Request& request) override;
  void Join() override;
  void Restart() override;
  void FailAll(const std::string& why) override;
  void OnSumReady(uint64_t key, uint64_t generation, Buffer sum) override;
  int sums_in_flight() const override { return sums_in_flight_; }

 private:
  // Replies to a push Classify did not accept (every verdict but kAccumulate).
  void Refuse(Request& request, KeyState& state, PushVerdict verdict);
  // Adds an accepted push of the current round (in rank order when deterministic) and
  // acknowledges it; completes the round if it was the last.
  void Accumulate(Request& request, KeyState& state);
  // The round is complete: ends it on the device; answers now (CPU) or once the sum
  // arrives (GPU: the key is `summing` until OnSumReady).
  void CompleteRound(uint64_t key, KeyState& state);
  // Answers every pusher with `state.sum` and moves the key to the next round.
  void SendRound(uint64_t key, KeyState& state);
  // A PUSH_RESULT of `sum` for the round `round` of `key`.
  Reply Result(const PendingReply& to, uint64_t key, const KeyState& state, uint32_t round,
               const Buffer& sum, uint32_t contributors) const;
  // Answers a resend with the previous round's sum (last_sum).
  void Resend(const PendingReply& to, uint64_t key, const KeyState& state);
  // The key fails for good (logged): every pusher waiting is told `reason` (kMismatch).
  void FailKey(uint64_t key, KeyState& state, const std::string& reason);
  // FailKey without the log line; the pushers waiting get `code`.
  void DropKey(uint64_t key, KeyState& state, ErrorCode code, const std::string& reason);

  const bool deterministic_;
  int sums_in_flight_ = 0;  // GPU: Finishes whose sum has not arrived
};

}  // namespace ferry
