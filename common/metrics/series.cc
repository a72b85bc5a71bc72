#include "common/metrics/series.h"

#include <charconv>
#include <cstdio>
#include <map>

#include "common/transport/van.h"
#include "common/util/error.h"
#include "common/util/strings.h"

namespace ferry::metrics {

const std::vector<Series>& Catalog() {
  static const std::vector<Series> catalog = {
      // Every node (the scheduler computes the first two from what it sees).
      {"ferry_node_up", Kind::kGauge,
       "1 while the node is a live member of the job, 0 once it died or left (label reason: "
       "what the scheduler said; label node: its id)"},
      {"ferry_heartbeat_age_seconds", Kind::kGauge,
       "seconds since the scheduler last heard the node's heartbeat"},
      {"ferry_membership_epoch", Kind::kGauge, "the job's membership epoch (elastic training)"},
      {"ferry_bytes_sent_total", Kind::kCounter,
       "tensor bytes sent to a peer (workers: pushes to a server; servers: sums to a worker)"},
      {"ferry_bytes_received_total", Kind::kCounter,
       "tensor bytes received from a peer (workers: sums; servers: pushes)"},
      {"ferry_refused_messages_total", Kind::kCounter,
       "messages refused or dropped, by reason (label reason)"},
      // Workers.
      {"ferry_operations_total", Kind::kCounter, "push_pull and broadcast operations started"},
      {"ferry_partitions_in_flight", Kind::kGauge,
       "partitions handed to the transport and not yet acknowledged (within the credit)"},
      {"ferry_queued_bytes", Kind::kGauge,
       "bytes of partitions waiting in the send queue, by priority class (label priority: "
       "urgent = the most urgent 10% of the worker's partitions, other)"},
      {"ferry_urgent_queue_delay_seconds", Kind::kHistogram,
       "how long an urgent partition waited in the send queue (from ready to sent)"},
      {"ferry_partition_round_seconds", Kind::kHistogram,
       "a partition's round: from its push sent to its sum received"},
      {"ferry_resends_total", Kind::kCounter, "pushes sent again after a timeout"},
      {"ferry_iteration_seconds", Kind::kHistogram,
       "training iteration time, between the program's step boundaries"},
      // Servers.
      {"ferry_summed_bytes_total", Kind::kCounter,
       "bytes summed (its rate is the summation throughput)"},
      {"ferry_rounds_completed_total", Kind::kCounter, "partition rounds whose sum was complete"},
      {"ferry_duplicates_dropped_total", Kind::kCounter,
       "pushes dropped as duplicates of one already counted"},
  };
  return catalog;
}

const Series* Find(const std::string& name) {
  for (const Series& s : Catalog()) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

const std::vector<uint64_t>& HistogramBoundsUs() {
  static const std::vector<uint64_t> bounds = [] {
    std::vector<uint64_t> b;
    for (int k = 7; k <= 25; ++k) b.push_back((uint64_t{1} << k) - 1);
    return b;
  }();
  return bounds;
}

namespace {

proto::Metric* NewSample(proto::MetricsSnapshot* out, const char* name, Kind kind) {
  const Series* s = Find(name);
  FERRY_ENFORCE(s != nullptr && s->kind == kind, ErrorCode::kInternal, "metric ", name,
                " is not a series of this kind in common/metrics/series.cc's catalog");
  proto::Metric* m = out->add_metrics();
  m->set_name(name);
  return m;
}

std::string SecondsText(uint64_t us);

std::string Number(double v) {  // the shortest text that reads back as v
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string LabelText(const NodeSamples& node, const proto::Metric& m, const std::string& le) {
  std::string out = StrCat("{role=\"", EscapeLabel(node.role), "\",rank=\"", node.rank, "\"");
  const std::map<std::string, std::string> sorted(m.labels().begin(), m.labels().end());
  for (const auto& [k, v] : sorted) out += StrCat(",", k, "=\"", EscapeLabel(v), "\"");
  if (!le.empty()) out += StrCat(",le=\"", le, "\"");
  return out + "}";
}

void WriteSample(const Series& s, const NodeSamples& node, const proto::Metric& m,
                 std::string* out) {
  if (s.kind != Kind::kHistogram) {
    *out += StrCat(s.name, LabelText(node, m, ""), " ", Number(m.value()), "\n");
    return;
  }
  const auto& bounds = HistogramBoundsUs();
  for (size_t i = 0; i < bounds.size(); ++i) {
    const uint64_t n = i < static_cast<size_t>(m.buckets_size()) ? m.buckets(static_cast<int>(i))
                                                                 : m.count();
    *out += StrCat(s.name, "_bucket", LabelText(node, m, SecondsText(bounds[i])),
                   " ", n, "\n");
  }
  *out += StrCat(s.name, "_bucket", LabelText(node, m, "+Inf"), " ", m.count(), "\n");
  *out += StrCat(s.name, "_sum", LabelText(node, m, ""), " ", Number(m.sum()), "\n");
  *out += StrCat(s.name, "_count", LabelText(node, m, ""), " ", m.count(), "\n");
}

// A bound of 2^k - 1 microseconds in seconds, exactly ("0.000127", "1.048575").
std::string SecondsText(uint64_t us) {
  std::string frac = std::to_string(1000000 + us % 1000000).substr(1);
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  return std::to_string(us / 1000000) + (frac.empty() ? "" : "." + frac);
}

const char* TypeName(Kind k) {
  switch (k) {
    case Kind::kCounter:
      return "counter";
    case Kind::kGauge:
      return "gauge";
    case Kind::kHistogram:
      return "histogram";
  }
  return "untyped";
}

}  // namespace

void AddValue(proto::MetricsSnapshot* out, const char* name, double value, const Labels& labels) {
  const Series* s = Find(name);
  proto::Metric* m =
      NewSample(out, name, s != nullptr && s->kind == Kind::kCounter ? Kind::kCounter : Kind::kGauge);
  m->set_value(value);
  for (const auto& [k, v] : labels) (*m->mutable_labels())[k] = v;
}

void AddHistogram(proto::MetricsSnapshot* out, const char* name, const Histogram& h) {
  proto::Metric* m = NewSample(out, name, Kind::kHistogram);
  for (uint64_t n : h.CountsAtMost(HistogramBoundsUs())) m->add_buckets(n);
  // count last, and at least the last bucket: Record adds to its bucket before the count,
  // so a racing Record can be in a bucket and not yet in count; the +Inf bucket (count)
  // must not be below a finite one.
  m->set_sum(static_cast<double>(h.sum()) / 1e6);
  m->set_count(std::max<uint64_t>(h.count(), m->buckets(m->buckets_size() - 1)));
}

void AddPeerBytes(proto::MetricsSnapshot* out, const PeerBytes& peers, const std::string& prefix) {
  for (int i = 0; i < peers.size(); ++i) {
    if (peers.sent(i) == 0 && peers.received(i) == 0) continue;
    const Labels peer{{"peer", StrCat(prefix, i)}};
    AddValue(out, "ferry_bytes_sent_total", static_cast<double>(peers.sent(i)), peer);
    AddValue(out, "ferry_bytes_received_total", static_cast<double>(peers.received(i)), peer);
  }
}

namespace {

// The length of the valid UTF-8 sequence at s[i], or 0 if there is none.
size_t Utf8Length(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) >> 6) != 2) return 0;
  }
  return n;
}

}  // namespace

