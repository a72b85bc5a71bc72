#pragma once

// Request and Reply: what a key protocol (key_protocol.h) reads and answers, and the one
// builder that turns a Reply into the message that goes out (ToMessage).

#include <cstdint>
#include <string>

#include "common/transport/buffer.h"
#include "common/transport/message.h"
#include "common/util/status.h"
#include "server/key_state.h"

namespace ferry {

// A PUSH, ROWS_PUSH or RESEND_SUM of a worker, as the engine thread hands it to a protocol.
struct Request {
  Message message;
  std::string identity;  // the worker's connection on the server's ROUTER
  int rank = -1;         // the sender's worker rank (the server checked it is a worker)

  const proto::Envelope& envelope() const { return message.envelope; }
  PendingReply reply_to() const {
    return PendingReply{message.envelope.sender(), identity, message.envelope.request_id(),
                        message.envelope.priority()};
  }
};

// One answer to one request. kAck: PUSH_ACK (the push arrived; its sum comes later).
// kSum: PUSH_RESULT (a dense key's sum, or its parameters in async mode). kRowsSum:
// ROWS_RESULT (the rows the pusher listed). kError: ERROR with `code` and `reason`.
// kJoinAck: JOIN_ACK (the server's answer to a JOIN, not a protocol's; sum.round: the
// JOIN's position among those the server received).
struct Reply {
  enum class Kind { kAck, kSum, kRowsSum, kError, kJoinAck };
  Kind kind = Kind::kAck;
  std::string identity;
  int worker_id = -1;    // the requester's node id (-1: unknown), for per-peer metrics
  uint64_t request_id = 0;
  uint64_t key = 0;
  int32_t priority = 0;  // the request's; sums are sent most urgent first (van.h, "Order")
  uint64_t offset = 0;   // kAck, kSum: the frame's place in its key (message.h, frames)
  // kSum and kRowsSum: the envelope's fields of a sum.
  struct Sum {
    uint32_t round = 0;
    DataType dtype = DataType::kFloat32;
    uint64_t length = 0;  // a dense key's (or frame's) bytes, the rows' bytes
    uint64_t tensor_hash = 0;
    uint32_t contributors = 0;
    // A frame of a key cut in frames (kSum): the key's bytes and the cut; 0 for whole keys.
    uint64_t key_length = 0;
    uint64_t frame_bytes = 0;
  };
  Sum sum;
  // kSum of a compressed key: the compressor's text and the raw bytes the payload stands
  // for (empty: the payload is raw).
  std::string compression;
  uint64_t raw_length = 0;
  std::string left_out;       // kSum: the ranks a round closed early left out (stragglers.h)
  uint64_t row_elements = 0;  // kRowsSum: elements per row
  Buffer payload;             // shared with the key's state (and other replies), no copy
  // kError:
  ErrorCode code = ErrorCode::kInternal;
  std::string reason;
};

// A PUSH_ACK of the frame at `offset` (0 for whole keys).
Reply AckReply(const PendingReply& to, uint64_t key, uint64_t offset = 0);
Reply ErrorReply(const PendingReply& to, uint64_t key, ErrorCode code, std::string reason);
// A kSum (or, with row_elements set after, kRowsSum) reply: `payload` is shared, not
// copied (every reply of a round sends the same bytes).
Reply SumReply(Reply::Kind kind, const PendingReply& to, uint64_t key, const Reply::Sum& sum,
               const Buffer& payload);

// Why a dense push disagrees with the key's definition (verdict kMismatch): the text
// every worker of the key is told.
std::string MismatchReason(const Request& request, const KeyDefinition& definition);

// The one reply builder: the message `reply` stands for, from node `sender`.
Message ToMessage(const Reply& reply, int sender);

}  // namespace ferry
