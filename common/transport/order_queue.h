#pragma once

// OrderQueues: the transport's priority order for tensor bytes (van.h, "Order"). One
// queue per destination node; each holds items (a message's frames) with their priority
// and payload bytes, and hands them over most urgent first (common/types/urgency.h: the
// order the worker's scheduling uses too) while fewer than `watermark_bytes` payload
// bytes handed to that destination are unreleased.
//
// Invariants:
//  - A destination hands an item over only while its unreleased bytes are below the
//    watermark (so at most one item's bytes beyond it are ever out; watermark 0: no
//    limit), only while the queues are not held (Hold: tests), and, unless the item is
//    critical, only while no open flow shares a link with the destination.
//  - Pump adds an item's bytes to its destination's `unreleased` before hand_over sees
//    it; whoever releases the bytes (ZeroMQ's release hook, any thread) subtracts them and
//    wakes the owner, which pumps again. A destination never stalls for good as long as
//    every handed-over item is released once (a dead connection releases what it held) and
//    the owner closes every flow that shares its links (van.h, Links: measured gone, or
//    its connection down).
//  - Destinations are made at first use and kept for the object's life: release hooks
//    hold a pointer to their `unreleased`.
//
//
// Links and critical flows (point-to-point scheduling, van.h "Links"): a destination may be
// given the network links its path crosses (SetLinks; ids are the caller's: a host's
// uplink, the peer host's downlink; a destination on this host crosses none). An item
// pushed as critical goes before every other item of its destination and opens a flow on
// it; while a destination's flow is open, no non-critical item of any destination that
// shares a link with it is handed over (it is held back, counted in held_items), and critical
// items are never held. The owner closes a flow (CloseFlow) once it measured that the flow's
// bytes left the links (no critical item queued, none unreleased, the kernel drained), then
// pumps every destination again.
//  - A flow is open exactly while flow_open(); open_links_ counts, per link, the open
//    flows whose destination crosses it (SetLinks on a destination with an open flow moves
//    its counts to the new links: a connection is often placed just after its first send).
//
// Threads: one owner thread (the Van's IO thread) calls everything; only `unreleased` and
// `critical_unreleased` are touched from other threads (atomic). No sockets: tests drive
// it directly.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "common/types/urgency.h"

namespace ferry {

template <typename Item>
class OrderQueues {
 public:
  class Destination {
   public:
    const std::string& name() const { return name_; }
    int peer() const { return peer_; }
    // Payload bytes handed over and not yet released; release hooks subtract from it.
    std::atomic<uint64_t>& unreleased() { return unreleased_; }
    size_t queued() const { return queue_.size(); }
    // Critical payload bytes handed over and not yet released (the hook subtracts them too).
    std::atomic<uint64_t>& critical_unreleased() { return critical_unreleased_; }
    uint32_t critical_queued() const { return critical_queued_; }
    bool flow_open() const { return flow_open_; }
    const std::vector<int>& links() const { return links_; }

   private:
    friend class OrderQueues;
    struct Entry {
      uint64_t bytes;
      bool critical;
      Item item;
    };
    std::string name_;
    int peer_ = -1;
    std::atomic<uint64_t> unreleased_{0};
    std::atomic<uint64_t> critical_unreleased_{0};
    uint32_t critical_queued_ = 0;
    bool flow_open_ = false;
    std::vector<int> links_;
    std::map<Urgency, Entry, ByUrgency> queue_;  // most urgent first
    std::set<uint64_t> arrivals_;                // the arrivals in queue_: oldest first
  };

  // `watermark_bytes` 0: no watermark (items wait only for a held link, or Hold).
  explicit OrderQueues(uint64_t watermark_bytes) : watermark_bytes_(watermark_bytes) {}
  // A new watermark (0: none), for what is handed over from now on.
  void SetWatermark(uint64_t watermark_bytes) { watermark_bytes_ = watermark_bytes; }
  uint64_t watermark_bytes() const { return watermark_bytes_; }

  // The destination `name` (made at first use with `peer`, the caller's reference to it).
  Destination& At(const std::string& name, int peer) {
    std::unique_ptr<Destination>& d = destinations_[name];
    if (!d) {
      d = std::make_unique<Destination>();
      d->name_ = name;
      d->peer_ = peer;
    }
    return *d;
  }

  // Queues `item` (`bytes` of payload) for `d` behind the items more urgent than it; a
  // critical item goes before every non-critical one and opens d's flow.
  void Push(Destination& d, int64_t priority, uint64_t bytes, Item item, bool critical = false) {
    const uint64_t arrival = next_arrival_++;
    const int64_t key = critical ? priority + kCriticalBoost : priority;
    d.queue_.emplace(Urgency{key, arrival},
                     typename Destination::Entry{bytes, critical, std::move(item)});
    d.arrivals_.insert(arrival);
    if (critical) {
      d.critical_queued_++;
      if (!d.flow_open_) OpenFlow(d);
    } else if (HeldBack(d)) {
      held_items_++;
    }
  }

