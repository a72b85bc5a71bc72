#pragma once

// StallCheck: the scheduler's view of what every worker has submitted, to name the ranks
// a collective waits for (Horovod's stall check). Pure logic: the Scheduler feeds it the
// workers' heartbeat reports and asks it, on its own clock, what to say.
//
// What workers report (proto StallReport, common/cluster/cluster_client.h): their
// operations submitted and not finished that are at least report_after_ms() old, each as
// (label, seq): the seq-th operation under that label on that worker ("push_pull of 'x'",
// "broadcast of 'x'", "barrier", "join"). Every rank submits the same operations in the
// same order, so (label, seq) names one collective on every rank. For the labels that
// some worker reported (Watched(), sent back with the heartbeat acknowledgements) every
// worker also reports how many operations it has submitted under the label.
//
// A stall: an operation (label, seq) that some workers (the waiting ranks) have had
// pending for at least the warning time while other workers have submitted fewer than
// seq operations under its label (the missing ranks). It is based on what each worker
// submitted, not on what reached a server, so a partition its sender still holds back
// (credit, a slow link) never names an innocent rank. Not a stall: every rank submitted
// it (a slow or dead peer: the heartbeats and FERRY_OP_TIMEOUT_MS cover those), or a
// missing rank's count is not known yet (its next report will say). For "join" a
// rank counts as missing only while it submits nothing either (uneven data: a rank still
// training has simply not run out of batches yet).
//
// Check() returns each stall once per warning period (the first when it is
// warning_ms old), and marks it `shutdown` once it is shutdown_ms old (if set).
// Bounded memory: one report per worker (the latest), at most kMaxReported operations
// and kMaxWatched labels from each, labels cut to kMaxLabelBytes.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ferry.pb.h"

namespace ferry {

class StallCheck {
 public:
  static constexpr size_t kMaxReported = 64;     // operations per worker report
  static constexpr size_t kMaxWatched = 256;     // labels watched at once
  static constexpr size_t kMaxLabelBytes = 512;  // longer labels are cut

  // `warning_ms`, `shutdown_ms`: FERRY_STALL_WARNING_MS, FERRY_STALL_SHUTDOWN_MS (0: off).
  StallCheck(int num_workers, int64_t warning_ms, int64_t shutdown_ms);

  bool enabled() const { return report_after_ms() > 0; }
  // How old an operation must be before workers report it: half the earlier of the two
  // times, so a stall's counts are known well before it is due. 0: the check is off.
  int64_t report_after_ms() const;

  // A new membership epoch of `num_workers` (ranks renumbered): every report is forgotten.
  void Restart(int num_workers);
  // Worker `rank`'s report, received at `now_ms` (replaces its earlier one).
  void Update(int rank, const proto::StallReport& report, int64_t now_ms);
  // The labels whose submitted counts workers report next (every label reported pending).
  std::vector<std::string> Watched() const;

  struct Stall {
    std::string label;
    uint64_t seq = 0;
    int64_t waited_ms = 0;      // the longest any waiting rank has waited
    std::vector<int> waiting;   // ranks that submitted it, ascending
    std::vector<int> missing;   // ranks that have not, ascending
    bool shutdown = false;      // waited at least shutdown_ms: end the job
    std::string message;        // the whole warning (or the job's failure reason)
  };
  // The stalls to report at `now_ms` (see the file comment).
  std::vector<Stall> Check(int64_t now_ms);

 private:
  using OpKey = std::pair<std::string, uint64_t>;  // (label, seq)
  struct Pending {
    OpKey op;
    int64_t age_ms = 0;  // at the report's received_ms
  };
  struct Report {
    bool known = false;
    int64_t received_ms = 0;
    int64_t idle_ms = 0;
    std::vector<Pending> pending;
    std::map<std::string, uint64_t> counts;  // label -> submitted
  };
  std::string Message(const Stall& s) const;

  int num_workers_;
  const int64_t warning_ms_;
  const int64_t shutdown_ms_;
  std::vector<Report> reports_;  // by rank
  std::map<OpKey, int64_t> last_warned_ms_;
};

}  // namespace ferry
