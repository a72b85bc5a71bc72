#include "server/row_key_state.h"

#include <cstring>
#include <unordered_map>

#include "common/util/status.h"

namespace ferry {

std::vector<Buffer> SumRows(const std::vector<const RowsPush*>& pushes, uint64_t row_elements,
                            DataType dtype) {
  const size_t row_bytes = row_elements * DataTypeSize(dtype);
  uint64_t listed = 0;
  for (const RowsPush* p : pushes) listed += p->num_rows;
  // Invariant: slot_of[id] < distinct, and sums holds row id's running sum at that slot.
  std::unordered_map<int64_t, uint64_t> slot_of;
  slot_of.reserve(listed);
  Buffer sums = Buffer::Allocate(listed * row_bytes);
  uint64_t distinct = 0;
  std::vector<std::vector<uint64_t>> slots(pushes.size());
  for (size_t i = 0; i < pushes.size(); ++i) {
    const RowsPush& p = *pushes[i];
    slots[i].resize(p.num_rows);
    for (uint64_t j = 0; j < p.num_rows; ++j) {
      const uint8_t* row = p.values() + j * row_bytes;
      auto [it, fresh] = slot_of.emplace(p.ids()[j], distinct);
      uint8_t* dst = sums.bytes() + it->second * row_bytes;
      if (fresh) {
        std::memcpy(dst, row, row_bytes);
        distinct++;
      } else {
        SumInto(dst, row, row_elements, dtype);
      }
      slots[i][j] = it->second;
    }
  }
  std::vector<Buffer> results(pushes.size());
  for (size_t i = 0; i < pushes.size(); ++i) {
    results[i] = Buffer::Allocate(slots[i].size() * row_bytes);
    for (size_t j = 0; j < slots[i].size(); ++j) {
      std::memcpy(results[i].bytes() + j * row_bytes, sums.bytes() + slots[i][j] * row_bytes,
                  row_bytes);
    }
  }
  return results;
}

PushVerdict RowKeyState::Classify(int rank, uint32_t push_round, uint64_t push_total_rows,
                                  uint64_t push_row_elements, DataType push_dtype,
                                  uint64_t push_hash, int num_workers) {
  if (!failure.empty()) return PushVerdict::kFailed;
  if (!defined) {
    defined = true;
    total_rows = push_total_rows;
    row_elements = push_row_elements;
    dtype = push_dtype;
    tensor_hash = push_hash;
    defined_by_rank = rank;
    pushed.assign(num_workers, false);
    pushes.assign(num_workers, RowsPush());
    last_results.assign(num_workers, Buffer());
    answered_last.assign(num_workers, false);
  }
  if (push_total_rows != total_rows || push_row_elements != row_elements || push_dtype != dtype ||
      push_hash != tensor_hash) {
    return PushVerdict::kMismatch;
  }
  if (push_round == round) return pushed[rank] ? PushVerdict::kDuplicate : PushVerdict::kAccumulate;
  if (push_round > round) return PushVerdict::kAhead;
  return push_round + 1 == round && has_last && answered_last[rank] ? PushVerdict::kPrevious
                                                                    : PushVerdict::kStale;
}

std::string RowKeyState::CheckRowIds(const int64_t* ids, uint64_t num_rows) const {
  for (uint64_t j = 0; j < num_rows; ++j) {
    if (ids[j] < 0 || static_cast<uint64_t>(ids[j]) >= total_rows) {
      return StrCat("row id ", ids[j], " (position ", j, " of ", num_rows,
                    ") is outside the tensor's rows 0..", total_rows - 1);
    }
  }
  return "";
}

bool RowKeyState::Record(int rank, RowsPush push, const std::vector<bool>& joined) {
  pushed[rank] = true;
  rows_pushed += push.num_rows;
  pushes[rank] = std::move(push);
  return Complete(joined);
}

bool RowKeyState::Complete(const std::vector<bool>& joined) const {
  bool any = false;
  for (size_t r = 0; r < pushed.size(); ++r) {
    if (!pushed[r] && !(r < joined.size() && joined[r])) return false;
    any = any || pushed[r];
  }
  return any;
}

int RowKeyState::Contributors() const {
  int n = 0;
  for (bool p : pushed) n += p ? 1 : 0;
  return n;
}

std::vector<Buffer> RowKeyState::SumRound() const {
  std::vector<const RowsPush*> in_rank_order;
  std::vector<int> ranks;
  for (size_t r = 0; r < pushed.size(); ++r) {
    if (!pushed[r]) continue;
    in_rank_order.push_back(&pushes[r]);
    ranks.push_back(static_cast<int>(r));
  }
  std::vector<Buffer> sums = SumRows(in_rank_order, row_elements, dtype);
  std::vector<Buffer> by_rank(pushed.size());
  for (size_t i = 0; i < ranks.size(); ++i) by_rank[ranks[i]] = std::move(sums[i]);
  return by_rank;
}

void RowKeyState::NextRound(std::vector<Buffer> results, int num_workers) {
  last_contributors = static_cast<uint32_t>(Contributors());
  last_results = std::move(results);
  answered_last = pushed;
  has_last = true;
  pushed.assign(num_workers, false);
  pushes.assign(num_workers, RowsPush());
  round++;
  rounds_completed++;
}

void RowKeyState::Restart(int num_workers) {
  round = 0;
  pushed.assign(num_workers, false);
  pushes.assign(num_workers, RowsPush());
  has_last = false;
  last_results.assign(num_workers, Buffer());
  answered_last.assign(num_workers, false);
  last_contributors = 0;
}

void RowKeyState::DropPushes() {
  for (RowsPush& p : pushes) p = RowsPush();
}

}  // namespace ferry
