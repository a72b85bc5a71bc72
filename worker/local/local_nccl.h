#pragma once

// LocalNccl: the NCCL backend of the local group (local_group.h), for tensors in CUDA
// device memory. One per process, made at its first device push_pull (a job that never
// passes a device pointer never touches CUDA). This header needs no CUDA headers: it is
// compiled in every build; the engine (local_nccl.cc and NcclGroup, nccl_group.h) only
// where CMake found CUDA and NCCL (FERRY_HAVE_NCCL), and otherwise no_nccl.cc, whose
// Create throws. The stub builds (FERRY_NCCL_STUB=ON, the sanitizer stages) compile the
// engine against a stub of CUDA and NCCL on host memory (tests/stubs/cuda_nccl).
//
// A device push_pull of tensor T, on every local rank:
//   1. Submit (the caller's thread): the tensor is checked (device memory, this
//      process's GPU) and queued under T; the caller then tells the local root, which
//      counts the round as for host tensors (local_root.h).
//   2. Go (the root, once all L ranks submitted the round): T's oldest queued tensor may
//      start.
//   3. The root's "ferry-nccl" thread runs each round as two steps and, for L > 1, tells
//      the peers each step (SendStep) just before it runs the step itself; a peer runs
//      the steps in the order they come (one socket keeps it), so all L make the same
//      NCCL calls in the same order:
//      REDUCE, in GO order: ncclReduce (sum) into the root's output, copied to pinned
//        host memory; the root then starts the machine's push_pull of it (the Worker's
//        asynchronous push_pull) and goes on with the next step;
//      BROADCAST, in the order the machines' sums come back: the sum back to the root's
//        output, ncclBroadcast of it to every rank's output.
//      A step waits only for the other local ranks, which run it as soon as its message
//      arrives; no NCCL call ever waits for another machine. So the machine push_pulls
//      of many rounds overlap (the scheduling queue orders them), and machines whose
//      ranks call in different orders never wait for each other (the first design ran
//      a round's machine push_pull inside it, one round at a time: two machines that
//      started two tensors in opposite orders deadlocked; found on the first GPU run).
//      L = 1 (a Worker's own device tensors, or a group of one): no communicator, no
//      messages; the steps are the two copies.
//   4. Wait (the caller's thread) returns once the output holds the result.
// The communicator (local rank r of L, on the GPU of the first tensor) is made at the
// first step: the root's first REDUCE carries the NCCL unique id.
//
// Every wait has a deadline, ending in FerryError(kTimeout) that names the step: each
// step FERRY_OP_TIMEOUT_MS (the machine's push_pull has the Worker's own), a tensor
// without a GO as long (on a peer: without its REDUCE, counted from the engine's last
// progress, since the root may have steps of other rounds to run first), and Wait three
// times that without progress (a backstop). A failed CUDA or NCCL call throws FerryError
// naming the call and the local rank; a failed machine push_pull fails its round. After a
// failure the communicator is aborted, the owner's group fails (OnFailure), and every
// later call fails with it. The round whose step the thread runs at a failure ends only
// when the thread is done with it (its Wait waits for that, bounded by the step's polls):
// after the abort and once the stream ran the work the step queued (at most
// FERRY_OP_TIMEOUT_MS more), so no CUDA work on a caller's buffers or event is queued or
// runs after its Wait returned.
//
// Buffers: the pinned host buffer of a round is the engine's from REDUCE until its
// BROADCAST; the machine's push_pull writes it until its `done`. Shutdown order (the
// owner's destructor): Stop() (no step runs after it, so no new machine push_pull
// starts), then stop the machine push_pulls (the Worker: after its destructor no `done`
// comes and nothing writes the buffers), then destroy this object.
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
  // "" when the machine's push_pull succeeded, else its error.
  using MachineDone = std::function<void(const std::string& error)>;
  // The root's step 3: starts the machine's push_pull of `host` in place (pinned,
  // t.count elements; null when t.count is 0): the sum over the machines (averaged when
  // t.average and Create's `average_over` is 0). Returns at once; calls `done` once, on a
  // thread that must not block. Throws FerryError when the push_pull cannot start (then
  // `done` is never called).
  using MachinePushPull =
      std::function<void(const DeviceTensor& t, void* host, MachineDone done)>;
  enum class Step : uint8_t { kReduce, kBroadcast };
  // The root's, L > 1: every peer is to run `step` of tensor `name` now: REDUCE its oldest
  // submitted round, which becomes the peer's REDUCE number `seq` (1, 2, ...: the root's
  // and every peer's count of REDUCE steps agree), BROADCAST the round of REDUCE `seq`.
  // `unique_id`: the NCCL unique id (serialized) with the first REDUCE, "" afterwards.
  // Called on the "ferry-nccl" thread, with no lock of this class held.
  using SendStep = std::function<void(Step step, const std::string& name, uint64_t seq,
                                      const std::string& unique_id)>;
  // Called once, with no lock of this class held, when the backend failed on its own (a
  // step's CUDA or NCCL call, a deadline): the owner fails its group. Not called for a
  // failure the owner reported (Fail) or for Stop().
  using OnFailure = std::function<void(const std::string& reason)>;

  // Whether this Ferry was built with NCCL (FERRY_HAVE_NCCL).
  static bool Built();
  // `push_pull` and `send_step`: the root's (local rank 0) only; `send_step` may be
  // null when local_size is 1. `average_over` (the root's): 0 when `push_pull` averages
  // itself, else the number of ranks the root divides an averaged round's sum by (on its
  // thread, before the copy back). Throws FerryError(kInvalidArgument) in a build without
  // NCCL.
  static std::unique_ptr<LocalNccl> Create(int local_rank, int local_size, int64_t op_timeout_ms,
                                           int average_over, MachinePushPull push_pull,
                                           SendStep send_step, OnFailure on_failure);
  virtual ~LocalNccl() = default;

  // Step 1. Returns the ticket to Wait on. Throws FerryError: not device memory, another
  // GPU than the earlier tensors', no GPU, or the backend failed earlier.
  virtual uint64_t Submit(const DeviceTensor& t) = 0;
  // Step 2, the root's. REQUIRES: a tensor named `name` was submitted and not yet
  // started (else the backend fails, naming it).
  virtual void Go(const std::string& name) = 0;
  // A peer's: the root's step message (SendStep). REDUCE: `name`'s oldest submitted
  // round, numbered `seq`; BROADCAST: the round of REDUCE `seq` (else the backend fails,
  // naming it).
  virtual void RunStep(Step step, const std::string& name, uint64_t seq,
                       const std::string& unique_id) = 0;
  // Step 4. Throws FerryError: the round failed, or timed out.
  virtual void Wait(uint64_t ticket) = 0;
  // The group failed: queued and later rounds fail with `reason`; a running one aborts.
  virtual void Fail(const std::string& reason) = 0;
  // Stops the "ferry-nccl" thread after the step it runs (see the shutdown order above).
  // Rounds not done fail. Idempotent; the destructor calls it.
  virtual void Stop() = 0;
};

}  // namespace ferry
