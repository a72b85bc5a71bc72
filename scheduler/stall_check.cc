#include "scheduler/stall_check.h"

#include <algorithm>

#include "common/cluster/point_to_point_label.h"
#include "common/util/strings.h"

namespace ferry {

namespace {

// "1, 3, 4" (the first 16, then "and N more").
std::string Ranks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) s += StrCat(i ? ", " : "", ranks[i]);
  if (ranks.size() > 16) s += StrCat(" and ", ranks.size() - 16, " more");
  return s;
}

// "61 s", or "1.5 s" below ten seconds.
std::string Seconds(int64_t ms) {
  if (ms >= 10000) return StrCat(ms / 1000, " s");
  return StrCat(ms / 1000, ".", (ms % 1000) / 100, " s");
}

std::string Cut(const std::string& label) {
  return label.size() <= StallCheck::kMaxLabelBytes ? label
                                                    : label.substr(0, StallCheck::kMaxLabelBytes);
}

}  // namespace

StallCheck::StallCheck(int num_workers, int64_t warning_ms, int64_t shutdown_ms)
    : num_workers_(num_workers),
      warning_ms_(warning_ms),
      shutdown_ms_(shutdown_ms),
      reports_(static_cast<size_t>(std::max(0, num_workers))) {}

void StallCheck::Restart(int num_workers) {
  num_workers_ = num_workers;
  reports_.assign(static_cast<size_t>(std::max(0, num_workers)), Report());
  last_warned_ms_.clear();
}

int64_t StallCheck::report_after_ms() const {
  int64_t first = warning_ms_ > 0 ? warning_ms_ : shutdown_ms_;
  if (warning_ms_ > 0 && shutdown_ms_ > 0) first = std::min(warning_ms_, shutdown_ms_);
  return first > 0 ? std::max<int64_t>(1, first / 2) : 0;
}

void StallCheck::Update(int rank, const proto::StallReport& report, int64_t now_ms) {
  if (rank < 0 || rank >= num_workers_) return;
  Report& r = reports_[static_cast<size_t>(rank)];
  r = Report{};
  r.known = true;
  r.received_ms = now_ms;
  r.idle_ms = std::max<int64_t>(0, report.idle_ms());
  for (int i = 0; i < report.pending_size() && r.pending.size() < kMaxReported; ++i) {
    const proto::PendingOperation& p = report.pending(i);
    if (p.label().empty()) continue;
    r.pending.push_back(Pending{{Cut(p.label()), p.seq()}, std::max<int64_t>(0, p.age_ms())});
  }
  for (int i = 0; i < report.counts_size() && r.counts.size() < kMaxWatched; ++i) {
    r.counts[Cut(report.counts(i).label())] = report.counts(i).count();
  }
}

std::vector<std::string> StallCheck::Watched() const {
  std::set<std::string> labels;
  for (const Report& r : reports_) {
    for (const Pending& p : r.pending) {
      if (labels.size() >= kMaxWatched) break;
      labels.insert(p.op.first);
    }
  }
  return {labels.begin(), labels.end()};
}

std::vector<StallCheck::Stall> StallCheck::Check(int64_t now_ms) {
  std::vector<Stall> out;
  const int64_t threshold = report_after_ms() * 2;
  if (threshold <= 0) return out;
  // Every operation some worker reported pending: who waits, and for how long.
  std::map<OpKey, Stall> ops;
  for (int rank = 0; rank < num_workers_; ++rank) {
    const Report& r = reports_[static_cast<size_t>(rank)];
    for (const Pending& p : r.pending) {
      Stall& s = ops[p.op];
      s.label = p.op.first;
      s.seq = p.op.second;
      s.waited_ms = std::max(s.waited_ms, p.age_ms + (now_ms - r.received_ms));
      if (s.waiting.empty() || s.waiting.back() != rank) s.waiting.push_back(rank);
    }
  }
  for (auto it = last_warned_ms_.begin(); it != last_warned_ms_.end();) {
    it = ops.count(it->first) ? std::next(it) : last_warned_ms_.erase(it);
  }
  for (auto& [key, s] : ops) {
    if (s.waited_ms < threshold) continue;
    bool unknown = false;
    int src = -1, dst = -1;  // a point-to-point operation involves only its two ranks
    const bool pair = ParsePointToPointLabel(s.label, &src, &dst);
    for (int rank = 0; rank < num_workers_ && !unknown; ++rank) {
      if (std::binary_search(s.waiting.begin(), s.waiting.end(), rank)) continue;
      if (pair && rank != src && rank != dst) continue;
      const Report& r = reports_[static_cast<size_t>(rank)];
      auto count = r.counts.find(s.label);
      if (!r.known || count == r.counts.end()) {
        unknown = true;  // its next report will say
      } else if (count->second < s.seq) {
        // A rank that has not joined but still submits operations is training on.
        const bool training = s.label == "join" && r.idle_ms + (now_ms - r.received_ms) < threshold;
        if (!training) s.missing.push_back(rank);
      }
    }
    if (unknown || s.missing.empty()) continue;
    s.shutdown = shutdown_ms_ > 0 && s.waited_ms >= shutdown_ms_;
    auto warned = last_warned_ms_.find(key);
    const bool due = warning_ms_ > 0 && s.waited_ms >= warning_ms_ &&
                     (warned == last_warned_ms_.end() || now_ms - warned->second >= warning_ms_);
    if (!due && !s.shutdown) continue;
    last_warned_ms_[key] = now_ms;
    s.message = Message(s);
    out.push_back(std::move(s));
  }
  return out;
}

std::string StallCheck::Message(const Stall& s) const {
  int src = -1, dst = -1;
  if (ParsePointToPointLabel(s.label, &src, &dst)) {
    const bool sender_missing = !s.missing.empty() && s.missing.front() == src;
    std::string m = StrCat("stall: ", s.label, " (message ", s.seq, " under this name) has waited ",
                           Seconds(s.waited_ms), " on rank ", Ranks(s.waiting), " for rank ",
                           Ranks(s.missing), ", which has not ",
                           sender_missing ? "sent it (no matching send)"
                                          : "received it (no matching receive)");
    if (s.shutdown) return StrCat(m, "; ending the job (FERRY_STALL_SHUTDOWN_MS=", shutdown_ms_, ")");
    return StrCat(m, " (FERRY_STALL_WARNING_MS=", warning_ms_, ")");
  }
  std::string m = StrCat(
      "stall: ", s.label, " (operation ", s.seq, " under this name) has waited ",
      Seconds(s.waited_ms), " on rank", s.waiting.size() > 1 ? "s " : " ", Ranks(s.waiting),
      " for rank", s.missing.size() > 1 ? "s " : " ", Ranks(s.missing), ", which ",
      s.missing.size() > 1 ? "have" : "has", " not submitted it (every rank must make the same "
      "calls in the same order; a rank that took another branch, or is stuck, stalls the rest)");
  if (s.shutdown) return StrCat(m, "; ending the job (FERRY_STALL_SHUTDOWN_MS=", shutdown_ms_, ")");
  return StrCat(m, " (FERRY_STALL_WARNING_MS=", warning_ms_, ")");
}

}  // namespace ferry
