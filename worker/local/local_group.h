#pragma once

// LocalGroup: what a training process talks to (the C API, the torch plugin and the test
// programs): BytePS's hierarchy in front of ferry::Worker.
//
// With FERRY_LOCAL_SIZE = L > 1, L processes on one machine (FERRY_LOCAL_RANK 0..L-1,
// one DMLC_WORKER_ID, started by `ferry-launch --local-size L`) form a local group. Only
// local rank 0, the local root (local_root.h), creates a Worker: it registers with the
// scheduler (DMLC_NUM_WORKER counts machines) and talks to the servers. The others
// (local_peer.h) never do: their tensors reach the root through shared memory, the root
// sums the L inputs, push_pulls the machine's sum, and writes the result back.
//   size() = DMLC_NUM_WORKER x L,  rank() = machine rank x L + local rank,
// and averages divide by size(). With L = 1 every call goes straight to the Worker.
//
// Every local rank makes the same calls in the same order per tensor (as every worker
// does in a job): push_pull, broadcast (root: a global rank) and barrier are collectives
// of the group. Not available with L > 1: Join (uneven data), sparse rows
// (PushPullRows), FERRY_ENABLE_ASYNC, and,
// on local ranks other than 0, SetScheduling / scheduling() (the root alone partitions
// tensors; make the call there). These throw FerryError naming the reason.
// StepBoundary on a non-root rank does nothing (the root times the iteration).
//
// Thread-safe: any thread may call any method. Errors throw FerryError.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/util/mutex.h"
#include "worker/local/local_nccl.h"
#include "worker/worker.h"

namespace ferry {

class LocalRoot;
class LocalPeer;

class LocalGroup {
 public:
  // L = 1: a Worker. L > 1: the local root or a peer, per FERRY_LOCAL_RANK. Throws.
  static std::unique_ptr<LocalGroup> Create(const Config& config);
  ~LocalGroup();

  int rank() const;
  int size() const;
  int local_rank() const { return config_.local.size > 1 ? config_.local.rank : 0; }
  int local_size() const { return config_.local.size; }
  int num_servers() const;

  // On non-root ranks a declaration is checked and numbered here (no Worker); the
  // root's own declarations fix the order of the machine's tensors at the servers.
  int DeclareTensor(const std::string& name, DataType dtype, const std::vector<int64_t>& shape,
                    std::optional<int> priority = std::nullopt);
  // As Worker::PushPullAsync (averages over size()). On a non-root rank the input is
  // copied before the call returns; the output must live until the operation finished.
  Handle PushPullAsync(const std::string& name, const void* input, void* output, DataType dtype,
                       uint64_t count, bool average, std::optional<int> priority = std::nullopt);
  // As Worker::PushPullRowsAsync (sparse rows). Only with FERRY_LOCAL_SIZE = 1: a local
  // group would have to merge its ranks' row lists before the root pushes; with L > 1
  // it throws FerryError (kInvalidArgument) naming the reason.
  Handle PushPullRowsAsync(const std::string& name, const int64_t* rows, uint64_t num_rows,
                           const void* values, void* output, DataType dtype, bool average,
                           std::optional<int> priority = std::nullopt);
  void PushPullRows(const std::string& name, const int64_t* rows, uint64_t num_rows,
                    const void* values, void* output, DataType dtype, bool average);
  bool Poll(Handle handle);
  void Wait(Handle handle);
  bool WaitFor(Handle handle, int64_t timeout_ms);
  // As Worker::WaitAny: the first finished of `handles`, or 0 after `timeout_ms`.
  Handle WaitAny(const std::vector<Handle>& handles, int64_t timeout_ms);
  void PushPull(const std::string& name, const void* input, void* output, DataType dtype,
                uint64_t count, bool average);
  // PushPull of a tensor in CUDA device memory (input and output on this process's GPU,
  // one GPU per local rank), through the NCCL backend (local_nccl.h): NCCL reduces the
  // local ranks' tensors on the GPUs, the root push_pulls the machine's sum through its
  // Worker, NCCL broadcasts the result. `stream`: the cudaStream_t the input was written
  // on (null: the default stream). Blocks until the output holds the result. With
  // L = 1 the same path (a communicator of one rank). A collective of the group like
  // PushPull; the rounds of a name's device tensor are counted apart from its host
  // ones. Throws FerryError, e.g. in a build without NCCL (LocalNccl::Built()).
  void PushPullDevice(const std::string& name, const void* input, void* output, DataType dtype,
                      uint64_t count, bool average, void* stream = nullptr);
  // Every rank's `data` becomes global rank `root`'s.
  void Broadcast(const std::string& name, void* data, DataType dtype, uint64_t count, int root);
  void Barrier();
  void StepBoundary();
  void SetScheduling(int64_t partition_bytes, int64_t credit_bytes);
  SchedulingChoice scheduling() const;
  std::string scheduling_policy() const;
  void Join();
  // Idempotent. With L > 1 the root waits for every other local rank's Shutdown.
  void Shutdown();
  // A non-root rank has no Worker: its stats are zeros but `operations`.
  WorkerStats stats() const;
  // As Worker::Counters; a non-root rank has only "operations".
  CounterValues Counters() const;

 private:
  explicit LocalGroup(const Config& config);
  // The Worker of L = 1 or of the local root; throws naming `what` on a non-root rank.
  Worker& WorkerFor(const char* what) const;
  // REQUIRES: a non-root rank. Checks a declaration against the earlier ones.
  int DeclareLocally(const std::string& name, DataType dtype, const std::vector<int64_t>& shape)
      EXCLUDES(mu_);

  const Config config_;
  std::unique_ptr<Worker> worker_;   // L = 1
  std::unique_ptr<LocalRoot> root_;  // L > 1, local rank 0
  std::unique_ptr<LocalPeer> peer_;  // L > 1, other local ranks

  struct Declared {
    int id;
    DataType dtype;
    std::vector<int64_t> shape;
  };
  mutable Mutex mu_;  // guards declared_, operations_ and the making of nccl_
  std::map<std::string, Declared> declared_ GUARDED_BY(mu_);  // non-root ranks' declarations
  uint64_t operations_ GUARDED_BY(mu_) = 0;
  // L = 1: made at the first device push_pull; destroyed before worker_.
  std::unique_ptr<LocalNccl> nccl_ GUARDED_BY(mu_);
};

}  // namespace ferry
