// The Prometheus series of common/metrics/series.h: a series declared where its value lives
// (a registered counter, or a gauge's constant) travels with its help and type; a bad
// declaration is refused; the exposition lists each series' HELP and TYPE once with every
// node's labelled samples, escapes label values, and exports a Histogram's cumulative
// buckets exactly at 2^k - 1 us.

#include "common/metrics/series.h"

#include <gtest/gtest.h>

#include <string>

#include "common/util/counters.h"
#include "common/util/error.h"

namespace ferry::metrics {
namespace {

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

const Series kSent{"ferry_bytes_sent_total", Kind::kCounter, "bytes sent"};
const Series kInFlight{"ferry_partitions_in_flight", Kind::kGauge, "partitions in flight"};
const Series kUp{"ferry_node_up", Kind::kGauge, "1 while the node is up"};
const Series kIteration{"ferry_iteration_seconds", Kind::kHistogram, "iteration time"};

TEST(MetricsTest, ABadDeclarationOrTheWrongKindIsRefused) {
  proto::MetricsSnapshot s;
  EXPECT_THROW(AddValue(&s, Series{"ferry bad name", Kind::kGauge, "help"}, 1), FerryError);
  EXPECT_THROW(AddValue(&s, Series{"9lives", Kind::kGauge, "help"}, 1), FerryError);
  EXPECT_THROW(AddValue(&s, Series{"ferry_no_help", Kind::kGauge, ""}, 1), FerryError);
  EXPECT_THROW(AddValue(&s, Series{"ferry_resends", Kind::kCounter, "help"}, 1), FerryError);
  Histogram h;
  EXPECT_THROW(AddHistogram(&s, kSent, h), FerryError);  // a counter
  EXPECT_THROW(AddValue(&s, kIteration, 1), FerryError);  // a histogram
  EXPECT_EQ(s.metrics_size(), 0);
}

TEST(MetricsTest, ARegistryExportsTheCountersDeclaredWithASeriesAndOnlyThose) {
  CounterRegistry registry;
  Counter& rounds = registry.Register("rounds", {"ferry_rounds_total", "rounds done"});
  Counter& quiet = registry.Register("quiet");  // the stats file only
  Counter& refused_a = registry.Register("refused.a", {"ferry_refused_total", "refused", "reason", "a"});
  Counter& refused_b = registry.Register("refused.b", {"ferry_refused_total", "refused", "reason", "b"});
  Histogram& delay = registry.RegisterHistogram("delay_us", {"ferry_delay_seconds", "delays"});
  rounds += 3;
  quiet += 9;
  refused_a += 1;
  refused_b += 2;
  delay.Record(1000);
  proto::MetricsSnapshot s;
  AddRegistry(&s, registry);
  ASSERT_EQ(s.metrics_size(), 4);
  EXPECT_EQ(s.metrics(0).name(), "ferry_rounds_total");
  EXPECT_EQ(s.metrics(0).kind(), proto::METRIC_COUNTER);
  EXPECT_EQ(s.metrics(0).help(), "rounds done");
  EXPECT_EQ(s.metrics(0).value(), 3);
  EXPECT_EQ(s.metrics(2).labels().at("reason"), "b");
  EXPECT_EQ(s.metrics(2).value(), 2);
  EXPECT_EQ(s.metrics(3).kind(), proto::METRIC_HISTOGRAM);
  EXPECT_EQ(s.metrics(3).count(), 1u);
  const std::string text = Exposition({{"server", 0, &s}});
  EXPECT_EQ(Count(text, "# TYPE ferry_refused_total counter\n"), 1) << text;
  EXPECT_NE(text.find("ferry_refused_total{role=\"server\",rank=\"0\",reason=\"a\"} 1\n"),
            std::string::npos) << text;
  EXPECT_EQ(text.find("quiet"), std::string::npos) << text;
  // Counting on a counter is seen at the next export: the registry hands out the live ones.
  rounds += 1;
  proto::MetricsSnapshot later;
  AddRegistry(&later, registry);
  EXPECT_EQ(later.metrics(0).value(), 4);
}

TEST(MetricsTest, ExpositionHasHelpAndTypeOnceAndEveryNodesSamples) {
  proto::MetricsSnapshot w0, w1;
  AddValue(&w0, kSent, 1024, {{"peer", "server-0"}});
  AddValue(&w0, kSent, 2048, {{"peer", "server-1"}});
  AddValue(&w1, kSent, 4096, {{"peer", "server-0"}});
  AddValue(&w1, kInFlight, 3);
  const std::string text = Exposition({{"worker", 0, &w0}, {"worker", 1, &w1}});
  EXPECT_EQ(Count(text, "# TYPE ferry_bytes_sent_total counter\n"), 1) << text;
  EXPECT_EQ(Count(text, "# HELP ferry_bytes_sent_total "), 1) << text;
  EXPECT_EQ(Count(text, "# TYPE ferry_partitions_in_flight gauge\n"), 1) << text;
  EXPECT_NE(text.find("ferry_bytes_sent_total{role=\"worker\",rank=\"0\",peer=\"server-0\"} 1024\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("ferry_bytes_sent_total{role=\"worker\",rank=\"0\",peer=\"server-1\"} 2048\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("ferry_bytes_sent_total{role=\"worker\",rank=\"1\",peer=\"server-0\"} 4096\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("ferry_partitions_in_flight{role=\"worker\",rank=\"1\"} 3\n"), std::string::npos);
  EXPECT_EQ(Count(text, "# HELP ferry_bytes_sent_total bytes sent\n"), 1) << text;
  // The samples of a series follow its TYPE line, before the next series begins.
  EXPECT_LT(text.find("# TYPE ferry_bytes_sent_total"), text.find("ferry_bytes_sent_total{"));
  EXPECT_LT(text.find("ferry_bytes_sent_total{role=\"worker\",rank=\"1\""),
            text.find("# HELP ferry_partitions_in_flight"));
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  EXPECT_EQ(EscapeLabel("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(EscapeLabel("h\xC3\xA9te \xFF!"), "h\xC3\xA9te \xEF\xBF\xBD!");  // invalid UTF-8 replaced
  proto::MetricsSnapshot s;
  AddValue(&s, kUp, 0, {{"node", "4"}, {"reason", "worker 1 \"gone\"\nat 3"}});
  const std::string text = Exposition({{"worker", 1, &s}});
  EXPECT_NE(text.find("ferry_node_up{role=\"worker\",rank=\"1\",node=\"4\",reason=\"worker 1 "
                      "\\\"gone\\\"\\nat 3\"} 0\n"),
            std::string::npos)
      << text;
}

TEST(MetricsTest, HistogramBucketsAreExactAtTheirBounds) {
  const auto& bounds = HistogramBoundsUs();
  ASSERT_EQ(bounds.front(), 127u);
  ASSERT_EQ(bounds.back(), (1u << 25) - 1);
  Histogram h;
  // 127 us is in the first bucket, 128 us is not; 1.048575 s is in the 2^20 - 1 bucket.
  for (uint64_t v : {0, 127, 128, 255, 256, 1000, 1048575, 1048576, 100000000}) h.Record(v);
  EXPECT_EQ(h.CountAtMost(127), 2u);
  EXPECT_EQ(h.CountAtMost(255), 4u);
  EXPECT_EQ(h.CountAtMost(1023), 6u);
  EXPECT_EQ(h.CountAtMost(1048575), 7u);
  EXPECT_EQ(h.sum(), 0u + 127 + 128 + 255 + 256 + 1000 + 1048575 + 1048576 + 100000000);
  proto::MetricsSnapshot s;
  AddHistogram(&s, kIteration, h);
  ASSERT_EQ(s.metrics(0).buckets_size(), static_cast<int>(bounds.size()));
  EXPECT_EQ(s.metrics(0).count(), 9u);
  const std::string text = Exposition({{"worker", 0, &s}});
  EXPECT_NE(text.find("ferry_iteration_seconds_bucket{role=\"worker\",rank=\"0\",le=\"0.000127\"} 2\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("ferry_iteration_seconds_bucket{role=\"worker\",rank=\"0\",le=\"1.048575\"} 7\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("ferry_iteration_seconds_bucket{role=\"worker\",rank=\"0\",le=\"33.554431\"} 8\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("ferry_iteration_seconds_bucket{role=\"worker\",rank=\"0\",le=\"+Inf\"} 9\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("ferry_iteration_seconds_count{role=\"worker\",rank=\"0\"} 9\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("ferry_iteration_seconds_sum{role=\"worker\",rank=\"0\"} 102.098917\n"),
            std::string::npos) << text;
}

TEST(MetricsTest, PeerBytesCountsPerPeerAndIgnoresStrangers) {
  PeerBytes p;
  p.Resize(3);
  p.AddSent(0, 10);
  p.AddSent(2, 5);
  p.AddReceived(2, 7);
  p.AddSent(3, 100);   // outside: counts nowhere
  p.AddSent(-1, 100);
  EXPECT_EQ(p.sent(0), 10u);
  EXPECT_EQ(p.sent(1), 0u);
  EXPECT_EQ(p.sent(2), 5u);
  EXPECT_EQ(p.received(2), 7u);
  EXPECT_EQ(p.size(), 3);
}

}  // namespace
}  // namespace ferry::metrics
