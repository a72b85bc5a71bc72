#pragma once

// RowKeyState: one sparse-rows key's round bookkeeping on a server (ROWS_PUSH,
// common/transport/rows_message.h). A rows key is one tensor's rows on this server.
//
// Rounds follow KeyState's round invariant (key_state.h): every worker pushes each
// round of the key once (possibly with zero rows), round r+1 only after it received
// the sum of round r, so the key accumulates exactly one round at a time.
//
// Sums: a round's pushes are held (their received frames, no copy) until every worker
// has pushed or joined; then SumRows adds them in worker-rank order, so the bits of a
// sum never depend on arrival order (as FERRY_DETERMINISTIC does for dense keys).
// Only the rows someone listed are materialised: memory and time grow with the rows
// pushed, never with the tensor's row count. Each pusher gets exactly its listed rows.
//
// Resends: a resent push of the open round is a duplicate (acknowledged again, not
// added). Once the round completed, each pusher's reply is kept until the next round
// completes, and a resent push of the previous round is answered with it: no worker
// can still wait for an older one.
//
// Every field is touched by the engine thread that owns the key only.

#include <cstdint>
#include <string>
#include <vector>

#include "common/reduce/reduce.h"
#include "common/transport/buffer.h"
#include "server/key_state.h"

namespace ferry {

// One worker's push of a round: its ROWS_PUSH frame (row ids, then values).
struct RowsPush {
  Buffer payload;
  uint64_t num_rows = 0;
  PendingReply reply;

  const int64_t* ids() const { return static_cast<const int64_t*>(payload.data()); }
  const uint8_t* values() const { return payload.bytes() + num_rows * sizeof(int64_t); }
};

// Sums the rows of `pushes`, in the order given: the first occurrence of a row id is
// copied, every later one (in a later push, or again in the same push) is added with
// the reduce kernels. Returns, for each push, the sums of exactly the rows it listed,
// in its order (num_rows x row_elements values). REQUIRES: every push has
// row_elements-element rows of `dtype`.
std::vector<Buffer> SumRows(const std::vector<const RowsPush*>& pushes, uint64_t row_elements,
                            DataType dtype);

struct RowKeyState {
  // Fixed by the first push ever seen for the key; every later push must agree.
  bool defined = false;
  uint64_t total_rows = 0;
  uint64_t row_elements = 0;
  DataType dtype = DataType::kFloat32;
  uint64_t tensor_hash = 0;
  int defined_by_rank = -1;

  uint32_t round = 0;            // the round being accumulated
  std::vector<bool> pushed;      // by worker rank, for this round
  std::vector<RowsPush> pushes;  // by worker rank: this round's held pushes

  bool has_last = false;             // round - 1 completed and its replies are kept
  std::vector<Buffer> last_results;  // by rank: its reply of round - 1 (empty: none)
  std::vector<bool> answered_last;   // by rank: it pushed round - 1
  uint32_t last_contributors = 0;

  std::string failure;  // non-empty: the key is failed for good
  uint64_t rounds_completed = 0;
  uint64_t rows_pushed = 0;

  // Defines the key on its first push (num_workers sizes the per-rank vectors), then
  // classifies the push like KeyState::Classify: kAccumulate, kDuplicate, kPrevious,
  // kStale, kAhead, kMismatch or kFailed.
  PushVerdict Classify(int rank, uint32_t push_round, uint64_t push_total_rows,
                       uint64_t push_row_elements, DataType push_dtype, uint64_t push_hash,
                       int num_workers);
  // "" when every id is in [0, total_rows), else the reason naming the first bad one.
  std::string CheckRowIds(const int64_t* ids, uint64_t num_rows) const;
  // Holds an accepted push of `rank`; true when the round is complete.
  bool Record(int rank, RowsPush push, const std::vector<bool>& joined);
  // Every worker pushed this round or joined, and at least one pushed.
  bool Complete(const std::vector<bool>& joined) const;
  // The round's replies, by rank (empty Buffer for ranks that did not push): SumRows
  // over the held pushes in rank order.
  std::vector<Buffer> SumRound() const;
  // Keeps `results` for resends and starts the next round.
  void NextRound(std::vector<Buffer> results, int num_workers);
  // Every worker joined: rounds start over at 0, nothing from before is resent.
  // REQUIRES: no push held (the server fails such a key first).
  void Restart(int num_workers);
  // Drops every held push (a failed key).
  void DropPushes();
  int Contributors() const;  // pushes held this round
};

}  // namespace ferry
