#include "worker/operation_table.h"

#include <glog/logging.h>
#include <pthread.h>

#include <algorithm>
#include <limits>

#include "common/util/clock.h"

namespace ferry {

OperationTable::OperationTable(int64_t timeout_ms, TimeoutMessageFn timeout_message)
    : timeout_ms_(timeout_ms), timeout_message_(std::move(timeout_message)) {
  {
    MutexLock lock(mu_);
    last_labelled_ms_ = NowMs();
  }
  callback_thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "ferry-done");
    CallbackLoop();
  });
}

OperationTable::~OperationTable() { Close(); }

void OperationTable::Close() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  callbacks_cv_.NotifyAll();
  if (!callback_thread_.joinable()) return;
  if (callback_thread_.get_id() == std::this_thread::get_id()) {
    callback_thread_.detach();  // a callback destroyed the owner: it returns into the loop's end
  } else {
    callback_thread_.join();
  }
}

Handle OperationTable::Add(CompletionCallback callback, const std::string& label) {
  MutexLock lock(mu_);
  const Handle h = next_handle_++;
  Entry& e = entries_[h];
  if (!label.empty()) {
    e.label = label;
    e.seq = ++submitted_[label];
    e.added_ms = last_labelled_ms_ = NowMs();
  }
  if (callback) {
    e.callback = std::move(callback);
    e.deadline_ms = NowMs() + timeout_ms_;
    deadline_added_ = true;  // a new deadline to watch
    callbacks_cv_.NotifyAll();
  }
  if (!failure_.empty()) {
    e.finished = true;
    e.verdict = Verdict{failure_code_, failure_};
    if (e.callback) QueueCallback(h, e);
  }
  return h;
}

std::vector<PendingOperation> OperationTable::Unfinished(int64_t min_age_ms, size_t limit) const {
  MutexLock lock(mu_);
  const int64_t now = NowMs();
  std::vector<PendingOperation> out;
  for (const auto& [handle, e] : entries_) {
    if (e.finished || e.label.empty() || now - e.added_ms < min_age_ms) continue;
    out.push_back(PendingOperation{e.label, e.seq, now - e.added_ms});
  }
  std::sort(out.begin(), out.end(), [](const PendingOperation& a, const PendingOperation& b) {
    return a.age_ms > b.age_ms;
  });
  if (out.size() > limit) out.resize(limit);
  return out;
}

uint64_t OperationTable::Submitted(const std::string& label) const {
  MutexLock lock(mu_);
  auto it = submitted_.find(label);
  return it == submitted_.end() ? 0 : it->second;
}

void OperationTable::RestartCounts() {
  MutexLock lock(mu_);
  submitted_.clear();
}

int64_t OperationTable::IdleMs() const {
  MutexLock lock(mu_);
  return NowMs() - last_labelled_ms_;
}

OperationTable::Entry& OperationTable::Find(Handle handle) {
  auto it = entries_.find(handle);
  FERRY_ENFORCE(it != entries_.end(), ErrorCode::kInvalidArgument, "unknown handle ", handle);
  return it->second;
}

void OperationTable::QueueCallback(Handle handle, Entry& e) {
  ready_.push_back(Ready{handle, e.verdict, std::move(e.callback)});
  entries_.erase(handle);  // nobody waits on a handle with a callback
  callbacks_cv_.NotifyAll();
}

bool OperationTable::Finish(Handle handle, Verdict verdict) {
  MutexLock lock(mu_);
  auto it = entries_.find(handle);
  if (it == entries_.end() || it->second.finished) return false;
  Entry& e = it->second;
  e.finished = true;
  e.verdict = std::move(verdict);
  if (e.verdict.code == ErrorCode::kMismatch && !e.label.empty()) {  // withdrawn (Labels)
    auto count = submitted_.find(e.label);
    if (count != submitted_.end() && count->second == e.seq) count->second--;
  }
  if (Visible(e)) {
    cv_.NotifyAll();
    if (e.callback) QueueCallback(handle, e);
  }
  return true;
}

void OperationTable::FailAll(const std::string& reason, ErrorCode code) {
  MutexLock lock(mu_);
  if (!failure_.empty() && failure_code_ != ErrorCode::kMembershipChanged) return;
  failure_ = reason;
  failure_code_ = code;
  std::vector<Handle> done;
  for (auto& [h, e] : entries_) {
    if (e.finished) continue;
    e.finished = true;
    e.verdict = Verdict{code, reason};
    if (Visible(e) && e.callback) done.push_back(h);
  }
  for (Handle h : done) QueueCallback(h, entries_[h]);
  cv_.NotifyAll();
}

bool OperationTable::Reopen() {
  MutexLock lock(mu_);
  if (failure_code_ != ErrorCode::kMembershipChanged) return failure_.empty();
  failure_.clear();
  failure_code_ = ErrorCode::kOk;
  for (auto it = entries_.begin(); it != entries_.end();) {
    const Entry& e = it->second;
    const bool abandoned = Visible(e) && !e.callback && e.verdict.code == ErrorCode::kMembershipChanged;
    it = abandoned ? entries_.erase(it) : std::next(it);
  }
  return true;
}