void AddVanRefusals(proto::MetricsSnapshot* out, const VanStats& van) {
  AddValue(out, "ferry_refused_messages_total", static_cast<double>(van.bad_messages_dropped),
           {{"reason", "malformed"}});
  AddValue(out, "ferry_refused_messages_total", static_cast<double>(van.connections_refused),
           {{"reason", "handshake"}});
}

std::string EscapeLabel(const std::string& raw) {
  // Prometheus refuses a whole scrape over one label value that is not UTF-8: invalid bytes
  // (a host name, a reason quoting a tensor's name) become U+FFFD.
  std::string value;
  for (size_t i = 0; i < raw.size();) {
    const size_t n = Utf8Length(raw, i);
    value += n == 0 ? std::string("\xEF\xBF\xBD") : raw.substr(i, n);
    i += n == 0 ? 1 : n;
  }
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Exposition(const std::vector<NodeSamples>& nodes) {
  std::string out;
  for (const Series& s : Catalog()) {
    std::string samples;
    for (const NodeSamples& node : nodes) {
      if (node.snapshot == nullptr) continue;
      for (const proto::Metric& m : node.snapshot->metrics()) {
        if (m.name() == s.name) WriteSample(s, node, m, &samples);
      }
    }
    if (samples.empty()) continue;
    out += StrCat("# HELP ", s.name, " ", s.help, "\n# TYPE ", s.name, " ", TypeName(s.kind), "\n");
    out += samples;
  }
  return out;
}

}  // namespace ferry::metrics
