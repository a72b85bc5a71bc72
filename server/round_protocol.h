#pragma once

// RoundProtocol: synchronous training's dense keys (KeyProtocol, key_protocol.h). Every
// worker pushes each round of a key once; the round's sum answers every pusher. Each push
// is acknowledged (PUSH_ACK) before it is added, the one completing the round too, so a
// worker's scheduling credit never waits on a sum (docs/benchmarks.md).
//
// Streaming aggregation: a push may come in frames (key_state.h, "Frames"); each frame is
// acknowledged, added, and its sum sent to every pusher as soon as every worker's frame is
// in, while the push's later frames are still on their way.
//
// Sums go through the engine's Summation (summation.h), one open sum per frame: in
// arrival order or, when `deterministic` (FERRY_DETERMINISTIC=1), in worker-rank order
// (frames wait in FrameSum::held for their turn). On a GPU a frame's sum arrives after the
// frame completed (OnSumReady); the frame is `summing` meanwhile (key_state.h). The
// Summation knows a whole-key round's sum by the key, a frame's by an id of its own
// (SumId: the same id for the same frame of the same cut, round after round, as the GPU
// keeps one accumulator per id).
//
// Backup workers (FERRY_BACKUP_WORKERS): rounds of averaged floats may close without the last
// pushes, and be sat out (server/stragglers.h; round_protocol_backup.cc).
//
// Owns the KeyState of every dense key of its engine. Threads: the engine thread only;
// no lock.

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "server/key_protocol.h"
#include "server/key_state.h"
#include "server/sum_compression.h"

namespace ferry {

class RoundProtocol : public KeyProtocolOf<KeyState> {
 public:
  RoundProtocol(ProtocolContext context, bool deterministic);

  void Push(Request& request) override;
  void Pull(const Request& request) override;
  void Join() override;
  void Restart(RestartCause cause) override;
  void FailAll(const std::string& why) override;
  void RefuseOpenRounds(uint32_t tensor, const std::string& reason) override;
  void Retire(uint32_t tensor, const std::string& reason) override;
  void OnSumReady(uint64_t key, uint64_t generation, Buffer sum) override;
  int sums_in_flight() const override { return sums_in_flight_; }
  bool ForClosedRound(const Request& request) const override;

