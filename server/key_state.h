#pragma once

// KeyState: one key's round bookkeeping on a server.
//
// Round invariant: a worker pushes round r+1 of a key only after it received the
// sum of round r, and the server sends that sum only when round r is complete. So
// at any time a key accumulates exactly one round (`round`), and a push for any
// other round is either a duplicate (r < round, or already counted) or a protocol
// error (r > round).
//
// Buffer invariant: the first push of a round becomes the round's sum (the received
// ZeroMQ frame is adopted, no copy); later pushes are added into it. The replies
// share that buffer and ZeroMQ holds it until the last reply is on the wire, while
// the next round adopts a fresh frame: round r+1 fills while round r is still
// being sent, and no buffer is reused before ZeroMQ released it.

#include <cstdint>
#include <string>
#include <vector>

#include "common/reduce/reduce.h"
#include "common/transport/buffer.h"

namespace ferry {

struct PendingReply {
  int worker_id = -1;
  std::string identity;   // the worker's connection on the server's ROUTER
  uint64_t request_id = 0;
};

struct KeyState {
  // Fixed by the first push ever seen for the key; every later push must agree.
  bool defined = false;
  uint64_t length = 0;
  DataType dtype = DataType::kFloat32;
  uint64_t tensor_hash = 0;
  int defined_by_rank = -1;

  uint32_t round = 0;                 // the round being accumulated
  Buffer sum;                         // this round's running sum (empty: no push yet)
  std::vector<bool> pushed;           // by worker rank, for this round
  std::vector<PendingReply> waiting;  // pushers of this round, in arrival order

  std::string failure;                // non-empty: the key is failed for good
  uint64_t rounds_completed = 0;
  uint64_t bytes_pushed = 0;
};

}  // namespace ferry
