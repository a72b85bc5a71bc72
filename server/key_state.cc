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
  if (push_round < round || (push_round == round && pushed[rank])) return PushVerdict::kDuplicate;
  if (push_round > round) return PushVerdict::kAhead;
  return PushVerdict::kAccumulate;
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
  waiting.clear();
  pushed.assign(num_workers, false);
  sum = Buffer();  // ZeroMQ's references keep the sent bytes alive until released
  round++;
  rounds_completed++;
}

}  // namespace ferry
