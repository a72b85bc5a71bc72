#pragma once

// FaultInjection: what a Van does to received messages in tests of lossy or slow links
// (VanOptions::drop_percent, delay_ms): drops that share of data messages (pushes, acks,
// sums, resend requests, point-to-point sends and their acks), or hands every message on only `delay_ms` after it arrived (a
// fixed delay keeps each connection's order). Without either, Deliver hands a message
// on at once. One thread (the Van's IO thread) calls everything.

#include <cstdint>
#include <deque>
#include <functional>
#include <random>

#include "common/transport/message.h"

namespace ferry {

class FaultInjection {
 public:
  using Handler = std::function<void(Message&&, const Origin&)>;

  FaultInjection(double drop_percent, int delay_ms);

  // Hands `message` to `handler` now, or queues it for DeliverDue; false if it was
  // dropped (then `message` is left as it was, for the caller's log line).
  bool Deliver(Message&& message, const Origin& origin, const Handler& handler);
  // Hands on the delayed messages now due, in arrival order.
  void DeliverDue(const Handler& handler);
  // -1 with nothing delayed, else the milliseconds until the next delayed message is due.
  int PollTimeoutMs() const;

 private:
  struct Delayed {
    int64_t due_ms;
    Message message;
    Origin origin;
  };
  const double drop_percent_;
  const int delay_ms_;
  std::mt19937_64 random_;
  std::deque<Delayed> delayed_;  // due times never decrease
};

}  // namespace ferry
