#pragma once

// LocalPeer: local rank 1..L-1 of a machine's local group (local_group.h). It creates no
// Worker: it connects to the local root's socket, copies each input into its slot (a
// shared memory segment per tensor, created here and mapped by the root), sends the
// submission, and on DONE copies the result from the slot to the output.
//
// Slot invariant: a slot is written by this process until its submission is sent, then
// belongs to the root until DONE arrives; a second operation on the same tensor waits
// for that DONE first (so a peer has at most one operation per tensor in flight). The
// input may be reused as soon as PushPullAsync returns (it was copied); the output must
// live until the operation finished.
//
// Every wait has a deadline: FERRY_CONNECT_TIMEOUT_MS x 2 for the WELCOME (the root
// first registers with the scheduler, which may take that long), FERRY_OP_TIMEOUT_MS for
// each operation; a root that dies is noticed at once (socket disconnect).

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/config/config.h"
#include "common/reduce/reduce.h"
#include "common/util/counters.h"
#include "common/util/mutex.h"
#include "worker/local/local_group.h"
#include "worker/local/local_link.h"
#include "worker/local/local_nccl.h"
#include "common/transport/fd_channel.h"
#include "common/transport/memfd_segment.h"
#include "worker/operation_table.h"

namespace ferry {

class LocalPeer : public LocalMember {
 public:
  // Connects to the local root and waits for its WELCOME. Throws FerryError.
  static std::unique_ptr<LocalPeer> Create(const Config& config);
  ~LocalPeer() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int num_servers() const override { return num_servers_; }

  // Checked and numbered here (no Worker): the root's own declarations fix the order of
  // the machine's tensors at the servers.
  int DeclareTensor(const std::string& name, DataType dtype, const std::vector<int64_t>& shape,
                    std::optional<int> priority) override;
  // The input is copied before the call returns; `priority` is the root's to give.
  Handle PushPullAsync(const std::string& name, const void* input, void* output, DataType dtype,
                       uint64_t count, bool average, std::optional<int> priority,
                       CompletionCallback done) override;
  // A tensor in CUDA device memory, through the NCCL backend (local_nccl.h): queued
  // there, announced to the root, run in the steps the root sends. Blocks until the
  // output holds the result. Throws FerryError.
  void PushPullDevice(const std::string& name, const void* input, void* output, DataType dtype,
                      uint64_t count, bool average, void* stream) override;
  void Broadcast(const std::string& name, void* data, DataType dtype, uint64_t count,
                 int root) override;
  void Barrier() override;
  void StepBoundary() override {}  // the root times the machine's iterations
  // Waits for this rank's operations, says BYE, and waits (FERRY_OP_TIMEOUT_MS) for the
  // root's word that the job shut down. Idempotent.
  void Shutdown() override;
  // Only "operations" (push_pulls of this rank): the root counts the machine's traffic.
  CounterValues Counters() const override;

 private:
  struct Op;
  struct Slot {
    std::unique_ptr<MemfdSegment> segment;
    bool busy = false;  // submitted, no DONE yet: the root owns it
  };

  explicit LocalPeer(const Config& config);
  void OnMessage(LocalMessage&& m);  // IO thread
  void OnDisconnect();               // IO thread
  // Copies `input` into the slot of `name` and sends the submission; returns the handle.
  Handle Submit(LocalOp kind, const std::string& name, const void* input, void* output,
                DataType dtype, uint64_t count, bool average, int root,
                CompletionCallback done = nullptr);
  void Fail(const std::string& reason) REQUIRES(mu_);
  // Throws: the root alone talks to the servers and partitions the machine's tensors.
  [[noreturn]] Worker& MachineWorker(const char* what) const override;
  std::string TimeoutMessage(Handle handle) const EXCLUDES(mu_);
  std::string Me() const;

  std::unique_ptr<LocalLink> link_;
  int rank_ = -1, size_ = 0, num_servers_ = 0;
  // To the root's fd listener (LocalFdChannelName): each new slot's segment goes there
  // before the submission that names it. Set by Create; used under mu_.
  std::unique_ptr<FdChannel> fd_channel_;

  mutable Mutex mu_;  // guards everything below
  CondVar cv_;        // signalled on WELCOME, DONE, BYE and failure
  bool welcomed_ GUARDED_BY(mu_) = false;
  int root_pid_ GUARDED_BY(mu_) = 0;
  std::map<std::string, Slot> slots_ GUARDED_BY(mu_);  // by tensor name
  std::map<uint64_t, std::shared_ptr<Op>> by_seq_ GUARDED_BY(mu_);  // in flight, by number
  uint64_t next_seq_ GUARDED_BY(mu_) = 1;
  uint64_t next_segment_ GUARDED_BY(mu_) = 0;
  std::string failure_ GUARDED_BY(mu_);
  bool bye_sent_ GUARDED_BY(mu_) = false;
  bool bye_received_ GUARDED_BY(mu_) = false;
  std::string bye_error_ GUARDED_BY(mu_);
  LocalNccl* Nccl() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return nccl_.get();
  }
  std::unique_ptr<LocalNccl> nccl_ GUARDED_BY(mu_);  // made at the first device push_pull
  struct Declared {
    int id;
    DataType dtype;
    std::vector<int64_t> shape;
  };
  std::map<std::string, Declared> declared_ GUARDED_BY(mu_);
  Counter operations_;  // push_pulls (host and device) of this rank
};

}  // namespace ferry
