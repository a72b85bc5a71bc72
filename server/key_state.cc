#include "server/key_state.h"

namespace ferry {

int EngineForKey(uint64_t key, int engines) {
  uint64_t x = key;  // splitmix64's finalizer: every input bit moves every output bit
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<int>(x % static_cast<uint64_t>(engines));
}

bool KeyDefinition::Define(int rank, uint64_t push_length, DataType push_dtype,
                           uint64_t push_hash) {
  if (!defined) {
    defined = true;
    length = push_length;
    dtype = push_dtype;
    tensor_hash = push_hash;
    defined_by_rank = rank;
  }
  return push_length == length && push_dtype == dtype && push_hash == tensor_hash;
}

PushVerdict KeyState::Classify(int rank, uint32_t push_round, uint64_t push_length,
                               DataType push_dtype, uint64_t push_hash, int num_workers) {
  if (!failure.empty()) return PushVerdict::kFailed;
  if (!defined) {
    pushed.assign(num_workers, false);
    held.assign(num_workers, Buffer());
  }
  if (!Define(rank, push_length, push_dtype, push_hash)) return PushVerdict::kMismatch;
  if (push_round == round) return pushed[rank] ? PushVerdict::kDuplicate : PushVerdict::kAccumulate;
  if (push_round > round) return PushVerdict::kAhead;
  return push_round + 1 == round && has_last ? PushVerdict::kPrevious : PushVerdict::kStale;
}

PushVerdict KeyState::ClassifyPull(int rank, uint32_t pull_round) const {
  if (!failure.empty()) return PushVerdict::kFailed;
  if (!defined) return PushVerdict::kStale;
  if (pull_round == round && pushed[rank]) return PushVerdict::kDuplicate;
  if (pull_round + 1 == round && has_last) return PushVerdict::kPrevious;
  return pull_round > round ? PushVerdict::kAhead : PushVerdict::kStale;
}

bool KeyState::Record(int rank, const PendingReply& reply, const std::vector<bool>& joined) {
  pushed[rank] = true;
  waiting.push_back(reply);
  bytes_pushed += length;
  return Complete(joined);
}

bool KeyState::Complete(const std::vector<bool>& joined) const {
  if (waiting.empty() || summing) return false;
  for (size_t r = 0; r < pushed.size(); ++r) {
    if (!pushed[r] && !(r < joined.size() && joined[r])) return false;
  }
  return true;
}

void KeyState::NextRound(int num_workers) {
  last_contributors = static_cast<uint32_t>(waiting.size());
  last_sum = std::move(sum);  // the old last_sum is freed once ZeroMQ released it
  sum = Buffer();
  has_last = true;
  waiting.clear();
  pushed.assign(num_workers, false);
  held.assign(num_workers, Buffer());
  next_rank = 0;
  round++;
  rounds_completed++;
}

void KeyState::Restart(int num_workers) {
  summing = false;
  ++generation;
  round = 0;
  pushed.assign(num_workers, false);
  held.assign(num_workers, Buffer());
  next_rank = 0;
  has_last = false;
  last_sum = Buffer();
  last_contributors = 0;
}

}  // namespace ferry
