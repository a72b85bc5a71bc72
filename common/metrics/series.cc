#include "common/metrics/series.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <map>

#include "common/transport/van.h"
#include "common/util/error.h"
#include "common/util/strings.h"

namespace ferry::metrics {

const std::vector<uint64_t>& HistogramBoundsUs() {
  static const std::vector<uint64_t> bounds = [] {
    std::vector<uint64_t> b;
    for (int k = 7; k <= 25; ++k) b.push_back((uint64_t{1} << k) - 1);
    return b;
  }();
  return bounds;
}

namespace {

bool IsSeriesName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':';
  });
}

proto::MetricKind ProtoKind(Kind kind) {
  switch (kind) {
    case Kind::kCounter:
      return proto::METRIC_COUNTER;
    case Kind::kHistogram:
      return proto::METRIC_HISTOGRAM;
    case Kind::kGauge:
      break;
  }
  return proto::METRIC_GAUGE;
}

Kind KindOf(proto::MetricKind kind) {
  return kind == proto::METRIC_COUNTER     ? Kind::kCounter
         : kind == proto::METRIC_HISTOGRAM ? Kind::kHistogram
                                           : Kind::kGauge;
}

// A sample of `s`, checked: `histogram` says which Add* was called.
proto::Metric* NewSample(proto::MetricsSnapshot* out, const Series& s, bool histogram,
                         const Labels& labels) {
  FERRY_ENFORCE(IsSeriesName(s.name) && !s.help.empty(), ErrorCode::kInternal, "metric '", s.name,
                "': a series needs a Prometheus name and a help line");
  FERRY_ENFORCE(s.kind != Kind::kCounter || EndsWith(s.name, "_total"), ErrorCode::kInternal,
                "metric '", s.name, "': a counter's name ends in _total");
  FERRY_ENFORCE((s.kind == Kind::kHistogram) == histogram, ErrorCode::kInternal, "metric '",
                s.name, "' is ", histogram ? "not " : "", "a histogram");
  proto::Metric* m = out->add_metrics();
  m->set_name(s.name);
  m->set_help(s.help);
  m->set_kind(ProtoKind(s.kind));
  for (const auto& [k, v] : labels) (*m->mutable_labels())[k] = v;
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

void WriteSample(const proto::Metric& m, const NodeSamples& node, std::string* out) {
  const std::string& name = m.name();
  if (m.kind() != proto::METRIC_HISTOGRAM) {
    *out += StrCat(name, LabelText(node, m, ""), " ", Number(m.value()), "\n");
    return;
  }
  const auto& bounds = HistogramBoundsUs();
  for (size_t i = 0; i < bounds.size(); ++i) {
    const uint64_t n = i < static_cast<size_t>(m.buckets_size()) ? m.buckets(static_cast<int>(i))
                                                                 : m.count();
    *out += StrCat(name, "_bucket", LabelText(node, m, SecondsText(bounds[i])),
                   " ", n, "\n");
  }
  *out += StrCat(name, "_bucket", LabelText(node, m, "+Inf"), " ", m.count(), "\n");
  *out += StrCat(name, "_sum", LabelText(node, m, ""), " ", Number(m.sum()), "\n");
  *out += StrCat(name, "_count", LabelText(node, m, ""), " ", m.count(), "\n");
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

void AddValue(proto::MetricsSnapshot* out, const Series& series, double value,
              const Labels& labels) {
  NewSample(out, series, false, labels)->set_value(value);
}

void AddHistogram(proto::MetricsSnapshot* out, const Series& series, const Histogram& h,
                  const Labels& labels) {
  proto::Metric* m = NewSample(out, series, true, labels);
  for (uint64_t n : h.CountsAtMost(HistogramBoundsUs())) m->add_buckets(n);
  // count last, and at least the last bucket: Record adds to its bucket before the count,
  // so a racing Record can be in a bucket and not yet in count; the +Inf bucket (count)
  // must not be below a finite one.
  m->set_sum(static_cast<double>(h.sum()) / 1e6);
  m->set_count(std::max<uint64_t>(h.count(), m->buckets(m->buckets_size() - 1)));
}

void AddRegistry(proto::MetricsSnapshot* out, const CounterRegistry& registry) {
  for (const CounterRegistry::Exported& e : registry.ExportedSeries()) {
    const SeriesDeclaration& d = *e.series;
    Labels labels;
    if (!d.label.empty()) labels[d.label] = d.label_value;
    if (e.histogram != nullptr) {
      AddHistogram(out, Series{d.name, Kind::kHistogram, d.help}, *e.histogram, labels);
    } else {
      AddValue(out, Series{d.name, Kind::kCounter, d.help}, static_cast<double>(e.counter->value()),
               labels);
    }
  }
}

void AddPeerBytes(proto::MetricsSnapshot* out, const PeerBytes& peers, const std::string& prefix) {
  static const Series kSent{"ferry_bytes_sent_total", Kind::kCounter,
                            "tensor bytes sent to a peer (workers: pushes to a server; servers: "
                            "sums to a worker)"};
  static const Series kReceived{"ferry_bytes_received_total", Kind::kCounter,
                                "tensor bytes received from a peer (workers: sums; servers: "
                                "pushes)"};
  for (int i = 0; i < peers.size(); ++i) {
    if (peers.sent(i) == 0 && peers.received(i) == 0) continue;
    const Labels peer{{"peer", StrCat(prefix, i)}};
    AddValue(out, kSent, static_cast<double>(peers.sent(i)), peer);
    AddValue(out, kReceived, static_cast<double>(peers.received(i)), peer);
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

const Series& RefusedMessages() {
  static const Series series{"ferry_refused_messages_total", Kind::kCounter,
                             "messages refused or dropped, by reason (label reason)"};
  return series;
}

void AddVanRefusals(proto::MetricsSnapshot* out, const VanStats& van) {
  AddValue(out, RefusedMessages(), static_cast<double>(van.bad_messages_dropped),
           {{"reason", "malformed"}});
  AddValue(out, RefusedMessages(), static_cast<double>(van.connections_refused),
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
  struct Seen {
    proto::MetricKind kind;
    std::string help;
    std::string samples;
  };
  std::vector<std::string> order;     // series names, as they first appear
  std::map<std::string, Seen> series;
  for (const NodeSamples& node : nodes) {
    if (node.snapshot == nullptr) continue;
    for (const proto::Metric& m : node.snapshot->metrics()) {
      auto [it, first] = series.try_emplace(m.name(), Seen{m.kind(), m.help(), ""});
      if (first) order.push_back(m.name());
      if (it->second.kind == m.kind()) WriteSample(m, node, &it->second.samples);
    }
  }
  std::string out;
  for (const std::string& name : order) {
    const Seen& s = series.at(name);
    out += StrCat("# HELP ", name, " ", s.help, "\n# TYPE ", name, " ", TypeName(KindOf(s.kind)),
                  "\n", s.samples);
  }
  return out;
}

}  // namespace ferry::metrics
