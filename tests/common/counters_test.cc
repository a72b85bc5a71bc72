#include "common/util/counters.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace ferry {
namespace {

TEST(HistogramTest, EveryValueFallsInABucketWhoseBoundsHoldIt) {
  for (uint64_t v : {0ull, 1ull, 3ull, 4ull, 5ull, 7ull, 8ull, 9ull, 15ull, 16ull, 1000ull,
                     1023ull, 1024ull, 123456789ull, (1ull << 62) + 5, ~0ull}) {
    const int b = Histogram::BucketOf(v);
    ASSERT_GE(b, 0);
    ASSERT_LT(b, Histogram::kBuckets);
    EXPECT_GE(Histogram::UpperBound(b), v) << v;
    if (b > 0) {
      EXPECT_LT(Histogram::UpperBound(b - 1), v) << v;
    }
    // At most 25% above the value (exact below 8).
    EXPECT_LE(Histogram::UpperBound(b) - v, v / 4) << v;
  }
}

TEST(HistogramTest, PercentilesAreBucketBoundsAtOrAboveTheTrueQuantile) {
  Histogram h;
  EXPECT_EQ(h.Percentile(0.5), 0u);
  for (uint64_t v = 1; v <= 100; ++v) h.Record(v);
  EXPECT_EQ(h.count(), 100u);
  EXPECT_EQ(h.max(), 100u);
  EXPECT_GE(h.Percentile(0.5), 50u);
  EXPECT_LE(h.Percentile(0.5), 55u);  // 50 lies in [48, 55]
  EXPECT_GE(h.Percentile(0.99), 99u);
  EXPECT_LE(h.Percentile(0.99), 100u);  // never above the maximum
  EXPECT_EQ(h.Percentile(1.0), 100u);
}

TEST(HistogramTest, ASnapshotShowsCountPercentilesAndMaxAfterTheCounters) {
  CounterRegistry registry;
  Counter& c = registry.Register("things");
  Histogram& h = registry.RegisterHistogram("delay_us");
  EXPECT_EQ(&h, &registry.RegisterHistogram("delay_us"));
  c += 3;
  h.Record(10);
  h.Record(1000);
  CounterValues values = registry.Snapshot();
  ASSERT_EQ(values.size(), 5u);
  EXPECT_EQ(values[0].first, "things");
  EXPECT_EQ(CounterValue(values, "delay_us_count"), 2u);
  EXPECT_EQ(CounterValue(values, "delay_us_p50"), 11u);  // 10 lies in [10, 11]
  EXPECT_EQ(CounterValue(values, "delay_us_p99"), 1000u);
  EXPECT_EQ(CounterValue(values, "delay_us_max"), 1000u);
}

TEST(HistogramTest, ConcurrentRecordsAreAllCounted) {
  Histogram h;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (uint64_t i = 0; i < 10000; ++i) h.Record(i * (t + 1));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.count(), 40000u);
  EXPECT_EQ(h.max(), 9999u * 4);
}

}  // namespace
}  // namespace ferry
