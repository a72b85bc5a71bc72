#pragma once

// OrderQueues: the transport's priority order for tensor bytes (van.h, "Order"). One
// queue per destination node; each holds items (a message's frames) with their priority
// and payload bytes, and hands them over most urgent first (common/types/urgency.h: the
// order the worker's scheduling uses too) while fewer than `watermark_bytes` payload
// bytes handed to that destination are unreleased.
//
// Invariants:
//  - A destination hands an item over only while its unreleased bytes are below the
//    watermark (so at most one item's bytes beyond it are ever out), and only while the
//    queues are not held (Hold: tests).
//  - Pump adds an item's bytes to its destination's `unreleased` before hand_over sees
//    it; whoever releases the bytes (ZeroMQ's release hook, any thread) subtracts them and
//    wakes the owner, which pumps again. A destination never stalls for good as long as
//    every handed-over item is released once (a dead connection releases what it held).
//  - Destinations are made at first use and kept for the object's life: release hooks
//    hold a pointer to their `unreleased`.
//
// Threads: one owner thread (the Van's IO thread) calls everything; only `unreleased` is
// touched from other threads (atomic). No sockets: tests drive it directly.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
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

   private:
    friend class OrderQueues;
    struct Entry {
      uint64_t bytes;
      Item item;
    };
    std::string name_;
    int peer_ = -1;
    std::atomic<uint64_t> unreleased_{0};
    std::map<Urgency, Entry, ByUrgency> queue_;  // most urgent first
    std::set<uint64_t> arrivals_;                // the arrivals in queue_: oldest first
  };

  explicit OrderQueues(uint64_t watermark_bytes) : watermark_bytes_(watermark_bytes) {}

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

  // Queues `item` (`bytes` of payload) for `d` behind the items more urgent than it.
  void Push(Destination& d, int64_t priority, uint64_t bytes, Item item) {
    const uint64_t arrival = next_arrival_++;
    d.queue_.emplace(Urgency{priority, arrival}, typename Destination::Entry{bytes, std::move(item)});
    d.arrivals_.insert(arrival);
  }

  // Hands `d`'s items over, most urgent first, while the watermark lets them:
  // hand_over(d, item) after their bytes were added to d.unreleased(). Returns how many
  // went before an item that arrived earlier (the reordering the queue is for).
  template <typename HandOver>
  uint64_t Pump(Destination& d, HandOver&& hand_over) {
    uint64_t overtook = 0;
    while (!held_ && !d.queue_.empty() &&
           d.unreleased_.load(std::memory_order_relaxed) < watermark_bytes_) {
      auto first = d.queue_.begin();
      if (first->first.arrival != *d.arrivals_.begin()) overtook++;
      d.arrivals_.erase(first->first.arrival);
      typename Destination::Entry entry = std::move(first->second);
      d.queue_.erase(first);
      d.unreleased_.fetch_add(entry.bytes, std::memory_order_relaxed);
      hand_over(d, std::move(entry.item));
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
    }
  }

  // While held, nothing is handed over (items queue up). For tests.
  void Hold(bool held) { held_ = held; }

 private:
  const uint64_t watermark_bytes_;
  std::unordered_map<std::string, std::unique_ptr<Destination>> destinations_;
  uint64_t next_arrival_ = 0;
  bool held_ = false;
};

}  // namespace ferry
