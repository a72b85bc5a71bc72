// Tests of the worker's ScheduledQueue and its policies (worker/partition_scheduling/): the order
// each policy promises, the credit the queue enforces, fusion, p3's per-server window,
// fifo-bucket's size and timer (a fake clock), blocking, Close and SetCredit; and a
// many-threaded run per policy whose every event is recorded under the queue's lock and
// replayed against the invariants in scheduled_queue.h and policies.h.

#include "worker/partition_scheduling/scheduled_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "common/util/error.h"
#include "worker/partition_scheduling/policies.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

// A clock that moves only when told.
struct FakeClock {
  std::atomic<int64_t> us{1000000};
  ScheduledQueue::NowFn fn() {
    return [this] { return us.load(); };
  }
};

PushTask Task(int priority, uint64_t bytes, uint64_t cookie, int server = 0) {
  PushTask t;
  t.priority = priority;
  t.bytes = bytes;
  t.cookie = cookie;
  t.server = server;
  return t;
}

std::unique_ptr<Policy> Make(const std::string& name, uint64_t fusion = 0, uint64_t bucket = 1000,
                             int64_t timeout_us = 5000) {
  PolicyOptions o;
  EXPECT_TRUE(ParseSchedulingPolicy(name, &o.policy)) << name;
  o.fusion_bytes = fusion;
  o.bucket_bytes = bucket;
  o.bucket_timeout_us = timeout_us;
  return MakePolicy(o);
}

std::vector<uint64_t> Cookies(const Batch& b) {
  std::vector<uint64_t> c;
  for (const PushTask& t : b.tasks) c.push_back(t.cookie);
  return c;
}

// TryNext() that must succeed.
Batch MustNext(ScheduledQueue& q) {
  Batch b;
  EXPECT_TRUE(q.TryNext(&b)) << "nothing handed out";
  return b;
}

uint64_t MustNextOne(ScheduledQueue& q) {
  Batch b = MustNext(q);
  EXPECT_EQ(b.tasks.size(), 1u);
  return b.tasks.empty() ? ~0ull : b.tasks[0].cookie;
}

void MustBlock(ScheduledQueue& q) {
  Batch b;
  b.tasks.push_back(Task(0, 0, 12345));
  EXPECT_FALSE(q.TryNext(&b));
  ASSERT_EQ(b.tasks.size(), 1u);
  EXPECT_EQ(b.tasks[0].cookie, 12345u) << "a refused TryNext() wrote its output";
}

TEST(PolicyTest, NamesRoundTrip) {
  SchedulingPolicy policy = SchedulingPolicy::kCredit;
  EXPECT_FALSE(ParseSchedulingPolicy("lifo", &policy));
  EXPECT_EQ(policy, SchedulingPolicy::kCredit) << "a refused name changed the output";
  for (const char* name :
       {"fifo", "priority", "credit", "p3", "fifo-bucket", "mercury", "usbyte", "prophet"}) {
    EXPECT_EQ(Make(name)->name(), name);
  }
}

