#include "server/requests.h"

#include "common/util/clock.h"

#include "common/util/strings.h"

namespace ferry {

namespace {

// A reply of `kind` to `to` about `key`, the rest of it to be filled in.
Reply AddressedReply(Reply::Kind kind, const PendingReply& to, uint64_t key) {
  Reply r;
  r.kind = kind;
  r.identity = to.identity;
  r.worker_id = to.worker_id;
  r.request_id = to.request_id;
  r.key = key;
  r.priority = to.priority;
  return r;
}

}  // namespace

Reply AckReply(const PendingReply& to, uint64_t key, uint64_t offset) {
  Reply r = AddressedReply(Reply::Kind::kAck, to, key);
  r.offset = offset;
  return r;
}

Reply ErrorReply(const PendingReply& to, uint64_t key, ErrorCode code, std::string reason) {
  Reply r = AddressedReply(Reply::Kind::kError, to, key);
  r.code = code;
  r.reason = std::move(reason);
  return r;
}

Reply SumReply(Reply::Kind kind, const PendingReply& to, uint64_t key, const Reply::Sum& sum,
               const Buffer& payload) {
  Reply r = AddressedReply(kind, to, key);
  r.sum = sum;
  r.payload = payload;
  return r;
}

std::string MismatchReason(const Request& request, const KeyDefinition& definition) {
  const proto::Envelope& e = request.envelope();
  return StrCat("workers disagree on ", KeyName(e.key()), ": worker ", request.rank, " pushed ",
                FrameKeyLength(e), " bytes of ", DataTypeName(static_cast<DataType>(e.dtype())),
                " (tensor hash ", std::hex, e.tensor_hash(), std::dec, ") but worker ",
                definition.defined_by_rank, " pushed ", definition.length, " bytes of ",
                DataTypeName(definition.dtype), " (tensor hash ", std::hex, definition.tensor_hash,
                std::dec,
                "); declare the same tensors (name, dtype, shape) in the same order on "
                "every worker");
}

Message ToMessage(const Reply& reply, int sender) {
  static const proto::MessageType kTypes[] = {proto::PUSH_ACK, proto::PUSH_RESULT,
                                              proto::ROWS_RESULT, proto::ERROR, proto::JOIN_ACK};
  Message m = MakeMessage(kTypes[static_cast<int>(reply.kind)], sender);
  proto::Envelope& e = m.envelope;
  e.set_request_id(reply.request_id);
  e.set_key(reply.key);
  e.set_priority(reply.priority);
  e.set_sent_us(static_cast<uint64_t>(UnixUs()));  // handed to the Van next (Server::SendReply)
  e.set_offset(reply.offset);
  switch (reply.kind) {
    case Reply::Kind::kAck:
      break;
    case Reply::Kind::kJoinAck:
      e.set_round(reply.sum.round);  // the JOIN's position at this server
      break;
    case Reply::Kind::kError:
      e.mutable_error()->set_code(static_cast<int>(reply.code));
      e.mutable_error()->set_reason(reply.reason);
      break;
    case Reply::Kind::kSum:
    case Reply::Kind::kRowsSum:
      e.set_round(reply.sum.round);
      e.set_dtype(static_cast<proto::DataTypeProto>(reply.sum.dtype));
      e.set_length(reply.sum.length);
      e.set_tensor_hash(reply.sum.tensor_hash);
      e.set_contributors(reply.sum.contributors);
      SetFrame(&e, reply.offset, reply.sum.key_length, reply.sum.frame_bytes);
      if (!reply.left_out.empty()) e.set_left_out(reply.left_out);
      if (!reply.compression.empty()) {
        e.set_compression(reply.compression);
        e.set_raw_length(reply.raw_length);
      }
      if (reply.kind == Reply::Kind::kRowsSum) {
        proto::RowsHeader* h = e.mutable_rows();
        const uint64_t row_bytes = reply.row_elements * DataTypeSize(reply.sum.dtype);
        h->set_num_rows(reply.payload.size() / row_bytes);
        h->set_row_elements(reply.row_elements);
      }
      m.payload = reply.payload;  // shared: every reply of a round sends the same bytes
      break;
  }
  return m;
}

}  // namespace ferry
