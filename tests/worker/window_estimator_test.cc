// Tests of the BDP window (worker/partition_scheduling/window_estimator.h) alone and inside the
// ScheduledQueue under the `credit` policy, on a simulated link with a fake clock: the
// window converges to gain x rate x least round trip + two tasks, app-limited samples cannot lower
// the rate, the round trip ages out, tasks in flight together count together, bounds hold, and
// SetCredit / SetWindowGain / Done(acked = false) do what scheduled_queue.h says.

#include "worker/partition_scheduling/window_estimator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "worker/partition_scheduling/policies.h"
#include "worker/partition_scheduling/scheduled_queue.h"

namespace ferry {
namespace {

constexpr double kRate = 125.0;    // bytes per microsecond: 1 Gbit/s
constexpr int64_t kDelayUs = 200;  // the ack's way back
constexpr uint64_t kMiB = 1 << 20;

// A FIFO link: a task's last byte is through at start + bytes / rate, its ack arrives
// kDelayUs later.
struct Link {
  double busy_until = 0;
  int64_t AckAt(int64_t now, uint64_t bytes) {
    busy_until = std::max<double>(busy_until, now) + bytes / kRate;
    return static_cast<int64_t>(busy_until) + kDelayUs;
  }
};

// Pushes `tasks` tasks of `bytes` at `*now` and runs queue and link until every one is
// acknowledged; returns the largest number of bytes in flight seen.
uint64_t RunToEnd(ScheduledQueue& q, Link& link, int64_t* now, int tasks, uint64_t bytes,
                  uint64_t first_cookie) {
  for (int i = 0; i < tasks; ++i) {
    PushTask t;
    t.bytes = bytes;
    t.cookie = first_cookie + i;
    q.Push(t);
  }
  std::multimap<int64_t, PushTask> acks;
  uint64_t most = 0;
  for (int done = 0; done < tasks;) {
    Batch b;
    while (q.TryNext(&b)) {
      for (const PushTask& t : b.tasks) acks.emplace(link.AckAt(*now, t.bytes), t);
      most = std::max(most, q.in_flight_bytes());
    }
    auto first = acks.begin();
    *now = std::max(*now, first->first);
    q.Done(first->second);
    acks.erase(first);
    done++;
  }
  return most;
}

ScheduledQueue CreditQueue(int64_t* now, uint64_t credit) {
  PolicyOptions o;
  o.policy = SchedulingPolicy::kCredit;
  return ScheduledQueue(MakePolicy(o), credit, [now] { return *now; });
}

TEST(WindowEstimatorTest, ConvergesToGainTimesRateTimesLeastRoundTrip) {
  int64_t now = 1000000;
  ScheduledQueue q = CreditQueue(&now, 4 * kMiB);
  WindowOptions w;
  w.initial_bytes = 4 * kMiB;
  q.UseWindow(w);
  EXPECT_EQ(q.limit_bytes(), 4 * kMiB);  // the configured credit until 8 samples
  Link link;
  RunToEnd(q, link, &now, 100, kMiB, 1);
  // The least round trip is a task alone on the link: its own transmission plus the
  // ack's way back; the rate is the link's; a task and a one-task burst on top.
  const double rtt = kMiB / kRate + kDelayUs;
  const double expected = 2.0 * kRate * rtt + 2.0 * kMiB;
  EXPECT_NEAR(static_cast<double>(q.limit_bytes()), expected, expected * 0.01)
      << q.DescribeWindow();
  // And it keeps the link busy: the next 100 tasks take (almost) 100 transmissions.
  const int64_t start = now;
  const double busy_before = link.busy_until;
  RunToEnd(q, link, &now, 100, kMiB, 1000);
  EXPECT_GE(link.busy_until - std::max<double>(busy_before, start), 100 * kMiB / kRate - 1);
  EXPECT_LE(now - start, static_cast<int64_t>(100 * kMiB / kRate + kDelayUs + 2));
}

TEST(WindowEstimatorTest, AGainChangesTheWindowAndACreditFixesIt) {
  int64_t now = 1000000;
  ScheduledQueue q = CreditQueue(&now, 4 * kMiB);
  q.UseWindow(WindowOptions{});
  Link link;
  RunToEnd(q, link, &now, 50, kMiB, 1);
  const uint64_t at_two = q.limit_bytes();
  q.SetWindowGain(4.0);
  const double bdp = at_two - 2.0 * kMiB;  // gain 2 x rate x rtt
  EXPECT_NEAR(static_cast<double>(q.limit_bytes()), 2.0 * bdp + 2.0 * kMiB, at_two * 0.01);
  q.SetCredit(3 * kMiB);
  EXPECT_FALSE(q.window_on());
  EXPECT_EQ(q.limit_bytes(), 3 * kMiB);
  // A fixed credit bounds what is in flight; the window keeps sampling meanwhile.
  EXPECT_LE(RunToEnd(q, link, &now, 20, kMiB, 100), 3 * kMiB);
  q.SetWindowGain(2.0);
  EXPECT_TRUE(q.window_on());
  EXPECT_NEAR(static_cast<double>(q.limit_bytes()), static_cast<double>(at_two), at_two * 0.01);
}

TEST(WindowEstimatorTest, AppLimitedSamplesDoNotLowerTheRate) {
  WindowEstimator e(WindowOptions{});
  int64_t now = 1000;
  // Eight samples of a full link: 1 MiB every 8389 us, each with one ahead of it.
  for (int i = 0; i < 8; ++i) {
    auto s = e.OnSend(now, 4096, i == 0, /*app_limited=*/false);
    now += 2 * 8389;
    e.OnAck(s, 2 * kMiB, now);  // two tasks' worth delivered since the snapshot
  }
  const double rate = e.rate_bytes_per_us();
  ASSERT_GT(rate, 0);
  // A hundred small tasks alone, far apart: slow samples, app-limited.
  for (int i = 0; i < 100; ++i) {
    now += 100000;
    auto s = e.OnSend(now, 4096, /*idle=*/true, /*app_limited=*/true);
    now += 20000;
    e.OnAck(s, 4096, now);
  }
  EXPECT_EQ(e.rate_bytes_per_us(), rate);
  // The same samples not app-limited push the old ones out of the filter (64 samples).
  for (int i = 0; i < 100; ++i) {
    now += 100000;
    auto s = e.OnSend(now, 4096, true, false);
    now += 20000;
    e.OnAck(s, 4096, now);
  }
  EXPECT_LT(e.rate_bytes_per_us(), rate / 100);
}

TEST(WindowEstimatorTest, TheLeastRoundTripAgesOutAfterTenSeconds) {
  WindowEstimator e(WindowOptions{});
  int64_t now = 1000;
  auto s = e.OnSend(now, 4096, true, false);
  e.OnAck(s, kMiB, now + 1000);
  EXPECT_EQ(e.min_rtt_us(), 1000);
  now += 1000;
  for (int i = 0; i < 12; ++i) {  // one 5 ms round trip per second
    now += 1000000;
    s = e.OnSend(now, 4096, true, false);
    e.OnAck(s, kMiB, now + 5000);
  }
  EXPECT_EQ(e.min_rtt_us(), 5000);
}

TEST(WindowEstimatorTest, TasksInFlightTogetherMeasureTheirSum) {
  WindowEstimator e(WindowOptions{});
  auto a = e.OnSend(1000, 4096, true, false);
  auto b = e.OnSend(1000, 4096, false, false);
  e.OnAck(a, kMiB, 11000);  // 10 ms round trip: 1 MiB in 10 ms
  EXPECT_NEAR(e.rate_bytes_per_us(), kMiB / 10000.0, 1e-9);
  e.OnAck(b, kMiB, 11010);  // both in 10.01 ms: the link carried 2 MiB in that time
  EXPECT_NEAR(e.rate_bytes_per_us(), 2.0 * kMiB / 10010.0, 1e-9);
  EXPECT_EQ(e.min_rtt_us(), 10000);
  EXPECT_EQ(e.samples(), 2u);
}

TEST(WindowEstimatorTest, AcksThatComeInABurstWidenTheWindow) {
  WindowOptions o;
  o.min_samples = 1;
  o.min_bytes = 4096;
  WindowEstimator e(o);
  int64_t now = 1000;
  // Evenly: one 1 MiB task acknowledged every 10 ms, each alone on the link.
  for (int i = 0; i < 20; ++i) {
    auto s = e.OnSend(now, kMiB, true, false);
    now += 10000;
    e.OnAck(s, kMiB, now);
  }
  const double rate = kMiB / 10000.0;
  const double even = 2.0 * rate * 10000 + kMiB + kMiB;  // BDP + a task + a one-task burst
  EXPECT_NEAR(static_cast<double>(e.window_bytes()), even, even * 0.01) << e.Describe();
  // Eight tasks whose acks were held (behind sums) and come together, 10 us apart.
  std::vector<WindowEstimator::Snapshot> held;
  for (int i = 0; i < 8; ++i) held.push_back(e.OnSend(now, kMiB, i == 0, false));
  now += 80000;
  for (const auto& s : held) e.OnAck(s, kMiB, now += 10);
  // The epoch started at the first of them: 8 MiB acknowledged where the rate expected
  // about 1 x 70 us of bytes. The window must cover them.
  EXPECT_GT(static_cast<double>(e.window_bytes()), even + 6.0 * kMiB) << e.Describe();
}

TEST(WindowEstimatorTest, TheWindowStaysWithinItsBounds) {
  WindowOptions o;
  o.min_bytes = 2 * kMiB;
  o.max_bytes = 8 * kMiB;
  o.min_samples = 1;
  WindowEstimator slow(o);
  auto s = slow.OnSend(1000, 4096, true, false);
  slow.OnAck(s, 4096, 2000);  // 4 KB/ms x 1 ms x 2: far below the least
  EXPECT_EQ(slow.window_bytes(), 2 * kMiB);
  WindowEstimator fast(o);
  s = fast.OnSend(1000, 4096, true, false);
  fast.OnAck(s, 64 * kMiB, 11000);  // 6.7 GB/s x 10 ms x 2: far above the most
  EXPECT_EQ(fast.window_bytes(), 8 * kMiB);
}

TEST(WindowEstimatorTest, ATaskThatNeverWentIsNoSample) {
  int64_t now = 1000000;
  ScheduledQueue q = CreditQueue(&now, 4 * kMiB);
  WindowOptions o;
  o.min_samples = 1;
  q.UseWindow(o);
  PushTask t;
  t.bytes = kMiB;
  q.Push(t);
  Batch b;
  ASSERT_TRUE(q.TryNext(&b));
  now += 5;
  q.Done(b.tasks[0], /*acked=*/false);  // failed: no 5 us round trip
  EXPECT_EQ(q.limit_bytes(), 4 * kMiB);
  EXPECT_NE(q.DescribeWindow().find("0 samples"), std::string::npos) << q.DescribeWindow();
}

}  // namespace
}  // namespace ferry