  // The links `d`'s path crosses (an open flow of d holds the new ones from now on).
  void SetLinks(Destination& d, std::vector<int> links) {
    if (d.flow_open_) Count(d, -1);
    if (d.flow_open_ && d.links_.empty() && !links.empty()) flows_opened_++;
    d.links_ = std::move(links);
    if (d.flow_open_) Count(d, +1);
  }

  // Ends d's flow (the owner measured its bytes gone); the caller pumps every destination.
  void CloseFlow(Destination& d) {
    if (!d.flow_open_) return;
    d.flow_open_ = false;
    Count(d, -1);
    open_flows_--;
  }

  // Every destination whose flow is open, for the owner's measurements.
  std::vector<Destination*> OpenFlows() const {
    std::vector<Destination*> open;
    if (open_flows_ == 0) return open;
    for (auto& [name, d] : destinations_) {
      if (d->flow_open_) open.push_back(d.get());
    }
    return open;
  }
  size_t open_flows() const { return open_flows_; }
  // Flows that held links so far (a flow to a destination crossing none holds nothing and
  // is not counted), and non-critical items a flow held back (those queued when it opened,
  // and those queued while it ran; an item held by two flows counts twice).
  uint64_t flows_opened() const { return flows_opened_; }
  uint64_t held_items() const { return held_items_; }

  // Hands `d`'s items over, most urgent first, while the watermark and the links let them:
  // hand_over(d, item, critical) after their bytes were added to d.unreleased() (and, if
  // critical, to d.critical_unreleased()). Returns how many went before an item that
  // arrived earlier (the reordering the queue is for).
  template <typename HandOver>
  uint64_t Pump(Destination& d, HandOver&& hand_over) {
    uint64_t overtook = 0;
    while (!held_ && !d.queue_.empty() &&
           (watermark_bytes_ == 0 ||
            d.unreleased_.load(std::memory_order_relaxed) < watermark_bytes_)) {
      auto first = d.queue_.begin();
      if (!first->second.critical && HeldBack(d)) break;
      if (first->first.arrival != *d.arrivals_.begin()) overtook++;
      d.arrivals_.erase(first->first.arrival);
      typename Destination::Entry entry = std::move(first->second);
      d.queue_.erase(first);
      d.unreleased_.fetch_add(entry.bytes, std::memory_order_relaxed);
      if (entry.critical) {
        d.critical_queued_--;
        d.critical_unreleased_.fetch_add(entry.bytes, std::memory_order_relaxed);
      }
      hand_over(d, std::move(entry.item), entry.critical);
    }
    return overtook;
  }

  // Pump of every destination.
  template <typename HandOver>
  uint64_t PumpAll(HandOver&& hand_over) {
    uint64_t overtook = 0;
    for (auto& [name, d] : destinations_) overtook += Pump(*d, hand_over);
    return overtook;
  }

  // Drops every queued item (the destinations stay: release hooks may still point at
  // their counts).
  void Clear() {
    for (auto& [name, d] : destinations_) {
      d->queue_.clear();
      d->arrivals_.clear();
      d->critical_queued_ = 0;
      CloseFlow(*d);
    }
  }

  // While held, nothing is handed over (items queue up). For tests.
  void Hold(bool held) { held_ = held; }

 private:
  // Above any int32 priority: critical items sort before every other item.
  static constexpr int64_t kCriticalBoost = int64_t{1} << 40;

  // Opens d's flow; counts the non-critical items it now holds back.
  void OpenFlow(Destination& d) {
    d.flow_open_ = true;
    Count(d, +1);
    open_flows_++;
    if (d.links_.empty()) return;  // holds nothing (yet: SetLinks counts it then)
    flows_opened_++;
    for (auto& [name, other] : destinations_) {
      if (other->queue_.size() > other->critical_queued_ && HeldBack(*other)) {
        held_items_ += other->queue_.size() - other->critical_queued_;
      }
    }
  }
  // Adds `delta` to the open flows of each of d's links.
  void Count(const Destination& d, int delta) {
    for (int link : d.links_) {
      if ((open_links_[link] += delta) == 0) open_links_.erase(link);
    }
  }
  // True when d shares a link with an open flow (its own included).
  bool HeldBack(const Destination& d) const {
    if (open_flows_ == 0) return false;
    for (int link : d.links_) {
      if (open_links_.count(link)) return true;
    }
    return false;
  }

  uint64_t watermark_bytes_;
  std::unordered_map<std::string, std::unique_ptr<Destination>> destinations_;
  uint64_t next_arrival_ = 0;
  bool held_ = false;
  std::map<int, int> open_links_;  // link -> open flows crossing it
  size_t open_flows_ = 0;
  uint64_t flows_opened_ = 0, held_items_ = 0;
};

}  // namespace ferry
