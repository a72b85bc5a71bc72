#include "common/transport/message.h"

#include <algorithm>

#include "common/transport/fused_push.h"
#include "common/transport/rows_message.h"
#include "common/util/status.h"

namespace ferry {

std::string KeyName(uint64_t key) {
  if (KeyLayout(key) == 0) {
    return StrCat("tensor ", KeyTensor(key), " partition ", KeyPartition(key));
  }
  return StrCat("tensor ", KeyTensor(key), " partition ",
                KeyPartition(key) & (kMaxPartitionsPerTensor - 1), " of layout ", KeyLayout(key));
}

Message MakeMessage(proto::MessageType type, int sender) {
  Message m;
  m.envelope.set_version(kProtocolVersion);
  m.envelope.set_type(type);
  m.envelope.set_sender(sender);
  return m;
}

bool IsControlMessage(proto::MessageType type) {
  return type == proto::PUSH_ACK || type == proto::ERROR || type == proto::JOIN_ACK ||
         type == proto::RESEND_SUM || type == proto::P2P_ACK;
}

std::string MessageTypeName(int type) {
  if (proto::MessageType_IsValid(type)) {
    return proto::MessageType_Name(static_cast<proto::MessageType>(type));
  }
  return StrCat("type ", type);
}

bool ParseEnvelope(const void* data, size_t size, proto::Envelope* out, std::string* error) {
  if (size > (1u << 20)) {
    *error = StrCat("envelope frame of ", size, " bytes exceeds the 1 MiB limit");
    return false;
  }
  if (!out->ParseFromArray(data, static_cast<int>(size))) {
    *error = StrCat("envelope frame of ", size, " bytes is not a valid Ferry envelope");
    return false;
  }
  return true;
}

namespace {

bool IsDataMessage(proto::MessageType t) {
  return t == proto::PUSH || t == proto::PUSH_RESULT || t == proto::P2P_SEND;
}

// The body each control type must carry (or NOT_SET when it needs none).
proto::Envelope::BodyCase RequiredBody(proto::MessageType t) {
  switch (t) {
    case proto::REGISTER: return proto::Envelope::kRegisterRequest;
    case proto::NODE_TABLE: return proto::Envelope::kNodeTable;
    case proto::BARRIER: return proto::Envelope::kBarrier;
    case proto::NODE_FAILED: return proto::Envelope::kFailure;
    case proto::ERROR: return proto::Envelope::kError;
    case proto::PUSH_FUSED: return proto::Envelope::kFusedPush;
    case proto::ROWS_PUSH: return proto::Envelope::kRows;
    case proto::ROWS_RESULT: return proto::Envelope::kRows;
    case proto::STALL: return proto::Envelope::kStall;
    case proto::SHM_READY: return proto::Envelope::kShmProbe;
    case proto::REJOIN: return proto::Envelope::kRejoin;
    default: return proto::Envelope::BODY_NOT_SET;
  }
}

}  // namespace

Status CheckPayloadFrame(const Message& m, uint64_t max_payload_bytes) {
  const proto::Envelope& e = m.envelope;
  if (e.length() != m.payload.size()) {
    return BadMessageError(
        StrCat("length field ", e.length(), " but payload frame of ", m.payload.size(), " bytes"));
  }
  if (m.payload.size() > max_payload_bytes) {
    return BadMessageError(
        StrCat("payload of ", m.payload.size(), " bytes exceeds the limit of ", max_payload_bytes));
  }
  return Status::Ok();
}

uint64_t FrameKeyLength(const proto::Envelope& e) {
  return e.key_length() != 0 ? e.key_length() : e.length();
}

uint64_t FrameSize(const proto::Envelope& e) {
  return e.frame_bytes() != 0 ? e.frame_bytes() : FrameKeyLength(e);
}

uint32_t FrameCount(uint64_t key_length, uint64_t frame_bytes) {
  if (frame_bytes == 0 || key_length == 0) return 1;
  return static_cast<uint32_t>((key_length + frame_bytes - 1) / frame_bytes);
}

bool CutsNest(uint64_t a, uint64_t b, uint64_t length) {
  if (a == 0 || b == 0) return false;
  if (a >= length || b >= length) return true;
  return std::max(a, b) % std::min(a, b) == 0;
}

void SetFrame(proto::Envelope* e, uint64_t offset, uint64_t key_length, uint64_t frame_bytes) {
  e->set_offset(offset);
  e->set_key_length(key_length);
  e->set_frame_bytes(frame_bytes);
}

Status CheckFrame(const proto::Envelope& e, uint64_t max_payload_bytes) {
  auto bad = [&e](const std::string& why) {
    return BadMessageError(StrCat(MessageTypeName(e.type()), " of ", KeyName(e.key()), " round ",
                                  e.round(), " at offset ", e.offset(), ": ", why));
  };
  if (e.frame_bytes() == 0) {
    if (e.offset() != 0) return bad("a whole-key message (frame_bytes 0) must be at offset 0");
    if (e.key_length() != 0 && e.key_length() != e.length()) {
      return bad(StrCat("a whole-key message of ", e.length(), " bytes says the key has ",
                        e.key_length()));
    }
    return Status::Ok();
  }
  const uint64_t element = DataTypeSize(static_cast<DataType>(e.dtype()));
  if (e.frame_bytes() % element != 0) {
    return bad(StrCat("frame size ", e.frame_bytes(), " is not a whole number of ",
                      DataTypeName(static_cast<DataType>(e.dtype())), " elements"));
  }
  if (e.frame_bytes() > max_payload_bytes) {
    return bad(StrCat("frame size ", e.frame_bytes(), " exceeds the limit of ", max_payload_bytes));
  }
  if (e.key_length() == 0 || e.offset() >= e.key_length()) {
    return bad(StrCat("the offset is past the key's ", e.key_length(), " bytes"));
  }
  if (e.key_length() > max_payload_bytes) {  // a whole key would not fit in one message
    return bad(StrCat("a key of ", e.key_length(), " bytes exceeds the limit of ",
                      max_payload_bytes));
  }
  // A server keeps a record per frame of a key's open round: bounded per key.
  if ((e.key_length() - 1) / e.frame_bytes() >= kMaxFramesPerKey) {
    return bad(StrCat("a key of ", e.key_length(), " bytes is more than ", kMaxFramesPerKey,
                      " frames of ", e.frame_bytes()));
  }
  if (e.offset() % e.frame_bytes() != 0) {
    return bad(StrCat("the offset is not a multiple of the frame size ", e.frame_bytes()));
  }
  const uint64_t expected = std::min(e.frame_bytes(), e.key_length() - e.offset());
  if (e.length() != expected) {
    return bad(StrCat(e.length(), " bytes where the frame has ", expected, " (key of ",
                      e.key_length(), " bytes in ", e.frame_bytes(), "-byte frames)"));
  }
  return Status::Ok();
}

Status ValidateMessage(const Message& m, uint64_t max_payload_bytes) {
  const proto::Envelope& e = m.envelope;
  if (e.version() != kProtocolVersion) {
    return BadMessageError(
        StrCat("protocol version ", e.version(), " (this node speaks ", kProtocolVersion, ")"));
  }
  if (!proto::MessageType_IsValid(e.type()) || e.type() == proto::MESSAGE_TYPE_UNSPECIFIED) {
    return BadMessageError(StrCat("unknown message type ", static_cast<int>(e.type())));
  }
  proto::Envelope::BodyCase required = RequiredBody(e.type());
  if (required != proto::Envelope::BODY_NOT_SET && e.body_case() != required) {
    return BadMessageError(StrCat(MessageTypeName(e.type()), " without its body"));
  }
  if (e.type() == proto::PUSH_FUSED) return ValidateFusedPush(m, max_payload_bytes);
  if (e.type() == proto::ROWS_PUSH || e.type() == proto::ROWS_RESULT) {
    return ValidateRowsMessage(m, max_payload_bytes);
  }
  if (!IsDataMessage(e.type())) {
    if (!m.payload.empty()) {
      return BadMessageError(StrCat(MessageTypeName(e.type()), " with a payload frame"));
    }
    return Status::Ok();
  }
  if (!IsValidDataType(e.dtype())) {
    return BadMessageError(StrCat("unknown dtype ", static_cast<int>(e.dtype())));
  }
  if (!proto::ReduceOpProto_IsValid(e.reduce_op())) {
    return BadMessageError(StrCat("unknown reduce op ", static_cast<int>(e.reduce_op())));
  }
  if (Status bad = CheckPayloadFrame(m, max_payload_bytes); !bad.ok()) return bad;
  size_t element = DataTypeSize(static_cast<DataType>(e.dtype()));
  if (!e.compression().empty()) {  // compressed bytes: the values they stand for are whole
    if (e.raw_length() % element != 0 || e.raw_length() > max_payload_bytes ||
        e.frame_bytes() != 0 || e.offset() != 0) {
      return BadMessageError(StrCat("compressed ", MessageTypeName(e.type()), " of ",
                                    KeyName(e.key()), " standing for ", e.raw_length(),
                                    " bytes: not a whole key of whole ",
                                    DataTypeName(static_cast<DataType>(e.dtype())),
                                    " elements within the limit of ", max_payload_bytes));
    }
    return CheckFrame(e, max_payload_bytes);  // a whole key: offset 0, no other key length
  }
  if (m.payload.size() % element != 0) {
    return BadMessageError(StrCat("payload of ", m.payload.size(),
                                  " bytes is not a whole number of ",
                                  DataTypeName(static_cast<DataType>(e.dtype())), " elements"));
  }
  return CheckFrame(e, max_payload_bytes);
}

std::string Describe(const Message& m) {
  const proto::Envelope& e = m.envelope;
  std::string s = StrCat(MessageTypeName(e.type()), " from node ", e.sender());
  if (e.request_id()) s += StrCat(" request ", e.request_id());
  if (e.type() == proto::PUSH || e.type() == proto::PUSH_RESULT) {
    s += StrCat(" ", KeyName(e.key()), " round ", e.round(), " ", e.length(), " bytes");
    if (e.frame_bytes() != 0) s += StrCat(" at offset ", e.offset(), " of ", e.key_length());
  }
  if (e.type() == proto::P2P_SEND) s += StrCat(" tag ", e.tag(), " #", e.round(), " ", e.length(), " bytes");
  if (e.type() == proto::PUSH_FUSED) {
    s += StrCat(" of ", e.fused_push().pushes_size(), " pushes, ", e.length(), " bytes");
  }
  if (e.type() == proto::ROWS_PUSH || e.type() == proto::ROWS_RESULT) {
    s += StrCat(" ", RowsKeyName(e.key()), " round ", e.round(), " ", e.rows().num_rows(),
                " rows, ", e.length(), " bytes");
  }
  return s;
}

}  // namespace ferry