void OperationTable::Hold(Handle handle) {
  MutexLock lock(mu_);
  Find(handle).holds++;
}

void OperationTable::Unhold(Handle handle) {
  MutexLock lock(mu_);
  Entry& e = Find(handle);
  CHECK_GT(e.holds, 0) << "Unhold without Hold of operation " << handle;
  if (--e.holds == 0 && e.finished) {
    cv_.NotifyAll();
    if (e.callback) QueueCallback(handle, e);
  }
}

bool OperationTable::Poll(Handle handle) {
  MutexLock lock(mu_);
  return Visible(Find(handle));
}

bool OperationTable::WaitFor(Handle handle, int64_t slice_ms) {
  MutexLock lock(mu_);
  Entry* e = &Find(handle);
  // The operation's deadline runs from the first wait for it, however it is sliced.
  if (e->deadline_ms == 0) e->deadline_ms = NowMs() + timeout_ms_;
  const int64_t deadline = e->deadline_ms;
  auto until = Clock::now() + Millis(std::max<int64_t>(0, std::min(slice_ms, deadline - NowMs())));
  // entries_ may rehash while we sleep: look the entry up again on every wake.
  cv_.WaitUntil(mu_, until, [&]() REQUIRES(mu_) { return Visible(Find(handle)); });
  e = &Find(handle);
  if (!Visible(*e)) {
    if (NowMs() < deadline) return false;
    lock.Unlock();
    throw FerryError(ErrorCode::kTimeout, timeout_message_(handle));
  }
  Verdict v = std::move(e->verdict);
  entries_.erase(handle);
  if (!v.ok()) throw FerryError(v.code, v.error);
  return true;
}

void OperationTable::Wait(Handle handle) {
  while (!WaitFor(handle, timeout_ms_)) {
  }
}

Handle OperationTable::WaitAny(const std::vector<Handle>& handles, int64_t slice_ms) {
  MutexLock lock(mu_);
  int64_t deadline = std::numeric_limits<int64_t>::max();
  for (Handle h : handles) {
    Entry& e = Find(h);
    if (e.deadline_ms == 0) e.deadline_ms = NowMs() + timeout_ms_;
    deadline = std::min(deadline, e.deadline_ms);
  }
  Handle found = 0;
  auto any = [&]() REQUIRES(mu_) {
    for (Handle h : handles) {
      if (Visible(Find(h))) {
        found = h;
        return true;
      }
    }
    return false;
  };
  // Past a deadline the wait returns at once: the caller's Wait on that handle throws.
  const int64_t wait = std::max<int64_t>(0, std::min(slice_ms, deadline - NowMs()));
  cv_.WaitUntil(mu_, Clock::now() + Millis(wait), any);
  if (found == 0 && NowMs() >= deadline) {
    for (Handle h : handles) {
      if (Find(h).deadline_ms <= NowMs()) return h;  // its Wait reports the timeout
    }
  }
  return found;
}

bool OperationTable::WaitAll(int64_t timeout_ms) {
  MutexLock lock(mu_);
  return cv_.WaitFor(mu_, Millis(timeout_ms), [this]() REQUIRES(mu_) {
    if (!failure_.empty()) return true;
    for (const auto& [h, e] : entries_) {
      if (!Visible(e)) return false;
    }
    return true;
  });
}

size_t OperationTable::size() const {
  MutexLock lock(mu_);
  return entries_.size() + ready_.size();
}

void OperationTable::Post(std::function<void()> task) {
  MutexLock lock(mu_);
  if (stop_) return;
  ready_.push_back(
      Ready{0, Verdict{}, [task = std::move(task)](Handle, const Verdict&) { task(); }});
  callbacks_cv_.NotifyAll();
}

void OperationTable::TimeOut(Handle handle) {
  // No lock held: the message may take its owner's lock.
  Finish(handle, Verdict{ErrorCode::kTimeout, timeout_message_(handle)});
}

void OperationTable::CallbackLoop() {
  MutexLock lock(mu_);
  while (!stop_) {
    if (!ready_.empty()) {
      Ready r = std::move(ready_.front());
      ready_.pop_front();
      lock.Unlock();
      r.callback(r.handle, r.verdict);
      lock.Lock();
      continue;
    }
    // Operations with a callback have no waiter: their deadlines are watched here.
    const int64_t now = NowMs();
    int64_t next = std::numeric_limits<int64_t>::max();
    std::vector<Handle> overdue;
    for (const auto& [h, e] : entries_) {
      if (!e.callback || e.finished) continue;
      if (e.deadline_ms <= now) {
        overdue.push_back(h);
      } else {
        next = std::min(next, e.deadline_ms);
      }
    }
    if (!overdue.empty()) {
      lock.Unlock();
      for (Handle h : overdue) TimeOut(h);
      lock.Lock();
      continue;
    }
    auto wake = [this]() REQUIRES(mu_) { return stop_ || !ready_.empty() || deadline_added_; };
    if (next == std::numeric_limits<int64_t>::max()) {
      callbacks_cv_.Wait(mu_, wake);
    } else {
      callbacks_cv_.WaitFor(mu_, Millis(next - now), wake);
    }
    deadline_added_ = false;
  }
}

}  // namespace ferry