 private:
  // Replies to a push of `frame` Classify did not accept (every verdict but kAccumulate).
  void Refuse(Request& request, KeyState& state, PushVerdict verdict, const FrameRef& frame);
  // Acknowledges an accepted frame of the current round and adds it (in rank order when
  // deterministic); completes the frame if it was the last one missing.
  void Accumulate(Request& request, KeyState& state, const FrameRef& frame);
  // A frame cut otherwise than the open round (key_state.h, "Cuts that differ"), acknowledged
  // already: added as the grid frames it covers, or gathered until its grid frame is whole.
  void AccumulateRecut(Request& request, KeyState& state, const FrameRef& frame);
  // Records grid frame `frame` of `rank` (answered at `to`) with its bytes and adds them (in rank order
  // when deterministic); completes the frame if it was the last one missing.
  void AddFrame(int rank, const PendingReply& to, uint64_t key, KeyState& state, const FrameRef& frame,
                Buffer payload);
  // Frame `f` is complete: ends its sum on the device; answers now (CPU) or once the sum
  // arrives (GPU: the frame is `summing` until OnSumReady).
  void CompleteFrame(uint64_t key, KeyState& state, uint32_t f);
  // Completes every frame of the key that is complete (after a join).
  void CompleteFrames(uint64_t key, KeyState& state);
  // Answers every pusher with frame `f`'s sum; the round's last frame moves the key to the
  // next round.
  void SendFrame(uint64_t key, KeyState& state, uint32_t f);
  // What a sum of a round says beside its bytes: its round, its cut in `frame_bytes`
  // (`frames` frames: one is a whole-key sum), its compression (empty: raw) and the ranks
  // it left out (backup workers; empty: none).
  struct RoundOf {
    uint32_t round;
    uint64_t frame_bytes;
    size_t frames;
    const std::string& compression;
    const std::string& left_out;
  };
  static RoundOf OpenRound(const KeyState& state);
  static RoundOf LastRound(const KeyState& state);
  // A PUSH_RESULT of `sum`: frame `f` of `round` of `key`, holding `contributors` pushes.
  Reply Result(const PendingReply& to, uint64_t key, const KeyState& state, const RoundOf& round,
               uint32_t f, const Buffer& sum, uint32_t contributors) const;
  // Backup workers (stragglers.h): fixes the open round's contributors once all but b live
  // workers pushed and no live rank is behind; then completes what it can. True: closed.
  bool MaybeCloseEarly(uint64_t key, KeyState& state);
  // A push of the open round after it closed without `request`'s rank: acknowledged and
  // dropped; its first frame makes the rank a waiter of the round's sum (the frames sent
  // already go to it at once).
  void Late(Request& request, KeyState& state, const FrameRef& frame);
  // A header-only push that sits a round out (Envelope.sit_out): the rank waits for the
  // round's sum (or gets the previous round's, which closed without it) and is not waited
  // for; refused for a round that must hold every worker.
  void SitOut(Request& request, KeyState& state);
  // A push of the previous round from a rank it left out (kPrevious): the rank is behind no
  // more, and the round it held up may close.
  void LatePrevious(Request& request, KeyState& state, const FrameRef& frame);
  // Whether every live worker sits the open round out (no contribution can ever close it).
  bool EveryoneSatOut(KeyState& state) const;
  // Answers a resend with the previous round's sum (last_sums): the frames that overlap the
  // resent piece [offset, offset + frame_bytes), or every frame when `frame_bytes` is 0.
  void Resend(const PendingReply& to, uint64_t key, const KeyState& state, uint64_t offset,
              uint64_t frame_bytes);
  // A RESEND_SUM of the open round: the frames already summed, again.
  void ResendSent(const PendingReply& to, uint64_t key, const KeyState& state);
  // The Summation's id of frame `f` of the key's open round (see above).
  uint64_t SumId(uint64_t key, const KeyState& state, uint32_t f);
  // Drops the open sums of every frame of the key's open round.
  void ResetSums(uint64_t key, KeyState& state);
  // The key fails for good (logged): every pusher waiting is told `reason` (kMismatch).
  void FailKey(uint64_t key, KeyState& state, const std::string& reason);
  // FailKey without the log line; the pushers waiting get `code`.
  void DropKey(uint64_t key, KeyState& state, ErrorCode code, const std::string& reason);

  // Refuses a push whose round disagrees with the key's open round on the reduce op or
  // the compression: the key fails on every worker, naming both. True if refused.
  bool RefuseDisagreement(Request& request, KeyState& state, const FrameRef& frame);
  // Process sets (common/types/process_set.h): the first push fixes the key's members; a
  // push naming other members, or from a rank outside them, is refused. True: refused.
  bool RefuseOutsider(Request& request, KeyState& state);
  // The ranks a round of `state` does not wait for: the joined ones, and for a process
  // set's key every rank outside it.
  const std::vector<bool>& Absent(KeyState& state) const;

  const bool deterministic_;
  SumCompression compression_;  // compressed pushes decoded, compressed sums (per key)
  int sums_in_flight_ = 0;  // GPU: Finishes whose sum has not arrived
  // Frames' Summation ids: (key, cut, frame) -> id, and back. Ids have the top bit set, so
  // they never equal a key (a whole-key round's id).
  // Ids are never reused (a retired key's are forgotten).
  std::map<std::tuple<uint64_t, uint64_t, uint32_t>, uint64_t> sum_ids_;
  std::unordered_map<uint64_t, std::pair<uint64_t, uint32_t>> frame_of_sum_;
  uint64_t next_sum_id_ = 1;
};

}  // namespace ferry
