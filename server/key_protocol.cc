#include "server/key_protocol.h"

#include <utility>

namespace ferry {

Reply AckReply(const PendingReply& to, uint64_t key) {
  Reply r;
  r.kind = Reply::Kind::kAck;
  r.identity = to.identity;
  r.request_id = to.request_id;
  r.key = key;
  return r;
}

Reply ErrorReply(const PendingReply& to, uint64_t key, ErrorCode code, std::string reason) {
  Reply r;
  r.kind = Reply::Kind::kError;
  r.identity = to.identity;
  r.request_id = to.request_id;
  r.key = key;
  r.code = code;
  r.reason = std::move(reason);
  return r;
}

std::string MismatchReason(const Request& request, const KeyDefinition& definition) {
  const proto::Envelope& e = request.envelope();
  return StrCat("workers disagree on ", KeyName(e.key()), ": worker ", request.rank, " pushed ",
                e.length(), " bytes of ", DataTypeName(static_cast<DataType>(e.dtype())),
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
  switch (reply.kind) {
    case Reply::Kind::kAck:
    case Reply::Kind::kJoinAck:
      break;
    case Reply::Kind::kError:
      e.mutable_error()->set_code(static_cast<int>(reply.code));
      e.mutable_error()->set_reason(reply.reason);
      break;
    case Reply::Kind::kSum:
    case Reply::Kind::kRowsSum:
      e.set_round(reply.round);
      e.set_dtype(static_cast<proto::DataTypeProto>(reply.dtype));
      e.set_length(reply.length);
      e.set_tensor_hash(reply.tensor_hash);
      e.set_contributors(reply.contributors);
      if (reply.kind == Reply::Kind::kRowsSum) {
        proto::RowsHeader* h = e.mutable_rows();
        const uint64_t row_bytes = reply.row_elements * DataTypeSize(reply.dtype);
        h->set_num_rows(reply.payload.size() / row_bytes);
        h->set_row_elements(reply.row_elements);
      }
      m.payload = reply.payload;  // shared: every reply of a round sends the same bytes
      break;
  }
  return m;
}

}  // namespace ferry
