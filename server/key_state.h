#pragma once

// KeyState: one dense key's round bookkeeping on a server (synchronous training,
// RoundProtocol in round_protocol.h). Every field is touched by the engine thread that owns
// the key only.
//
// Round invariant: a worker pushes round r+1 of a key only after it received the
// sum of round r, and the server sends that sum only when round r is complete. So
// at any time a key accumulates exactly one round (`round`), and a push for any
// other round is either a duplicate (r < round, or already counted) or a protocol
// error (r > round).
//
// Resends: a worker whose push or reply was lost sends the push again (same request
// id) or, once acknowledged, a header-only RESEND_SUM. While the key is still at round r a
// resent push of r is a duplicate (acknowledged again, not added). Once round r is
// complete, its sum is kept as `last_sum` until round r+1 completes: a worker cannot
// push r+1 before it received r, so no worker can still be waiting for an older round,
// and one sum per key is all a resend can ask for.
//
// Buffer invariant: the first push of a round becomes the round's sum (the received
// ZeroMQ frame is adopted, no copy); later pushes are added into it. The replies
// share that buffer and ZeroMQ holds it until the last reply is on the wire, while
// the next round adopts a fresh frame: round r+1 fills while round r is still
// being sent (and kept as `last_sum`), and no buffer is reused, ever: it is freed
// once neither ZeroMQ nor `last_sum` holds it.
//
// Sums that come later (FERRY_SERVER_DEVICE=gpu, server/summation.h): between a
// round's completion and the arrival of its sum the key is `summing`: still at round r,
// every pusher recorded in `pushed` and `waiting`. So a resent push or a RESEND_SUM of round r
// is a duplicate (acknowledged again, not added), Complete() is false (a JOIN meanwhile
// does not finish the round twice), and no push of r+1 can come (no worker has the sum
// of r). When the sum arrives the server moves the key on exactly as the CPU path does
// at completion. The sum is pinned host memory from a pool and follows the buffer
// invariant above: its block is reused only once neither ZeroMQ nor `last_sum` holds
// it (server/gpu/pinned_pool.h). `generation` changes whenever a round is abandoned
// (Restart, a failed key): a sum finished under an older generation answers nobody.
//
// Deterministic mode (FERRY_DETERMINISTIC=1): invariant: `sum` holds exactly the pushes
// of the ranks below `next_rank`, added in ascending rank order (the lowest rank's
// frame adopted, ranks that joined skipped); a push from rank next_rank or above waits
// in `held` until every lower rank has pushed or joined. Float addition is not
// associative, so this is what makes the bits of a sum independent of arrival order.
//
// Frames (streaming aggregation): a push may come as several frames (wire protocol 3,
// common/transport/message.h), all with the push's request id. Everything above holds per
// frame: the round's first frame fixes the round's cut (frame_bytes), each frame has its
// own sum (the first frame of it adopted), its own record of ranks (so a resent frame is a
// duplicate: deduplication is per (rank, frame)), its own rank order in deterministic mode
// (each element is still summed in rank order, so the bits equal a whole-key sum's), and
// its sum goes to every pusher as soon as every worker's frame is in, while later frames
// still arrive. The round ends, and becomes last_sums, when every frame's sum was sent.
// A worker pushes round r+1 only after it has every frame of r's sum, so one round per
// key stays open, whatever a slow worker does. `waiting` holds one reply per pushing rank
// (its first frame's): every frame of a push shares the request id.
//
// Cuts that differ (range arithmetic): workers may cut one key differently (partitions sized
// per link, FERRY_PARTITION_PER_LINK; FERRY_FRAME_BYTES set unalike), as long as the cuts
// nest (CutsNest: the larger is a multiple of the smaller, or one is the whole key). The
// round's grid stays the cut of its first frame; every frame, deduplication, rank order,
// sum and reply above is a grid frame. A frame of a coarser cut is split into the grid
// frames it covers (views of its bytes, no copy); the frames of a finer cut are gathered per
// (rank, grid frame) in `staged`, a copy, until the grid frame is whole, and only then
// recorded. A rank is among the pushers (`pushed`, `waiting`) from its first frame on, staged
// or not. Sums go back in the grid's cut; a worker takes them by range (the worker's
// DensePushPull). Not for rounds that may close early (backup workers): their late-frame
// bookkeeping is by grid frame of one cut.
//
// Asynchronous mode (FERRY_ENABLE_ASYNC=1) keeps parameters, not rounds: ParamState
// (param_protocol.h) is its key state; only the definition (KeyDefinition) is shared.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/reduce/reduce.h"
#include "common/transport/buffer.h"

