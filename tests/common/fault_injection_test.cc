// FaultInjection (common/transport/fault_injection.h): drops only data messages, at about
// the share asked for, and a delay keeps the arrival order.

#include "common/transport/fault_injection.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "common/util/clock.h"

namespace ferry {
namespace {

Message Of(proto::MessageType type, uint64_t request) {
  Message m = MakeMessage(type, 1);
  m.envelope.set_request_id(request);
  return m;
}

TEST(FaultInjectionTest, WithoutFaultsEveryMessageGoesOnAtOnce) {
  FaultInjection faults(0, 0);
  std::vector<uint64_t> seen;
  auto handler = [&](Message&& m, const Origin&) { seen.push_back(m.envelope.request_id()); };
  for (uint64_t i = 0; i < 5; ++i) EXPECT_TRUE(faults.Deliver(Of(proto::PUSH, i), Origin{}, handler));
  EXPECT_EQ(seen, (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(faults.PollTimeoutMs(), -1);
}

TEST(FaultInjectionTest, DropsOnlyDataMessagesAndLeavesADroppedOneIntact) {
  FaultInjection faults(100, 0);
  int delivered = 0;
  auto handler = [&](Message&&, const Origin&) { delivered++; };
  Message push = Of(proto::PUSH, 7);
  EXPECT_FALSE(faults.Deliver(std::move(push), Origin{}, handler));
  EXPECT_EQ(push.envelope.request_id(), 7u);  // left as it was, for the caller's log line
  EXPECT_TRUE(faults.Deliver(Of(proto::HEARTBEAT, 1), Origin{}, handler));
  EXPECT_TRUE(faults.Deliver(Of(proto::JOIN, 2), Origin{}, handler));
  EXPECT_EQ(delivered, 2);
}

TEST(FaultInjectionTest, DropsAboutTheShareAskedFor) {
  FaultInjection faults(25, 0);
  int delivered = 0;
  auto handler = [&](Message&&, const Origin&) { delivered++; };
  for (int i = 0; i < 4000; ++i) faults.Deliver(Of(proto::PUSH_RESULT, i), Origin{}, handler);
  EXPECT_GT(delivered, 2700);  // 3000 expected; 6 standard deviations are about 165
  EXPECT_LT(delivered, 3300);
}

TEST(FaultInjectionTest, ADelayHandsMessagesOnInArrivalOrderOnceDue) {
  FaultInjection faults(0, 30);
  std::vector<uint64_t> seen;
  auto handler = [&](Message&& m, const Origin&) { seen.push_back(m.envelope.request_id()); };
  const int64_t start = NowMs();
  for (uint64_t i = 0; i < 3; ++i) faults.Deliver(Of(proto::PUSH, i), Origin{}, handler);
  EXPECT_TRUE(seen.empty());
  EXPECT_GE(faults.PollTimeoutMs(), 0);
  EXPECT_LE(faults.PollTimeoutMs(), 30);
  while (seen.size() < 3) {
    ASSERT_LT(NowMs() - start, 10000) << "the delayed messages never came due";
    std::this_thread::sleep_for(std::chrono::milliseconds(std::max(1, faults.PollTimeoutMs())));
    faults.DeliverDue(handler);
  }
  EXPECT_GE(NowMs() - start, 30);
  EXPECT_EQ(seen, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(faults.PollTimeoutMs(), -1);
}

}  // namespace
}  // namespace ferry
