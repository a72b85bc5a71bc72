#pragma once

// Ferry's Prometheus series: how nodes report their metrics with their heartbeats and how
// the scheduler serves the whole cluster's (FERRY_METRICS_PORT, scheduler/cluster_metrics.h).
// A series is declared once, where its value lives: a counter or histogram with its
// registration (CounterRegistry::Register's SeriesDeclaration, exported by AddRegistry), a
// gauge by the code that reads it (a Series constant beside the AddValue call). Each sample
// carries its series' type and help, so the scheduler's exposition needs no list of its
// own; it adds the labels role and rank.
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

// A series' declaration. `name`: Prometheus' [a-zA-Z_:][a-zA-Z0-9_:]*, a counter's ending
// in _total; `help`: one line saying what a sample counts.
struct Series {
  std::string name;
  Kind kind;
  std::string help;
};

// The histograms' bucket bounds, in microseconds (2^k - 1) and as exported (seconds).
const std::vector<uint64_t>& HistogramBoundsUs();

using Labels = std::map<std::string, std::string>;

// Appends samples to `out`. A declaration that breaks the rules above, or a histogram
// given to AddValue (or the other way round), throws FerryError(kInternal) naming it.
void AddValue(proto::MetricsSnapshot* out, const Series& series, double value,
              const Labels& labels = {});
// `h` holds microseconds.
void AddHistogram(proto::MetricsSnapshot* out, const Series& series, const Histogram& h,
                  const Labels& labels = {});
// Every counter and histogram of `registry` registered with a series.
void AddRegistry(proto::MetricsSnapshot* out, const CounterRegistry& registry);

// ferry_bytes_sent_total and ferry_bytes_received_total of every peer that exchanged
// bytes, labelled peer="<prefix><index>" ("server-0", "worker-3").
void AddPeerBytes(proto::MetricsSnapshot* out, const PeerBytes& peers, const std::string& prefix);

// ferry_refused_messages_total: what every node refused or dropped, by reason (label
// reason). The Van's reasons below; a server registers its own with this declaration.
const Series& RefusedMessages();

// A Van's refusals: ferry_refused_messages_total with reasons malformed (messages that
// failed validation) and handshake (connections refused). Every node reports them.
void AddVanRefusals(proto::MetricsSnapshot* out, const VanStats& van);

// A node's snapshot with the labels the scheduler gives it.
struct NodeSamples {
  std::string role;  // "scheduler", "server", "worker"
  int rank = 0;
  const proto::MetricsSnapshot* snapshot = nullptr;
};

// The Prometheus text exposition (format 0.0.4) of `nodes`: the series in the order they
// first appear (the nodes in order, each node's samples in order), each with its # HELP
// and # TYPE once (from its first sample), then every node's samples of it with labels
// role, rank and the sample's own (sorted). A sample whose type differs from its series'
// first is left out.
std::string Exposition(const std::vector<NodeSamples>& nodes);

// A label value escaped for the exposition (backslash, double quote, newline).
std::string EscapeLabel(const std::string& value);

}  // namespace ferry::metrics
