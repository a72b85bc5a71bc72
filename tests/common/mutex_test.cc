// ferry::Mutex, MutexLock, MutexUnlock and CondVar (common/util/mutex.h). The lock
// discipline itself is checked at compile time (-Wthread-safety in clang builds); these
// tests check the run-time behaviour: waits with a deadline, and that every wait (and
// every MutexUnlock scope) ends with the lock held again.

#include "common/util/mutex.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace ferry {
namespace {

using std::chrono::milliseconds;

// A flag and a condition variable; every test body holds mu_ as the analysis demands.
class Flag {
 public:
  void Set() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    set_ = true;
    cv_.NotifyAll();
  }
  // Waits up to `timeout`; returns whether the flag was set, and that the lock was held
  // again when the wait returned.
  bool WaitFor(milliseconds timeout, bool* held_after) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    bool ok = cv_.WaitFor(mu_, timeout, [this]() REQUIRES(mu_) { return set_; });
    *held_after = HeldByMe();
    return ok;
  }
  bool WaitUntil(CondVar::Clock::time_point deadline, bool* held_after) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    bool ok = cv_.WaitUntil(mu_, deadline, [this]() REQUIRES(mu_) { return set_; });
    *held_after = HeldByMe();
    return ok;
  }
  void Wait(bool* held_after) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    cv_.Wait(mu_, [this]() REQUIRES(mu_) { return set_; });
    *held_after = HeldByMe();
  }
  // Whether this thread holds mu_: another thread's TryLock must fail.
  bool HeldByMe() REQUIRES(mu_) {
    mu_.AssertHeld();  // aborts if not
    bool other_got_it = true;
    std::thread([&] {
      if (mu_.TryLock()) {
        mu_.Unlock();
      } else {
        other_got_it = false;
      }
    }).join();
    return !other_got_it;
  }
  Mutex& mu() RETURN_CAPABILITY(mu_) { return mu_; }

 private:
  Mutex mu_;  // guards set_
  CondVar cv_;
  bool set_ GUARDED_BY(mu_) = false;
};

TEST(MutexTest, WaitForTimesOutWithTheLockHeld) {
  Flag flag;
  bool held = false;
  auto start = CondVar::Clock::now();
  EXPECT_FALSE(flag.WaitFor(milliseconds(50), &held));
  EXPECT_GE(CondVar::Clock::now() - start, milliseconds(50));
  EXPECT_TRUE(held);
}

TEST(MutexTest, WaitUntilTimesOutWithTheLockHeld) {
  Flag flag;
  bool held = false;
  auto deadline = CondVar::Clock::now() + milliseconds(30);
  EXPECT_FALSE(flag.WaitUntil(deadline, &held));
  EXPECT_GE(CondVar::Clock::now(), deadline);
  EXPECT_TRUE(held);
}

TEST(MutexTest, WaitForReturnsTrueWhenNotified) {
  Flag flag;
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(20));
    flag.Set();
  });
  bool held = false;
  EXPECT_TRUE(flag.WaitFor(milliseconds(60000), &held));
  EXPECT_TRUE(held);
  setter.join();
}

TEST(MutexTest, WaitUntilReturnsTrueWhenNotified) {
  Flag flag;
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(20));
    flag.Set();
  });
  bool held = false;
  EXPECT_TRUE(flag.WaitUntil(CondVar::Clock::now() + milliseconds(60000), &held));
  EXPECT_TRUE(held);
  setter.join();
}

TEST(MutexTest, WaitReturnsWhenNotified) {
  Flag flag;
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(20));
    flag.Set();
  });
  bool held = false;
  flag.Wait(&held);
  EXPECT_TRUE(held);
  setter.join();
}

TEST(MutexTest, AlreadyTrueReturnsAtOnce) {
  Flag flag;
  flag.Set();
  bool held = false;
  EXPECT_TRUE(flag.WaitFor(milliseconds(0), &held));
  EXPECT_TRUE(held);
}

TEST(MutexTest, MutexUnlockReleasesForItsScope) {
  Flag flag;
  MutexLock lock(flag.mu());
  {
    MutexUnlock unlock(flag.mu());
    // Released: another thread takes it.
    bool other_got_it = false;
    std::thread([&] {
      if (flag.mu().TryLock()) {
        other_got_it = true;
        flag.mu().Unlock();
      }
    }).join();
    EXPECT_TRUE(other_got_it);
  }
  EXPECT_TRUE(flag.HeldByMe());
}

TEST(MutexTest, MutexLockRelocks) {
  Mutex mu;
  MutexLock lock(mu);
  mu.AssertHeld();
  lock.Unlock();
  bool relocked = false;
  if (mu.TryLock()) {
    relocked = true;
    mu.Unlock();
  }
  EXPECT_TRUE(relocked);
  lock.Lock();
  mu.AssertHeld();
}

TEST(MutexDeathTest, AssertHeldAbortsWithoutTheLock) {
  Mutex mu;
  EXPECT_DEATH(mu.AssertHeld(), "not held");
}

}  // namespace
}  // namespace ferry
