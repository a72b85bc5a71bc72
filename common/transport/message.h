#pragma once

// Message: one protobuf Envelope plus an optional payload Buffer.
//
// On the wire a message is 1 or 2 ZeroMQ frames: the serialized Envelope, then the
// payload if there is one (routers prepend the peer's routing id, which Van strips).
// Everything decoded here comes from the network and is checked before use.

#include <cstdint>
#include <string>

#include "common/types/data_type.h"
#include "common/util/status.h"
#include "common/transport/buffer.h"
#include "ferry.pb.h"

namespace ferry {

// 1: the first release; 2: type 16 renamed (PULL -> RESEND_SUM: same number, same meaning);
// 3: frames (Envelope fields offset, key_length, frame_bytes); 4: the stall check (STALL,
// the bodies stall_report, stall_watch and stall); 5: RETIRE (names declared anew), the join
// position, SUSPEND and RESUME (re-initialisation); 6: the shared-memory lane (SHM_READY,
// Envelope.shm_slot); 7: membership epochs (Envelope.epoch, NodeTable.epoch,
// RegisterRequest.spare: elastic training); 8: live metrics (counters with the heartbeats);
// 9: the join barrier carries catalogs (Barrier.catalog_next_id and Barrier.catalog); 10:
// compressed pushes and sums (Envelope.compression, Envelope.raw_length); 11: point-to-point
// (P2P_SEND, P2P_ACK, Envelope.tag) and process sets (Envelope.members); 12: scheduler failover
// (REJOIN_ASK, REJOIN, FENCED, Envelope.term, Barrier.seq); 13: backup workers
// (Envelope.backup_workers, Envelope.average, Envelope.left_out).
constexpr uint32_t kProtocolVersion = 13;

struct Message {
  proto::Envelope envelope;
  Buffer payload;  // empty when the message carries no tensor bytes

  proto::MessageType type() const { return envelope.type(); }
  int sender() const { return envelope.sender(); }
};

// Keys name one partition: the tensor's declaration index and the partition index.
inline uint64_t MakeKey(uint32_t tensor_id, uint32_t partition) {
  return (static_cast<uint64_t>(tensor_id) << 32) | partition;
}
inline uint32_t KeyTensor(uint64_t key) { return static_cast<uint32_t>(key >> 32); }
inline uint32_t KeyPartition(uint64_t key) { return static_cast<uint32_t>(key & 0xffffffffu); }
// Layout generations: a worker that cuts its tensors again with another partition size
// (Worker::SetScheduling) uses fresh keys, because a server fixes a key's length at its
// first push. The generation goes in the high 8 bits of the partition field, the
// partition's index in the low 24; generation 0 gives the plain MakeKey(tensor, index).
constexpr uint32_t kMaxLayouts = 256;
constexpr uint32_t kMaxPartitionsPerTensor = 1u << 24;
inline uint64_t MakeLayoutKey(uint32_t tensor_id, uint32_t layout, uint32_t index) {
  return MakeKey(tensor_id, (layout << 24) | (index & (kMaxPartitionsPerTensor - 1)));
}
inline uint32_t KeyLayout(uint64_t key) { return KeyPartition(key) >> 24; }
// "tensor 3 partition 1"; "tensor 3 partition 1 of layout 2" for a later generation.
std::string KeyName(uint64_t key);

// A message with the protocol version and sender filled in.
Message MakeMessage(proto::MessageType type, int sender);

// Checks what does not depend on cluster membership: version, known type, body
// present where required, payload present only for data messages and consistent
// with length and dtype, frame size under `max_payload_bytes`. Returns OK when valid,
// else kBadMessage with the reason.
Status ValidateMessage(const Message& m, uint64_t max_payload_bytes);
// The checks every message with a payload shares: the envelope's length field matches the
// payload frame, and the frame is within max_payload_bytes. OK when both hold, else
// kBadMessage with the reason.
Status CheckPayloadFrame(const Message& m, uint64_t max_payload_bytes);

// Frames (protocol 3): a PUSH or PUSH_RESULT carries the bytes [offset, offset + length) of
// its key, which has key_length bytes cut in frame_bytes-byte frames (the last one
// shorter). frame_bytes 0 is the whole key in one message: offset 0, key_length 0 or
// equal to length. So two frames of one cut are either equal or disjoint.
// A key is at most the message limit (FERRY_MAX_MESSAGE_BYTES) and at most
// kMaxFramesPerKey frames, so what a server keeps per frame is bounded per key.
constexpr uint64_t kMaxFramesPerKey = 65536;
// The key's bytes: key_length, or length for a whole-key message.
uint64_t FrameKeyLength(const proto::Envelope& e);
// The size the key is cut in: frame_bytes, or the key's bytes for a whole-key message.
uint64_t FrameSize(const proto::Envelope& e);
// How many frames a key of `key_length` bytes has in `frame_bytes`-byte frames (at least
// one: an empty key is one empty frame). frame_bytes 0: one.
uint32_t FrameCount(uint64_t key_length, uint64_t frame_bytes);
// Whether frames cut in `a` and in `b` bytes can be summed together in a key of `length`
// bytes (range arithmetic: server/key_state.h, "Cuts that differ"): one is the whole key, or
// the larger is a multiple of the smaller. False if either is 0.
bool CutsNest(uint64_t a, uint64_t b, uint64_t length);
// Sets the frame fields of `e`: the frame at `offset` of a key of `key_length` bytes cut in
// `frame_bytes`-byte frames (length, dtype and the payload are the caller's). Whether the
// cut is valid is CheckFrame's to say.
void SetFrame(proto::Envelope* e, uint64_t offset, uint64_t key_length, uint64_t frame_bytes);
// The frame rules above, for a PUSH or PUSH_RESULT whose length and dtype were checked:
// OK, or kBadMessage naming the key, round and offset. Also checked by ValidateMessage.
// A valid frame's key has at most UINT32_MAX frames, so FrameCount does not wrap.
Status CheckFrame(const proto::Envelope& e, uint64_t max_payload_bytes);

// Parses an envelope frame. Returns false (and `error`) on bytes that do not parse.
bool ParseEnvelope(const void* data, size_t size, proto::Envelope* out, std::string* error);

// Control messages: small, and nothing may make them wait behind tensor bytes. They take
// the control lane where a connection has one (see van.h): PUSH_ACK, ERROR, JOIN_ACK
// (server -> worker), RESEND_SUM (worker -> server) and P2P_ACK (worker -> worker).
bool IsControlMessage(proto::MessageType type);

// "PUSH", "REGISTER", ... ; "type N" when unknown.
std::string MessageTypeName(int type);
// One line for logs: type, sender, request, key, round, length.
std::string Describe(const Message& m);

// Where a received message came from.
struct Origin {
  bool inbound = false;  // arrived on the ROUTER (reply with Reply(identity, ...))
  std::string identity;  // ROUTER routing id of the connection (inbound only)
  int peer = -1;         // outbound peer id (outbound only)
};

}  // namespace ferry
