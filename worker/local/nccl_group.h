#pragma once

// NcclGroup: LocalNccl on CUDA and NCCL (local_nccl.h has the contract: the steps, the
// deadlines, the shutdown order). nccl_group.cc keeps the book of rounds (Submit, Go,
// RunStep, Wait, failure, and the "ferry-nccl" thread's loop that takes their steps);
// nccl_steps.cc runs the steps on the GPU (REDUCE, BROADCAST, the communicator, the
// pinned buffers, the polls with deadlines). Compiled only with FERRY_HAVE_NCCL.
//
// Threads: callers (Submit, Wait), the owner's (Go on the root, RunStep on a peer, Fail,
// Stop), the Worker's completion thread (OnSummed, the root's) and "ferry-nccl", which
// alone makes CUDA and NCCL calls on the communicator and its stream. No lock of this
// class is held while it calls the owner (MachinePushPull, SendStep, OnFailure), so the
// owner may call in under its own lock.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <string>
#include <thread>

#include "common/util/mutex.h"
#include "worker/local/local_nccl.h"

namespace ferry {

class NcclGroup : public LocalNccl {
 public:
  NcclGroup(int local_rank, int local_size, int64_t op_timeout_ms, int average_over,
            MachinePushPull push_pull, SendStep send_step, OnFailure on_failure);
  ~NcclGroup() override;

  void Stop() override EXCLUDES(mu_);
  uint64_t Submit(const DeviceTensor& t) override EXCLUDES(mu_);
  void Go(const std::string& name) override EXCLUDES(mu_);
  void RunStep(Step step, const std::string& name, uint64_t seq,
               const std::string& unique_id) override EXCLUDES(mu_);
  void Wait(uint64_t ticket) override EXCLUDES(mu_);
  void Fail(const std::string& reason) override EXCLUDES(mu_);

 private:
  // Where a device push_pull is: what a timeout or an error names.
  enum class Stage {
    kQueued,   // submitted, not reduced yet
    kReduced,  // reduced; waiting for the machine's sum (the root) or the BROADCAST (a peer)
    kDone,
  };
  struct Item {
    DeviceTensor t;
    uint64_t reduce_seq = 0;      // its REDUCE's number (local_nccl.h, SendStep)
    cudaEvent_t ready = nullptr;  // recorded on t.stream at Submit
    Stage stage = Stage::kQueued;
    bool go = false;  // started: GO (the root) or REDUCE (a peer) came
    std::string error;
    int64_t progress_ms = 0;  // submitted, started, or the thread's last step done
    void* host = nullptr;     // the root's: the pinned machine sum, REDUCE to BROADCAST
    std::string sum_error;    // the root's: the machine push_pull's error
  };
  // A step for the thread, with its item as it was when taken (copied under mu_).
  struct Work {
    Step step = Step::kReduce;
    uint64_t ticket = 0;
    std::string unique_id;  // a peer's first REDUCE
    Item item;
  };
  struct Pinned {
    void* data = nullptr;
    size_t bytes = 0;
    bool busy = false;
  };
  using Queues = std::map<std::string, std::deque<uint64_t>>;

  // nccl_group.cc: the book of rounds.
  std::string Me() const;
  uint64_t TakeLocked(Queues& from, const std::string& name, const char* what) REQUIRES(mu_);
  void Erase(std::map<uint64_t, Item>::iterator it) REQUIRES(mu_);
  void FailLocked(const std::string& reason) REQUIRES(mu_);
  void OnSummed(uint64_t ticket, const std::string& error) EXCLUDES(mu_);
  std::string StateOf(const Item& item) const;
  std::string TimeOutLocked(std::map<uint64_t, Item>::iterator it) REQUIRES(mu_);
  void ThrowIfFailed() EXCLUDES(mu_);
  bool HasWorkLocked() const REQUIRES(mu_);
  Work TakeWorkLocked() REQUIRES(mu_);
  void Loop() EXCLUDES(mu_);
  std::string RunWork(const Work& w) EXCLUDES(mu_);
  bool FinishWork(const Work& w, std::string* error) EXCLUDES(mu_);
  void Touch() EXCLUDES(mu_);
  void CheckDeadline(int64_t deadline, const std::string& what) EXCLUDES(mu_);

  // nccl_steps.cc: the thread's steps on the GPU.
  void Reduce(const Work& w) EXCLUDES(mu_);
  void BeginReduce(const Work& w) EXCLUDES(mu_);
  void* ReduceToHost(const DeviceTensor& t, cudaEvent_t ready);
  void Broadcast(const Work& w) EXCLUDES(mu_);
  void* TakeHost(size_t bytes);
  void GiveBackHost(void* p);
  void InitStream() EXCLUDES(mu_);
  void InitComm(const std::string& id) EXCLUDES(mu_);
  void WaitComm(const std::string& what) EXCLUDES(mu_);
  void WaitStream(const std::string& what) EXCLUDES(mu_);
  void AbortAndDrain();

  const int local_rank_, local_size_;
  const int64_t op_timeout_ms_;
  const int average_over_;
  const MachinePushPull push_pull_;
  const SendStep send_step_;
  const OnFailure on_failure_;

  // The "ferry-nccl" thread's alone (the destructor's after the join): no lock.
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::list<Pinned> pinned_;  // the root's host buffers (a list: pointers stay valid)

  // Guards the book of rounds: items_, the queues, the counters, device_, failure_ and
  // stopping_.
  Mutex mu_;
  CondVar cv_;  // signalled on GO, steps, sums, a step done, failure and stop
  std::map<uint64_t, Item> items_ GUARDED_BY(mu_);  // by ticket, until Wait takes it
  Queues queued_ GUARDED_BY(mu_);                   // submitted, not started, by name
  // A peer's: REDUCE number -> ticket, until its BROADCAST.
  std::map<uint64_t, uint64_t> reducing_ GUARDED_BY(mu_);
  uint64_t reduces_ GUARDED_BY(mu_) = 0;           // REDUCE steps numbered so far
  uint64_t running_ GUARDED_BY(mu_) = 0;           // the ticket whose step the thread runs, or 0
  std::deque<uint64_t> runnable_ GUARDED_BY(mu_);  // the root's: GO came, in GO order
  std::deque<uint64_t> summed_ GUARDED_BY(mu_);    // the root's: the machine's sum came
  std::deque<Work> steps_ GUARDED_BY(mu_);         // a peer's: the root's steps, in order
  uint64_t next_ticket_ GUARDED_BY(mu_) = 1;
  int device_ GUARDED_BY(mu_) = -1;  // the GPU of this process's device tensors (the first's)
  std::string failure_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace ferry
