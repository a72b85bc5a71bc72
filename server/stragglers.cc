#include "server/stragglers.h"

#include <glog/logging.h>

#include "common/metrics/series.h"
#include "common/transport/message.h"
#include "common/util/strings.h"

namespace ferry {

Stragglers::Stragglers(int ranks, ServerCounters* counters)
    : size_(ranks), counters_(counters), ranks_(new Rank[ranks > 0 ? ranks : 1]) {}

void Stragglers::NoteLate(int rank, uint64_t key, uint32_t round, int64_t late_ms) {
  counters_->late_pushes++;
  if (!Valid(rank)) return;
  Rank& r = ranks_[rank];
  r.late++;
  if (!r.logged.exchange(true)) {
    LOG(WARNING) << "worker " << rank << "'s push of " << KeyName(key) << " round " << round
                 << " came " << late_ms << " ms after the round closed without it "
                 << "(FERRY_BACKUP_WORKERS): dropped, and answered with the round's sum; its "
                 << "late pushes are counted as backup.late_pushes and logged no more";
  }
  if (r.streak.fetch_add(1) + 1 == kNamedAfter) {
    LOG(WARNING) << "worker " << rank << " was late for the last " << kNamedAfter
                 << " rounds in a row: its gradients are dropped; a slower machine, GPU or "
                    "link? (ferry_backup_late_rounds_in_a_row{peer=\"worker-"
                 << rank << "\"})";
  }
}

void Stragglers::NoteContributed(int rank) {
  if (!Valid(rank)) return;
  Rank& r = ranks_[rank];
  if (r.streak.load(std::memory_order_relaxed) == 0) return;
  const uint64_t was = r.streak.exchange(0);
  if (was >= kNamedAfter) {
    LOG(INFO) << "worker " << rank << " is in step again after " << was << " late rounds";
  }
}

uint64_t Stragglers::late_pushes(int rank) const { return Valid(rank) ? ranks_[rank].late.load() : 0; }

uint64_t Stragglers::streak(int rank) const { return Valid(rank) ? ranks_[rank].streak.load() : 0; }

void Stragglers::Report(proto::MetricsSnapshot* out) const {
  static const metrics::Series kLate{
      "ferry_backup_late_pushes_total", metrics::Kind::kCounter,
      "pushes that came after their round closed without them (FERRY_BACKUP_WORKERS), dropped"};
  static const metrics::Series kStreak{
      "ferry_backup_late_rounds_in_a_row", metrics::Kind::kGauge,
      "rounds in a row a worker's push came after its round closed (0: it contributes)"};
  for (int i = 0; i < size_; ++i) {
    const uint64_t late = ranks_[i].late.load();
    if (late == 0) continue;
    const metrics::Labels peer{{"peer", StrCat("worker-", i)}};
    metrics::AddValue(out, kLate, static_cast<double>(late), peer);
    metrics::AddValue(out, kStreak, static_cast<double>(ranks_[i].streak.load()), peer);
  }
}

}  // namespace ferry
