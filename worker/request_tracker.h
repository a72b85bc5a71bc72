#pragma once

// RequestTracker: the requests of one kind (dense partitions, sparse rows) between
// their send and their answer, with their resend timers (compare ps-lite's Resender).
//
// A request's timer (FERRY_RESEND_TIMEOUT_MS, `timeout_ms`; 0 = resends off):
// - starts when its bytes have left this host (OnWire: the payload's release), so a deep
//   local queue causes no resends; a request without a borrowed payload is added with
//   its timer running;
// - restarts when the server acknowledges it (Ack): from then on only the answer may be
//   missing, and a RESEND_SUM asks for it again;
// - backs off: after `attempts` resends the delay is timeout x 2^attempts, up to 32x. A
//   RESEND_SUM for a sum that other workers still hold up is acknowledged again, so the
//   back-off keeps a straggler from making every worker send RESEND_SUM every timeout.
// The answer removes the request (Take); an answer for an unknown request is late (a
// resend crossed the first answer) and is counted by its owner.
//
// `R` derives from TrackedRequest. Not thread-safe: the owner's lock guards it.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>
#include <unordered_map>

#include "common/util/clock.h"

namespace ferry {

// A request's timer is stopped while its bytes are still queued here.
constexpr int64_t kNotOnTheWire = std::numeric_limits<int64_t>::max();

struct TrackedRequest {
  int attempts = 0;                      // resends (or RESEND_SUMs) so far
  bool acked = false;                    // the server holds it; only its answer is missing
  int64_t resend_at_ms = kNotOnTheWire;  // no answer by then: resend
};

template <typename R>
class RequestTracker {
 public:
  explicit RequestTracker(int64_t timeout_ms) : timeout_ms_(timeout_ms) {}

  bool resends_on() const { return timeout_ms_ > 0; }
  // The delay before the next resend after `attempts` resends: doubling, up to 32x.
  int64_t DelayMs(int attempts) const {
    return timeout_ms_ * (int64_t{1} << std::min(attempts, 5));
  }

  // Tracks request `id`; its timer starts now unless `on_wire_later`.
  R& Add(uint64_t id, R r, bool on_wire_later) {
    r.resend_at_ms = on_wire_later ? kNotOnTheWire : NowMs() + timeout_ms_;
    return requests_[id] = std::move(r);
  }
  R* Find(uint64_t id) {
    auto it = requests_.find(id);
    return it == requests_.end() ? nullptr : &it->second;
  }
  // Removes and returns the request (its answer came); empty if unknown (late).
  std::optional<R> Take(uint64_t id) {
    auto it = requests_.find(id);
    if (it == requests_.end()) return std::nullopt;
    R r = std::move(it->second);
    requests_.erase(it);
    return r;
  }
  // Removes and returns every request (elastic training: their operations were abandoned).
  std::vector<R> TakeAll() {
    std::vector<R> all;
    all.reserve(requests_.size());
    for (auto& [id, r] : requests_) all.push_back(std::move(r));
    requests_.clear();
    return all;
  }
  // The request's bytes have left this host: its timer starts (if it was stopped).
  void OnWire(uint64_t id) {
    R* r = Find(id);
    if (r && r->resend_at_ms == kNotOnTheWire) r->resend_at_ms = NowMs() + DelayMs(r->attempts);
  }
  // The server acknowledged the request. Returns it, or null if unknown.
  R* Ack(uint64_t id) {
    R* r = Find(id);
    if (!r) return nullptr;
    r->acked = true;
    r->resend_at_ms = NowMs() + DelayMs(r->attempts);
    return r;
  }
  // For every request overdue at `now_ms`: counts the attempt and calls
  // `resend(id, r)`, which sends again and returns true if the new send's timer starts
  // only once it is on the wire (a payload borrowed again). `skip(r)` true: the request
  // is left alone (`erase_skipped`: and forgotten).
  template <typename Skip, typename Resend>
  void ResendOverdue(int64_t now_ms, Skip skip, bool erase_skipped, Resend resend) {
    for (auto it = requests_.begin(); it != requests_.end();) {
      R& r = it->second;
      if (skip(r)) {
        it = erase_skipped ? requests_.erase(it) : std::next(it);
        continue;
      }
      if (now_ms >= r.resend_at_ms) {
        r.attempts++;
        r.resend_at_ms = now_ms + DelayMs(r.attempts);
        if (resend(it->first, r)) r.resend_at_ms = kNotOnTheWire;
      }
      ++it;
    }
  }

  const std::unordered_map<uint64_t, R>& requests() const { return requests_; }
  std::unordered_map<uint64_t, R>& requests() { return requests_; }

 private:
  const int64_t timeout_ms_;
  std::unordered_map<uint64_t, R> requests_;
};

}  // namespace ferry
