#pragma once

// SimServer: a Ferry server (server/) as the simulator sees it. Each push (or frame) is
// acknowledged as it arrives (PUSH_ACK), then queued on the engine thread that owns its
// key (EngineForKey, the server's own function), most urgent first. An engine takes one
// push at a time: the first of a round is adopted (no work), every later one is added in
// bytes / the summation rate. When every worker's push of a round (or frame) is summed,
// the sum goes to every pusher (streaming aggregation per frame, as FrameSum). With backup
// workers (FERRY_BACKUP_WORKERS) the global set's raw rounds close as BackupRounds says,
// and a worker may sit a round out (SubPush::sit_out).
//
// Grid rounds (cuts that differ: SimJob::CutsMayDiffer; server/key_state.h, "Cuts that
// differ"): the global set's raw pushes are summed by range. A round's grid is the cut of
// the first piece of it that an engine takes; a coarser piece is split into the grid frames
// it covers, a finer one's bytes gathered per (worker, grid frame). A grid frame brought
// whole by one piece while no worker's bytes of it are whole is adopted (no work); every
// other byte is added (bytes / the summation rate). A grid frame's sum goes to every pusher
// of it, in the grid's cut, once every worker's bytes of it are in; a worker takes it by
// range (SimSender::OnSumRange). With one cut for every worker this is the rounds by
// (key, frame) above, event for event.

#include <cstdint>
#include <memory>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sim/job.h"

namespace ferry::sim {

class SimSender;

// One partition (or one frame of it) in a push.
struct SubPush {
  uint64_t cookie = 0;  // the worker's task
  uint64_t key = 0;
  uint32_t frame = 0;
  uint32_t frames = 1;
  uint64_t bytes = 0;  // this frame's
  int priority = 0;
  uint64_t raw_bytes = 0;  // compressed: the bytes it stands for; 0: raw
  uint32_t round = 0;      // the pushing worker's iteration: the key's round
  // Backup workers: a header-only push of the whole key (`frames` of it; `bytes` 0) that
  // sits the round out (Envelope.sit_out; sim/backup_rounds.h).
  bool sit_out = false;
  // Grid rounds: the pusher's cut of the key (its frames' size; 0: whole) and the key's
  // bytes; the piece starts at frame x cut.
  uint64_t cut = 0;
  uint64_t key_bytes = 0;
};

class BackupRounds;

// Work for a server's engine thread other than adding a push (a rows push:
// sim/pipeline_rows.h), queued with the pushes by priority.
class EngineWork {
 public:
  virtual ~EngineWork() = default;
  // The engine of server `server` takes the work queued with `tag` now; returns how long
  // it keeps the engine, us.
  virtual double Take(int server, uint64_t tag) = 0;
};

class SimServer {
 public:
  SimServer(SimJob& job, int rank);
  ~SimServer();

  // A message from `from` arrived: one push, a fused pack of several, or one frame.
  void OnPushes(SimSender& from, const std::vector<SubPush>& pushes);
  // Queues `work` (its `tag`) on the engine that owns `key`, at `priority`, behind the
  // more urgent pushes and work there. REQUIRES: `work` outlives the run.
  void Enqueue(uint64_t key, int priority, EngineWork& work, uint64_t tag);

  int rank() const { return rank_; }
  uint64_t bytes_summed() const { return bytes_summed_; }
  uint64_t rounds() const { return rounds_completed_; }
  // Backup workers: pushes that came after their round closed without them, by worker
  // rank; empty without backup workers.
  std::vector<uint64_t> late_pushes() const;
  // Backup workers: "round R of tensor T" where every worker sat out a round (which then
  // never closes: BackupRounds::starved), or "".
  std::string Starved() const;

 private:
  struct Item {
    int priority;
    uint64_t seq;
    SimSender* from;
    SubPush push;                // with `work`: its key, and the tag as the cookie
    EngineWork* work = nullptr;  // null: a push
  };
  struct LessUrgent {
    bool operator()(const Item& a, const Item& b) const {
      return a.priority != b.priority ? a.priority < b.priority : a.seq > b.seq;
    }
  };
  struct Engine {
    std::priority_queue<Item, std::vector<Item>, LessUrgent> queue;
    SimTime busy_until = 0;       // when the push it sums is through
    bool wake_scheduled = false;  // an event at busy_until takes the next
  };
  struct Round {
    int summed = 0;
    std::vector<std::pair<SimSender*, uint64_t>> pushers;  // (worker, its cookie)
  };
  // A key's grid round: its cut, and by grid frame each worker's bytes in and the pushers.
  struct GridFrame {
    std::vector<uint64_t> got;  // by worker rank
    int whole = 0;              // workers whose bytes of it are all in
    std::vector<std::pair<SimSender*, uint64_t>> pushers;  // (worker, its cookie)
  };
  struct Grid {
    uint32_t round = 0;
    uint64_t cut = 0;    // the grid frame's bytes
    uint64_t bytes = 0;  // the key's
    std::vector<GridFrame> frames;
    size_t sent = 0;  // frames whose sum went back
  };
  void Work(int engine);
  // The round of `item` (its last push) is summed: the sums go to every pusher.
  void SendSums(const Item& item);
  // Grid rounds: whether `push` is summed by range, taking it (`e` is free), and sending
  // grid frame `frame`'s sum.
  bool ByRange(const SubPush& push) const;
  void TakeByRange(Engine& e, const Item& item);
  void SendGridSum(uint64_t key, uint32_t frame, int priority);
  // Backup workers: whether `push`'s round may close early (the global set's raw pushes:
  // averaged floating-point gradients), and the engine taking it; `e` is free.
  bool ClosesEarly(const SubPush& push) const;
  void TakeWithBackups(Engine& e, const Item& item);
  // Frame `frame` of `key`'s round is summed: its sum goes to every worker BackupRounds names.
  void SendBackupSum(uint64_t key, uint32_t frame, int priority);
  // One sum to one worker's task (`duplicate`: it has it already; only the bytes travel;
  // `late`: it leaves the worker out, its push came late).
  void SendSumTo(SimSender* to, uint64_t cookie, uint32_t frame, uint64_t bytes, int priority,
                 bool duplicate, bool late);

  SimJob& job_;
  const int rank_;
  std::vector<Engine> engines_;
  struct RoundId {
    uint64_t key;
    uint32_t frame;
    bool operator==(const RoundId& o) const { return key == o.key && frame == o.frame; }
  };
  struct RoundIdHash {
    size_t operator()(const RoundId& r) const {
      return std::hash<uint64_t>()(r.key * 0x9e3779b97f4a7c15ull ^ r.frame);
    }
  };
  static RoundId IdOf(const SubPush& p) { return RoundId{p.key, p.frame}; }
  std::unordered_map<RoundId, Round, RoundIdHash> open_;  // open rounds by (key, frame)
  std::unordered_map<uint64_t, Grid> grids_;               // open grid rounds by key
  // The open round of `push`, made on its first push. Remembers the last one found: an
  // engine sums one key's pushes from every worker mostly in a row.
  Round& RoundOf(const SubPush& push);
  RoundId last_id_{};
  Round* last_round_ = nullptr;  // open_'s element for last_id_ (stable), or null
  uint64_t next_seq_ = 0;
  uint64_t bytes_summed_ = 0;
  uint64_t rounds_completed_ = 0;
  std::unique_ptr<BackupRounds> backup_;  // FERRY_BACKUP_WORKERS > 0, or null
};

}  // namespace ferry::sim
