// Tests of the engine's work order (server/engine_queue.h): most urgent first, arrival
// order among equal priorities, and JOIN fences that nothing crosses.

#include "server/engine_queue.h"

#include <gtest/gtest.h>

#include <climits>
#include <memory>
#include <string>
#include <vector>

namespace ferry {
namespace {

std::vector<std::string> Drain(EngineQueue<std::string>& q) {
  std::vector<std::string> out;
  while (!q.empty()) out.push_back(q.Pop());
  return out;
}

using Order = std::vector<std::string>;

TEST(EngineQueueTest, MostUrgentFirst) {
  EngineQueue<std::string> q;
  q.Push("p-5", -5);
  q.Push("p0", 0);
  q.Push("p7", 7);
  q.Push("p-1", -1);
  q.Push("pmax", INT_MAX);
  q.Push("pmin", INT_MIN);
  EXPECT_EQ(q.size(), 6u);
  EXPECT_EQ(Drain(q), (Order{"pmax", "p7", "p0", "p-1", "p-5", "pmin"}));
}

TEST(EngineQueueTest, EqualPrioritiesKeepArrivalOrder) {
  EngineQueue<std::string> q;
  for (int i = 0; i < 50; ++i) q.Push("a" + std::to_string(i), i % 2 == 0 ? 1 : 0);
  Order want;
  for (int i = 0; i < 50; i += 2) want.push_back("a" + std::to_string(i));
  for (int i = 1; i < 50; i += 2) want.push_back("a" + std::to_string(i));
  EXPECT_EQ(Drain(q), want);
}

TEST(EngineQueueTest, InterleavedPushAndPopKeepsTheOrder) {
  EngineQueue<std::string> q;
  q.Push("low1", -3);
  q.Push("high1", 2);
  EXPECT_EQ(q.Pop(), "high1");
  q.Push("low2", -3);
  q.Push("mid", 0);
  EXPECT_EQ(q.Pop(), "mid");
  EXPECT_EQ(q.Pop(), "low1");  // before low2: it came first
  EXPECT_EQ(q.Pop(), "low2");
  EXPECT_TRUE(q.empty());
}

TEST(EngineQueueTest, FenceComesAfterEverythingBeforeItWhateverThePriority) {
  EngineQueue<std::string> q;
  q.Push("w0-low", -100);
  q.Push("w1-high", 100);
  q.PushFence("join-w0");
  // Pushes after the JOIN, however urgent, wait for it.
  q.Push("w1-urgent", INT_MAX);
  q.Push("w0-next", 0);
  EXPECT_EQ(Drain(q), (Order{"w1-high", "w0-low", "join-w0", "w1-urgent", "w0-next"}));
}

TEST(EngineQueueTest, ConsecutiveFencesKeepTheirOrder) {
  EngineQueue<std::string> q;
  q.Push("a", 1);
  q.PushFence("join-0");
  q.PushFence("join-1");
  q.Push("b", 5);
  q.PushFence("join-2");
  q.Push("c", -5);
  q.Push("d", 5);
  EXPECT_EQ(Drain(q), (Order{"a", "join-0", "join-1", "b", "join-2", "d", "c"}));
}

TEST(EngineQueueTest, FenceAloneAndAfterDraining) {
  EngineQueue<std::string> q;
  q.PushFence("join");
  EXPECT_EQ(q.Pop(), "join");
  // A fence already popped holds nothing back.
  q.Push("x", -1);
  q.Push("y", 1);
  EXPECT_EQ(Drain(q), (Order{"y", "x"}));
}

TEST(EngineQueueTest, MoveOnlyItems) {
  EngineQueue<std::unique_ptr<int>> q;
  q.Push(std::make_unique<int>(1), 0);
  q.Push(std::make_unique<int>(2), 9);
  EXPECT_EQ(*q.Pop(), 2);
  EXPECT_EQ(*q.Pop(), 1);
}

}  // namespace
}  // namespace ferry