namespace ferry {

struct PendingReply {
  int worker_id = -1;
  std::string identity;  // the worker's connection on the server's ROUTER
  uint64_t request_id = 0;
  int32_t priority = 0;  // the request's: its sum leaves before less urgent ones (van.h)
};

// What to do with a push, given the key's state (see the round invariant above).
enum class PushVerdict {
  kAccumulate,  // the push belongs to the current round: add it
  kDuplicate,   // already counted in the current round (a resend): acknowledge again
  kPrevious,    // a resend for the round just completed: answer with `last_sum`
  kStale,       // older than the previous round: cannot happen unless a worker misbehaves
  kAhead,       // a round the key has not reached: protocol error
  kMismatch,    // length, dtype or tensor hash differ from the key's definition
  kFailed,      // the key failed earlier; every push is refused
  kBadFrame,    // cut in frames that do not nest with the open round's (CutsNest)
};

// The engine thread that owns `key`: splitmix64's finalizer of the key, modulo
// `engines`. A key is (tensor id << 32) | partition index, so its low bits are the
// partition index; libstdc++'s std::hash of an integer is the integer itself, which
// put nearly every key on engine 0. REQUIRES: engines > 0.
int EngineForKey(uint64_t key, int engines);

// A dense key's definition: fixed by the first push ever seen for the key; every later
// push must agree.
struct KeyDefinition {
  bool defined = false;
  uint64_t length = 0;
  DataType dtype = DataType::kFloat32;
  uint64_t tensor_hash = 0;
  int defined_by_rank = -1;

  // Fixes the definition on the first push; false if the push disagrees with it.
  bool Define(int rank, uint64_t push_length, DataType push_dtype, uint64_t push_hash);
};

// A frame's place in its key (wire protocol 3, message.h): `offset` and `length` of the
// frame, the round's cut `frame_bytes` (the key's length for a whole-key push).
struct FrameRef {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t frame_bytes = 0;
};

// A grid frame's bytes from one rank that cuts finer than the round (see above), gathered.
struct StagedFrame {
  Buffer bytes;                  // the grid frame's length; filled by the pieces
  uint64_t filled = 0;           // bytes of it that came
  std::vector<uint64_t> pieces;  // the offsets that came (a resent one is a duplicate)
};

// One frame of a key's open round: its running sum and who is in it.
struct FrameSum {
  Buffer sum;               // CPU: the running sum (the first frame adopted); GPU: empty
  std::vector<bool> got;    // by rank: this rank's frame is recorded
  uint32_t count = 0;       // ranks recorded
  std::vector<Buffer> held; // deterministic mode: frames waiting for their turn
  int next_rank = 0;        // deterministic mode: the next rank to add
  bool summing = false;     // complete, its sum on its way (GPU)
  bool sent = false;        // its sum went to every pusher
};

// Backup workers (FERRY_BACKUP_WORKERS; server/stragglers.h): how the open round closes,
// and whom the previous round left out.
struct BackupRound {
  bool eligible = false;          // the open round may close early (fixed by its first push)
  bool closed = false;            // its contributors are fixed
  std::vector<bool> contributed;  // by rank, once closed: the pushes its sum holds
  std::vector<bool> sat_out;      // by rank: sits the open round out (Envelope.sit_out)
  std::string left_out;           // once closed: the live ranks outside it (a rank mask)
  int64_t closed_us = 0;
  // By rank: left out of round - 1 and has not pushed it since (the lag invariant).
  std::vector<bool> behind;
  // By behind rank: the frames of its late push of round - 1 that came (empty: none yet).
  std::vector<std::vector<bool>> late_frames;
  std::string last_left_out;  // round - 1's left_out
  int64_t last_closed_us = 0;

