#pragma once

// OperationTable: the handles of one role's asynchronous operations, their deadlines,
// the waits on them and their completion callbacks. One table serves every kind of
// operation of a Worker (push_pull, sparse rows), of a LocalRoot and of a LocalPeer.
//
//   Handle h = table.Add(callback);        // an unfinished operation
//   ... the protocol works; when it is over:
//   table.Finish(h, "");                   // or an error: the first verdict counts
//   table.Wait(h, describe);               // throws the error; the handle is released
//
// Lifecycle of a handle: Add -> (Hold/Unhold)* -> Finish -> released by the Wait (or
// WaitFor returning true) that saw it finished, or at once when it has a callback.
//
// Holds: a protocol that works on an operation's buffers outside its own lock (copies of
// sums into the output, of inputs into a fused push) holds the operation meanwhile. A
// finished operation is reported finished (Poll, Wait, WaitAny, callback) only once no
// hold remains, so a caller that frees its buffers after the error never races a copy.
//
// Deadlines: an operation waited on fails its wait FERRY_OP_TIMEOUT_MS (`timeout_ms`)
// after its first wait, however the wait is sliced (WaitFor). An operation with a
// callback has no waiter: its deadline runs from Add, and when it passes the table
// finishes it with the timeout error that `timeout_message` words (the callback reports
// it).
//
// Completion callbacks run on the table's own thread ("ferry-done"), one at a time in
// the order the operations finished, with no lock of the table or of its owner held.
// A callback must not block (the next callbacks wait for it); it may call back into its
// owner (e.g. start another operation) but must not Wait on a handle of this table.
//
// Finish and FailAll wake waiters that need no lock of the owner: call them after every
// side effect a woken caller could race with (messages to send, outputs to write), or a
// caller may return, even end the process, first (LocalRoot::Fail once lost its FAIL so).
//
// Labels (the stall check, scheduler/stall_check.h): an operation added with a label
// ("push_pull of 'fc.weight'") counts as the label's next submission (Submitted), and is
// listed by Unfinished until it finished, with its sequence number under the label (1 for
// the label's first operation) and its age. Every rank submits the same operations under
// the same labels in the same order, so (label, seq) names one collective across ranks.
// An operation that finishes with kMismatch (a server refused it: the ranks disagree on
// it) is withdrawn when it is the label's latest: the count goes back, so a peer waiting
// for a matching operation names this rank, and this rank's next operation under the label
// takes the same number.
//
// Thread-safe. Lock order: an owner may call any method with its own lock held, except
// the waits (Wait, WaitFor, WaitAny, WaitAll), which block; the table calls out (describe,
// callbacks, timeout_message) with no lock of its own held.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/util/mutex.h"
#include "common/util/status.h"

namespace ferry {

using Handle = uint64_t;

// How an operation ended: `error` empty = success; otherwise `code` and the reason.
struct Verdict {
  ErrorCode code = ErrorCode::kOk;
  std::string error;
  bool ok() const { return error.empty(); }
};

using CompletionCallback = std::function<void(Handle, const Verdict&)>;

// An unfinished labelled operation (see Labels above).
struct PendingOperation {
  std::string label;
  uint64_t seq = 0;     // 1: the label's first operation on this rank
  int64_t age_ms = 0;   // since it was added
};
// The message of an unfinished operation's timeout (kTimeout), naming what it waits for.
// Called with no lock of the table held.
using TimeoutMessageFn = std::function<std::string(Handle)>;

class OperationTable {
 public:
  // `timeout_ms`: FERRY_OP_TIMEOUT_MS; `timeout_message`: see Deadlines above.
  OperationTable(int64_t timeout_ms, TimeoutMessageFn timeout_message);
  ~OperationTable();  // Close()
  // Stops and joins the callback thread; callbacks still queued are dropped. The owner
  // calls it before the state its callbacks use goes. Idempotent.
  void Close() EXCLUDES(mu_);
  OperationTable(const OperationTable&) = delete;
  OperationTable& operator=(const OperationTable&) = delete;

  // A new unfinished operation; `callback` (may be empty) runs once when it finished.
  // `label` (may be empty: not tracked): see Labels above.
  Handle Add(CompletionCallback callback = nullptr, const std::string& label = {}) EXCLUDES(mu_);
  // The operation is over. The first verdict counts; later ones and unknown handles
  // (already released) are ignored. Returns true if this call finished it.
  bool Finish(Handle handle, Verdict verdict) EXCLUDES(mu_);
  // Every unfinished operation fails with `reason` and `code`; so does every operation
  // added from now on, at once. The first failure stays, except that any failure replaces
  // a kMembershipChanged (a job that fails for good after a membership change).
  void FailAll(const std::string& reason, ErrorCode code = ErrorCode::kPeerFailed)
      EXCLUDES(mu_);
  // Elastic training (Worker::Reset): a kMembershipChanged failure is over; operations
  // added from now on run, and the handles of the operations it failed that nobody waited
  // for are released (a later wait on one: unknown handle). False (nothing changes) for
  // any other failure.
  bool Reopen() EXCLUDES(mu_);
  void Hold(Handle handle) EXCLUDES(mu_);    // see Holds above; the handle must be known
  void Unhold(Handle handle) EXCLUDES(mu_);  // one per Hold

