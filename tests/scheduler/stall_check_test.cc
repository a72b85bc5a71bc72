// StallCheck (scheduler/stall_check.h): which ranks a stalled operation waits for, when it
// is reported, and when it ends the job. A fake clock: times are arguments.

#include "scheduler/stall_check.h"

#include <gtest/gtest.h>

#include "common/cluster/point_to_point_label.h"

namespace ferry {
namespace {

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}
using Ranks = std::vector<int>;

struct Op {
  std::string label;
  uint64_t seq;
  int64_t age_ms;
};

proto::StallReport Report(std::vector<Op> pending,
                          std::vector<std::pair<std::string, uint64_t>> counts,
                          int64_t idle_ms = 0) {
  proto::StallReport r;
  for (const Op& op : pending) {
    auto* p = r.add_pending();
    p->set_label(op.label);
    p->set_seq(op.seq);
    p->set_age_ms(op.age_ms);
  }
  for (const auto& [label, count] : counts) {
    auto* c = r.add_counts();
    c->set_label(label);
    c->set_count(count);
  }
  r.set_idle_ms(idle_ms);
  return r;
}

const std::string kX = "push_pull of 'x'";

TEST(StallCheckTest, ReportsAfterHalfTheEarlierTime) {
  EXPECT_EQ(StallCheck(2, 60000, 0).report_after_ms(), 30000);
  EXPECT_EQ(StallCheck(2, 60000, 90000).report_after_ms(), 30000);
  EXPECT_EQ(StallCheck(2, 0, 8000).report_after_ms(), 4000);
  EXPECT_EQ(StallCheck(2, 0, 0).report_after_ms(), 0);
  EXPECT_FALSE(StallCheck(2, 0, 0).enabled());
}

TEST(StallCheckTest, NamesTheRanksThatNeverSubmitted) {
  StallCheck check(4, 1000, 0);
  // Ranks 0 and 2 wait on x's third operation; rank 1 has submitted only two, rank 3 three
  // (its third is younger than the report threshold, so not listed as pending).
  check.Update(0, Report({{kX, 3, 1200}}, {{kX, 3}}), 0);
  check.Update(1, Report({}, {{kX, 2}}), 0);
  check.Update(2, Report({{kX, 3, 1100}}, {{kX, 3}}), 0);
  check.Update(3, Report({}, {{kX, 3}}), 0);
  std::vector<StallCheck::Stall> stalls = check.Check(0);
  ASSERT_EQ(stalls.size(), 1u);
  const StallCheck::Stall& s = stalls[0];
  EXPECT_EQ(s.label, kX);
  EXPECT_EQ(s.seq, 3u);
  EXPECT_EQ(s.waited_ms, 1200);
  EXPECT_EQ(s.waiting, (Ranks{0, 2}));
  EXPECT_EQ(s.missing, (Ranks{1}));
  EXPECT_FALSE(s.shutdown);
  EXPECT_TRUE(Contains(s.message, "push_pull of 'x' (operation 3 under this name) has waited "
                                   "1.2 s on ranks 0, 2 for rank 1, which has not submitted it"));
  EXPECT_TRUE(Contains(s.message, "FERRY_STALL_WARNING_MS=1000"));
}

TEST(StallCheckTest, APointToPointMessageNamesOnlyItsPeer) {
  // Rank 2 waits for its receive of rank 1's first message under tag 7; rank 1 sent none, and
  // ranks 0 and 3 never take part in that pair (no count under the label), so only rank 1 is
  // named. Then rank 1 waits on its send of a second message that rank 2 never receives.
  const std::string pair = PointToPointLabel(1, 2, 7);
  StallCheck check(4, 1000, 0);
  check.Update(0, Report({}, {}), 0);
  check.Update(1, Report({}, {{pair, 0}}), 0);
  check.Update(2, Report({{pair, 1, 1500}}, {{pair, 1}}), 0);
  check.Update(3, Report({}, {}), 0);
  std::vector<StallCheck::Stall> stalls = check.Check(0);
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].missing, (Ranks{1}));
  EXPECT_TRUE(Contains(stalls[0].message, "point-to-point from rank 1 to rank 2, tag 7 (message 1 "
                                          "under this name) has waited 1.5 s on rank 2 for rank "
                                          "1, which has not sent it (no matching send)"));
  StallCheck later(4, 1000, 0);
  later.Update(1, Report({{pair, 2, 1500}}, {{pair, 2}}), 0);
  later.Update(2, Report({}, {{pair, 1}}), 0);
  later.Update(0, Report({}, {}), 0);
  later.Update(3, Report({}, {}), 0);
  stalls = later.Check(0);
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].missing, (Ranks{2}));
  EXPECT_TRUE(Contains(stalls[0].message, "for rank 2, which has not received it"));
  int src = 0, dst = 0;
  EXPECT_TRUE(ParsePointToPointLabel(pair, &src, &dst));
  EXPECT_EQ(src, 1);
  EXPECT_EQ(dst, 2);
  EXPECT_FALSE(ParsePointToPointLabel(pair + "x", &src, &dst));
  EXPECT_FALSE(ParsePointToPointLabel(kX, &src, &dst));
}

