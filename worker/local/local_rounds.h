#pragma once

// LocalRounds: the local root's book of rounds (local_root.h). The k-th call of a tensor
// (or of the barrier) on every local rank forms round k of that key; a round starts once
// every local rank has submitted it, in round order per key. This class only keeps the
// book: the local root starts, finishes and pops rounds, under its own lock (the class
// has none and is not thread-safe).

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/types/data_type.h"
#include "worker/local/local_link.h"
#include "worker/operation_table.h"

namespace ferry {

struct LocalRound {
  LocalOp kind = LocalOp::kHello;  // kHello: no submission yet
  DataType dtype = DataType::kFloat32;
  uint64_t count = 0;
  bool average = false;
  int root = -1;
  std::vector<bool> have;       // by local rank: submitted
  std::vector<uint64_t> seq;    // by local rank: its operation number (echoed in DONE)
  const void* input = nullptr;  // the root's
  void* output = nullptr;       // the root's
  uint64_t op_id = 0;           // the root's operation (0: the root has not called yet)
  Handle handle = 0;            // the root's push_pull, in its table (0: none)
  std::optional<int> priority;  // the root's
  bool started = false;
  Handle worker_handle = 0;  // push_pull: the Worker's operation on the staging buffer
};

// The rounds of one key.
struct LocalRoundQueue {
  uint64_t base = 0;  // the round number of q.front()
  std::deque<LocalRound> q;
  std::vector<uint64_t> next;  // by local rank: its next round number
  std::vector<char> staging;   // the front round's sum (local_root.h's invariants)
  // Drops the front round (it finished).
  void Pop() {
    q.pop_front();
    base++;
  }
};

class LocalRounds {
 public:
  // `pid_of(lr)`: local rank lr's process id, for messages.
  LocalRounds(int local_size, std::function<int(int)> pid_of)
      : local_size_(local_size), pid_of_(std::move(pid_of)) {}

  // Adds local rank `lr`'s submission to its next round of `key`. A submission that
  // disagrees with the round's others throws FerryError (kMismatch) naming both.
  LocalRound& Submit(const std::string& key, int lr, LocalOp kind, DataType dtype, uint64_t count,
                     bool average, int root, uint64_t seq);
  // The rounds of `key` (made empty if there are none yet).
  LocalRoundQueue& Of(const std::string& key) { return by_key_[key]; }
  // The rounds of `key`, or null.
  LocalRoundQueue* Find(const std::string& key);
  // What the root's operation in the round `is_op` picks waits for, for a timeout.
  // `barrier_key` is named "barrier".
  std::string Describe(const std::function<bool(const LocalRound&)>& is_op,
                       const std::string& barrier_key) const;

 private:
  std::string Missing(const LocalRound& round) const;  // local ranks not submitted yet

  const int local_size_;
  const std::function<int(int)> pid_of_;
  std::map<std::string, LocalRoundQueue> by_key_;  // by tensor name (or barrier key)
};

}  // namespace ferry
