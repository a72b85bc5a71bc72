#include "common/transport/fused_push.h"

#include <glog/logging.h>

#include <cstring>

#include "common/util/status.h"

namespace ferry {

proto::SubPush SubPushOf(const proto::Envelope& push) {
  proto::SubPush s;
  s.set_request_id(push.request_id());
  s.set_key(push.key());
  s.set_round(push.round());
  s.set_dtype(push.dtype());
  s.set_length(push.length());
  s.set_priority(push.priority());
  s.set_tensor_hash(push.tensor_hash());
  s.set_reduce_op(push.reduce_op());
  s.set_members(push.members());
  s.set_average(push.average());
  return s;
}

Message MakeFusedPush(int sender, const std::vector<const Message*>& pushes) {
  CHECK(!pushes.empty() && pushes.size() <= kMaxFusedPushes) << pushes.size() << " pushes";
  Message m = MakeMessage(proto::PUSH_FUSED, sender);
  uint64_t total = 0;
  for (const Message* p : pushes) {
    CHECK_EQ(p->envelope.length(), p->payload.size());
    *m.envelope.mutable_fused_push()->add_pushes() = SubPushOf(p->envelope);
    total += p->payload.size();
  }
  m.envelope.set_request_id(pushes.front()->envelope.request_id());
  m.envelope.set_async_mode(pushes.front()->envelope.async_mode());  // one mode per worker
  m.envelope.set_backup_workers(pushes.front()->envelope.backup_workers());  // one per worker
  m.envelope.set_epoch(pushes.front()->envelope.epoch());  // one epoch per batch (worker.h)
  m.envelope.set_length(total);
  if (total == 0) return m;
  m.payload = Buffer::Allocate(total);
  uint64_t at = 0;
  for (const Message* p : pushes) {
    if (!p->payload.empty())
      std::memcpy(m.payload.bytes() + at, p->payload.data(), p->payload.size());
    at += p->payload.size();
  }
  return m;
}

Status ValidateFusedPush(const Message& m, uint64_t max_payload_bytes) {
  const proto::Envelope& e = m.envelope;
  if (e.body_case() != proto::Envelope::kFusedPush) {
    return BadMessageError("PUSH_FUSED without its body");
  }
  const auto& pushes = e.fused_push().pushes();
  if (pushes.empty() || static_cast<size_t>(pushes.size()) > kMaxFusedPushes) {
    return BadMessageError(
        StrCat("PUSH_FUSED with ", pushes.size(), " pushes (1 to ", kMaxFusedPushes, " allowed)"));
  }
  if (Status bad = CheckPayloadFrame(m, max_payload_bytes); !bad.ok()) return bad;
  uint64_t total = 0;
  for (int i = 0; i < pushes.size(); ++i) {
    const proto::SubPush& s = pushes[i];
    if (!IsValidDataType(s.dtype())) {
      return BadMessageError(
          StrCat("fused push ", i, ": unknown dtype ", static_cast<int>(s.dtype())));
    }
    if (!proto::ReduceOpProto_IsValid(s.reduce_op())) {
      return BadMessageError(
          StrCat("fused push ", i, ": unknown reduce op ", static_cast<int>(s.reduce_op())));
    }
    size_t element = DataTypeSize(static_cast<DataType>(s.dtype()));
    if (s.length() % element != 0) {
      return BadMessageError(StrCat("fused push ", i, ": ", s.length(),
                                    " bytes is not a whole number of ",
                                    DataTypeName(static_cast<DataType>(s.dtype())), " elements"));
    }
    // Each length is checked against what is left, so the sum cannot overflow.
    if (s.length() > m.payload.size() - total) {
      return BadMessageError(StrCat("fused push ", i, " of ", s.length(),
                                    " bytes runs past the payload frame of ", m.payload.size(),
                                    " bytes"));
    }
    total += s.length();
  }
  if (total != m.payload.size()) {
    return BadMessageError(StrCat("fused pushes add up to ", total,
                                  " bytes but the payload frame has ", m.payload.size()));
  }
  return Status::Ok();
}

Status SplitFusedPush(const Message& fused, std::vector<Message>* out) {
  out->clear();
  if (Status bad = ValidateFusedPush(fused, ~uint64_t{0}); !bad.ok()) return bad;
  uint64_t at = 0;
  for (const proto::SubPush& s : fused.envelope.fused_push().pushes()) {
    Message p = MakeMessage(proto::PUSH, fused.sender());
    p.envelope.set_request_id(s.request_id());
    p.envelope.set_key(s.key());
    p.envelope.set_round(s.round());
    p.envelope.set_dtype(s.dtype());
    p.envelope.set_length(s.length());
    p.envelope.set_priority(s.priority());
    p.envelope.set_tensor_hash(s.tensor_hash());
    p.envelope.set_reduce_op(s.reduce_op());
    p.envelope.set_members(s.members());
    p.envelope.set_average(s.average());
    p.envelope.set_async_mode(fused.envelope.async_mode());
    p.envelope.set_backup_workers(fused.envelope.backup_workers());
    p.envelope.set_epoch(fused.envelope.epoch());
    if (s.length() > 0) p.payload = fused.payload.Slice(at, s.length());  // zero copy
    at += s.length();
    out->push_back(std::move(p));
  }
  return Status::Ok();
}

}  // namespace ferry
