#pragma once

// Fused pushes: several small pushes to one server in one message (PUSH_FUSED).
//
// Wire format: one Envelope of type PUSH_FUSED whose body `fused_push` lists the
// pushes' headers (SubPush: request id, key, round, dtype, length, priority, tensor
// hash) and whose one payload frame holds their bytes back to back, in the listed
// order, with no padding. `length` is the frame's size. The server splits the frame
// into zero-copy slices (Buffers sharing the received frame) and handles each as an
// ordinary PUSH; each is answered on its own (PUSH_ACK / PUSH_RESULT / ERROR with its
// own request id), so a worker's credit, replies and resends stay per partition.
//
// Validation (everything comes from the wire): at least one and at most
// kMaxFusedPushes pushes, every dtype known, every length a whole number of elements,
// and the lengths add up exactly to the payload frame (no overflow), which is itself
// within the size limit.

#include <string>
#include <vector>

#include "common/transport/message.h"
#include "common/util/status.h"

namespace ferry {

// Keeps a fused envelope well under the 1 MiB envelope limit (a SubPush is < 64 bytes).
constexpr size_t kMaxFusedPushes = 4096;

// A PUSH_FUSED from `sender` carrying `pushes` (PUSH messages to one server, each
// with its payload, if any). The payloads are copied into one frame; the envelope's
// request id is the first push's. REQUIRES: 1 <= pushes.size() <= kMaxFusedPushes.
Message MakeFusedPush(int sender, const std::vector<const Message*>& pushes);

// The header of a PUSH message as a SubPush, and back (without payload).
proto::SubPush SubPushOf(const proto::Envelope& push);

// Checks a PUSH_FUSED as described above. Returns OK when valid, else kBadMessage with
// the reason.
Status ValidateFusedPush(const Message& m, uint64_t max_payload_bytes);

// Splits a PUSH_FUSED into its PUSH messages, whose payloads share `fused`'s frame.
// Returns OK on success, else kBadMessage with the reason (and leaves `out` empty).
Status SplitFusedPush(const Message& fused, std::vector<Message>* out);

}  // namespace ferry
