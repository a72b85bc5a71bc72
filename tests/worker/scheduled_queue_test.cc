// Tests of the worker's ScheduledQueue (worker/scheduling/scheduled_queue.h): order,
// credit in partitions and in bytes, Close, SetCredit, and a many-threaded run that
// checks every task is handed out exactly once under the credit.

#include "worker/scheduling/scheduled_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <random>
#include <thread>
#include <vector>

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

PushTask Task(int priority, uint64_t bytes, uint64_t cookie) {
  PushTask t;
  t.priority = priority;
  t.bytes = bytes;
  t.cookie = cookie;
  return t;
}

// Next() that must succeed at once.
PushTask MustNext(ScheduledQueue& q) {
  PushTask t;
  bool timed_out = true;
  EXPECT_TRUE(q.Next(&t, 1000, &timed_out));
  EXPECT_FALSE(timed_out);
  return t;
}

// Next() that must time out (the credit or an empty queue holds it back).
void MustBlock(ScheduledQueue& q, int64_t timeout_ms = 30) {
  PushTask t;
  t.cookie = 12345;
  bool timed_out = false;
  EXPECT_FALSE(q.Next(&t, timeout_ms, &timed_out));
  EXPECT_TRUE(timed_out);
  EXPECT_EQ(t.cookie, 12345u) << "a refused Next() wrote its output";
}

TEST(ScheduledQueueTest, LargerPriorityFirst) {
  ScheduledQueue q(100, 0);
  q.Push(Task(1, 10, 1));
  q.Push(Task(5, 10, 2));
  q.Push(Task(-3, 10, 3));
  q.Push(Task(0, 10, 4));
  q.Push(Task(7, 10, 5));
  EXPECT_EQ(q.queued(), 5u);
  std::vector<uint64_t> order;
  for (int i = 0; i < 5; ++i) order.push_back(MustNext(q).cookie);
  EXPECT_EQ(order, (std::vector<uint64_t>{5, 2, 1, 4, 3}));
  EXPECT_EQ(q.queued(), 0u);
  EXPECT_EQ(q.in_flight(), 5);
  EXPECT_EQ(q.in_flight_bytes(), 50u);
}

TEST(ScheduledQueueTest, FifoAmongEqualPriorities) {
  ScheduledQueue q(1000, 0);
  for (uint64_t i = 0; i < 50; ++i) q.Push(Task(static_cast<int>(i % 2), 1, i));
  // Odd cookies (priority 1) first, in arrival order, then the even ones.
  std::vector<uint64_t> order;
  std::vector<uint64_t> seqs;
  for (int i = 0; i < 50; ++i) {
    PushTask t = MustNext(q);
    order.push_back(t.cookie);
    seqs.push_back(t.seq);
  }
  for (int i = 0; i < 25; ++i) {
    EXPECT_EQ(order[i], static_cast<uint64_t>(2 * i + 1));
    EXPECT_EQ(order[25 + i], static_cast<uint64_t>(2 * i));
  }
  // Push numbers tasks in arrival order.
  for (int i = 0; i < 50; ++i) EXPECT_EQ(seqs[i], order[i]);
}

TEST(ScheduledQueueTest, EmptyQueueTimesOut) {
  ScheduledQueue q(4, 0);
  auto start = Clock::now();
  MustBlock(q, 50);
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(45));
}

TEST(ScheduledQueueTest, PushWakesABlockedNext) {
  ScheduledQueue q(4, 0);
  auto waiter = std::async(std::launch::async, [&q] {
    PushTask t;
    bool timed_out = true;
    bool ok = q.Next(&t, 5000, &timed_out);
    return ok && !timed_out ? t.cookie : 0;
  });
  q.Push(Task(0, 8, 77));
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(waiter.get(), 77u);
}

TEST(ScheduledQueueTest, PartitionCredit) {
  ScheduledQueue q(2, 0);
  for (uint64_t i = 0; i < 4; ++i) q.Push(Task(0, 1000, i));
  EXPECT_EQ(MustNext(q).cookie, 0u);
  EXPECT_EQ(MustNext(q).cookie, 1u);
  EXPECT_EQ(q.in_flight(), 2);
  EXPECT_EQ(q.in_flight_bytes(), 2000u);
  MustBlock(q);  // in_flight == credit
  EXPECT_EQ(q.queued(), 2u);

  q.Done(1000);
  EXPECT_EQ(q.in_flight(), 1);
  EXPECT_EQ(MustNext(q).cookie, 2u);
  MustBlock(q);

  // Done from another thread releases a blocked Next.
  auto waiter = std::async(std::launch::async, [&q] {
    PushTask t;
    bool timed_out = true;
    bool ok = q.Next(&t, 5000, &timed_out);
    return ok && !timed_out ? static_cast<int64_t>(t.cookie) : -1;
  });
  q.Done(1000);
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(waiter.get(), 3);
  EXPECT_EQ(q.in_flight(), 2);
  q.Done(1000);
  q.Done(1000);
  EXPECT_EQ(q.in_flight(), 0);
  EXPECT_EQ(q.in_flight_bytes(), 0u);
}

