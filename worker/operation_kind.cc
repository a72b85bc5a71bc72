#include "worker/operation_kind.h"

namespace ferry {

bool OperationKind::OnReply(Message& m, proto::MessageType result_type) {
  if (m.type() == proto::PUSH_ACK) return OnAck(m);
  if (m.type() == result_type) return OnResult(std::move(m));
  if (m.type() == proto::ERROR) return OnError(m);
  return false;
}

}  // namespace ferry
