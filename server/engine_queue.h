#pragma once

// EngineQueue: the order in which an engine thread takes its work.
//
// Most urgent first: an item with a larger priority (the envelope's `priority`,
// larger = more urgent, as on the worker) goes before a smaller one; equal priorities
// keep arrival order.
//
// Fences: a fence item (a JOIN) splits the queue. Invariant: every item pushed
// before a fence is popped before it, and every item pushed after a fence is popped
// after it; priority reorders only between two fences. Why: a JOIN must follow the
// pushes its worker sent before it (they count in their rounds) and precede the
// pushes sent after it (after the last JOIN the keys restart at round 0, and the
// next epoch's pushes belong to the restarted rounds). A fence holds back every
// worker's pushes, not only its own worker's: JOINs are rare, and "everything
// before, nothing after" is the invariant that needs no reasoning about who sent what.
//
// Reordering pushes is safe otherwise: a worker has at most one round of a key in
// flight (it pushes round r+1 only after receiving round r), so pushes that overtake
// each other belong to different keys, or are resends of the same round.
//
// Not thread-safe: the engine's mutex guards it.

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace ferry {

template <typename T>
class EngineQueue {
 public:
  void Push(T item, int32_t priority) { Add(std::move(item), priority, false); }
  // A fence: popped after everything pushed before it, before everything after it.
  void PushFence(T item) {
    Add(std::move(item), 0, true);
    ++fences_;  // items pushed from now on sort after the fence
  }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  // REQUIRES: !empty().
  T Pop() {
    std::pop_heap(heap_.begin(), heap_.end(), Later);
    T item = std::move(heap_.back().item);
    heap_.pop_back();
    return item;
  }

 private:
  struct Entry {
    uint64_t segment;  // fences pushed before this item
    bool fence;        // a fence sorts after every item of its segment
    int32_t priority;
    uint64_t seq;  // arrival order
    T item;
  };
  // Heap order: true when `a` goes after `b`.
  static bool Later(const Entry& a, const Entry& b) {
    if (a.segment != b.segment) return a.segment > b.segment;
    if (a.fence != b.fence) return a.fence;
    if (a.priority != b.priority) return a.priority < b.priority;
    return a.seq > b.seq;
  }
  void Add(T item, int32_t priority, bool fence) {
    heap_.push_back(Entry{fences_, fence, priority, next_seq_++, std::move(item)});
    std::push_heap(heap_.begin(), heap_.end(), Later);
  }

  std::vector<Entry> heap_;
  uint64_t fences_ = 0;
  uint64_t next_seq_ = 0;
};

}  // namespace ferry
