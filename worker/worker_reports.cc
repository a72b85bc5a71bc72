#include "worker/worker_reports.h"

#include <algorithm>

#include "common/cluster/cluster_client.h"
#include "common/metrics/series.h"
#include "common/util/clock.h"
#include "common/util/strings.h"
#include "worker/worker.h"

namespace ferry {

void ReportMetrics(const WorkerCounters& c, const ScheduledQueue& queue,
                   proto::MetricsSnapshot* out) {
  static const metrics::Series kInFlight{
      "ferry_partitions_in_flight", metrics::Kind::kGauge,
      "partitions handed to the transport and not yet acknowledged (within the credit)"};
  static const metrics::Series kQueued{
      "ferry_queued_bytes", metrics::Kind::kGauge,
      "bytes of partitions waiting in the send queue, by priority class (label priority: "
      "urgent = the most urgent 10% of the worker's partitions, other)"};
  metrics::AddRegistry(out, c.registry);
  metrics::AddPeerBytes(out, c.servers, "server-");
  metrics::AddValue(out, kInFlight, queue.in_flight());
  const auto [urgent, other] = queue.QueuedBytes(c.urgency.threshold());
  metrics::AddValue(out, kQueued, urgent, {{"priority", "urgent"}});
  metrics::AddValue(out, kQueued, other, {{"priority", "other"}});
}

void ReportStalls(const OperationTable& table, int64_t report_after_ms,
                  const std::vector<std::string>& labels, proto::StallReport* report) {
  for (const PendingOperation& p : table.Unfinished(report_after_ms, ClusterClient::kMaxReported)) {
    auto* out = report->add_pending();
    out->set_label(p.label);
    out->set_seq(p.seq);
    out->set_age_ms(p.age_ms);
  }
  for (const std::string& label : labels) {
    auto* count = report->add_counts();  // 0 too: "never submitted" is the point
    count->set_label(label);
    count->set_count(table.Submitted(label));
  }
  report->set_idle_ms(table.IdleMs());
}

void NoteReplyDelay(WorkerCounters& counters, const Message& m) {
  if (m.envelope.sent_us() == 0) return;
  const int64_t delay = std::max<int64_t>(0, UnixUs() - static_cast<int64_t>(m.envelope.sent_us()));
  const bool sum = m.type() == proto::PUSH_RESULT || m.type() == proto::ROWS_RESULT;
  (sum ? counters.sum_delay_us : counters.ack_delay_us).Record(static_cast<uint64_t>(delay));
}

std::string Summary(const WorkerCounters& c, const ScheduledQueue& queue, const VanStats& van) {
  return StrCat(c.operations, " push_pulls, ", c.partitions_pushed, " partitions, ",
                c.bytes_pushed, " bytes pushed, ", c.resends, " pushes sent again, ", c.pulls,
                " pulls, ", c.late_replies, " late replies dropped, ", van.injected_drops,
                " messages dropped by fault injection, ", c.fused_messages, " fused messages of ",
                c.partitions_fused, " partitions, ", c.rows_operations, " push_pull_rows of ",
                c.rows_pushed, " rows; at most ", queue.max_in_flight_bytes(),
                " bytes in flight; ", queue.window_on() ? "" : "fixed credit, measured ",
                queue.DescribeWindow());
}

CounterValues Worker::Counters() const {
  CounterValues values = counters_.registry.Snapshot();
  for (auto& v : VanCounterValues(van_.stats())) values.push_back(std::move(v));
  for (auto& v : queue_.WindowCounters()) values.push_back(std::move(v));
  if (scheduling_) {
    const SchedulingChoice now = scheduling_->current();
    values.emplace_back("scheduling.partition_bytes", static_cast<uint64_t>(now.partition_bytes));
    values.emplace_back("scheduling.credit_bytes", static_cast<uint64_t>(now.credit_bytes));
  }
  MutexLock lock(ctx_.mu);  // partitions sized per link: the pieces in use, by server
  const std::vector<uint64_t>& pieces = ctx_.link_frame_bytes;
  if (!pieces.empty()) {
    values.emplace_back("scheduling.link_piece_bytes_min", *std::min_element(pieces.begin(), pieces.end()));
    values.emplace_back("scheduling.link_piece_bytes_max", *std::max_element(pieces.begin(), pieces.end()));
  }
  values.emplace_back("scheduling.link_decisions", ctx_.link_decisions);
  values.emplace_back("scheduling.layer_decisions", ctx_.layer_decisions);
  values.emplace_back("scheduling.layers_cut", static_cast<uint64_t>(ctx_.layer_frame_bytes.size()));
  return values;
}

std::vector<uint64_t> Worker::PlacedBytes() const {
  MutexLock lock(ctx_.mu);
  return catalog_->PlacedBytes();
}

}  // namespace ferry
