#include "worker/operation_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "common/util/clock.h"

namespace ferry {
namespace {

std::string Message(Handle h) { return StrCat("operation ", h, " waits for its sum"); }

// Labels (the stall check): each labelled operation is its label's next submission; one a
// server refused as a disagreement (kMismatch) is withdrawn if it is the latest, so the
// rank's next operation under the label takes its number again.
TEST(OperationTableTest, LabelsCountSubmissionsAndARefusedOneIsWithdrawn) {
  OperationTable t(10000, Message);
  const Handle a = t.Add(nullptr, "push_pull of 'x'");
  const Handle b = t.Add(nullptr, "push_pull of 'x'");
  t.Add(nullptr, "push_pull of 'y'");
  EXPECT_EQ(t.Submitted("push_pull of 'x'"), 2u);
  EXPECT_EQ(t.Submitted("push_pull of 'z'"), 0u);
  t.Finish(a, Verdict{ErrorCode::kMismatch, "refused"});  // not the latest: it stays counted
  EXPECT_EQ(t.Submitted("push_pull of 'x'"), 2u);
  t.Finish(b, Verdict{ErrorCode::kMismatch, "refused"});
  EXPECT_EQ(t.Submitted("push_pull of 'x'"), 1u);
  const Handle c = t.Add(nullptr, "push_pull of 'x'");
  bool listed = false;
  for (const PendingOperation& p : t.Unfinished(0, 10)) {
    if (p.label == "push_pull of 'x'") {
      EXPECT_EQ(p.seq, 2u);  // b's number again
      listed = true;
    }
  }
  EXPECT_TRUE(listed);
  t.Finish(c, Verdict{ErrorCode::kTimeout, "late"});  // other errors stay counted
  EXPECT_EQ(t.Submitted("push_pull of 'x'"), 2u);
}

TEST(OperationTableTest, WaitReturnsOnceFinishedAndReleasesTheHandle) {
  OperationTable t(10000, Message);
  const Handle h = t.Add();
  EXPECT_FALSE(t.Poll(h));
  EXPECT_FALSE(t.WaitFor(h, 1));
  std::thread finisher([&] { t.Finish(h, Verdict{}); });
  t.Wait(h);
  finisher.join();
  EXPECT_EQ(t.size(), 0u);
  EXPECT_THROW(t.Poll(h), FerryError);  // released
}

TEST(OperationTableTest, TheFirstVerdictCountsAndItsErrorIsThrown) {
  OperationTable t(10000, Message);
  const Handle h = t.Add();
  EXPECT_TRUE(t.Finish(h, Verdict{ErrorCode::kMismatch, "tensor 'w' disagrees"}));
  EXPECT_FALSE(t.Finish(h, Verdict{}));
  try {
    t.Wait(h);
    FAIL() << "no error";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMismatch);
    EXPECT_STREQ(e.what(), "tensor 'w' disagrees");
  }
}

TEST(OperationTableTest, AWaitTimesOutAtItsDeadlineWithTheOwnersMessage) {
  OperationTable t(50, Message);
  const Handle h = t.Add();
  const int64_t start = NowMs();
  try {
    t.Wait(h);
    FAIL() << "no timeout";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_EQ(std::string(e.what()), Message(h));
  }
  EXPECT_GE(NowMs() - start, 50);
}

TEST(OperationTableTest, SlicedWaitsKeepTheDeadlineOfTheFirstWait) {
  OperationTable t(60, Message);
  const Handle h = t.Add();
  int slices = 0;
  EXPECT_THROW(
      {
        while (!t.WaitFor(h, 10)) slices++;
      },
      FerryError);
  EXPECT_GE(slices, 3);
  EXPECT_LE(slices, 7);
}

TEST(OperationTableTest, AHeldOperationIsNotReportedFinishedUntilUnheld) {
  OperationTable t(10000, Message);
  const Handle h = t.Add();
  t.Hold(h);
  t.Finish(h, Verdict{ErrorCode::kPeerFailed, "server 1 died"});
  EXPECT_FALSE(t.Poll(h));
  EXPECT_FALSE(t.WaitFor(h, 5));
  t.Unhold(h);
  EXPECT_TRUE(t.Poll(h));
  EXPECT_THROW(t.Wait(h), FerryError);
}

TEST(OperationTableTest, FailAllFailsTheRunningAndEveryLaterOperation) {
  OperationTable t(10000, Message);
  const Handle a = t.Add();
  t.FailAll("the scheduler is gone");
  const Handle b = t.Add();
  for (Handle h : {a, b}) {
    try {
      t.Wait(h);
      FAIL() << "no error";
    } catch (const FerryError& e) {
      EXPECT_EQ(e.code(), ErrorCode::kPeerFailed);
      EXPECT_STREQ(e.what(), "the scheduler is gone");
    }
  }
}

TEST(OperationTableTest, WaitAnyReturnsTheFirstFinishedInTheList) {
  OperationTable t(10000, Message);
  const Handle a = t.Add(), b = t.Add(), c = t.Add();
  EXPECT_EQ(t.WaitAny({a, b, c}, 1), 0u);
  t.Finish(c, Verdict{});
  t.Finish(b, Verdict{});
  EXPECT_EQ(t.WaitAny({a, b, c}, 0), b);
  std::thread finisher([&] { t.Finish(a, Verdict{}); });
  EXPECT_EQ(t.WaitAny({a}, 10000), a);
  finisher.join();
  for (Handle h : {a, b, c}) t.Wait(h);
  EXPECT_THROW(t.WaitAny({a}, 0), FerryError);  // released
}

TEST(OperationTableTest, CallbacksRunInFinishingOrderOnTheTablesThreadWithoutItsLock) {
  OperationTable t(10000, Message);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Handle> order;
  std::vector<std::thread::id> threads;
  auto cb = [&](Handle h, const Verdict& v) {
    EXPECT_TRUE(v.ok());
    t.size();  // the table's lock is not held here
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(h);
    threads.push_back(std::this_thread::get_id());
    cv.notify_all();
  };
  const Handle a = t.Add(cb), b = t.Add(cb), c = t.Add(cb);
  t.Finish(b, Verdict{});
  t.Finish(c, Verdict{});
  t.Finish(a, Verdict{});
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, Millis(10000), [&] { return order.size() == 3; }));
  EXPECT_EQ(order, (std::vector<Handle>{b, c, a}));
  EXPECT_NE(threads[0], std::this_thread::get_id());
  EXPECT_EQ(threads[0], threads[2]);
  EXPECT_THROW(t.Poll(a), FerryError);  // a handle with a callback is released at once
}

TEST(OperationTableTest, AnOperationWithACallbackTimesOutWithoutAWaiter) {
  OperationTable t(30, Message);
  std::mutex mu;
  std::condition_variable cv;
  Verdict got;
  bool called = false;
  const Handle h = t.Add([&](Handle, const Verdict& v) {
    std::lock_guard<std::mutex> lock(mu);
    got = v;
    called = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, Millis(10000), [&] { return called; }));
  EXPECT_EQ(got.code, ErrorCode::kTimeout);
  EXPECT_EQ(got.error, Message(h));
}

TEST(OperationTableTest, WaitAllWaitsForEveryOperationAndTimesOut) {
  OperationTable t(10000, Message);
  const Handle a = t.Add();
  EXPECT_FALSE(t.WaitAll(5));
  std::thread finisher([&] { t.Finish(a, Verdict{}); });
  EXPECT_TRUE(t.WaitAll(10000));
  finisher.join();
}

}  // namespace
}  // namespace ferry
