#pragma once

// Sender: the Worker's "sender" thread. Callers and van-io send what their own calls
// let out (DensePushPull::SendReady, "Who sends"); this thread sends whatever else the
// scheduled queue lets out: it wakes on the queue's notified changes (a new credit or
// window, Wake, Close; ScheduledQueue::WaitForChange), at the policy's timers, and at least
// every second, when it tries too if the queue changed quietly since it last looked (a
// safety net: a quiet change its thread failed to send goes within a second). Counter
// sender_thread_batches. With resends on (FERRY_RESEND_TIMEOUT_MS > 0) it also sends every
// kind's overdue requests again, at least every quarter of that timeout.
//
// Lifetime: the thread starts in the constructor; the destructor closes the queue and
// joins it, so every object it uses must outlive this one (the Worker destroys it first).

#include <thread>

#include "worker/dense_push_pull.h"
#include "worker/sequencer.h"
#include "worker/worker_context.h"
#include "worker/operation_kind.h"
#include "worker/partition_scheduling/scheduled_queue.h"

namespace ferry {

class Sender {
 public:
  Sender(WorkerContext& ctx, ScheduledQueue& queue, DensePushPull& dense, OperationKinds& kinds);
  ~Sender();
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

 private:
  void Loop();
  void ResendOverdue() EXCLUDES(ctx_.mu);  // every kind's overdue requests

  WorkerContext& ctx_;
  ScheduledQueue& queue_;
  DensePushPull& dense_;
  OperationKinds& kinds_;
  std::thread thread_;  // last: starts once the members above are set
};

}  // namespace ferry
