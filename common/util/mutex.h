#pragma once

// Mutex, MutexLock, MutexUnlock and CondVar: std::mutex and std::condition_variable with
// Clang thread-safety annotations (common/util/thread_annotations.h), so the compiler
// checks the lock discipline: a member declared GUARDED_BY(mu_) is only touched with mu_
// held, a function declared REQUIRES(mu_) is only called with it. libstdc++'s std::mutex
// carries no annotations, so every lock in our code is a ferry::Mutex.
//
//   Mutex mu_;                               // guards items_
//   std::deque<Item> items_ GUARDED_BY(mu_);
//   CondVar cv_;                             // signalled when items_ grows
//
//   void Put(Item item) EXCLUDES(mu_) {
//     MutexLock lock(mu_);
//     items_.push_back(std::move(item));
//     cv_.NotifyOne();
//   }
//   Item Take() EXCLUDES(mu_) {
//     MutexLock lock(mu_);
//     cv_.Wait(mu_, [&]() REQUIRES(mu_) { return !items_.empty(); });
//     ...
//   }
//
// A predicate that reads guarded members says REQUIRES(mu_) (as above): CondVar only
// calls it with the lock held, but the analysis checks a lambda's body on its own.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "common/util/thread_annotations.h"

namespace ferry {

class CondVar;

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() {
    mu_.lock();
    owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  }
  void Unlock() RELEASE() {
    owner_.store(std::thread::id(), std::memory_order_relaxed);
    mu_.unlock();
  }
  bool TryLock() TRY_ACQUIRE(true) {
    if (!mu_.try_lock()) return false;
    owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    return true;
  }
  // Aborts unless the calling thread holds the lock; afterwards the analysis takes it
  // as held (for code it cannot follow, e.g. a callback run under the lock).
  void AssertHeld() const ASSERT_CAPABILITY(this) {
    if (owner_.load(std::memory_order_relaxed) != std::this_thread::get_id()) {
      std::fprintf(stderr, "ferry::Mutex::AssertHeld: lock not held by this thread\n");
      std::abort();
    }
  }

 private:
  friend class CondVar;
  std::mutex mu_;
  // The holder, for AssertHeld (written only by the holder; relaxed is enough because
  // a thread compares it with its own id, which only it can have stored).
  std::atomic<std::thread::id> owner_{};
};

// Holds `mu` for its scope (std::lock_guard). Unlock() and Lock() release and retake it
// early (std::unique_lock's relocking), the destructor releases it only when held.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_.Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    mu_.Unlock();
    held_ = false;
  }
  void Lock() ACQUIRE() {
    mu_.Lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// Releases a held `mu` for its scope and retakes it at the end: for work done outside
// the lock (copying a payload, calling a callback) in the middle of a locked section.
//
//   MutexLock lock(mu_);
//   Job job = TakeJobLocked();
//   { MutexUnlock unlock(mu_); Run(job); }   // mu_ is not held while Run runs
//   FinishLocked(job);
class SCOPED_CAPABILITY MutexUnlock {
 public:
  explicit MutexUnlock(Mutex& mu) RELEASE(mu) : mu_(mu) { mu_.Unlock(); }
  // RELEASE() ends the scope: for a scope that released its lock, the analysis takes
  // that as retaking it (clang's convention for scoped unlockers).
  ~MutexUnlock() RELEASE() { mu_.Lock(); }
  MutexUnlock(const MutexUnlock&) = delete;
  MutexUnlock& operator=(const MutexUnlock&) = delete;

 private:
  Mutex& mu_;
};

// A condition variable for Mutex. Every wait needs the lock held, releases it while
// blocked and holds it again when it returns (also on timeout).
class CondVar {
 public:
  using Clock = std::chrono::steady_clock;

  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // One wait (may wake spuriously: callers loop on their condition).
  void Wait(Mutex& mu) REQUIRES(mu) NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    mu.owner_.store(std::thread::id(), std::memory_order_relaxed);
    cv_.wait(lock);
    mu.owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    lock.release();
  }
  // Waits until pred() (called with the lock held) is true. The predicate waits are not
  // analysed inside: the analysis cannot match the predicate's REQUIRES(caller's mu_)
  // with `mu`; the caller's lambda body and the REQUIRES(mu) here are checked.
  template <typename Predicate>
  void Wait(Mutex& mu, Predicate pred) REQUIRES(mu) NO_THREAD_SAFETY_ANALYSIS {
    while (!pred()) Wait(mu);
  }
  // Waits until pred() is true or `deadline` passed; returns pred() (false: timed out).
  template <typename C, typename D, typename Predicate>
  bool WaitUntil(Mutex& mu, const std::chrono::time_point<C, D>& deadline, Predicate pred)
      REQUIRES(mu) NO_THREAD_SAFETY_ANALYSIS {
    while (!pred()) {
      if (WaitUntilOnce(mu, deadline) == std::cv_status::timeout) return pred();
    }
    return true;
  }
  // WaitUntil(now + timeout).
  template <typename Rep, typename Period, typename Predicate>
  bool WaitFor(Mutex& mu, const std::chrono::duration<Rep, Period>& timeout, Predicate pred)
      REQUIRES(mu) {
    return WaitUntil(mu, Clock::now() + timeout, std::move(pred));
  }
  // One wait up to `deadline` (may wake spuriously).
  template <typename C, typename D>
  std::cv_status WaitUntilOnce(Mutex& mu, const std::chrono::time_point<C, D>& deadline)
      REQUIRES(mu) NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    mu.owner_.store(std::thread::id(), std::memory_order_relaxed);
    std::cv_status status = cv_.wait_until(lock, deadline);
    mu.owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    lock.release();
    return status;
  }

  // One wait up to `timeout` (may wake spuriously).
  template <typename Rep, typename Period>
  std::cv_status WaitForOnce(Mutex& mu, const std::chrono::duration<Rep, Period>& timeout)
      REQUIRES(mu) {
    return WaitUntilOnce(mu, Clock::now() + timeout);
  }

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace ferry
