#include "server/key_state.h"

namespace ferry {

PushVerdict KeyState::Classify(int rank, uint32_t push_round, uint64_t push_length,
                               DataType push_dtype, uint64_t push_hash, int num_workers) {
  if (!failure.empty()) return PushVerdict::kFailed;
  if (!defined) {
    defined = true;
    length = push_length;
    dtype = push_dtype;
    tensor_hash = push_hash;
    defined_by_rank = rank;
    pushed.assign(num_workers, false);
  }
  if (push_length != length || push_dtype != dtype || push_hash != tensor_hash) {
    return PushVerdict::kMismatch;
  }
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
  if (waiting.empty()) return false;
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
  round++;
  rounds_completed++;
}

void KeyState::Restart(int num_workers) {
  round = 0;
  pushed.assign(num_workers, false);
  has_last = false;
  last_sum = Buffer();
  last_contributors = 0;
}

}  // namespace ferry