TEST(StallCheckTest, AgesGrowOnTheSchedulersClockAndWarningsRepeatEachPeriod) {
  StallCheck check(2, 1000, 0);
  check.Update(0, Report({{kX, 1, 600}}, {{kX, 1}}), 10000);
  check.Update(1, Report({}, {{kX, 0}}), 10000);
  EXPECT_TRUE(check.Check(10300).empty());  // 900 ms: not yet
  ASSERT_EQ(check.Check(10400).size(), 1u);    // 1000 ms
  EXPECT_TRUE(check.Check(10900).empty());  // warned 500 ms ago
  std::vector<StallCheck::Stall> again = check.Check(11400);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].waited_ms, 2000);
}

TEST(StallCheckTest, NoStallWhileAnyCountIsUnknownOrEveryRankSubmitted) {
  StallCheck check(3, 1000, 0);
  check.Update(0, Report({{kX, 1, 5000}}, {}), 0);
  check.Update(1, Report({}, {}), 0);  // its count of x not reported yet
  EXPECT_TRUE(check.Check(0).empty());
  // Every rank submitted it: a slow peer, not a rank stall (heartbeats cover dead ones).
  check.Update(1, Report({}, {{kX, 1}}), 0);
  check.Update(2, Report({}, {{kX, 1}}), 0);
  EXPECT_TRUE(check.Check(0).empty());
  // A rank never heard from: unknown too.
  StallCheck silent(2, 1000, 0);
  silent.Update(0, Report({{kX, 1, 5000}}, {{kX, 1}}), 0);
  EXPECT_TRUE(silent.Check(0).empty());
}

TEST(StallCheckTest, WatchesEveryReportedLabel) {
  StallCheck check(2, 1000, 0);
  check.Update(0, Report({{kX, 1, 600}, {"barrier", 4, 700}}, {}), 0);
  check.Update(1, Report({{kX, 1, 600}}, {}), 0);
  EXPECT_EQ(check.Watched(), (std::vector<std::string>{"barrier", kX}));
}

TEST(StallCheckTest, EndsTheJobAfterTheShutdownTime) {
  StallCheck check(2, 1000, 3000);
  check.Update(0, Report({{"barrier", 2, 1000}}, {{"barrier", 2}}), 0);
  check.Update(1, Report({}, {{"barrier", 1}}), 0);
  std::vector<StallCheck::Stall> first = check.Check(0);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_FALSE(first[0].shutdown);
  std::vector<StallCheck::Stall> last = check.Check(2000);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_TRUE(last[0].shutdown);
  EXPECT_TRUE(Contains(last[0].message, "ending the job (FERRY_STALL_SHUTDOWN_MS=3000)"));
  EXPECT_EQ(last[0].missing, (Ranks{1}));
}

TEST(StallCheckTest, ShutdownAloneWithoutWarnings) {
  StallCheck check(2, 0, 2000);
  check.Update(0, Report({{kX, 1, 1500}}, {{kX, 1}}), 0);
  check.Update(1, Report({}, {{kX, 0}}), 0);
  EXPECT_TRUE(check.Check(0).empty());  // no warning time: nothing until the shutdown
  std::vector<StallCheck::Stall> s = check.Check(500);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_TRUE(s[0].shutdown);
}

TEST(StallCheckTest, AJoinWaitsForRanksThatStoppedSubmitting) {
  StallCheck check(2, 1000, 0);
  // Rank 1 has not joined, but submitted an operation 200 ms ago: uneven data, it trains on.
  check.Update(0, Report({{"join", 1, 5000}}, {{"join", 1}}), 0);
  check.Update(1, Report({}, {{"join", 0}}, 200), 0);
  EXPECT_TRUE(check.Check(0).empty());
  // Silent for longer than the warning time: it is named.
  check.Update(1, Report({}, {{"join", 0}}, 1500), 0);
  std::vector<StallCheck::Stall> s = check.Check(0);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].missing, (Ranks{1}));
}

TEST(StallCheckTest, ReportsAreBoundedAndBadRanksIgnored) {
  StallCheck check(2, 1000, 0);
  std::vector<Op> many;
  for (uint64_t i = 1; i <= 1000; ++i) many.push_back({kX, i, 5000});
  check.Update(0, Report(many, {}), 0);
  check.Update(7, Report({{"y", 1, 5000}}, {}), 0);   // no such rank
  check.Update(-1, Report({{"z", 1, 5000}}, {}), 0);  // no such rank
  EXPECT_EQ(check.Watched(), (std::vector<std::string>{kX}));
  check.Update(1, Report({}, {{kX, 0}}), 0);
  EXPECT_EQ(check.Check(0).size(), StallCheck::kMaxReported);
}

}  // namespace
}  // namespace ferry