  // Whether rank `rank`'s push is not in the open round's sum: it came after the round
  // closed without it, or the rank sits the round out.
  bool Late(int rank) const {
    const size_t r = static_cast<size_t>(rank);
    return (closed && !contributed[r]) || (r < sat_out.size() && sat_out[r]);
  }
  // Whether `rank` is left out of round - 1 and pushes it now for the first time.
  bool LatePrevious(int rank) const {
    return static_cast<size_t>(rank) < behind.size() && behind[static_cast<size_t>(rank)];
  }
};

struct KeyState : KeyDefinition {  // KeyDefinition::length: the key's bytes (all frames)
  uint32_t round = 0;                 // the round being accumulated
  // The open round's cut, fixed by its first frame (frames empty: no frame yet). Every
  // frame of a round has its own sum; a whole-key round is one frame of `length` bytes.
  uint64_t frame_bytes = 0;
  ReduceOp reduce_op = ReduceOp::kSum;  // how the open round combines, fixed by its first frame
  // The open round's compression (canonical text; empty: raw), fixed by its first push,
  // and the previous round's (of last_sums). A compressed round's frame sums are
  // replaced by their compressed bytes when they are sent (SumCompression).
  std::string compression;
  std::string last_compression;
  std::vector<FrameSum> frames;
  std::map<std::pair<int, uint32_t>, StagedFrame> staged;  // (rank, grid frame): finer cuts
  uint32_t frames_sent = 0;           // frames whose sum went out; all: the round is over
  std::vector<bool> pushed;           // by worker rank: pushed a frame of this round
  std::vector<PendingReply> waiting;  // pushers of this round, in arrival order (one each)
  uint64_t generation = 0;            // bumped when a round is abandoned (see above)

  bool has_last = false;           // round - 1 completed and its sum is kept
  std::vector<Buffer> last_sums;   // the frames of round - 1's sum (see Resends above)
  uint64_t last_frame_bytes = 0;   // their cut
  uint32_t last_contributors = 0;  // how many pushes last_sums hold

  // A process set's key: its members (Envelope.members, fixed by the first push); empty:
  // every worker. `absent`: scratch for RoundProtocol::Absent.
  std::string members;
  std::vector<bool> absent;
  BackupRound backup;
  std::string failure;  // non-empty: the key is failed for good
  uint64_t rounds_completed = 0;
  uint64_t bytes_pushed = 0;

