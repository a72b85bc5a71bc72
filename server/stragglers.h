#pragma once

// Backup workers (FERRY_BACKUP_WORKERS=b; Chen et al., "Revisiting Distributed Synchronous
// SGD"): a round of averaged floating-point pushes closes once all but b of its workers
// pushed, so one slow worker no longer sets every worker's pace.
//
// Which rounds: a dense key's round whose first push is averaged (Envelope.average), of a
// floating-point dtype, summed (no other reduction), raw (no compression) and of every
// worker (no process set). Every other round (broadcasts, allgathers, integer or
// non-averaged sums, sparse rows) waits for every worker, as do barriers and joins.
//
// Closing (RoundProtocol, KeyState::Backup): the round closes when `live - b` workers pushed
// (`live`: the workers that have not joined; b clamped to live - 1), the first to arrive;
// their ranks are its contributors, fixed from then on. A frame of the round is complete
// when every contributor's frame is in. The sum goes to every contributor with the ranks it
// lacks (Envelope.left_out), and workers average over the contributors.
//
// Late pushes: a push of a closed round from a rank outside its contributors is dropped
// (never added), counted (`backup.late_pushes`), and answered with the closed round's sum:
// at once with every frame already sent and then with the rest, or, once the key moved on,
// from `last_sums`. So a late worker receives every round's sum, its model stays equal to
// everyone's, and it never waits for the others' communication.
//
// Lag invariant: a rank left out of round r that has not pushed r yet is `behind`; round
// r + 1 closes early only once no live rank is behind (it waits for every worker while one
// is). So a late worker is at most one round behind, its push of r always finds the sum of
// r in `last_sums`, and a server keeps one closed sum per key, as without backup workers.
//
// Stragglers (this file): the server-wide record of late pushes by rank, shared by the
// engine threads (atomics, no lock): each rank's first late push is logged with its
// lateness; a rank late for kNamedAfter rounds in a row is named in the log (again once
// it contributes), and both figures are live metrics.

#include <atomic>
#include <cstdint>
#include <memory>

#include "proto/ferry.pb.h"
#include "server/server_counters.h"

namespace ferry {

class Stragglers {
 public:
  // Rounds in a row a rank must be late for to be named.
  static constexpr uint64_t kNamedAfter = 100;

  // `ranks`: the most worker ranks the job can have (elastic: FERRY_MAX_WORKERS).
  Stragglers(int ranks, ServerCounters* counters);

  // `rank`'s push of `key`'s round `round` came `late_ms` after the round closed without
  // it. Any engine thread.
  void NoteLate(int rank, uint64_t key, uint32_t round, int64_t late_ms);
  // `rank`'s push is in a round's sum: its streak of late rounds ends. Any engine thread.
  void NoteContributed(int rank);

  uint64_t late_pushes(int rank) const;
  uint64_t streak(int rank) const;
  // ferry_backup_late_pushes_total and ferry_backup_late_rounds_in_a_row, by worker.
  void Report(proto::MetricsSnapshot* out) const;

 private:
  struct Rank {
    std::atomic<uint64_t> late{0};
    std::atomic<uint64_t> streak{0};
    std::atomic<bool> logged{false};
  };
  bool Valid(int rank) const { return rank >= 0 && rank < size_; }

  const int size_;
  ServerCounters* const counters_;
  std::unique_ptr<Rank[]> ranks_;
};

}  // namespace ferry
