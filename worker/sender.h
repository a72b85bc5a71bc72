#pragma once

// Sender: the Worker's "sender" thread. It takes batches of partitions from the scheduled
// queue in the order the policy releases them and sends them (DensePushPull::SendBatch);
// with resends on (FERRY_RESEND_TIMEOUT_MS > 0) it also wakes at least every quarter of
// that timeout to send every kind's overdue requests again.
//
// Lifetime: the thread starts in the constructor; the destructor closes the queue and
// joins it, so every object it uses must outlive this one (the Worker destroys it first).

#include <thread>

#include "worker/dense_push_pull.h"
#include "worker/operation_kind.h"
#include "worker/rows_push_pull.h"
#include "worker/scheduling/scheduled_queue.h"

namespace ferry {

class Sender {
 public:
  Sender(WorkerContext& ctx, ScheduledQueue& queue, DensePushPull& dense, RowsPushPull& rows);
  ~Sender();
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

 private:
  void Loop();
  void ResendOverdue() EXCLUDES(ctx_.mu);  // every kind's overdue requests

  WorkerContext& ctx_;
  ScheduledQueue& queue_;
  DensePushPull& dense_;
  RowsPushPull& rows_;
  std::thread thread_;  // last: starts once the members above are set
};

}  // namespace ferry
