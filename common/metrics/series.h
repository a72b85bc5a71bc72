#pragma once

// Ferry's Prometheus series: one catalog for the nodes that report them with
// their heartbeats and for the scheduler that serves the whole cluster's (FERRY_METRICS_PORT,
// scheduler/cluster_metrics.h). A node reports samples by name (proto::Metric); the catalog
// gives each name its type and help, and the scheduler adds the labels role and rank.
//
// Histograms are recorded in microseconds (common/util/counters.h's Histogram, 4 buckets
// per power of two) and exported in seconds at the bounds 2^k - 1 us, k = 7..25 (127 us to
// 33.6 s): each is the upper end of one of the Histogram's buckets, so the cumulative counts
// are exact, not interpolated.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/util/counters.h"
#include "proto/ferry.pb.h"

namespace ferry {
struct VanStats;
}

namespace ferry::metrics {

enum class Kind { kCounter, kGauge, kHistogram };

struct Series {
  const char* name;
  Kind kind;
  const char* help;
};

// Every series Ferry exports, in the order the exposition lists them.
const std::vector<Series>& Catalog();
// The catalog's entry for `name`; null if there is none.
const Series* Find(const std::string& name);

// The histograms' bucket bounds, in microseconds (2^k - 1) and as exported (seconds).
const std::vector<uint64_t>& HistogramBoundsUs();

using Labels = std::map<std::string, std::string>;

// Appends samples to `out`. `name` must be in the catalog (checked: a FerryError names it).
void AddValue(proto::MetricsSnapshot* out, const char* name, double value,
              const Labels& labels = {});
// `h` holds microseconds.
void AddHistogram(proto::MetricsSnapshot* out, const char* name, const Histogram& h);

// ferry_bytes_sent_total and ferry_bytes_received_total of every peer that exchanged
// bytes, labelled peer="<prefix><index>" ("server-0", "worker-3").
void AddPeerBytes(proto::MetricsSnapshot* out, const PeerBytes& peers, const std::string& prefix);

// A Van's refusals: ferry_refused_messages_total with reasons malformed (messages that
// failed validation) and handshake (connections refused). Every node reports them.
void AddVanRefusals(proto::MetricsSnapshot* out, const VanStats& van);

// A node's snapshot with the labels the scheduler gives it.
struct NodeSamples {
  std::string role;  // "scheduler", "server", "worker"
  int rank = 0;
  const proto::MetricsSnapshot* snapshot = nullptr;
};

// The Prometheus text exposition (format 0.0.4) of `nodes`: each series' # HELP and # TYPE
// once, then every node's samples with labels role, rank and the sample's own (sorted).
// Samples of names not in the catalog are left out (a newer node's: logged by the caller).
std::string Exposition(const std::vector<NodeSamples>& nodes);

// A label value escaped for the exposition (backslash, double quote, newline).
std::string EscapeLabel(const std::string& value);

}  // namespace ferry::metrics
