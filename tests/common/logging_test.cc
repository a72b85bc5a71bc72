#include "common/util/logging.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace ferry {
namespace {

constexpr int64_t kSecond = 1000000000;

TEST(LogRateLimiterTest, OneLinePerIntervalAndTheCountOfTheRest) {
  LogRateLimiter limiter(1.0);
  LogRateLimiter::Ticket t = limiter.TakeAt(5 * kSecond);
  EXPECT_TRUE(t.allowed);  // the first line always goes
  EXPECT_EQ(t.suppressed, 0u);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(limiter.TakeAt(5 * kSecond + i).allowed);
  EXPECT_FALSE(limiter.TakeAt(6 * kSecond - 1).allowed);
  t = limiter.TakeAt(6 * kSecond);  // the interval is over
  EXPECT_TRUE(t.allowed);
  EXPECT_EQ(t.suppressed, 4u);
  t = limiter.TakeAt(8 * kSecond);  // nothing held back since
  EXPECT_TRUE(t.allowed);
  EXPECT_EQ(t.suppressed, 0u);
}

TEST(LogRateLimiterTest, ManyThreadsOneLineEachInterval) {
  LogRateLimiter limiter(1.0);
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < 1000; ++j) {
        LogRateLimiter::Ticket t = limiter.TakeAt(kSecond);
        if (t.allowed) allowed++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(allowed.load(), 1);
  LogRateLimiter::Ticket t = limiter.TakeAt(3 * kSecond);
  EXPECT_TRUE(t.allowed);
  EXPECT_EQ(t.suppressed, 3999u);
}

// A line of `count` calls in a row from one call site.
void LogBurst(int count) {
  for (int i = 0; i < count; ++i) FERRY_LOG_EVERY_T(WARNING, 0.2) << "burst line " << i;
}

TEST(FerryLogEveryTTest, LogsTheFirstAndCountsTheSuppressed) {
  FLAGS_logtostderr = true;
  testing::internal::CaptureStderr();
  LogBurst(5);  // the first goes, four are held back
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  LogBurst(1);  // after the interval: says how many were held back
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("burst line 0\n"), std::string::npos) << log;
  for (int i = 1; i < 5; ++i) {
    EXPECT_EQ(log.find("burst line " + std::to_string(i)), std::string::npos) << log;
  }
  EXPECT_NE(log.find("burst line 0 (4 similar suppressed)\n"), std::string::npos) << log;
}

TEST(FerryLogEveryTTest, IsOneStatement) {
  FLAGS_logtostderr = true;
  testing::internal::CaptureStderr();
  bool flag = false;
  if (flag)
    FERRY_LOG_EVERY_T(ERROR, 10) << "not logged";
  else
    FERRY_LOG_EVERY_T(ERROR, 10) << "the else branch";
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.find("not logged"), std::string::npos) << log;
  EXPECT_NE(log.find("the else branch"), std::string::npos) << log;
}

}  // namespace
}  // namespace ferry
