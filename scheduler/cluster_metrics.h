#pragma once

// ClusterMetrics: what the scheduler knows of every node, for its metrics endpoint and
// status page (FERRY_METRICS_PORT; docs/operations.md "Live metrics"): each node's role,
// rank and host, alive or dead (with the reason the scheduler gave), when it last
// heartbeat, its last metrics snapshot (common/metrics/series.h: the nodes send one with
// every heartbeat while the scheduler asks) and a minute of history for rates.
//
// Dead nodes stay listed (ferry_node_up 0, with the reason) until a spare takes their id;
// their own series are no longer exported (a survivor may hold their rank now), nor their
// frozen rates in the status. When the job ends, the nodes alive then are listed as ended
// (ferry_node_up 0, "the job finished" / "the job failed") and keep their last series:
// the job's final numbers, while the scheduler lingers (FERRY_METRICS_LINGER_MS).
//
// Thread-safe: the scheduler writes (under its lock, or not), the HTTP thread reads;
// every method takes mu_ only, so the HTTP thread never waits for the scheduler's lock.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/cluster/node_table.h"
#include "common/metrics/series.h"
#include "common/util/mutex.h"
#include "ferry.pb.h"

namespace ferry {

class ClusterMetrics {
 public:
  // Rates are over this window (the status page's throughput), delays over kHistoryMs.
  static constexpr int64_t kRateWindowMs = 10000;
  static constexpr int64_t kHistoryMs = 60000;

  using NowFn = std::function<int64_t()>;  // milliseconds, monotonic
  explicit ClusterMetrics(NowFn now = nullptr);

  // The members of `table` (the newest epoch) are alive with these roles, ranks and hosts;
  // an id that was dead comes back as a new node (a spare took its slot).
  void SetTable(const NodeTable& table) EXCLUDES(mu_);
  // A heartbeat of member `id`, with its metrics (null: none).
  void Heartbeat(int id, const proto::MetricsSnapshot* snapshot) EXCLUDES(mu_);
  // Member `id` died or was dropped; `reason` as the scheduler logged it.
  void Died(int id, const std::string& reason) EXCLUDES(mu_);
  // The job ended: `failure` empty after an orderly end. Every node still alive is then
  // listed as ended ("the job finished" / "the job failed"): the processes exit with it.
  void JobEnded(const std::string& failure) EXCLUDES(mu_);
  // The scheduler's own samples (its Van's refusals), refreshed by the caller.
  void SetOwn(const proto::MetricsSnapshot& own) EXCLUDES(mu_);

  // The Prometheus text exposition of the whole cluster.
  std::string Exposition() const EXCLUDES(mu_);
  // /api/status: JSON for the status page (docs/operations.md lists its fields).
  std::string StatusJson() const EXCLUDES(mu_);

 private:
  // One heartbeat's numbers the page needs over time.
  struct Sample {
    int64_t ms = 0;
    std::map<std::string, double> sent, received;  // by peer
    double summed = 0;
    std::vector<uint64_t> urgent_buckets;  // ferry_urgent_queue_delay_seconds
    uint64_t urgent_count = 0;
    std::vector<uint64_t> iteration_buckets;  // ferry_iteration_seconds
    uint64_t iteration_count = 0;
  };
  struct Node {
    int id = 0;
    std::string role;
    int rank = 0;
    std::string host;
    bool alive = true;
    std::string reason;  // why it died, or that the job ended
    bool ended = false;  // alive until the job ended: its last numbers stay exported
    int64_t last_heartbeat_ms = 0;
    proto::MetricsSnapshot last;
    std::deque<Sample> history;  // oldest first, kHistoryMs of it
  };

  static Sample SampleOf(int64_t ms, const proto::MetricsSnapshot& s);
  // Every node's samples for the exposition (copies: formatted without the lock).
  void Collect(std::vector<proto::MetricsSnapshot>* merged,
               std::vector<metrics::NodeSamples>* samples) const REQUIRES(mu_);
  std::string NodeJson(const Node& n, int64_t now) const REQUIRES(mu_);

  const NowFn now_;
  mutable Mutex mu_;
  std::map<int, Node> nodes_ GUARDED_BY(mu_);  // by id
  uint32_t epoch_ GUARDED_BY(mu_) = 0;
  std::string scheduler_host_ GUARDED_BY(mu_);
  std::string job_ GUARDED_BY(mu_) = "starting";  // starting, running, done, failed
  std::string failure_ GUARDED_BY(mu_);
  proto::MetricsSnapshot own_ GUARDED_BY(mu_);
};

// The bound (in milliseconds) under which a `q` share of the samples between two
// cumulative histograms (common/metrics/series.h's bounds) fall; -1 without samples, and
// +infinity when beyond the last bound.
double QuantileMs(const std::vector<uint64_t>& newer, uint64_t newer_count,
                  const std::vector<uint64_t>& older, uint64_t older_count, double q);

}  // namespace ferry