TEST(ScheduledQueueTest, PartitionCreditIgnoresBytes) {
  ScheduledQueue q(3, 0);
  for (uint64_t i = 0; i < 3; ++i) q.Push(Task(0, 1ull << 30, i));
  for (int i = 0; i < 3; ++i) MustNext(q);
  EXPECT_EQ(q.in_flight_bytes(), 3ull << 30);
}

TEST(ScheduledQueueTest, ByteCredit) {
  ScheduledQueue q(1, 100);  // byte mode: the partition credit does not apply
  for (uint64_t i = 0; i < 5; ++i) q.Push(Task(0, 40, i));
  MustNext(q);
  MustNext(q);  // 80 bytes in flight: a second partition despite credit_partitions = 1
  EXPECT_EQ(q.in_flight(), 2);
  EXPECT_EQ(q.in_flight_bytes(), 80u);
  MustBlock(q);  // 120 > 100
  q.Done(40);
  EXPECT_EQ(MustNext(q).cookie, 2u);
  EXPECT_EQ(q.in_flight_bytes(), 80u);
  MustBlock(q);
}

TEST(ScheduledQueueTest, ByteCreditFillsExactly) {
  ScheduledQueue q(1, 100);
  q.Push(Task(0, 60, 0));
  q.Push(Task(0, 40, 1));
  q.Push(Task(0, 1, 2));
  MustNext(q);
  MustNext(q);  // exactly 100
  EXPECT_EQ(q.in_flight_bytes(), 100u);
  MustBlock(q);
}

TEST(ScheduledQueueTest, OversizedTaskGoesWhenNothingInFlight) {
  ScheduledQueue q(1, 100);
  q.Push(Task(0, 500, 0));  // larger than the whole credit
  q.Push(Task(0, 10, 1));
  EXPECT_EQ(MustNext(q).cookie, 0u);
  EXPECT_EQ(q.in_flight_bytes(), 500u);
  MustBlock(q);  // 500 in flight: nothing more
  q.Done(500);
  EXPECT_EQ(MustNext(q).cookie, 1u);

  // An oversized task waits until everything in flight is done, then goes.
  q.Push(Task(0, 300, 2));
  MustBlock(q);
  q.Done(10);
  EXPECT_EQ(MustNext(q).cookie, 2u);
}

TEST(ScheduledQueueTest, CloseWakesABlockedNext) {
  ScheduledQueue q(1, 0);
  q.Push(Task(0, 1, 0));
  q.Push(Task(0, 1, 1));
  MustNext(q);
  auto start = Clock::now();
  auto waiter = std::async(std::launch::async, [&q] {
    PushTask t;
    bool timed_out = true;
    bool ok = q.Next(&t, 20000, &timed_out);
    return std::make_pair(ok, timed_out);
  });
  q.Close();
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  auto [ok, timed_out] = waiter.get();
  EXPECT_FALSE(ok);
  EXPECT_FALSE(timed_out);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));

  // After Close, Next refuses even when a task could go.
  q.Done(1);
  PushTask t;
  bool to = true;
  EXPECT_FALSE(q.Next(&t, 1000, &to));
  EXPECT_FALSE(to);
}

TEST(ScheduledQueueTest, SetCreditTakesEffect) {
  ScheduledQueue q(1, 0);
  for (uint64_t i = 0; i < 6; ++i) q.Push(Task(0, 50, i));
  MustNext(q);
  MustBlock(q);

  // Raising the credit releases a blocked Next.
  auto waiter = std::async(std::launch::async, [&q] {
    PushTask t;
    bool timed_out = true;
    return q.Next(&t, 5000, &timed_out) && !timed_out;
  });
  q.SetCredit(3, 0);
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(waiter.get());
  MustNext(q);
  EXPECT_EQ(q.in_flight(), 3);
  MustBlock(q);

  // Lowering it holds new tasks back until in_flight drops below it.
  q.SetCredit(2, 0);
  q.Done(50);
  MustBlock(q);  // 2 in flight, credit 2
  q.Done(50);
  MustNext(q);

  // Switching to bytes: 2 x 50 in flight, 120-byte credit leaves no room for 50 more.
  q.SetCredit(1, 120);
  EXPECT_EQ(q.in_flight_bytes(), 100u);
  MustBlock(q);
  q.SetCredit(1, 150);
  MustNext(q);
  EXPECT_EQ(q.in_flight_bytes(), 150u);
}

