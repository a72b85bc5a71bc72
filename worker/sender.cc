#include "worker/sender.h"

#include <pthread.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "common/util/clock.h"

namespace ferry {

Sender::Sender(WorkerContext& ctx, ScheduledQueue& queue, DensePushPull& dense,
               OperationKinds& kinds)
    : ctx_(ctx), queue_(queue), dense_(dense), kinds_(kinds), thread_([this] {
        pthread_setname_np(pthread_self(), "sender");
        Loop();
      }) {}

Sender::~Sender() {
  queue_.Close();
  if (thread_.joinable()) thread_.join();
}

void Sender::Loop() {
  // With resends on, wake often enough to resend within a quarter of the timeout.
  const int64_t resend_ms = ctx_.config.transport.resend_timeout_ms;
  const int64_t wake_ms = resend_ms > 0 ? std::clamp<int64_t>(resend_ms / 4, 5, 1000) : 1000;
  uint64_t version = 0;
  int64_t resent_ms = NowMs();
  while (true) {
    const ScheduledQueue::WaitResult wake = queue_.WaitForChange(&version, wake_ms);
    if (resend_ms > 0 && NowMs() - resent_ms >= wake_ms) {
      ResendOverdue();
      resent_ms = NowMs();
    }
    if (wake == ScheduledQueue::WaitResult::kClosed) return;
    if (wake == ScheduledQueue::WaitResult::kChanged) {
      ctx_.counters.sender_thread_batches += dense_.SendReady();
    }
  }
}

void Sender::ResendOverdue() {
  std::vector<std::pair<int, Message>> out;  // (server rank, message)
  {
    MutexLock lock(ctx_.mu);
    kinds_.ResendOverdue(NowMs(), &out);
  }
  for (auto& [server, m] : out) {
    ctx_.counters.servers.AddSent(server, m.payload.size());  // resent bytes are sent bytes
    ctx_.van.Send(ServerId(server), std::move(m));
  }
}

}  // namespace ferry
