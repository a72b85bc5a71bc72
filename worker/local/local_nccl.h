#pragma once

// LocalNccl: the NCCL backend of the local group (local_group.h), for tensors in CUDA
// device memory. One per process, made at its first device push_pull (a job that never
// passes a device pointer never touches CUDA). This header needs no CUDA headers: it is
// compiled in every build; the engine (local_nccl.cc) only where CMake found CUDA and
// NCCL (FERRY_HAVE_NCCL), and otherwise no_nccl.cc, whose Create throws.
//
// A device push_pull of tensor T, on every local rank:
//   1. Submit (the caller's thread): the tensor is checked (device memory, this
//      process's GPU) and queued under T; the caller then tells the local root, which
//      counts the round as for host tensors (local_root.h).
//   2. Go (the root, once all L ranks submitted the round; on the peers, when the root's
//      GO arrives over the control socket): T's oldest queued tensor is the process's
//      next collective. The root decides one order of rounds and every process runs
//      them in the order of its GOs, so all L run the same NCCL calls in the same order
//      even where the ranks call Ferry in different orders.
//   3. The "ferry-nccl" thread runs it: ncclReduce (sum) into the root's output; on
//      the root, that to pinned host memory, the machine's push_pull through `push_pull`
//      (the Worker: sum over machines, averaged when asked), back to the device; then
//      ncclBroadcast of the root's output to every rank's output.
//   4. Wait (the caller's thread) returns once the output holds the result.
// The communicator (local rank r of L, on the GPU of the first tensor) is made at the
// first round: the root's first GO carries the NCCL unique id.
//
// Every wait has a deadline, ending in FerryError(kTimeout) that names the step: each
// step of a round FERRY_OP_TIMEOUT_MS (a peer's broadcast twice that: the root's
// push_pull through the servers is inside it), a tensor without a GO as long, and Wait
// three times that without progress (a backstop). A failed CUDA or NCCL call throws
// FerryError naming the call and the local rank. After a failure the communicator is
// aborted, the owner's group fails (OnFailure), and every later call fails with it.
//
// Thread-safe.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/reduce/reduce.h"

namespace ferry {

// One rank's part of a device push_pull.
struct DeviceTensor {
  std::string name;
  const void* input = nullptr;  // CUDA device memory of this process's GPU
  void* output = nullptr;       // likewise; may equal input
  DataType dtype = DataType::kFloat32;
  uint64_t count = 0;  // elements
  bool average = false;
  // The cudaStream_t the input was written on (the round waits for its work submitted
  // before the call); null: the legacy default stream.
  void* stream = nullptr;
};

class LocalNccl {
 public:
  // The root's step 3: `host` (pinned, t.count elements) holds the machine's sum and
  // becomes the job's result of `t` (averaged when t.average). Throws FerryError.
  using MachinePushPull = std::function<void(const DeviceTensor& t, void* host)>;
  // Called once, on the "ferry-nccl" thread with no lock of this class held, when a
  // round failed: the owner fails its group.
  using OnFailure = std::function<void(const std::string& reason)>;

  // Whether this Ferry was built with NCCL (FERRY_HAVE_NCCL).
  static bool Built();
  // `push_pull`: the root's (local rank 0) only. Throws FerryError(kInvalidArgument)
  // in a build without NCCL.
  static std::unique_ptr<LocalNccl> Create(int local_rank, int local_size, int64_t op_timeout_ms,
                                           MachinePushPull push_pull, OnFailure on_failure);
  virtual ~LocalNccl() = default;

  // Step 1. Returns the ticket to Wait on. Throws FerryError: not device memory, another
  // GPU than the earlier tensors', no GPU, or the backend failed earlier.
  virtual uint64_t Submit(const DeviceTensor& t) = 0;
  // The root: the NCCL unique id (serialized) on the first call, "" afterwards: what the
  // first round's GO carries.
  virtual std::string TakeUniqueId() = 0;
  // Step 2. REQUIRES: a tensor named `name` was submitted and not yet started.
  // `unique_id`: non-empty in the first round only.
  virtual void Go(const std::string& name, const std::string& unique_id) = 0;
  // Step 4. Throws FerryError: the round failed, or timed out.
  virtual void Wait(uint64_t ticket) = 0;
  // The group failed: queued and later rounds fail with `reason`; a running one aborts.
  virtual void Fail(const std::string& reason) = 0;
};

}  // namespace ferry
