#include "scheduler/cluster_metrics.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/metrics/series.h"
#include "common/util/clock.h"
#include "common/util/strings.h"

namespace ferry {
namespace {

// Samples of `name` in `s` (the first, for histograms and plain values).
const proto::Metric* FindMetric(const proto::MetricsSnapshot& s, const std::string& name) {
  for (const proto::Metric& m : s.metrics()) {
    if (m.name() == name) return &m;
  }
  return nullptr;
}

std::string Label(const proto::Metric& m, const std::string& key) {
  auto it = m.labels().find(key);
  return it == m.labels().end() ? std::string() : it->second;
}

// Invalid UTF-8 (a host name, a reason quoting a tensor's name) becomes U+FFFD instead of
// an exception that would turn every later /api/status into an error.
std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Per second, between two samples' values; 0 when there is no span.
double Rate(double newer, double older, int64_t span_ms) {
  return span_ms > 0 && newer >= older ? (newer - older) * 1000.0 / static_cast<double>(span_ms) : 0;
}

nlohmann::json Quantiles(const std::vector<uint64_t>& newer, uint64_t newer_count,
                         const std::vector<uint64_t>& older, uint64_t older_count) {
  nlohmann::json j;
  j["count"] = newer_count >= older_count ? newer_count - older_count : 0;
  for (const auto& [key, q] : {std::pair{"p50_ms", 0.5}, std::pair{"p99_ms", 0.99}}) {
    const double v = QuantileMs(newer, newer_count, older, older_count, q);
    if (std::isinf(v)) {
      j[key] = "over 33554 ms";
    } else if (v < 0) {
      j[key] = nullptr;
    } else {
      j[key] = v;
    }
  }
  return j;
}

}  // namespace

double QuantileMs(const std::vector<uint64_t>& newer, uint64_t newer_count,
                  const std::vector<uint64_t>& older, uint64_t older_count, double q) {
  if (newer_count <= older_count) return -1;
  const uint64_t total = newer_count - older_count;
  const auto& bounds = metrics::HistogramBoundsUs();
  for (size_t i = 0; i < bounds.size() && i < newer.size(); ++i) {
    const uint64_t before = i < older.size() ? older[i] : 0;
    const uint64_t in = newer[i] >= before ? newer[i] - before : 0;
    if (static_cast<double>(in) >= q * static_cast<double>(total)) {
      return static_cast<double>(bounds[i]) / 1000.0;
    }
  }
  return std::numeric_limits<double>::infinity();
}

ClusterMetrics::ClusterMetrics(NowFn now) : now_(now ? std::move(now) : [] { return NowMs(); }) {}

ClusterMetrics::Sample ClusterMetrics::SampleOf(int64_t ms, const proto::MetricsSnapshot& s) {
  Sample out;
  out.ms = ms;
  for (const proto::Metric& m : s.metrics()) {
    if (m.name() == "ferry_bytes_sent_total") out.sent[Label(m, "peer")] += m.value();
    if (m.name() == "ferry_bytes_received_total") out.received[Label(m, "peer")] += m.value();
    if (m.name() == "ferry_summed_bytes_total") out.summed += m.value();
    if (m.name() == "ferry_urgent_queue_delay_seconds") {
      out.urgent_buckets.assign(m.buckets().begin(), m.buckets().end());
      out.urgent_count = m.count();
    }
    if (m.name() == "ferry_iteration_seconds") {
      out.iteration_buckets.assign(m.buckets().begin(), m.buckets().end());
      out.iteration_count = m.count();
    }
  }
  return out;
}

void ClusterMetrics::SetTable(const NodeTable& table) {
  MutexLock lock(mu_);
  epoch_ = table.proto().epoch();
  if (job_ == "starting") job_ = "running";
  for (const proto::NodeInfo& info : table.proto().nodes()) {
    if (info.id() == kSchedulerId) {  // the scheduler's samples are its own
      scheduler_host_ = info.host();
      continue;
    }
    auto [it, added] = nodes_.try_emplace(info.id());
    Node& n = it->second;
    if (!added && !n.alive) n = Node{};  // a spare in a dead server's slot: a new node
    if (n.last_heartbeat_ms == 0) n.last_heartbeat_ms = now_();
    n.id = info.id();
    n.role = RoleName(info.role());
    n.rank = info.rank();
    n.host = info.host();
    n.alive = true;
  }
}

void ClusterMetrics::Heartbeat(int id, const proto::MetricsSnapshot* snapshot) {
  MutexLock lock(mu_);
  auto it = nodes_.find(id);
  if (it == nodes_.end() || !it->second.alive) return;
  Node& n = it->second;
  const int64_t now = now_();
  n.last_heartbeat_ms = now;
  if (snapshot == nullptr) return;
  n.last = *snapshot;
  n.history.push_back(SampleOf(now, *snapshot));
  while (n.history.size() > 1 && n.history.front().ms < now - kHistoryMs) n.history.pop_front();
}

void ClusterMetrics::Died(int id, const std::string& reason) {
  MutexLock lock(mu_);
  auto it = nodes_.find(id);
  if (it == nodes_.end() || !it->second.alive) return;
  it->second.alive = false;
  it->second.reason = reason;
}

void ClusterMetrics::JobEnded(const std::string& failure) {
  MutexLock lock(mu_);
  job_ = failure.empty() ? "done" : "failed";
  failure_ = failure;
  for (auto& [id, n] : nodes_) {  // every process ends with the job (FERRY_METRICS_LINGER_MS)
    if (!n.alive) continue;
    n.alive = false;
    n.ended = true;
    n.reason = failure.empty() ? "the job finished" : "the job failed";
  }
}

void ClusterMetrics::SetOwn(const proto::MetricsSnapshot& own) {
  MutexLock lock(mu_);
  own_ = own;
}

std::string ClusterMetrics::Exposition() const {
  // The snapshots are copied under the lock and formatted after it (the scheduler's IO
  // thread waits for the lock with each heartbeat).
  std::vector<proto::MetricsSnapshot> merged;
  std::vector<metrics::NodeSamples> samples;
  {
    MutexLock lock(mu_);
    Collect(&merged, &samples);
  }
  return metrics::Exposition(samples);
}

void ClusterMetrics::Collect(std::vector<proto::MetricsSnapshot>* merged_out,
                             std::vector<metrics::NodeSamples>* samples_out) const {
  const int64_t now = now_();
  std::vector<proto::MetricsSnapshot>& merged = *merged_out;
  std::vector<metrics::NodeSamples>& samples = *samples_out;
  merged.reserve(nodes_.size() + 1);  // NodeSamples point into it: no reallocation
  static const metrics::Series kUp{
      "ferry_node_up", metrics::Kind::kGauge,
      "1 while the node is a live member of the job, 0 once it died or left (label reason: "
      "what the scheduler said; label node: its id)"};
  static const metrics::Series kHeartbeatAge{
      "ferry_heartbeat_age_seconds", metrics::Kind::kGauge,
      "seconds since the scheduler last heard the node's heartbeat"};
  static const metrics::Series kEpoch{"ferry_membership_epoch", metrics::Kind::kGauge,
                                      "the job's membership epoch (elastic training)"};
  proto::MetricsSnapshot scheduler;
  metrics::AddValue(&scheduler, kUp, 1, {{"node", "0"}});
  metrics::AddValue(&scheduler, kEpoch, epoch_);
  scheduler.MergeFrom(own_);
  merged.push_back(std::move(scheduler));
  samples.push_back({"scheduler", 0, &merged.back()});
  for (const auto& [id, n] : nodes_) {
    proto::MetricsSnapshot s;
    metrics::Labels up{{"node", std::to_string(id)}};
    if (!n.alive) up["reason"] = n.reason;
    metrics::AddValue(&s, kUp, n.alive ? 1 : 0, up);
    if (n.alive) {
      metrics::AddValue(&s, kHeartbeatAge,
                        static_cast<double>(now - n.last_heartbeat_ms) / 1000.0);
    }
    if (n.alive || n.ended) s.MergeFrom(n.last);  // the job's final numbers stay
    merged.push_back(std::move(s));
    samples.push_back({n.role, n.rank, &merged.back()});
  }
}

std::string ClusterMetrics::NodeJson(const Node& n, int64_t now) const {
  nlohmann::json j;
  j["id"] = n.id;
  j["role"] = n.role;
  j["rank"] = n.rank;
  j["host"] = n.host;
  j["alive"] = n.alive;
  j["reason"] = n.reason;
  j["heartbeat_age_s"] = static_cast<double>(now - n.last_heartbeat_ms) / 1000.0;
  nlohmann::json links = nlohmann::json::array();
  if (!n.alive) {  // its numbers stopped when it died: no rates, no queues
    j["links"] = links;
    return Dump(j);
  }
  if (!n.history.empty()) {
    const Sample& last = n.history.back();
    const Sample* window = &last;  // the oldest sample within kRateWindowMs (or the oldest)
    for (const Sample& s : n.history) {
      if (s.ms >= last.ms - kRateWindowMs) {
        window = &s;
        break;
      }
    }
    const Sample& minute = n.history.front();
    const int64_t span = last.ms - window->ms;
    const int64_t minute_span = last.ms - minute.ms;
    std::map<std::string, bool> peers;
    for (const auto& [peer, v] : last.sent) peers[peer] = true;
    for (const auto& [peer, v] : last.received) peers[peer] = true;
    auto at = [](const std::map<std::string, double>& m, const std::string& k) {
      auto it = m.find(k);
      return it == m.end() ? 0.0 : it->second;
    };
    for (const auto& [peer, unused] : peers) {
      links.push_back({{"peer", peer},
                       {"sent_bytes_per_s", Rate(at(last.sent, peer), at(window->sent, peer), span)},
                       {"received_bytes_per_s",
                        Rate(at(last.received, peer), at(window->received, peer), span)},
                       {"sent_bytes_per_s_minute",
                        Rate(at(last.sent, peer), at(minute.sent, peer), minute_span)},
                       {"received_bytes_per_s_minute",
                        Rate(at(last.received, peer), at(minute.received, peer), minute_span)},
                       {"sent_bytes", at(last.sent, peer)},
                       {"received_bytes", at(last.received, peer)}});
    }
    if (n.role == "server") j["summed_bytes_per_s"] = Rate(last.summed, window->summed, span);
    if (n.role == "worker") {
      j["urgent_queue_delay"] = Quantiles(last.urgent_buckets, last.urgent_count,
                                          minute.urgent_buckets, minute.urgent_count);
      j["iteration"] = Quantiles(last.iteration_buckets, last.iteration_count,
                                 minute.iteration_buckets, minute.iteration_count);
    }
    j["window_s"] = static_cast<double>(span) / 1000.0;
    j["minute_s"] = static_cast<double>(minute_span) / 1000.0;
  }
  j["links"] = links;
  if (const proto::Metric* m = FindMetric(n.last, "ferry_partitions_in_flight")) {
    j["partitions_in_flight"] = m->value();
  }
  for (const proto::Metric& m : n.last.metrics()) {
    if (m.name() == "ferry_queued_bytes") j["queued_bytes"][Label(m, "priority")] = m.value();
  }
  return Dump(j);
}

std::string ClusterMetrics::StatusJson() const {
  MutexLock lock(mu_);
  const int64_t now = now_();
  Node scheduler;  // listed first, alive while it answers
  scheduler.role = "scheduler";
  scheduler.host = scheduler_host_;
  scheduler.last_heartbeat_ms = now;
  std::string nodes = NodeJson(scheduler, now);
  for (const auto& [id, n] : nodes_) {
    if (!nodes.empty()) nodes += ",";
    nodes += NodeJson(n, now);
  }
  nlohmann::json job = {{"state", job_}, {"failure", failure_}, {"epoch", epoch_},
                        {"unix_ms", UnixUs() / 1000}};
  return StrCat("{\"job\":", Dump(job), ",\"nodes\":[", nodes, "]}");
}

}  // namespace ferry
