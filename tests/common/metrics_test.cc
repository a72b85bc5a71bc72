// The Prometheus series of common/metrics/series.h: the catalog refuses unknown names, the
// exposition lists each series' HELP and TYPE once with every node's labelled samples,
// escapes label values, and exports a Histogram's cumulative buckets exactly at 2^k - 1 us.

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

TEST(MetricsTest, UnknownNameOrWrongKindIsRefused) {
  proto::MetricsSnapshot s;
  EXPECT_THROW(AddValue(&s, "ferry_no_such_series", 1), FerryError);
  Histogram h;
  EXPECT_THROW(AddHistogram(&s, "ferry_resends_total", h), FerryError);  // a counter
  EXPECT_THROW(AddValue(&s, "ferry_iteration_seconds", 1), FerryError);  // a histogram
  EXPECT_EQ(s.metrics_size(), 0);
}

TEST(MetricsTest, ExpositionHasHelpAndTypeOnceAndEveryNodesSamples) {
  proto::MetricsSnapshot w0, w1;
  AddValue(&w0, "ferry_bytes_sent_total", 1024, {{"peer", "server-0"}});
  AddValue(&w0, "ferry_bytes_sent_total", 2048, {{"peer", "server-1"}});
  AddValue(&w1, "ferry_bytes_sent_total", 4096, {{"peer", "server-0"}});
  AddValue(&w1, "ferry_partitions_in_flight", 3);
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
  // Series nobody reported are left out entirely.
  EXPECT_EQ(text.find("ferry_summed_bytes_total"), std::string::npos) << text;
  // The samples of a series follow its TYPE line, before the next series begins.
  EXPECT_LT(text.find("# TYPE ferry_bytes_sent_total"), text.find("ferry_bytes_sent_total{"));
  EXPECT_LT(text.find("ferry_bytes_sent_total{role=\"worker\",rank=\"1\""),
            text.find("# HELP ferry_partitions_in_flight"));
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  EXPECT_EQ(EscapeLabel("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(EscapeLabel("h\xC3\xA9te \xFF!"), "h\xC3\xA9te \xEF\xBF\xBD!");  // invalid UTF-8 replaced
  proto::MetricsSnapshot s;
  AddValue(&s, "ferry_node_up", 0, {{"node", "4"}, {"reason", "worker 1 \"gone\"\nat 3"}});
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
  AddHistogram(&s, "ferry_iteration_seconds", h);
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
