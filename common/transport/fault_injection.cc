#include "common/transport/fault_injection.h"

#include <algorithm>

#include "common/util/clock.h"

namespace ferry {

FaultInjection::FaultInjection(double drop_percent, int delay_ms)
    : drop_percent_(drop_percent), delay_ms_(delay_ms), random_(std::random_device()()) {}

bool FaultInjection::Deliver(Message&& message, const Origin& origin, const Handler& handler) {
  if (drop_percent_ > 0) {
    const proto::MessageType t = message.type();
    const bool data = t == proto::PUSH || t == proto::PUSH_ACK || t == proto::PUSH_RESULT ||
                      t == proto::RESEND_SUM || t == proto::PUSH_FUSED ||
                      t == proto::P2P_SEND || t == proto::P2P_ACK;
    if (data && std::uniform_real_distribution<double>(0, 100)(random_) < drop_percent_) {
      return false;
    }
  }
  if (delay_ms_ > 0) {
    delayed_.push_back(Delayed{NowMs() + delay_ms_, std::move(message), origin});
    return true;
  }
  handler(std::move(message), origin);
  return true;
}

void FaultInjection::DeliverDue(const Handler& handler) {
  const int64_t now = NowMs();
  while (!delayed_.empty() && delayed_.front().due_ms <= now) {
    Delayed d = std::move(delayed_.front());
    delayed_.pop_front();
    handler(std::move(d.message), d.origin);
  }
}

int FaultInjection::PollTimeoutMs() const {
  if (delayed_.empty()) return -1;
  return static_cast<int>(std::max<int64_t>(0, delayed_.front().due_ms - NowMs()));
}

}  // namespace ferry