struct StressResult {
  int max_in_flight = 0;                // by the consumers' own count
  uint64_t max_in_flight_bytes = 0;     // by the consumers' own count
  int max_queue_in_flight = 0;          // as the queue reported it right after Next
  uint64_t max_queue_in_flight_bytes = 0;
};

template <typename T>
void RaiseTo(std::atomic<T>& max, T value) {
  T prev = max.load();
  while (value > prev && !max.compare_exchange_weak(prev, value)) {
  }
}

// 4 producers push 1000 tasks each with random priorities and sizes; 2 consumers take
// them and return the credit. Each consumer holds up to 4 tasks at once (so together
// they would exceed the credit if the queue let them) and returns the oldest when
// Next() refuses. Every task must come out exactly once, within the credit.
StressResult Stress(int credit_partitions, int64_t credit_bytes, uint64_t max_task_bytes) {
  constexpr int kProducers = 4, kConsumers = 2, kPerProducer = 1000, kHoldMax = 4;
  constexpr int kTotal = kProducers * kPerProducer;
  ScheduledQueue q(credit_partitions, credit_bytes);
  std::vector<std::atomic<int>> seen(kTotal);
  for (auto& s : seen) s = 0;
  std::atomic<int> done{0}, in_flight{0}, max_in_flight{0}, max_queue_in_flight{0};
  std::atomic<uint64_t> in_flight_bytes{0}, max_in_flight_bytes{0}, max_queue_in_flight_bytes{0};

  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      std::mt19937 rng(1000 + p);
      for (int i = 0; i < kPerProducer; ++i) {
        int priority = static_cast<int>(rng() % 21) - 10;
        uint64_t bytes = 1 + rng() % max_task_bytes;
        q.Push(Task(priority, bytes, static_cast<uint64_t>(p * kPerProducer + i)));
      }
    });
  }
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&] {
      std::vector<PushTask> held;
      auto finish_oldest = [&] {
        PushTask t = held.front();
        held.erase(held.begin());
        --in_flight;
        in_flight_bytes -= t.bytes;
        q.Done(t.bytes);
        if (++done == kTotal) q.Close();
      };
      while (true) {
        bool want = held.size() < static_cast<size_t>(kHoldMax);
        if (want) {
          PushTask t;
          bool timed_out = false;
          if (q.Next(&t, held.empty() ? 100 : 0, &timed_out)) {
            RaiseTo(max_queue_in_flight, q.in_flight());
            RaiseTo(max_queue_in_flight_bytes, q.in_flight_bytes());
            RaiseTo(max_in_flight, ++in_flight);
            RaiseTo(max_in_flight_bytes, in_flight_bytes += t.bytes);
            if (t.cookie < static_cast<uint64_t>(kTotal)) seen[t.cookie]++;
            held.push_back(t);
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
  auto deadline = Clock::now() + std::chrono::seconds(8);
  while (done.load() < kTotal && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  q.Close();  // also ends the consumers if the run did not finish in time
  for (auto& t : threads) t.join();

  EXPECT_EQ(done.load(), kTotal);
  int wrong = 0;
  for (int i = 0; i < kTotal; ++i) wrong += seen[i].load() != 1;
  EXPECT_EQ(wrong, 0) << "tasks not handed out exactly once";
  EXPECT_EQ(q.in_flight(), 0);
  EXPECT_EQ(q.in_flight_bytes(), 0u);
  EXPECT_EQ(q.queued(), 0u);
  return StressResult{max_in_flight.load(), max_in_flight_bytes.load(),
                      max_queue_in_flight.load(), max_queue_in_flight_bytes.load()};
}

TEST(ScheduledQueueTest, ConcurrentPartitionCredit) {
  StressResult r = Stress(3, 0, 4096);
  EXPECT_LE(r.max_in_flight, 3);
  EXPECT_LE(r.max_queue_in_flight, 3);
  // The consumers want up to 8 tasks at once: the credit is what held them back.
  EXPECT_EQ(r.max_queue_in_flight, 3);
}

TEST(ScheduledQueueTest, ConcurrentByteCredit) {
  const int64_t kCredit = 10000;
  const uint64_t kMaxTask = 15000;  // some tasks exceed the whole credit
  StressResult r = Stress(1, kCredit, kMaxTask);
  // Bytes in flight never exceed the credit plus one task.
  EXPECT_LE(r.max_in_flight_bytes, static_cast<uint64_t>(kCredit) + kMaxTask);
  EXPECT_LE(r.max_queue_in_flight_bytes, static_cast<uint64_t>(kCredit) + kMaxTask);
  // More than one task at a time went (byte mode ignores credit_partitions = 1).
  EXPECT_GE(r.max_queue_in_flight, 2);
}

}  // namespace
}  // namespace ferry
