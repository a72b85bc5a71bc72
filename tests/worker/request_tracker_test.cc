#include "worker/request_tracker.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

struct Req : TrackedRequest {
  int part = 0;
};

TEST(RequestTrackerTest, TheTimerStartsOnTheWireAndBacksOffPerAttempt) {
  RequestTracker<Req> t(100);
  EXPECT_EQ(t.DelayMs(0), 100);
  EXPECT_EQ(t.DelayMs(1), 200);
  EXPECT_EQ(t.DelayMs(5), 3200);
  EXPECT_EQ(t.DelayMs(9), 3200);  // at most 32x
  t.Add(1, Req{}, /*on_wire_later=*/true);
  EXPECT_EQ(t.Find(1)->resend_at_ms, kNotOnTheWire);
  int resent = 0;
  auto never = [](const Req&) { return false; };
  t.ResendOverdue(NowMs() + 1000000, never, false, [&](uint64_t, Req&) { return ++resent, false; });
  EXPECT_EQ(resent, 0);  // still queued here: no resend
  const int64_t before = NowMs();
  t.OnWire(1);
  EXPECT_GE(t.Find(1)->resend_at_ms, before + 100);
  EXPECT_LE(t.Find(1)->resend_at_ms, NowMs() + 100);
}

TEST(RequestTrackerTest, OverdueRequestsAreResentWithTheAttemptCounted) {
  RequestTracker<Req> t(100);
  t.Add(1, Req{}, false);
  t.Add(2, Req{}, false);
  auto never = [](const Req&) { return false; };
  std::vector<uint64_t> resent;
  const int64_t now = NowMs();
  t.ResendOverdue(now + 50, never, false,
                  [&](uint64_t id, Req&) { return resent.push_back(id), false; });
  EXPECT_TRUE(resent.empty());
  t.ResendOverdue(now + 150, never, false, [&](uint64_t id, Req& r) {
    resent.push_back(id);
    EXPECT_EQ(r.attempts, 1);
    return id == 2;  // request 2 borrowed its payload again: its timer waits for the wire
  });
  EXPECT_EQ(resent.size(), 2u);
  EXPECT_EQ(t.Find(1)->resend_at_ms, now + 150 + 200);
  EXPECT_EQ(t.Find(2)->resend_at_ms, kNotOnTheWire);
}

TEST(RequestTrackerTest, AnAckRestartsTheTimerAndTheAnswerRemovesTheRequest) {
  RequestTracker<Req> t(100);
  Req r;
  r.part = 7;
  t.Add(5, r, true);
  Req* acked = t.Ack(5);
  ASSERT_NE(acked, nullptr);
  EXPECT_TRUE(acked->acked);
  EXPECT_NE(acked->resend_at_ms, kNotOnTheWire);
  EXPECT_EQ(t.Ack(6), nullptr);
  std::optional<Req> answered = t.Take(5);
  ASSERT_TRUE(answered);
  EXPECT_EQ(answered->part, 7);
  EXPECT_FALSE(t.Take(5));  // a late answer
}

TEST(RequestTrackerTest, SkippedRequestsAreLeftOrForgotten) {
  RequestTracker<Req> t(100);
  t.Add(1, Req{}, false);
  auto all = [](const Req&) { return true; };
  int resent = 0;
  t.ResendOverdue(NowMs() + 1000, all, false, [&](uint64_t, Req&) { return ++resent, false; });
  EXPECT_NE(t.Find(1), nullptr);
  t.ResendOverdue(NowMs() + 1000, all, true, [&](uint64_t, Req&) { return ++resent, false; });
  EXPECT_EQ(t.Find(1), nullptr);
  EXPECT_EQ(resent, 0);
}

}  // namespace
}  // namespace ferry
