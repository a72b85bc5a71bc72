#pragma once

// RowsProtocol: sparse rows (ROWS_PUSH, Worker::PushPullRows; KeyProtocol, key_protocol.h).
// Rounds as for dense keys: every worker pushes each round of a rows key once (possibly
// with zero rows); a push that does not complete the round is acknowledged, and when the
// round completes its held pushes are summed on the CPU in worker-rank order
// (row_key_state.h) and every pusher gets exactly the rows it listed. Never uses the
// Summation: rows are summed where they are held.
//
// With asynchronous training (`async_training`, fixed at start) every rows push is refused:
// sparse rows need synchronous rounds.
//
// Owns the RowKeyState of every rows key of its engine. Threads: the engine thread only;
// no lock.

#include <cstdint>
#include <string>
#include <vector>

#include "server/key_protocol.h"
#include "server/row_key_state.h"

namespace ferry {

class RowsProtocol : public KeyProtocolOf<RowKeyState> {
 public:
  RowsProtocol(ProtocolContext context, bool async_training);

  void Push(Request& request) override;
  void Pull(const Request& request) override;
  void Join() override;
  void Restart(RestartCause cause) override;
  // Rows are summed on the CPU, which does not fail: rows keys are left as they are.
  void FailAll(const std::string&) override {}
  void RefuseOpenRounds(uint32_t tensor, const std::string& reason) override;
  void Retire(uint32_t tensor, const std::string& reason) override;
  // Rows never go through the Summation: no sum ever arrives.
  void OnSumReady(uint64_t, uint64_t, Buffer) override {}
  int sums_in_flight() const override { return 0; }

 private:
  // Replies to a push Classify did not accept (every verdict but kAccumulate).
  void Refuse(const Request& request, RowKeyState& state, PushVerdict verdict);
  // Sums the round and answers every pusher with exactly the rows it listed.
  void SendRound(uint64_t key, RowKeyState& state);
  // A ROWS_RESULT of `values` (rows of `state`) for the round `round` of `key`.
  Reply Result(const PendingReply& to, uint64_t key, const RowKeyState& state, uint32_t round,
               const Buffer& values, uint32_t contributors) const;
  // The key fails for good (logged): every pusher waiting is told `reason`.
  void FailKey(uint64_t key, RowKeyState& state, const std::string& reason);

  const bool async_training_;
};

}  // namespace ferry
