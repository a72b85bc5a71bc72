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

#include <memory>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "worker/collective.h"
#include "worker/local/local_nccl.h"
#include "worker/operation_table.h"

namespace ferry {

class Worker;

// A device push_pull's description (local_nccl.h), after checking that this Ferry was
// built with NCCL (else FerryError kInvalidArgument naming the tensor).
DeviceTensor CheckedDeviceTensor(const std::string& name, const void* input, void* output,
                                 DataType dtype, uint64_t count, bool average, void* stream);

class LocalGroup {
 public:
  // FERRY_LOCAL_SIZE = 1: a Worker. L > 1: the local root (FERRY_LOCAL_RANK 0) or a
  // LocalPeer. Registers with the cluster (the root) or connects to the root (a peer)
  // before it returns. Throws FerryError.
  static std::unique_ptr<Collective> Create(const Config& config);
};

// What LocalRoot and LocalPeer share: the local shape, the table of this rank's handles,
// refusing what a local group cannot do (sparse rows, Join), and the calls only the
// machine's Worker can answer (the root forwards them; a peer refuses them).
class LocalMember : public Collective {
 public:
  // The machine's Worker partitions its tensors: see Worker.
  void SetScheduling(int64_t partition_bytes, int64_t credit_bytes) override;
  SchedulingChoice scheduling() const override;
  std::string scheduling_policy() const override;
  int local_rank() const override { return config_.local.rank; }
  int local_size() const override { return config_.local.size; }
  // Refused: a local group would have to merge its ranks' row lists before the root pushes.
  Handle PushPullRowsAsync(const std::string& name, const int64_t*, uint64_t, const void*, void*,
                           DataType, bool, std::optional<int>, CompletionCallback) override;
  // Refused: every local rank must push every round.
  int Join() override;

 protected:
  // `timeout_message`: as Collective's.
  LocalMember(const Config& config, TimeoutMessageFn timeout_message)
      : Collective(config.cluster.op_timeout_ms, std::move(timeout_message)), config_(config) {}

  // The local root's Worker; on another local rank, throws FerryError (kInvalidArgument)
  // saying that `what` is only available on local rank 0.
  virtual Worker& MachineWorker(const char* what) const = 0;

  const Config config_;
};

}  // namespace ferry
