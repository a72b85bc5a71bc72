#pragma once

// LocalRoot: local rank 0 of a machine's local group (local_group.h). It alone owns a
// Worker (registered with the scheduler, talking to the servers); the other local ranks
// (LocalPeer) hand it their inputs through shared memory and get the results back there.
//
// Rounds: the k-th push_pull (or broadcast) of tensor T on every local rank forms round k
// of T. A round starts once every local rank has submitted it, in round order per tensor
// (as the Worker runs a tensor's operations). A push_pull round sums the L inputs into the
// tensor's staging buffer (common/reduce), push_pulls that (a sum, never an average)
// through the Worker, divides by size() when averaging, and writes the result to the
// root's output and to every other rank's slot, then sends each a DONE.
//
// Buffer ownership (the invariants that make this safe without copies of slots):
// - A peer's slot for T (its shared memory segment) is written by the peer until it sends
//   its submission, then belongs to the root until the root sends DONE for it; a peer has
//   at most one operation per tensor in flight (it waits for DONE before reusing a slot).
// - The staging buffer of T is used by the front round of T only, from its start until it
//   finishes; the next round of T cannot start earlier, since its peers' submissions wait
//   for this round's DONE.
// - The root's own input and output follow the Worker's contract (worker.h): they must
//   live, and the input stay unchanged, until the operation finished.
//
// Threads: the caller's threads, the "ferry-local" IO thread of the link (messages from
// the peers), and the Worker's completion thread ("ferry-done": a machine's push_pull
// finished, OnMachineDone). Every blocking wait has a deadline; nothing polls.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/config/config.h"
#include "common/reduce/reduce.h"
#include "common/util/mutex.h"
#include "worker/local/local_group.h"
#include "worker/local/local_link.h"
#include "worker/local/local_nccl.h"
#include "worker/local/local_rounds.h"
#include "common/transport/fd_channel.h"
#include "common/transport/memfd_segment.h"
#include "worker/operation_table.h"
#include "worker/worker.h"

namespace ferry {

class LocalRoot : public LocalMember {
 public:
  // Binds the local socket, registers the Worker, then waits (FERRY_CONNECT_TIMEOUT_MS)
  // for the other local ranks' HELLO and welcomes them. Throws FerryError.
  static std::unique_ptr<LocalRoot> Create(const Config& config);
  ~LocalRoot() override;

  int rank() const override { return worker_->rank() * config_.local.size; }
  int size() const override { return worker_->size() * config_.local.size; }
  int num_servers() const override { return worker_->num_servers(); }

  // The root's declarations fix the order of the machine's tensors at the servers.
  int DeclareTensor(const std::string& name, DataType dtype, const std::vector<int64_t>& shape,
                    std::optional<int> priority) override {
    return worker_->DeclareTensor(name, dtype, shape, priority);
  }
  Handle PushPullAsync(const std::string& name, const void* input, void* output, DataType dtype,
                       uint64_t count, bool average, std::optional<int> priority,
                       CompletionCallback done) override;
  // A tensor in CUDA device memory, through the NCCL backend (local_nccl.h): its rounds
  // are counted here as the host tensors' are (under a key of their own); a round whose
  // every rank called starts (GO), and the NCCL thread sends the peers its steps. Blocks
  // until the output holds the result; other threads' rounds overlap. Throws FerryError.
  void PushPullDevice(const std::string& name, const void* input, void* output, DataType dtype,
                      uint64_t count, bool average, void* stream) override;
  // `root`: a global rank (machine rank x local size + local rank).
  void Broadcast(const std::string& name, void* data, DataType dtype, uint64_t count,
                 int root) override;
  void Barrier() override;
  // The Worker's (worker.h): the root times the machine's iterations.
  void StepBoundary() override { worker_->StepBoundary(); }
  // Waits for the other local ranks' BYE (FERRY_OP_TIMEOUT_MS), shuts the Worker down,
  // and tells them how that went. Idempotent.
  void Shutdown() override;
  // The Worker's: the machine's traffic.
  CounterValues Counters() const override { return worker_->Counters(); }

 private:
  struct PeerState;

  Worker& MachineWorker(const char*) const override { return *worker_; }

  explicit LocalRoot(const Config& config);
  void OnMessage(LocalMessage&& m);  // IO thread
  void OnDisconnect();               // IO thread
  // The Worker's completion thread: the machine's push_pull of the front round of `key`
  // finished; the round finishes (or the group fails).
  void OnMachineDone(const std::string& key, const Verdict& verdict);
  // LocalRounds::Submit; a submission that disagrees fails the group (and throws).
  LocalRound& Submit(const std::string& key, int lr, LocalOp kind, DataType dtype, uint64_t count,
                     bool average, int root, uint64_t seq) REQUIRES(mu_);
  void TryStart(const std::string& key) REQUIRES(mu_);
  void StartPushPull(const std::string& key, LocalRoundQueue& rs) REQUIRES(mu_);
  // Every rank submitted the front device round of `key`: GO to this process's backend,
  // which sends the peers its steps; the round is over here (the backend runs the rest).
  void StartDevice(const std::string& key, LocalRoundQueue& rs) REQUIRES(mu_);
  // The NCCL thread's SendStep (local_nccl.h): the step to every peer.
  void SendDeviceStep(LocalNccl::Step step, const std::string& name, uint64_t seq,
                      const std::string& unique_id) EXCLUDES(mu_);
  LocalNccl* Nccl() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return nccl_.get();
  }
  // The front round of `key` is over: results to the peers' slots (and DONE), the root's
  // operation finished, the next round may start.
  void FinishRound(const std::string& key, const void* result) REQUIRES(mu_);
  // Root's blocking collectives (broadcast, barrier): waits until the round of the
  // root's operation `op_id` is the front one and every rank submitted it.
  void WaitStarted(const std::string& key, uint64_t op_id) REQUIRES(mu_);
  void Fail(const std::string& reason) REQUIRES(mu_);
  std::string Me() const;

  std::unique_ptr<LocalLink> link_;
  std::unique_ptr<Worker> worker_;

  mutable Mutex mu_;  // guards everything below
  CondVar cv_;        // signalled on every change of a round, op or peer
  std::vector<PeerState> peers_ GUARDED_BY(mu_);  // by local rank; [0] is unused (this process)
  // Where local ranks connect to pass their slots' segments (LocalFdChannelName); made
  // before the first WELCOME.
  std::unique_ptr<FdListener> fd_listener_;
  // The segment `id` that local rank `lr` announced over its fd channel, mapped (`bytes`
  // at least). Throws FerryError naming the rank when it does not come in time.
  std::unique_ptr<MemfdSegment> TakeSlot(int lr, const std::string& id, uint64_t bytes)
      REQUIRES(mu_);
  LocalRounds rounds_ GUARDED_BY(mu_);
  uint64_t next_op_id_ GUARDED_BY(mu_) = 1;  // the root's operations, for LocalRound::op_id
  std::string failure_ GUARDED_BY(mu_);      // non-empty: the group failed; calls throw
  bool shut_down_ GUARDED_BY(mu_) = false;
  // Made at the first device push_pull; destroyed before the Worker it pushes through.
  std::unique_ptr<LocalNccl> nccl_ GUARDED_BY(mu_);
};

}  // namespace ferry
