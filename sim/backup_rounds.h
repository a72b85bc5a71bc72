#pragma once

// BackupRounds: one simulated server's rounds under backup workers (FERRY_BACKUP_WORKERS=b;
// server/stragglers.h says what the real server does), as a state machine that SimServer
// drives: it takes each push as the server's engine takes it and says whether it is added
// to the sum, which frames' sums may go out once it is, and which sums go back to its
// worker at once. SimServer does the timing and the sending.
//
//   BackupRounds rounds(workers, b);
//   BackupRounds::Taken t = rounds.Take(push, sender, rank);   // t.added, t.complete, ...
//   for (uint32_t f : t.complete) ... rounds.Send(key, f) ...  // once the summation is done
//
// The rules, per key (as RoundProtocol's): a round closes once `workers - b` workers pushed
// a frame of it (b clamped to workers - 1), the first to arrive; they are its contributors,
// and a frame is complete when every contributor's frame is in. A push from outside the
// contributors (late) is dropped: its worker gets every frame already sent at once and the
// others when they go out; a push of the previous round, once the key moved on, gets that
// frame's sum at once. Lag invariant: a worker left out of round r that has not pushed r
// yet (every frame of it, once the key moved on) is behind, and round r + 1 closes early
// only once no worker is behind.
//
// Sitting out (SubPush::sit_out: a header-only push of the whole key, Envelope.sit_out): the
// worker contributes nothing and is not waited for; it counts neither among the
// contributors nor among the `workers - b` needed, and gets every frame's sum as it goes
// out (at once, from the last round, if the key moved on). A round closes when `workers - b`
// workers contributed, or when every worker contributed or sat it out (at least one
// contributed). A sit-out counts as a push for the lag invariant.
//
// Rounds are told apart by SubPush::round (the worker's iteration: every worker pushes each
// key once per iteration). Only the keys SimServer routes here (the global set's raw
// pushes: averaged floating-point sums in a training job) close early; no worker joins.
// Not thread-safe (one event loop).

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sim/sim_server.h"

namespace ferry::sim {

class BackupRounds {
 public:
  // A sum's receiver: a worker, its task's cookie, and whether the sum leaves it out
  // because its push came late (Envelope.left_out names it; a sit-out's does not count:
  // the worker chose it).
  struct Reply {
    SimSender* worker = nullptr;
    uint64_t cookie = 0;
    bool late = false;
  };

  // A sum for the pushing worker, to send at once.
  struct Answer {
    uint32_t frame = 0;
    uint64_t bytes = 0;
    bool duplicate = false;  // the worker has it already: bytes on the link, nothing more
    bool late = true;        // as Reply::late
  };
  // What the engine does with a push.
  struct Taken {
    bool added = false;              // summed into its frame (false: dropped, a late push)
    bool adopted = false;            // the frame's first push: adopted, no work
    std::vector<uint32_t> complete;  // frames whose sums go out once this push is summed
    std::vector<Answer> answers;     // sums for the pushing worker, now
  };

  // REQUIRES: 1 <= backups < workers.
  BackupRounds(int workers, int backups);

  // The engine takes `push` of worker `rank` (`from`) now.
  Taken Take(const SubPush& push, SimSender* from, int rank);
  // Frame `frame` of `key`'s open round goes out: the workers to send it to, and its bytes.
  // REQUIRES: Take listed it in `complete`. The last frame's send ends the round.
  std::vector<Reply> Send(uint64_t key, uint32_t frame, uint64_t* bytes);

  // Pushes that came after their round closed without them, by worker rank (the real
  // server's backup.late_pushes, counted once per round and worker).
  const std::vector<uint64_t>& late_pushes() const { return late_pushes_; }
  // The first round every worker sat out, as (key, round): with no push to sum it never
  // closes (nor does the real server's), and the job stops there.
  const std::optional<std::pair<uint64_t, uint32_t>>& starved() const { return starved_; }

 private:
  struct Frame {
    uint64_t bytes = 0;
    int summed = 0;
    bool complete = false;
    bool sent = false;
    std::vector<Reply> to;  // its contributors' tasks, and late workers'
  };
  // Left out of the last round: still to push it, or some frames of it (behind: each frame
  // answered as it comes), pushed it since the key moved on, or pushed it while it was open
  // (every frame answered then: a later frame of it gets a duplicate).
  enum class LeftOut : uint8_t { kNo, kBehind, kResent, kAnswered };
  struct Key {
    bool open = false;  // a push of `round` came and not every frame of it went out
    uint32_t round = 0;
    bool has_last = false;
    uint32_t last_round = 0;
    std::vector<Frame> frames;
    uint32_t frames_sent = 0;
    std::vector<bool> pushed;  // by rank: pushed a frame of `round`, or sat it out
    int pushed_count = 0;
    std::vector<bool> sat_out;  // by rank: sat `round` out
    int sat_outs = 0;
    bool closed = false;  // closed early: its contributors are fixed
    std::vector<bool> contributed;
    int contributors = 0;
    std::vector<LeftOut> last_left_out;  // by rank, of the last round
    int behind = 0;                      // ranks kBehind
    std::vector<uint32_t> resent;        // by rank: frames of the last round in since (kBehind)
    std::vector<uint64_t> last_bytes;    // by frame, of the last round
  };
  Taken Current(Key& k, const SubPush& push, SimSender* from, int rank);
  Taken Late(Key& k, const SubPush& push, SimSender* from, int rank);
  Taken Previous(Key& k, const SubPush& push, int rank);
  Taken SitOut(Key& k, const SubPush& push, SimSender* from, int rank);
  Taken SitOutPrevious(Key& k, const SubPush& push, int rank);
  void Open(Key& k, const SubPush& push);
  // Closes the round early where the rules allow; appends the frames that completes.
  void MaybeClose(Key& k, std::vector<uint32_t>* complete);
  void NextRound(Key& k);

  const int workers_;
  const int backups_;
  std::unordered_map<uint64_t, Key> keys_;
  std::vector<uint64_t> late_pushes_;
  std::optional<std::pair<uint64_t, uint32_t>> starved_;
};

}  // namespace ferry::sim
