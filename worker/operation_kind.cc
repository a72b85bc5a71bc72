#include "worker/operation_kind.h"

namespace ferry {

bool OperationKind::OnReply(Message& m, proto::MessageType result_type) {
  if (m.type() == proto::PUSH_ACK) return OnAck(m);
  if (m.type() == result_type) return OnResult(std::move(m));
  if (m.type() == proto::ERROR) return OnError(m);
  return false;
}

void OperationKinds::Add(OperationKind* kind, proto::MessageType result_type) {
  kinds_.emplace_back(kind, result_type);
}

bool OperationKinds::OnReply(Message& m) {
  for (const auto& [kind, result_type] : kinds_) {
    if (kind->OnReply(m, result_type)) return true;
  }
  return false;
}

void OperationKinds::ResendOverdue(int64_t now_ms, std::vector<std::pair<int, Message>>* out) {
  for (const auto& entry : kinds_) entry.first->ResendOverdue(now_ms, out);
}

void OperationKinds::AbandonInFlight() {
  for (const auto& entry : kinds_) entry.first->AbandonInFlight();
}

}  // namespace ferry
