#pragma once

// What a Worker tells others about itself: the heartbeat's live metrics, the stall check's
// report, the reply delays it records and its closing summary. Free functions over the
// parts they read, so the Worker only wires them up.

#include <cstdint>
#include <string>
#include <vector>

#include "common/transport/message.h"
#include "common/transport/van.h"
#include "proto/ferry.pb.h"
#include "worker/operation_table.h"
#include "worker/partition_scheduling/scheduled_queue.h"
#include "worker/worker_counters.h"

namespace ferry {

// The heartbeat's metrics (ClusterClient::SetMetricsReporter): the counters declared as
// series, and the queue's gauges.
void ReportMetrics(const WorkerCounters& counters, const ScheduledQueue& queue,
                   proto::MetricsSnapshot* out);
// What heartbeats report for the stall check (ClusterClient::StallReporter): the
// operations unfinished for `report_after_ms`, and how many of each label were submitted.
void ReportStalls(const OperationTable& table, int64_t report_after_ms,
                  const std::vector<std::string>& labels, proto::StallReport* report);
// Records a server reply's delay since it left the server (the WorkerCounters histograms).
void NoteReplyDelay(WorkerCounters& counters, const Message& m);
// The closing line's counts (Worker::Shutdown).
std::string Summary(const WorkerCounters& counters, const ScheduledQueue& queue,
                    const VanStats& van);

}  // namespace ferry
