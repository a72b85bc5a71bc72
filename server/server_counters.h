#pragma once

// ServerCounters: what a server counts, each counter registered once under its name in the
// stats file and, where it is a live metric, with its Prometheus series; and Refusal, why a
// server refused a message.

#include <cstdint>

#include "common/util/counters.h"

namespace ferry {

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
  kModeMismatch,     // FERRY_ENABLE_ASYNC or FERRY_BACKUP_WORKERS unlike the server's
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
  Counter& bytes_summed = registry.Register(
      "bytes_summed", {"ferry_summed_bytes_total", "bytes summed (its rate is the summation throughput)"});
  Counter& rounds = registry.Register(
      "rounds_completed", {"ferry_rounds_completed_total", "partition rounds whose sum was complete"});
  // Sums sent: one per round of a whole key, one per frame of a key pushed in frames.
  Counter& frames_completed = registry.Register("frames_completed");
  // Frames cut otherwise than their round's first (partitions sized per link): split or gathered.
  Counter& frames_recut = registry.Register("frames_recut");
  // Failed validation (mismatch, stranger, bad round).
  Counter& rejected = registry.Register("rejected_pushes");
  // Resent pushes not added again.
  Counter& duplicates = registry.Register(
      "duplicate_pushes", {"ferry_duplicates_dropped_total",
                           "pushes dropped as duplicates of one already counted"});
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
  // Backup workers (server/stragglers.h): pushes that came after their round closed.
  Counter& late_pushes = registry.Register("backup.late_pushes");
  // Pushes that sat a round out (Envelope.sit_out): header only, answered with the sum.
  Counter& sat_out = registry.Register("backup.rounds_sat_out");
  // Keys dropped because every worker retired their tensor (a name declared anew).
  Counter& keys_retired = registry.Register("keys_retired");
  // Elastic: messages of an older membership epoch, dropped unanswered (their workers
  // abandoned those operations at the new epoch).
  Counter& stale_epoch = registry.Register("stale_epoch_messages", Refused("stale_epoch"));
  Counter* refused[static_cast<int>(Refusal::kCount)];  // refused.<reason>, in the registry
  PeerBytes workers;  // by rank: pushes received, sums sent (Server sizes it)

  // ferry_refused_messages_total{reason=`reason`}.
  static SeriesDeclaration Refused(const char* reason);
  // Counts a refusal: rejected and refused.<reason>.
  void Refuse(Refusal r) {
    rejected++;
    *refused[static_cast<int>(r)] += 1;
  }
};

}  // namespace ferry