  // True once the operation finished. Unknown handle: throws kInvalidArgument.
  bool Poll(Handle handle) EXCLUDES(mu_);
  // Waits at most `slice_ms`: true (handle released) once finished, false if not yet.
  // Throws the operation's error, or kTimeout once its deadline passed (the message
  // names what it waits for).
  bool WaitFor(Handle handle, int64_t slice_ms) EXCLUDES(mu_);
  void Wait(Handle handle);  // WaitFor until finished
  // Waits at most `slice_ms` for any of `handles` to finish; returns the first finished
  // one in the list (not released: Wait on it next), or 0. Unknown handle: throws.
  // Each handle's deadline starts with this wait, as with WaitFor.
  Handle WaitAny(const std::vector<Handle>& handles, int64_t slice_ms) EXCLUDES(mu_);
  // Runs `task` on the callback thread, in order with the callbacks (it must not block
  // either). Lets a thread that may take no lock of the owner (ZeroMQ's IO thread) hand
  // work to one that may. Dropped once the table is closed.
  void Post(std::function<void()> task) EXCLUDES(mu_);
  // Waits until every operation added so far finished (or the table failed), at most
  // `timeout_ms`; false on timeout. Holds count as unfinished.
  bool WaitAll(int64_t timeout_ms) EXCLUDES(mu_);
  // Operations not yet released.
  size_t size() const EXCLUDES(mu_);
  // Labelled operations not finished and at least `min_age_ms` old, oldest first, at most
  // `limit` of them.
  std::vector<PendingOperation> Unfinished(int64_t min_age_ms, size_t limit) const EXCLUDES(mu_);
  // Operations added under `label` so far (since RestartCounts).
  uint64_t Submitted(const std::string& label) const EXCLUDES(mu_);
  // Every label's count starts over at 0 (Worker::Join: after uneven data the ranks'
  // counts differ; every rank restarts at the same point).
  void RestartCounts() EXCLUDES(mu_);
  // Milliseconds since the last labelled operation was added (since construction if none).
  int64_t IdleMs() const EXCLUDES(mu_);

 private:
  struct Entry {
    bool finished = false;
    int holds = 0;
    Verdict verdict;
    int64_t deadline_ms = 0;  // 0: not waited on yet
    CompletionCallback callback;
    std::string label;  // empty: not tracked (Labels)
    uint64_t seq = 0;
    int64_t added_ms = 0;
  };
  Entry& Find(Handle handle) REQUIRES(mu_);  // throws kInvalidArgument if unknown
  static bool Visible(const Entry& e) { return e.finished && e.holds == 0; }
  void QueueCallback(Handle handle, Entry& e) REQUIRES(mu_);  // e visible
  void CallbackLoop() EXCLUDES(mu_);
  void TimeOut(Handle handle) EXCLUDES(mu_);  // fails `handle` if it is still running

  const int64_t timeout_ms_;
  const TimeoutMessageFn timeout_message_;

  // The lock order's checked declaration (WorkerContext::mu is taken before this) names it.
  friend struct WorkerContext;
  mutable Mutex mu_;  // guards entries_, next_handle_, failure_, ready_ and the two flags
  CondVar cv_;        // signalled when an operation becomes visible as finished
  CondVar callbacks_cv_;  // signalled on a queued callback, a new deadline and on stop
  std::unordered_map<Handle, Entry> entries_ GUARDED_BY(mu_);
  Handle next_handle_ GUARDED_BY(mu_) = 1;
  std::unordered_map<std::string, uint64_t> submitted_ GUARDED_BY(mu_);  // label -> count
  int64_t last_labelled_ms_ GUARDED_BY(mu_);
  std::string failure_ GUARDED_BY(mu_);  // non-empty: FailAll ran
  ErrorCode failure_code_ GUARDED_BY(mu_) = ErrorCode::kOk;
  struct Ready {
    Handle handle;
    Verdict verdict;
    CompletionCallback callback;
  };
  std::deque<Ready> ready_ GUARDED_BY(mu_);  // callbacks to run, in finishing order
  // An operation with a callback came since the callback thread last scanned deadlines.
  bool deadline_added_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread callback_thread_;
};

}  // namespace ferry
