// Tests of ReadyProfile (worker/partition_scheduling/ready_profile.h) and the two policies that
// schedule by it, usbyte and prophet (policies.h): the phases, the predictions, drift and
// re-profiling, and each policy's limit on a hand-made profile, with time as an argument.

#include "worker/partition_scheduling/ready_profile.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "worker/partition_scheduling/policies.h"
#include "worker/partition_scheduling/scheduling_core.h"

namespace ferry {
namespace {

// One backward pass: (priority, offset in us from the iteration's first Ready).
using Backward = std::vector<std::pair<int, int64_t>>;

// Layers 0..3 (priority 3 nearest the input, ready last): two close together, then gaps.
const Backward kBackward = {{0, 0}, {1, 200}, {2, 10000}, {3, 30000}};
constexpr int64_t kPeriod = 100000;

// Drives a profile through iterations: a Step every kPeriod (or `period`), the backward
// pass 5 ms after it.
struct Driver {
  ReadyProfile& profile;
  int64_t step_us = 1000000;

  void Iteration(const Backward& backward, int64_t period = kPeriod) {
    profile.OnStep(step_us);
    for (const auto& [priority, offset] : backward) profile.OnReady(priority, Start() + offset);
    step_us += period;
  }
  int64_t Start() const { return step_us + 5000; }  // this iteration's first Ready
};

TEST(ReadyProfileTest, SkipsProfilesThenPredicts) {
  ReadyProfile p;
  Driver d{p};
  d.Iteration(kBackward);  // skipped
  EXPECT_FALSE(p.Predicting(d.step_us));
  EXPECT_NE(p.Describe().find("skipping"), std::string::npos) << p.Describe();
  d.Iteration(kBackward);
  EXPECT_NE(p.Describe().find("profiling (1 of 2)"), std::string::npos) << p.Describe();
  d.Iteration(kBackward);
  EXPECT_FALSE(p.Predicting(d.step_us)) << "the profile is built at the next boundary";
  p.OnStep(d.step_us);  // the third iteration ends: two profiled
  EXPECT_EQ(p.profiles(), 1u);
  EXPECT_NE(p.Describe().find("4 priorities in 3 bursts over 30 ms"), std::string::npos)
      << p.Describe();
  // Before this iteration's first Ready the previous backward is over.
  EXPECT_TRUE(p.Predicting(d.step_us));
  EXPECT_TRUE(p.BackwardOver());
  EXPECT_EQ(p.NextBurstUs(), ReadyProfile::kNever);
  EXPECT_EQ(p.BackwardAfterUs(0), 30000);
  EXPECT_EQ(p.BackwardAfterUs(2), 20000);
  EXPECT_EQ(p.BackwardAfterUs(3), 0);
  EXPECT_EQ(p.BackwardAfterUs(99), 0) << "unprofiled";

  const int64_t start = d.step_us + 7000;
  p.OnReady(0, start);
  EXPECT_FALSE(p.BackwardOver());
  EXPECT_EQ(p.NextBurstUs(), start + 10000) << "0 and 1 are one burst: the next is 2's";
  p.OnReady(1, start + 150);
  EXPECT_EQ(p.NextBurstUs(), start + 10000);
  p.OnReady(2, start + 10100);
  EXPECT_EQ(p.NextBurstUs(), start + 30000);
  EXPECT_TRUE(p.Predicting(start + 10100));
  p.OnReady(3, start + 29500);
  EXPECT_TRUE(p.BackwardOver());
  EXPECT_TRUE(p.Predicting(start + 29500));
  EXPECT_EQ(p.EndsPredictingUs(), ReadyProfile::kNever);
}

// A profiled predictor after the three iterations above.
void Profiled(Driver& d) {
  for (int i = 0; i < 3; ++i) d.Iteration(kBackward);
  d.profile.OnStep(d.step_us);
  d.step_us += kPeriod;
  ASSERT_EQ(d.profile.profiles(), 1u);
}

TEST(ReadyProfileTest, MediansOverTheProfiledIterationsAndOnlyCommonPriorities) {
  ReadyProfileOptions o;
  o.iterations = 3;
  ReadyProfile p(o);
  Driver d{p};
  d.Iteration(kBackward);
  d.Iteration({{0, 0}, {2, 9000}, {3, 31000}, {7, 40000}});
  d.Iteration({{0, 0}, {1, 300}, {2, 11000}, {3, 29000}});
  d.Iteration({{0, 0}, {1, 100}, {2, 10500}, {3, 30500}, {7, 1000}});
  p.OnStep(d.step_us);
  ASSERT_EQ(p.profiles(), 1u);
  // Priority 1 was missing once and 7 twice: neither is profiled.
  EXPECT_NE(p.Describe().find("3 priorities"), std::string::npos) << p.Describe();
  EXPECT_EQ(p.BackwardAfterUs(0), 30500);  // the median of 31000, 29000, 30500
  EXPECT_EQ(p.BackwardAfterUs(2), 30500 - 10500);
  EXPECT_EQ(p.BackwardAfterUs(1), 0);
}

TEST(ReadyProfileTest, ALateBurstEndsThePredictionAtItsTolerance) {
  ReadyProfile p;
  Driver d{p};
  Profiled(d);
  p.OnStep(d.step_us);
  const int64_t start = d.step_us + 5000;
  p.OnReady(0, start);
  p.OnReady(1, start + 200);
  // Tolerance: max(2 ms, 20% of the 30 ms span) = 6 ms.
  EXPECT_EQ(p.EndsPredictingUs(), start + 10000 + 6000 + 1);
  EXPECT_TRUE(p.Predicting(start + 16000));
  EXPECT_FALSE(p.Predicting(start + 16001));
}

TEST(ReadyProfileTest, ChangedComputeIsDriftAndIsProfiledAgain) {
  ReadyProfile p;
  Driver d{p};
  Profiled(d);
  // The compute doubles: every gap doubles.
  const Backward slower = {{0, 0}, {1, 400}, {2, 20000}, {3, 60000}};
  p.OnStep(d.step_us);
  const int64_t start = d.step_us + 5000;
  p.OnReady(0, start);
  p.OnReady(1, start + 400);
  EXPECT_TRUE(p.Predicting(start + 400));
  p.OnReady(2, start + 20000);  // 10 ms late: beyond the 6 ms tolerance
  EXPECT_FALSE(p.Predicting(start + 20000)) << "the rest of the iteration runs credit";
  EXPECT_EQ(p.EndsPredictingUs(), ReadyProfile::kNever);
  p.OnReady(3, start + 60000);
  d.step_us += 2 * kPeriod;
  d.Iteration(slower, 2 * kPeriod);  // its boundary: the first strike
  EXPECT_EQ(p.drifts(), 0u);
  d.Iteration(slower, 2 * kPeriod);  // the second: this iteration is profiled
  EXPECT_EQ(p.drifts(), 1u);
  EXPECT_NE(p.Describe().find("profiling (1 of 2)"), std::string::npos)
      << "gradients off their times: the workload changed, no back-off; " << p.Describe();
  d.Iteration(slower, 2 * kPeriod);
  EXPECT_EQ(p.profiles(), 1u);
  p.OnStep(d.step_us);
  EXPECT_EQ(p.profiles(), 2u);
  EXPECT_EQ(p.BackwardAfterUs(0), 60000) << "the new profile has the new gaps";
  EXPECT_TRUE(p.Predicting(d.step_us));
}

TEST(ReadyProfileTest, SlowerIterationsAreDriftOneIsNot) {
  ReadyProfile p;
  Driver d{p};
  Profiled(d);
  d.Iteration(kBackward, kPeriod * 110 / 100);  // one slow iteration: a strike
  d.Iteration(kBackward, kPeriod);              // clears it
  d.Iteration(kBackward, kPeriod * 110 / 100);
  EXPECT_EQ(p.drifts(), 0u);
  d.Iteration(kBackward, kPeriod * 104 / 100);  // within 5%: clears it
  d.Iteration(kBackward, kPeriod * 110 / 100);
  d.Iteration(kBackward, kPeriod * 110 / 100);
  p.OnStep(d.step_us);
  EXPECT_EQ(p.drifts(), 1u);
}

TEST(ReadyProfileTest, AProfileThatNeverHelpedDoublesTheNextProfiling) {
  ReadyProfile p;
  Driver d{p};
  Profiled(d);
  d.Iteration(kBackward, 2 * kPeriod);
  d.Iteration(kBackward, 2 * kPeriod);
  p.OnStep(d.step_us);
  EXPECT_EQ(p.drifts(), 1u);
  EXPECT_NE(p.Describe().find("of 4)"), std::string::npos) << p.Describe();
}

TEST(ReadyProfileTest, AnIterationWithoutBackwardIsNeutral) {
  ReadyProfile p;
  Driver d{p};
  Profiled(d);
  d.Iteration(kBackward, 2 * kPeriod);  // a strike
  d.Iteration({}, 5 * kPeriod);         // an evaluation step: nothing pushed
  d.Iteration(kBackward, kPeriod);      // clears it
  d.Iteration(kBackward, 2 * kPeriod);
  p.OnStep(d.step_us);
  EXPECT_EQ(p.drifts(), 0u);
}

// The policies' limits on a profile, with a hand-made CreditState.
constexpr uint64_t kCredit = 4000;
constexpr double kRate = 2.0;  // bytes per us

CreditState Credit(uint64_t in_flight = 0, int tasks = 0) {
  CreditState c;
  c.limit_bytes = kCredit;
  c.in_flight_bytes = in_flight;
  c.in_flight_tasks = tasks;
  c.rate_bytes_per_us = kRate;
  return c;
}

// Runs `policy` through the profiling iterations (Ready and Step, as the core would).
int64_t Profile(ProfiledPolicy& policy) {
  int64_t step = 1000000;
  PushTask t;
  for (int i = 0; i < 3; ++i) {
    policy.Step(step);
    for (const auto& [priority, offset] : kBackward) {
      t.priority = priority;
      t.bytes = 100;
      policy.Ready(t, step + 5000 + offset);
      Batch b;
      while (policy.Next(Credit(), step + 5000 + offset, &b)) b.tasks.clear();
    }
    step += kPeriod;
  }
  policy.Step(step);
  EXPECT_EQ(policy.profile().profiles(), 1u);
  return step;
}

TEST(UsbytePolicyTest, CreditUntilProfiledThenBlocksSizedByTheComputeAhead) {
  UsbytePolicy policy(/*fusion_bytes=*/0);
  EXPECT_EQ(policy.LimitAt(Credit(), 0, 0), kCredit) << "no profile: credit";
  const int64_t step = Profile(policy);
  const int64_t start = step + 5000;
  PushTask t;
  t.priority = 0;
  t.bytes = 100;
  policy.Ready(t, start);
  // Backward: the link carries R x (the next burst - now); never below the credit.
  EXPECT_EQ(policy.LimitAt(Credit(), 0, start), static_cast<uint64_t>(kRate * 10000));
  EXPECT_EQ(policy.LimitAt(Credit(), 0, start + 9000), kCredit);
  CreditState unmeasured = Credit();
  unmeasured.rate_bytes_per_us = 0;
  EXPECT_EQ(policy.LimitAt(unmeasured, 0, start), kCredit) << "no rate: credit";
  for (int priority : {1, 2, 3}) {
    t.priority = priority;
    policy.Ready(t, start + kBackward[priority].second);
  }
  // After backward: the forward compute before the head's layer (half its backward).
  const int64_t now = start + 30000;
  EXPECT_EQ(policy.LimitAt(Credit(), 3, now), kCredit) << "the layer nearest the input";
  EXPECT_EQ(policy.LimitAt(Credit(), 2, now), static_cast<uint64_t>(kRate * 0.5 * 20000));
  EXPECT_EQ(policy.LimitAt(Credit(), 0, now), static_cast<uint64_t>(kRate * 0.5 * 30000));
}

TEST(ProphetPolicyTest, TheBudgetDrainsByTheNextBurstThenCredit) {
  ProphetPolicy policy(/*fusion_bytes=*/0);
  EXPECT_EQ(policy.LimitAt(Credit(), 0, 0), kCredit) << "no profile: credit";
  const int64_t step = Profile(policy);
  const int64_t start = step + 5000;
  PushTask t;
  t.bytes = 3000;
  for (uint64_t cookie = 0; cookie < 4; ++cookie) {
    t.priority = 0;
    t.cookie = cookie;
    t.seq = 1000 + cookie;  // as SchedulingCore::Push numbers them
    policy.Ready(t, start);
  }
  EXPECT_EQ(policy.LimitAt(Credit(), 0, start), static_cast<uint64_t>(kRate * 10000))
      << "above the credit: the gap is long";
  EXPECT_EQ(policy.LimitAt(Credit(), 0, start + 9000), static_cast<uint64_t>(kRate * 1000))
      << "below the credit: the burst is near";
  CreditState windowed = Credit();
  windowed.window_bytes = 1500;
  EXPECT_EQ(policy.LimitAt(windowed, 0, start + 9000), 1500 + static_cast<uint64_t>(kRate * 1000))
      << "the bandwidth-delay window comes on top: it is what the link has already carried";
  // What goes: 6000 of the 20000-byte budget in flight, 3000 more fit, ...
  Batch b;
  ASSERT_TRUE(policy.Next(Credit(6000, 2), start, &b));
  EXPECT_EQ(b.tasks.size(), 1u);
  b.tasks.clear();
  // ... not as the burst nears, unless nothing is in flight (one task alone).
  EXPECT_FALSE(policy.Next(Credit(3000, 1), start + 9000, &b));
  EXPECT_TRUE(policy.Next(Credit(0, 0), start + 9000, &b));
  // The timer: when a late burst ends the prediction (10 ms + the 6 ms tolerance).
  EXPECT_EQ(policy.WakeAtUs(), start + 16001);
  EXPECT_EQ(policy.LimitAt(Credit(), 0, start + 16001), kCredit) << "late: credit";
  t.priority = 2;
  policy.Ready(t, start + 10000);
  t.priority = 3;
  policy.Ready(t, start + 30000);
  EXPECT_EQ(policy.LimitAt(Credit(), 0, start + 30000), kCredit) << "after the last burst";
}

TEST(ProfiledPolicyTest, TheCoreChecksTheBatchAgainstThePolicysOwnLimit) {
  // Through SchedulingCore, a batch over the configured credit but within usbyte's limit is
  // accepted by the core's invariant check (it asks the policy), and the order is credit's.
  for (SchedulingPolicy kind : {SchedulingPolicy::kUsbyte, SchedulingPolicy::kProphet}) {
    PolicyOptions o;
    o.policy = kind;
    o.fusion_bytes = 0;
    SchedulingCore core(MakePolicy(o), /*credit_bytes=*/100);
    int64_t now = 0;
    for (int i = 0; i < 10; ++i) {
      core.Step(now);
      PushTask t;
      t.bytes = 60;
      for (int p = 0; p < 4; ++p) {
        t.priority = p;
        t.cookie = static_cast<uint64_t>(i * 10 + p);
        core.Push(t, now + p * 1000);
      }
      std::vector<int> order;
      Batch b;
      while (core.TryNext(now + 4000, &b)) {
        for (const PushTask& task : b.tasks) {
          order.push_back(task.priority);
          core.Done(task, true, now + 5000);
        }
      }
      EXPECT_EQ(order, (std::vector<int>{3, 2, 1, 0})) << "priority order";
      now += 10000;
    }
  }
}

}  // namespace
}  // namespace ferry
