#include "worker/partition_scheduling/policies.h"

#include <algorithm>

#include "common/transport/fused_push.h"
#include "common/util/error.h"

namespace ferry {

PolicyOptions PolicyOptionsOf(const Config::Scheduling& c) {
  PolicyOptions o;
  o.policy = c.policy;
  o.fusion_bytes = static_cast<uint64_t>(c.fusion_bytes);
  o.bucket_bytes = static_cast<uint64_t>(c.bucket_bytes);
  o.bucket_timeout_us = c.bucket_timeout_ms * 1000;
  return o;
}

std::unique_ptr<Policy> MakePolicy(const PolicyOptions& o) {
  switch (o.policy) {
    case SchedulingPolicy::kFifo:
      return std::make_unique<FifoPolicy>();
    case SchedulingPolicy::kPriority:
      return std::make_unique<PriorityPolicy>(o.policy, false, 0);
    case SchedulingPolicy::kCredit:
    case SchedulingPolicy::kTrirace:
      return std::make_unique<PriorityPolicy>(o.policy, true, o.fusion_bytes);
    case SchedulingPolicy::kMercury:
      return std::make_unique<PriorityPolicy>(o.policy, false, o.fusion_bytes);
    case SchedulingPolicy::kP3:
      return std::make_unique<P3Policy>();
    case SchedulingPolicy::kFifoBucket:
      return std::make_unique<BucketPolicy>(o.bucket_bytes, o.bucket_timeout_us);
    case SchedulingPolicy::kUsbyte:
      return std::make_unique<UsbytePolicy>(o.fusion_bytes);
    case SchedulingPolicy::kProphet:
      return std::make_unique<ProphetPolicy>(o.fusion_bytes);
  }
  // Only a value cast from outside the enum gets here (Config parses the names).
  throw FerryError(ErrorCode::kInternal,
                   StrCat("unknown scheduling policy ", static_cast<int>(o.policy)));
}

void FifoPolicy::Ready(const PushTask& task, int64_t) { ready_.push_back(task); }

bool FifoPolicy::Next(const CreditState&, int64_t, Batch* out) {
  if (ready_.empty()) return false;
  out->tasks.push_back(ready_.front());
  ready_.pop_front();
  return true;
}

void PriorityPolicy::Ready(const PushTask& task, int64_t) { ready_.insert(task); }

bool PriorityPolicy::Next(const CreditState& credit, int64_t now_us, Batch* out) {
  auto it = ready_.begin();
  if (it == ready_.end()) return false;
  const uint64_t limit =
      with_credit_ ? LimitAt(credit, it->priority, now_us) : CreditState::kUnlimited;
  // Head of line: when the most urgent task does not fit, nothing goes, so an urgent
  // partition never waits behind a smaller, less urgent one that slipped ahead.
  if (!credit.idle() && !credit.AdmitsWithin(limit, it->bytes)) return false;
  const int server = it->server;
  uint64_t bytes = it->bytes;
  out->tasks.push_back(*it);
  it = ready_.erase(it);
  // A head of fusion_bytes or more can take nothing along: skip the scan.
  if (bytes < fusion_bytes_) Fuse(credit, limit, server, bytes, it, out);
  out->fuse_bytes = fusion_bytes_;
  return true;
}

void PriorityPolicy::Fuse(const CreditState& credit, uint64_t limit, int server, uint64_t bytes,
                          std::set<PushTask, ByPriority>::iterator it, Batch* out) {
  // More tasks for the head's server, in priority order. A task for another server may
  // be passed over (it goes on another connection), but only by strictly less urgent
  // ones, so equal priorities keep their arrival order; a task for this server that
  // cannot be taken ends the batch, so each server sees exact priority order.
  bool passed = false;
  int passed_priority = 0;  // the least urgent task passed over so far
  for (size_t scanned = 0; it != ready_.end() && scanned < kMaxFusionScan; ++scanned) {
    if (it->server != server) {
      passed = true;
      passed_priority = it->priority;
      ++it;
      continue;
    }
    if (bytes + it->bytes > fusion_bytes_ || out->tasks.size() >= kMaxFusedPushes ||
        !credit.AdmitsWithin(limit, bytes + it->bytes) ||
        (passed && passed_priority <= it->priority)) {
      return;
    }
    bytes += it->bytes;
    out->tasks.push_back(*it);
    it = ready_.erase(it);
  }
}

void ProfiledPolicy::Ready(const PushTask& task, int64_t now_us) {
  profile_.OnReady(task.priority, now_us);
  PriorityPolicy::Ready(task, now_us);
}

uint64_t ProfiledPolicy::LimitAt(const CreditState& credit, int priority, int64_t now_us) const {
  if (credit.rate_bytes_per_us <= 0 || !profile_.Predicting(now_us)) return credit.limit_bytes;
  return ProfiledLimit(credit, priority, now_us);
}

namespace {

// The bytes a link at `rate` (bytes per us) carries in `us`.
uint64_t BytesIn(double rate, int64_t us) {
  return us <= 0 ? 0 : static_cast<uint64_t>(rate * static_cast<double>(us));
}

}  // namespace

uint64_t UsbytePolicy::ProfiledLimit(const CreditState& credit, int priority,
                                     int64_t now_us) const {
  int64_t hide_us = 0;  // the compute the batch hides behind
  if (profile_.BackwardOver()) {
    hide_us = static_cast<int64_t>(kForwardPerBackward *
                                   static_cast<double>(profile_.BackwardAfterUs(priority)));
  } else if (const int64_t next = profile_.NextBurstUs(); next != ReadyProfile::kNever) {
    hide_us = next - now_us;
  }
  return std::max(credit.limit_bytes,
                  credit.window_bytes + BytesIn(credit.rate_bytes_per_us, hide_us));
}

uint64_t ProphetPolicy::ProfiledLimit(const CreditState& credit, int, int64_t now_us) const {
  const int64_t next = profile_.NextBurstUs();
  if (next == ReadyProfile::kNever) return credit.limit_bytes;  // after the last burst
  return credit.window_bytes + BytesIn(credit.rate_bytes_per_us, next - now_us);
}

void P3Policy::Ready(const PushTask& task, int64_t) {
  if (task.server >= static_cast<int>(by_server_.size())) by_server_.resize(task.server + 1);
  std::set<PushTask, ByPriority>& mine = by_server_[task.server];
  if (!mine.empty() && ByPriority()(task, *mine.begin())) heads_.erase(*mine.begin());
  mine.insert(task);
  heads_.insert(*mine.begin());
  queued_++;
}

bool P3Policy::Next(const CreditState& credit, int64_t, Batch* out) {
  // The most urgent slice whose server connection is idle: the most urgent head of an
  // idle server's slices (each server's slices in priority order, their heads too).
  for (auto it = heads_.begin(); it != heads_.end(); ++it) {
    if (credit.InFlightTo(it->server) != 0) continue;
    const PushTask task = *it;
    std::set<PushTask, ByPriority>& mine = by_server_[task.server];
    heads_.erase(it);
    mine.erase(mine.begin());
    if (!mine.empty()) heads_.insert(*mine.begin());
    queued_--;
    out->tasks.push_back(task);
    return true;
  }
  return false;
}

void BucketPolicy::Ready(const PushTask& task, int64_t now_us) {
  open_.push_back(task);
  open_bytes_ += task.bytes;
  last_ready_us_ = now_us;
  queued_++;
  // As DDP: the task that reaches the size closes the bucket (so a bucket exceeds
  // bucket_bytes by less than one partition).
  if (open_bytes_ >= bucket_bytes_) CloseBucket();
}

void BucketPolicy::CloseBucket() {
  closed_.push_back(std::move(open_));
  open_.clear();
  open_bytes_ = 0;
}

bool BucketPolicy::Next(const CreditState&, int64_t now_us, Batch* out) {
  if (closed_.empty() && !open_.empty() && now_us >= WakeAtUs()) CloseBucket();
  if (closed_.empty()) return false;
  out->tasks = std::move(closed_.front());
  closed_.pop_front();
  out->fuse_bytes = bucket_bytes_;
  queued_ -= out->tasks.size();
  return true;
}

int64_t BucketPolicy::WakeAtUs() const {
  return open_.empty() ? Policy::WakeAtUs() : last_ready_us_ + timeout_us_;
}

}  // namespace ferry