TEST(FifoPolicyTest, ReadinessOrderNoCredit) {
  ScheduledQueue q(Make("fifo"), 1);  // a 1-byte credit: ignored
  q.Push(Task(1, 100, 1));
  q.Push(Task(9, 100, 2));
  q.Push(Task(-5, 100, 3, 1));
  q.Push(Task(9, 100, 4));
  std::vector<uint64_t> order;
  for (int i = 0; i < 4; ++i) order.push_back(MustNextOne(q));
  EXPECT_EQ(order, (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(q.in_flight(), 4);
  EXPECT_EQ(q.in_flight_bytes(), 400u);
  MustBlock(q);
}

TEST(PriorityPolicyTest, MostUrgentFirstUnlimited) {
  for (const char* name : {"priority", "mercury"}) {
  SCOPED_TRACE(name);
  ScheduledQueue q(Make(name), 1);
  q.Push(Task(1, 1 << 20, 1));
  q.Push(Task(5, 1 << 20, 2));
  q.Push(Task(-3, 1 << 20, 3));
  q.Push(Task(0, 1 << 20, 4));
  q.Push(Task(7, 1 << 20, 5));
  std::vector<uint64_t> order;
  for (int i = 0; i < 5; ++i) order.push_back(MustNextOne(q));
  EXPECT_EQ(order, (std::vector<uint64_t>{5, 2, 1, 4, 3}));
  EXPECT_EQ(q.in_flight_bytes(), 5u << 20);  // no credit
  }
}

TEST(PriorityPolicyTest, EqualPrioritiesKeepArrivalOrder) {
  for (const char* name : {"priority", "credit"}) {
    ScheduledQueue q(Make(name), 1 << 30);
    for (uint64_t i = 0; i < 50; ++i) q.Push(Task(static_cast<int>(i % 2), 1, i));
    std::vector<uint64_t> order, seqs;
    for (int i = 0; i < 50; ++i) {
      Batch b = MustNext(q);
      order.push_back(b.tasks[0].cookie);
      seqs.push_back(b.tasks[0].seq);
    }
    for (int i = 0; i < 25; ++i) {
      EXPECT_EQ(order[i], static_cast<uint64_t>(2 * i + 1)) << name;
      EXPECT_EQ(order[25 + i], static_cast<uint64_t>(2 * i)) << name;
    }
    for (int i = 0; i < 50; ++i) EXPECT_EQ(seqs[i], order[i]) << "Push numbers arrivals";
  }
}

TEST(CreditPolicyTest, ByteCredit) {
  ScheduledQueue q(Make("credit"), 100);
  for (uint64_t i = 0; i < 5; ++i) q.Push(Task(0, 40, i));
  MustNextOne(q);
  MustNextOne(q);
  EXPECT_EQ(q.in_flight_bytes(), 80u);
  MustBlock(q);  // 120 > 100
  q.Done(Task(0, 40, 0));
  EXPECT_EQ(MustNextOne(q), 2u);
  MustBlock(q);
}

TEST(CreditPolicyTest, FillsExactly) {
  ScheduledQueue q(Make("credit"), 100);
  q.Push(Task(2, 60, 0));
  q.Push(Task(1, 40, 1));
  q.Push(Task(0, 1, 2));
  MustNextOne(q);
  MustNextOne(q);
  EXPECT_EQ(q.in_flight_bytes(), 100u);
  MustBlock(q);
}

TEST(CreditPolicyTest, HeadOfLineNoSmallerTaskSlipsPast) {
  ScheduledQueue q(Make("credit"), 100);
  q.Push(Task(0, 60, 0));
  EXPECT_EQ(MustNextOne(q), 0u);
  q.Push(Task(5, 50, 1));  // urgent, does not fit (110 > 100)
  q.Push(Task(1, 10, 2));  // would fit, but is less urgent
  MustBlock(q);
  q.Done(Task(0, 60, 0));
  EXPECT_EQ(MustNextOne(q), 1u);
  EXPECT_EQ(MustNextOne(q), 2u);
}

TEST(CreditPolicyTest, OversizedTaskGoesWhenNothingInFlight) {
  ScheduledQueue q(Make("credit"), 100);
  q.Push(Task(0, 500, 0));  // larger than the whole credit
  q.Push(Task(0, 10, 1));
  EXPECT_EQ(MustNextOne(q), 0u);
  EXPECT_EQ(q.in_flight_bytes(), 500u);
  MustBlock(q);
  q.Done(Task(0, 500, 0));
  EXPECT_EQ(MustNextOne(q), 1u);
  q.Push(Task(0, 300, 2));
  MustBlock(q);  // waits until everything in flight is done, then goes
  q.Done(Task(0, 10, 1));
  EXPECT_EQ(MustNextOne(q), 2u);
  EXPECT_EQ(q.max_in_flight_bytes(), 500u);  // credit + one partition at most
}

TEST(CreditPolicyTest, FusionTakesTheNextTasksForTheSameServer) {
  ScheduledQueue q(Make("credit", /*fusion=*/100), 1 << 20);
  q.Push(Task(9, 30, 0, 0));
  q.Push(Task(8, 30, 1, 0));
  q.Push(Task(7, 30, 2, 0));
  q.Push(Task(6, 30, 3, 0));  // 120 > 100: the next batch
  q.Push(Task(5, 10, 4, 1));  // another server, more urgent than task 5: passed over
  q.Push(Task(4, 10, 5, 0));
  Batch b1 = MustNext(q), b2 = MustNext(q), b3 = MustNext(q);
  EXPECT_EQ(Cookies(b1), (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(b1.fuse_bytes, 100u);
  EXPECT_EQ(Cookies(b2), (std::vector<uint64_t>{3, 5}));
  EXPECT_EQ(Cookies(b3), (std::vector<uint64_t>{4}));
  MustBlock(q);
  EXPECT_EQ(q.in_flight(), 6);
  EXPECT_EQ(q.in_flight_to(0), 5);
  EXPECT_EQ(q.in_flight_to(1), 1);
}

TEST(CreditPolicyTest, FusionNeverPassesAnEqualPriority) {
  // Partitions of one tensor (equal priority) alternating between servers: fusing 0
  // and 2 would send 2 before 1.
  ScheduledQueue q(Make("credit", 100), 1 << 20);
  q.Push(Task(1, 10, 0, 0));
  q.Push(Task(1, 10, 1, 1));
  q.Push(Task(1, 10, 2, 0));
  EXPECT_EQ(Cookies(MustNext(q)), (std::vector<uint64_t>{0}));
  EXPECT_EQ(Cookies(MustNext(q)), (std::vector<uint64_t>{1}));
  EXPECT_EQ(Cookies(MustNext(q)), (std::vector<uint64_t>{2}));
}

TEST(CreditPolicyTest, FusionStopsAtATaskForItsServerThatDoesNotFit) {
  // Taking 6 but not 5 would reorder server 0's pushes.
  ScheduledQueue q(Make("credit", 100), 1 << 20);
  q.Push(Task(9, 30, 4, 0));
  q.Push(Task(8, 90, 5, 0));
  q.Push(Task(7, 10, 6, 0));
  EXPECT_EQ(Cookies(MustNext(q)), (std::vector<uint64_t>{4}));
  EXPECT_EQ(Cookies(MustNext(q)), (std::vector<uint64_t>{5, 6}));
}

TEST(CreditPolicyTest, FusionStaysWithinTheCredit) {
  ScheduledQueue q(Make("credit", /*fusion=*/1000), 50);
  for (uint64_t i = 0; i < 4; ++i) q.Push(Task(0, 20, i));
  EXPECT_EQ(Cookies(MustNext(q)), (std::vector<uint64_t>{0, 1}));  // 60 > 50
  MustBlock(q);
  q.Done(Task(0, 20, 0));
  EXPECT_EQ(Cookies(MustNext(q)), (std::vector<uint64_t>{2}));
  // An oversized first task goes alone, nothing is fused onto it.
  ScheduledQueue big(Make("credit", 1000), 50);
  big.Push(Task(0, 80, 0));
  big.Push(Task(0, 1, 1));
  EXPECT_EQ(Cookies(MustNext(big)), (std::vector<uint64_t>{0}));
}

TEST(CreditPolicyTest, NoFusionWhenOff) {
  ScheduledQueue q(Make("credit", 0), 1000);
  q.Push(Task(0, 1, 0));
  q.Push(Task(0, 1, 1));
  EXPECT_EQ(Cookies(MustNext(q)), (std::vector<uint64_t>{0}));
  EXPECT_EQ(MustNext(q).fuse_bytes, 0u);
}

TEST(P3PolicyTest, OneSliceInFlightPerServer) {
  ScheduledQueue q(Make("p3"), 1);
  q.Push(Task(5, 100, 0, 0));
  q.Push(Task(4, 100, 1, 0));
  q.Push(Task(3, 100, 2, 1));
  q.Push(Task(2, 100, 3, 1));
  EXPECT_EQ(MustNextOne(q), 0u);  // server 0
  EXPECT_EQ(MustNextOne(q), 2u);  // server 0 is busy: the most urgent for server 1
  MustBlock(q);
  q.Push(Task(9, 100, 4, 0));  // urgent, but server 0 is busy
  MustBlock(q);
  q.Done(Task(5, 100, 0, 0));
  EXPECT_EQ(MustNextOne(q), 4u);  // the most urgent for server 0 now
  q.Done(Task(3, 100, 2, 1));
  EXPECT_EQ(MustNextOne(q), 3u);
  EXPECT_EQ(q.in_flight_to(0), 1);
  EXPECT_EQ(q.in_flight_to(1), 1);
}

TEST(BucketPolicyTest, ABucketGoesWhenFullInArrivalOrder) {
  FakeClock clock;
  ScheduledQueue q(Make("fifo-bucket", 0, /*bucket=*/100, /*timeout_us=*/5000), 1, clock.fn());
  q.Push(Task(0, 40, 0, 0));
  q.Push(Task(9, 40, 1, 1));
  MustBlock(q);                // 80 < 100, and no time passed
  q.Push(Task(-9, 40, 2, 0));  // 120 >= 100: the bucket closes (DDP: the last one in)
  q.Push(Task(3, 10, 3, 1));   // the next bucket
  Batch b = MustNext(q);
  EXPECT_EQ(Cookies(b), (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(b.fuse_bytes, 100u);
  MustBlock(q);
  EXPECT_EQ(q.queued(), 1u);
}

TEST(BucketPolicyTest, APartBucketGoesAfterTheTimeout) {
  FakeClock clock;
  ScheduledQueue q(Make("fifo-bucket", 0, 1000, 5000), 1, clock.fn());
  q.Push(Task(0, 10, 0));
  clock.us += 3000;
  q.Push(Task(0, 10, 1));  // restarts the timer
  clock.us += 4999;
  MustBlock(q);
  clock.us += 1;
  EXPECT_EQ(Cookies(MustNext(q)), (std::vector<uint64_t>{0, 1}));
  MustBlock(q);
  EXPECT_EQ(q.queued(), 0u);
}

TEST(BucketPolicyTest, TheTimerWakesABlockedNext) {
  // A real clock: Next() must wake by itself when the bucket's time is up.
  ScheduledQueue q(Make("fifo-bucket", 0, 1 << 20, /*timeout_us=*/20000), 1);
  q.Push(Task(0, 10, 7));
  auto start = Clock::now();
  Batch b;
  bool timed_out = true;
  ASSERT_TRUE(q.Next(&b, 5000, &timed_out));
  EXPECT_FALSE(timed_out);
  EXPECT_EQ(Cookies(b), (std::vector<uint64_t>{7}));
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(19));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(4));
}

TEST(ScheduledQueueTest, EmptyQueueTimesOut) {
  ScheduledQueue q(Make("credit"), 4);
  auto start = Clock::now();
  Batch b;
  bool timed_out = false;
  EXPECT_FALSE(q.Next(&b, 50, &timed_out));
  EXPECT_TRUE(timed_out);
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(45));
}

TEST(ScheduledQueueTest, PushAndDoneWakeABlockedNext) {
  ScheduledQueue q(Make("credit"), 10);
  auto next = [&q] {
    Batch b;
    bool timed_out = true;
    return q.Next(&b, 5000, &timed_out) && !timed_out ? static_cast<int64_t>(b.tasks[0].cookie)
                                                      : -1;
  };
  auto waiter = std::async(std::launch::async, next);
  q.Push(Task(0, 8, 77));
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(waiter.get(), 77);
  q.Push(Task(0, 8, 78));  // 16 > 10: waits for the credit
  auto waiter2 = std::async(std::launch::async, next);
  EXPECT_EQ(waiter2.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  q.Done(Task(0, 8, 77));
  ASSERT_EQ(waiter2.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(waiter2.get(), 78);
}

TEST(ScheduledQueueTest, CloseWakesABlockedNext) {
  ScheduledQueue q(Make("credit"), 1);
  q.Push(Task(0, 1, 0));
  q.Push(Task(0, 1, 1));
  MustNext(q);
  auto waiter = std::async(std::launch::async, [&q] {
    Batch b;
    bool timed_out = true;
    bool ok = q.Next(&b, 20000, &timed_out);
    return std::make_pair(ok, timed_out);
  });
  q.Close();
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  auto [ok, timed_out] = waiter.get();
  EXPECT_FALSE(ok);
  EXPECT_FALSE(timed_out);
  q.Done(Task(0, 1, 0));
  MustBlock(q);  // closed: refuses even when a task could go
}

// WaitForChange (the sender thread's wait; dense_push_pull.h, "Who sends"): quiet changes
// wake nobody but are seen by the next wait; notified ones wake a waiter; the policy's
// timer counts as a change; Close ends it.
TEST(ScheduledQueueTest, WaitForChangeSeesQuietChangesAndWakesOnNotifiedOnes) {
  FakeClock clock;
  ScheduledQueue q(Make("credit"), 10, clock.fn());
  uint64_t version = 0;
  // The constructor's SetCredit is a change.
  EXPECT_EQ(q.WaitForChange(&version, 0), ScheduledQueue::WaitResult::kChanged);
  EXPECT_EQ(q.WaitForChange(&version, 1), ScheduledQueue::WaitResult::kTimedOut);
  q.Push(Task(0, 8, 1), /*notify=*/false);
  EXPECT_EQ(q.WaitForChange(&version, 0), ScheduledQueue::WaitResult::kChanged);
  const Batch first = MustNext(q);
  q.Push(Task(0, 8, 2), /*notify=*/false);  // waits for the credit
  EXPECT_EQ(q.WaitForChange(&version, 0), ScheduledQueue::WaitResult::kChanged);
  MustBlock(q);
  q.Done(first.tasks[0], true, /*notify=*/false);
  EXPECT_EQ(q.WaitForChange(&version, 0), ScheduledQueue::WaitResult::kChanged);
  EXPECT_EQ(MustNextOne(q), 2u);
  // A notified change wakes a waiter blocked for up to a minute.
  auto waiter = std::async(std::launch::async, [&q, version]() mutable {
    return q.WaitForChange(&version, 60000);
  });
  q.Push(Task(0, 1, 3));
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(waiter.get(), ScheduledQueue::WaitResult::kChanged);
  q.Close();
  EXPECT_EQ(q.WaitForChange(&version, 60000), ScheduledQueue::WaitResult::kClosed);
}

TEST(BucketPolicyTest, ADueTimerIsAChangeForWaitForChange) {
  FakeClock clock;
  ScheduledQueue q(Make("fifo-bucket", 0, 1000, 5000), 1, clock.fn());
  q.Push(Task(0, 10, 0), /*notify=*/false);
  uint64_t version = 0;
  EXPECT_EQ(q.WaitForChange(&version, 0), ScheduledQueue::WaitResult::kChanged);
  MustBlock(q);  // the bucket is neither full nor due
  EXPECT_EQ(q.WaitForChange(&version, 1), ScheduledQueue::WaitResult::kTimedOut);
  clock.us += 5000;
  EXPECT_EQ(q.WaitForChange(&version, 60000), ScheduledQueue::WaitResult::kChanged);
  EXPECT_EQ(MustNextOne(q), 0u);
}

// The sender sleeps until the timer it saw when it began to wait; a quiet push that starts
// a bucket's timer must wake it (the pusher's own TryNext comes before the timer is due), or
// the bucket would go only when full (the bug the simulator's validation found: fifo-bucket
// sent every bucket at the end of backward).
TEST(BucketPolicyTest, AQuietPushThatStartsTheTimerWakesTheSender) {
  FakeClock clock;
  ScheduledQueue q(Make("fifo-bucket", 0, 1 << 20, 5000), 1, clock.fn());
  uint64_t version = 0;
  EXPECT_EQ(q.WaitForChange(&version, 0), ScheduledQueue::WaitResult::kChanged);
  auto waiter = std::async(std::launch::async, [&q, version]() mutable {
    return q.WaitForChange(&version, 60000);  // no timer yet: a minute
  });
  // Let it block first (were it late, it would see the push at once and pass: this wait
  // can only hide the bug, never fail the fix).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  q.Push(Task(0, 10, 0), /*notify=*/false);
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "the sender slept through the bucket's new timer";
  EXPECT_EQ(waiter.get(), ScheduledQueue::WaitResult::kChanged);
  MustBlock(q);  // not yet due
  clock.us += 5000;
  EXPECT_EQ(MustNextOne(q), 0u);
}

// The same through the sender's loop on a real clock: the part bucket goes on its timeout.
// The timeout is long enough (300 ms) that the pusher's own tries below come before it even
// on a loaded machine (at 2 ms a stalled pusher once took the batch itself, and the sender,
// left with nothing, slept on); a failure closes the queue, so the sender never outlives it.
TEST(BucketPolicyTest, TheSendersLoopSendsAPartBucketOnItsTimeout) {
  ScheduledQueue q(Make("fifo-bucket", 0, 1 << 20, /*timeout_us=*/300000), 1);
  uint64_t version = 0;
  q.WaitForChange(&version, 0);
  auto sender = std::async(std::launch::async, [&q, version]() mutable {
    for (int i = 0; i < 100; ++i) {  // as Sender::Loop, with a minute's wake-up
      if (q.WaitForChange(&version, 60000) == ScheduledQueue::WaitResult::kClosed) return -1;
      Batch b;
      if (q.TryNext(&b)) return static_cast<int>(b.tasks.size());
    }
    return -2;
  });
  struct CloseFirst {  // destroyed before `sender`, whose destructor waits for the thread
    ScheduledQueue& q;
    ~CloseFirst() { q.Close(); }
  } close_first{q};
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // it waits (as above)
  q.Push(Task(0, 10, 0), /*notify=*/false);
  Batch none;
  EXPECT_FALSE(q.TryNext(&none));  // the pusher's own try: not due
  q.Push(Task(0, 10, 1), /*notify=*/false);
  EXPECT_FALSE(q.TryNext(&none));
  ASSERT_EQ(sender.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "the part bucket never went";
  EXPECT_EQ(sender.get(), 2);
  q.Close();
}

TEST(ScheduledQueueTest, SetCreditTakesEffect) {
  ScheduledQueue q(Make("credit"), 50);
  for (uint64_t i = 0; i < 6; ++i) q.Push(Task(0, 50, i));
  MustNext(q);
  MustBlock(q);
  auto waiter = std::async(std::launch::async, [&q] {
    Batch b;
    bool timed_out = true;
    return q.Next(&b, 5000, &timed_out) && !timed_out;
  });
  q.SetCredit(150);  // raising it releases a blocked Next
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(waiter.get());
  MustNext(q);
  EXPECT_EQ(q.in_flight(), 3);
  EXPECT_EQ(q.credit_bytes(), 150u);
  MustBlock(q);
  q.SetCredit(100);  // lowering it holds new tasks back until the bytes drop below it
  q.Done(Task(0, 50, 0));
  MustBlock(q);
  q.Done(Task(0, 50, 1));
  MustNext(q);
  EXPECT_EQ(q.in_flight_bytes(), 100u);
}

TEST(ScheduledQueueTest, ReturnedPartsLetTheNextTaskGoAndDoneReturnsTheRest) {
  ScheduledQueue q(Make("credit"), 100);
  q.Push(Task(0, 100, 0));
  q.Push(Task(0, 30, 1));
  MustNext(q);
  MustBlock(q);
  q.ReturnPart(Task(0, 100, 0), 20);  // a frame of task 0 acknowledged
  MustBlock(q);                       // 80 + 30 > 100
  q.ReturnPart(Task(0, 100, 0), 20);
  MustNext(q);                        // 60 + 30 <= 100
  EXPECT_EQ(q.in_flight(), 2);
  EXPECT_EQ(q.in_flight_bytes(), 90u);
  q.Done(Task(0, 100, 0));  // the rest of task 0: 60
  EXPECT_EQ(q.in_flight_bytes(), 30u);
  EXPECT_EQ(q.in_flight(), 1);
  q.Done(Task(0, 30, 1));
  EXPECT_EQ(q.in_flight_bytes(), 0u);
}

TEST(ScheduledQueueDeathTest, PartsThatReturnAWholeTaskAreABug) {
  ScheduledQueue q(Make("credit"), 100);
  q.Push(Task(0, 40, 0));
  MustNext(q);
  q.ReturnPart(Task(0, 40, 0), 30);
  EXPECT_DEATH(q.ReturnPart(Task(0, 40, 0), 10), "returned all of its credit");
}

TEST(ScheduledQueueDeathTest, CreditReturnedTwiceIsABug) {
  ScheduledQueue q(Make("credit"), 10);
  q.Push(Task(0, 1, 0));
  MustNext(q);
  q.Done(Task(0, 1, 0));
  EXPECT_DEATH(q.Done(Task(0, 1, 0)), "credit returned twice");
}

// ---- many threads, every event recorded under the queue's lock and replayed ----

struct Event {
  enum Kind { kReady, kOut, kDone } kind;
  PushTask task;
  size_t batch = 0;  // kOut: which batch (in hand-out order)
};

// Wraps a policy; records every event in the exact order the queue saw them (the
// queue calls its policy under its own lock).
class Recorder : public Policy {
 public:
  explicit Recorder(std::unique_ptr<Policy> inner) : inner_(std::move(inner)) {}
  SchedulingPolicy kind() const override { return inner_->kind(); }
  bool uses_credit() const override { return inner_->uses_credit(); }
  int per_server_window() const override { return inner_->per_server_window(); }
  void Ready(const PushTask& t, int64_t now) override {
    events_.push_back({Event::kReady, t});
    inner_->Ready(t, now);
  }
  bool Next(const CreditState& c, int64_t now, Batch* out) override {
    if (!inner_->Next(c, now, out)) return false;
    for (const PushTask& t : out->tasks) events_.push_back({Event::kOut, t, batches_});
    batches_++;
    return true;
  }
  void Done(const PushTask& t) override {
    events_.push_back({Event::kDone, t});
    inner_->Done(t);
  }
  int64_t WakeAtUs() const override { return inner_->WakeAtUs(); }
  size_t queued() const override { return inner_->queued(); }
  std::vector<Event> events_;  // read after the threads are joined

 private:
  std::unique_ptr<Policy> inner_;
  size_t batches_ = 0;
};

constexpr int kServers = 3;

// 4 producers push 800 tasks each (random priorities among few values, so many ties;
// random sizes and servers); 2 consumers take batches and return credit, holding up to
// 4 tasks each (together more than the credit allows) and returning the oldest when
// Next() refuses. A clock thread moves the fake clock (fifo-bucket's timer).
std::vector<Event> Stress(std::unique_ptr<Policy> policy, uint64_t credit, uint64_t max_task) {
  constexpr int kProducers = 4, kConsumers = 2, kPerProducer = 800, kHoldMax = 4;
  constexpr int kTotal = kProducers * kPerProducer;
  FakeClock clock;
  auto recorder = std::make_unique<Recorder>(std::move(policy));
  Recorder* rec = recorder.get();
  ScheduledQueue q(std::move(recorder), credit, clock.fn());
  std::atomic<int> done{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      std::mt19937 rng(1000 + p);
      for (int i = 0; i < kPerProducer; ++i) {
        q.Push(Task(static_cast<int>(rng() % 5) - 2, 1 + rng() % max_task,
                    static_cast<uint64_t>(p * kPerProducer + i),
                    static_cast<int>(rng() % kServers)));
        if (i % 100 == 0) std::this_thread::yield();
      }
    });
  }
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&] {
      std::vector<PushTask> held;
      auto finish_oldest = [&] {
        q.Done(held.front());
        held.erase(held.begin());
        if (++done == kTotal) q.Close();
      };
      while (true) {
        if (held.size() < static_cast<size_t>(kHoldMax)) {
          Batch b;
          bool timed_out = false;
          if (q.Next(&b, held.empty() ? 20 : 0, &timed_out)) {
            held.insert(held.end(), b.tasks.begin(), b.tasks.end());
            continue;
          }
          if (!timed_out) {  // closed
            while (!held.empty()) finish_oldest();
            return;
          }
        }
        if (!held.empty()) finish_oldest();
      }
    });
  }
  std::thread ticker([&] {
    while (!stop) {
      clock.us += 1000;
      q.Wake();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (done.load() < kTotal && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  q.Close();  // also ends the consumers if the run did not finish in time
  for (auto& t : threads) t.join();
  stop = true;
  ticker.join();
  EXPECT_EQ(done.load(), kTotal) << "not every task was handed out in time";
  EXPECT_EQ(q.in_flight(), 0);
  EXPECT_EQ(q.queued(), 0u);
  return rec->events_;
}

// Replays the events: every task ready once, out once after it was ready, done once
// after it was out; returns the hand-out order.
std::vector<PushTask> CheckLifecycle(const std::vector<Event>& events) {
  std::map<uint64_t, int> state;  // cookie -> 1 ready, 2 out, 3 done
  std::vector<PushTask> out;
  for (const Event& e : events) {
    int& s = state[e.task.cookie];
    EXPECT_EQ(s, static_cast<int>(e.kind)) << "task " << e.task.cookie << " event " << e.kind;
    s = static_cast<int>(e.kind) + 1;
    if (e.kind == Event::kOut) out.push_back(e.task);
  }
  for (const auto& [cookie, s] : state) EXPECT_EQ(s, 3) << "task " << cookie;
  return out;
}

// The policy's choice at each hand-out: `pick` gets the ready set (in ByPriority order)
// and the tasks in flight per server, and returns the task it must hand out first.
using Pick = std::function<const PushTask*(const std::vector<PushTask>& ready,
                                           const std::vector<int>& per_server)>;

void CheckOrder(const std::vector<Event>& events, const Pick& pick, bool fifo_order) {
  std::vector<PushTask> ready;
  std::vector<int> per_server(kServers, 0);
  uint64_t wrong = 0;
  for (const Event& e : events) {
    if (e.kind == Event::kReady) {
      ready.push_back(e.task);
      if (!fifo_order) std::sort(ready.begin(), ready.end(), ByPriority());
    } else if (e.kind == Event::kOut) {
      // Within a fused batch each next task is still the policy's next pick.
      const PushTask* want = pick(ready, per_server);
      if (!want || want->cookie != e.task.cookie) wrong++;
      auto it = std::find_if(ready.begin(), ready.end(),
                             [&](const PushTask& t) { return t.cookie == e.task.cookie; });
      if (it != ready.end()) ready.erase(it);
      per_server[e.task.server]++;
    } else {
      per_server[e.task.server]--;
    }
  }
  EXPECT_EQ(wrong, 0u) << "tasks handed out out of the policy's order";
}

TEST(ScheduledQueueStressTest, FifoKeepsArrivalOrderUnderConcurrency) {
  auto events = Stress(Make("fifo"), 1, 5000);
  CheckLifecycle(events);
  CheckOrder(
      events,
      [](const std::vector<PushTask>& r, const std::vector<int>&) {
        return r.empty() ? nullptr : &r.front();
      },
      /*fifo_order=*/true);
}

TEST(ScheduledQueueStressTest, PriorityOrderUnderConcurrency) {
  auto events = Stress(Make("priority"), 1, 5000);
  CheckLifecycle(events);
  CheckOrder(
      events,
      [](const std::vector<PushTask>& r, const std::vector<int>&) {
        return r.empty() ? nullptr : &r.front();
      },
      false);
}

// Bytes in flight at every hand-out, from the events.
void CheckCredit(const std::vector<Event>& events, uint64_t credit, uint64_t max_task) {
  uint64_t in_flight = 0, max_seen = 0;
  int tasks = 0;
  size_t batch = ~size_t{0};
  uint64_t before = 0, batch_bytes = 0;
  bool alone_ok = false;
  for (const Event& e : events) {
    if (e.kind == Event::kOut) {
      if (e.batch != batch) {
        batch = e.batch;
        before = in_flight;
        batch_bytes = 0;
        alone_ok = tasks == 0;
      } else {
        alone_ok = false;  // a second task in the batch: it must fit
      }
      batch_bytes += e.task.bytes;
      EXPECT_TRUE(alone_ok || before + batch_bytes <= credit)
          << before << " + " << batch_bytes << " > " << credit;
      in_flight += e.task.bytes;
      tasks++;
      max_seen = std::max(max_seen, in_flight);
    } else if (e.kind == Event::kDone) {
      in_flight -= e.task.bytes;
      tasks--;
    }
  }
  EXPECT_LE(max_seen, credit + max_task);
  EXPECT_GT(max_seen, credit / 2) << "the credit was never used: the test proves little";
}

// The credit policy's order with fusion: a batch starts with the most urgent ready
// task; each further task is the most urgent ready task for the batch's server, and
// every task it passes over is strictly more urgent; a batch holds at most `fusion`.
void CheckFusedOrder(const std::vector<Event>& events, uint64_t fusion) {
  std::vector<PushTask> ready;  // ByPriority order
  size_t batch = ~size_t{0};
  int server = -1;
  uint64_t bytes = 0, wrong = 0, fused = 0;
  for (const Event& e : events) {
    if (e.kind == Event::kReady) {
      ready.insert(std::upper_bound(ready.begin(), ready.end(), e.task, ByPriority()), e.task);
      continue;
    }
    if (e.kind != Event::kOut) continue;
    auto it = std::find_if(ready.begin(), ready.end(),
                           [&](const PushTask& t) { return t.cookie == e.task.cookie; });
    if (it == ready.end()) {
      wrong++;
      continue;
    }
    if (e.batch != batch) {  // a batch's head: the most urgent of all
      batch = e.batch;
      server = e.task.server;
      bytes = 0;
      wrong += it != ready.begin();
    } else {
      fused++;
      wrong += e.task.server != server;
      for (auto ahead = ready.begin(); ahead != it; ++ahead) {
        wrong += ahead->server == server || ahead->priority <= e.task.priority;
      }
    }
    bytes += e.task.bytes;
    wrong += bytes > fusion && bytes != e.task.bytes;  // only a head may exceed it, alone
    ready.erase(it);
  }
  EXPECT_EQ(wrong, 0u) << "tasks handed out out of the credit policy's order";
  EXPECT_GT(fused, 0u) << "nothing was fused: the test proves little";
}

TEST(ScheduledQueueStressTest, CreditOrderAndBytesUnderConcurrency) {
  const uint64_t kCredit = 10000, kMaxTask = 15000;  // some tasks exceed the whole credit
  // usbyte and prophet without a profile (no Step) are credit exactly.
  for (const char* name : {"credit", "usbyte", "prophet"}) {
    SCOPED_TRACE(name);
    auto events = Stress(Make(name, /*fusion=*/4000), kCredit, kMaxTask);
    CheckLifecycle(events);
    CheckFusedOrder(events, 4000);
    CheckCredit(events, kCredit, kMaxTask);
  }
}

TEST(ScheduledQueueStressTest, P3OneSlicePerServerUnderConcurrency) {
  auto events = Stress(Make("p3"), 1, 5000);
  CheckLifecycle(events);
  // The most urgent ready task among the servers with nothing in flight.
  CheckOrder(
      events,
      [](const std::vector<PushTask>& r, const std::vector<int>& per_server) {
        for (const PushTask& t : r) {
          if (per_server[t.server] == 0) return &t;
        }
        return static_cast<const PushTask*>(nullptr);
      },
      false);
  std::vector<int> per_server(kServers, 0);
  for (const Event& e : events) {
    if (e.kind == Event::kOut) {
      EXPECT_LE(++per_server[e.task.server], 1);
    } else if (e.kind == Event::kDone) {
      per_server[e.task.server]--;
    }
  }
}

TEST(ScheduledQueueStressTest, BucketsKeepArrivalOrderUnderConcurrency) {
  auto events = Stress(Make("fifo-bucket", 0, /*bucket=*/20000, /*timeout_us=*/3000), 1, 5000);
  auto out = CheckLifecycle(events);
  CheckOrder(
      events,
      [](const std::vector<PushTask>& r, const std::vector<int>&) {
        return r.empty() ? nullptr : &r.front();
      },
      true);
  // Buckets: all but the timer-closed ones reach the size.
  std::map<size_t, uint64_t> bucket_bytes;
  for (const Event& e : events) {
    if (e.kind == Event::kOut) bucket_bytes[e.batch] += e.task.bytes;
  }
  size_t full = 0;
  for (const auto& [b, bytes] : bucket_bytes) full += bytes >= 20000;
  EXPECT_GT(full, 0u);
  EXPECT_LT(bucket_bytes.size(), out.size()) << "no task was fused into a bucket";
}

// The live metrics' ferry_queued_bytes: bytes pushed and not yet handed out, split at an
// urgency threshold, for a policy with credit (what waits behind the credit is queued).
TEST(QueuedBytesTest, PushedNotYetHandedOutByPriority) {
  ScheduledQueue q(Make("credit"), 100);
  q.Push(Task(5, 60, 0));
  q.Push(Task(5, 30, 1));
  q.Push(Task(1, 50, 2));
  q.Push(Task(0, 20, 3));
  EXPECT_EQ(q.QueuedBytes(5), std::make_pair(uint64_t{90}, uint64_t{70}));
  EXPECT_EQ(q.QueuedBytes(1), std::make_pair(uint64_t{140}, uint64_t{20}));
  MustNextOne(q);  // priority 5, 60 bytes
  MustNextOne(q);  // priority 5, 30 bytes; then the credit (100) is full
  EXPECT_EQ(q.QueuedBytes(5), std::make_pair(uint64_t{0}, uint64_t{70}));
  q.Done(Task(5, 60, 0));
  q.Done(Task(5, 30, 1));
  MustNextOne(q);
  MustNextOne(q);
  EXPECT_EQ(q.QueuedBytes(INT_MIN), std::make_pair(uint64_t{0}, uint64_t{0}));
}

}  // namespace
}  // namespace ferry