  // Defines the key on its first push (num_workers sizes `pushed`), then classifies
  // the push of `frame`. Changes nothing else. A frame cut differently from the open
  // round's is kBadFrame.
  PushVerdict Classify(int rank, uint32_t push_round, const FrameRef& frame, uint64_t key_length,
                       DataType push_dtype, uint64_t push_hash, int num_workers);
  // A whole-key push (one frame of `push_length` bytes).
  PushVerdict Classify(int rank, uint32_t push_round, uint64_t push_length, DataType push_dtype,
                       uint64_t push_hash, int num_workers) {
    return Classify(rank, push_round, FrameRef{0, push_length, push_length}, push_length,
                    push_dtype, push_hash, num_workers);
  }
  // Records an accepted frame from `rank` (the round's first frame fixes its cut); returns
  // the frame's index. REQUIRES: Classify said kAccumulate, and `frame` is in the round's
  // cut (the first frame, or a grid frame: see "Cuts that differ").
  uint32_t Record(int rank, const PendingReply& reply, const FrameRef& frame);
  // Makes `rank` a pusher of the open round (its reply waits for the sums), once.
  void NotePusher(int rank, const PendingReply& reply);
  // Whether `frame` is cut otherwise than the open round (which has a frame already).
  bool Recut(const FrameRef& frame) const {
    return !frames.empty() && frame.frame_bytes != frame_bytes;
  }
  // Whole keys: records the push and returns whether the round (its one frame) is complete.
  bool Record(int rank, const PendingReply& reply, const std::vector<bool>& joined) {
    return FrameComplete(Record(rank, reply, FrameRef{0, length, length}), joined);
  }
  // Whether every worker has pushed frame `f` of this round or joined (once the round is
  // closed early: every contributor), with at least one push to answer, and the frame is
  // neither summing nor sent.
  bool FrameComplete(uint32_t f, const std::vector<bool>& joined) const;
  // Whether any frame is complete (FrameComplete).
  bool Complete(const std::vector<bool>& joined) const;
  // The frame at `offset` in the open round's cut.
  uint32_t FrameIndex(uint64_t offset) const {
    return frame_bytes == 0 ? 0 : static_cast<uint32_t>(offset / frame_bytes);
  }
  // Where frame `f` of the open round starts, and its bytes.
  uint64_t FrameOffset(uint32_t f) const { return f * frame_bytes; }
  uint64_t FrameLength(uint32_t f) const;
  // What to do with a RESEND_SUM (a worker asking for the sum of `pull_round` after its push
  // was acknowledged): kPrevious (answer from last_sums), kDuplicate (the round is still
  // open and holds the push: acknowledge again, and send the frames already summed), or
  // kStale (no record of the push).
  PushVerdict ClassifyPull(int rank, uint32_t pull_round) const;
  // Deterministic mode: adds every frame `f` whose turn has come into its sum, in rank
  // order (the first one adopted as the sum), skipping ranks that joined; stops at the
  // first rank that has neither pushed nor joined. `add(sum, push)` adds one push into
  // `sum`. REQUIRES: frames were recorded (Record) with their bytes in `held`.
  template <typename Add>
  void SumInRankOrder(const std::vector<bool>& joined, Add&& add, uint32_t f = 0);
  // Deterministic mode, for any summation (server/summation.h): hands every frame `f` whose
  // turn has come to `take(Buffer push)`, in rank order, skipping ranks that joined;
  // stops at the first rank that has neither pushed nor joined. SumInRankOrder is this
  // with `take` = adopt the first push as the sum, add the others into it.
  template <typename Take>
  void TakeInRankOrder(const std::vector<bool>& joined, Take&& take, uint32_t f = 0);
  // Backup workers: closes the open round with the ranks that pushed so far (and do not sit
  // it out) as its contributors; the ranks neither in `absent` nor among them are left out.
  void CloseEarly(const std::vector<bool>& absent, int64_t now_us);
  // Starts the next round (after every frame's sum was sent); the finished round's
  // frames become last_sums, its left-out ranks that have not pushed it `behind`.
  void NextRound(int num_workers);
  // Every worker joined: rounds start over at 0 and nothing from before is resent; a
  // new generation (a sum still on its way is dropped when it arrives).
  // REQUIRES: no push waiting (the server fails such a key first).
  void Restart(int num_workers);
};

template <typename Add>
void KeyState::SumInRankOrder(const std::vector<bool>& joined, Add&& add, uint32_t f) {
  TakeInRankOrder(
      joined,
      [this, &add, f](Buffer push) {
        Buffer& sum = frames[f].sum;
        if (sum.empty()) {
          sum = std::move(push);
        } else if (!push.empty()) {
          add(sum, push);
        }
      },
      f);
}

template <typename Take>
void KeyState::TakeInRankOrder(const std::vector<bool>& joined, Take&& take, uint32_t f) {
  if (f >= frames.size()) return;  // no frame of this round yet
  FrameSum& frame = frames[f];
  const int workers = static_cast<int>(frame.got.size());
  for (; frame.next_rank < workers; ++frame.next_rank) {
    const size_t r = static_cast<size_t>(frame.next_rank);
    if (frame.got[r]) {
      Buffer push = std::move(frame.held[r]);
      frame.held[r] = Buffer();
      take(std::move(push));
    } else if (!(r < joined.size() && joined[r])) {
      return;  // rank r has not pushed yet: later ranks wait for it
    }
  }
}

}  // namespace ferry
