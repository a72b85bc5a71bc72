#include "worker/worker_context.h"

#include <glog/logging.h>

#include "common/util/status.h"

namespace ferry {

void WorkerContext::ThrowIfFailed() const {
  mu.AssertHeld();
  if (!failure.empty()) throw FerryError(failure_code, failure);
}

void WorkerContext::CheckRunning(const char* what, const std::string& name) const {
  mu.AssertHeld();
  ThrowIfFailed();
  FERRY_ENFORCE(!shut_down, ErrorCode::kShutdown, what, " of '", name, "' after Shutdown()");
}

Message WorkerContext::NewMessage(proto::MessageType type) const {
  Message m = MakeMessage(type, my_id);
  m.envelope.set_epoch(epoch.load(std::memory_order_relaxed));
  return m;
}

void WorkerContext::NoteLateReply(const Message& m) {
  if (m.type() == proto::PUSH_ACK) {  // its sum came first, on the other lane
    counters.late_acks++;
    return;
  }
  counters.late_replies++;
  if (config.transport.resend_timeout_ms > 0) {
    VLOG(1) << "dropped " << Describe(m) << ": answered already (a resend crossed its reply)";
  } else {
    LOG_EVERY_N(WARNING, 100) << "dropped " << Describe(m) << ": no such request in flight";
  }
}

}  // namespace ferry
