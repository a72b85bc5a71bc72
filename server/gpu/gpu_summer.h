#pragma once

// GpuSummer: sums a server's pushes on a CUDA GPU (FERRY_SERVER_DEVICE=gpu).
//
// The CPU engine (server/server.h, server/key_state.h) adopts a round's first push as
// the sum and adds each later push into it with common/reduce. GpuSummer does the same
// on a GPU, with the same arithmetic (server/gpu/sum_kernels.h), and maps onto the
// server's model like this (the server calls it through server/summation.h):
//
//   server, CPU engine                      with a GpuSummer
//   -------------------------               ----------------
//   an engine thread owns its keys          one GpuSummer per engine thread, used by
//                                           that thread only (it is not thread-safe)
//   first push of round r: adopt the frame  Add(): copy into the key's device
//                                           accumulator (no addition)
//   later push: SumInto(sum, frame)         Add(): copy to the GPU and add there
//   round complete: send the sum to every   Finish(key, done): the sum is copied back
//   pusher, keep it as last_sum             into pinned host memory; done(sum) runs on
//                                           the engine thread (RunCompletions), which
//                                           sends that Buffer and keeps it as last_sum
//   every worker joined: rounds restart     Reset(key) drops an open round
//
// Data path of one push: the received frame (pageable memory) is copied into a pinned
// staging block (GpuSummerOptions::copy: the server splits it over its sum pool's threads,
// since one thread copies pageable memory at a fifth of the host link), copied to the GPU
// on the key's stream, and added there. Add returns
// once the memcpy is done: the caller may drop the frame (and acknowledge the push)
// at once. The GPU work is only queued; nothing waits for it until Finish's sum is due.
//
// Streams and ordering (the invariants the implementation rests on):
//  - A key is bound to one of the summer's CUDA streams at its first Add (round robin).
//    All of a key's work (copies in, additions, the copy out) is queued on that stream,
//    so it runs in call order with no events between the steps; keys on different
//    streams overlap (one key's copies with another's additions).
//  - A key's device accumulator is allocated at its first Add (which fixes its length
//    and type) and reused every round: the next round's first copy into it is queued
//    behind the copy of the previous sum out of it.
//  - Each stream has one device scratch buffer that receives every non-first push of
//    its keys; the next copy into it is queued behind the addition that read it.
//  - Each stream has two pinned staging blocks, used in turn; the host writes into one
//    only after the event recorded behind its last copy says that copy is done (Add
//    waits, up to the deadline, when the GPU is two pushes behind on that stream).
//  - A sum's Buffer (pinned, from a pool) reaches `done` only after its copy is done,
//    and its block is reused only after the last holder of the Buffer lets go
//    (server/gpu/pinned_pool.h): round r+1's sum never overwrites round r's while
//    ZeroMQ sends it or the server keeps it as last_sum.
//  - Sums complete per stream in Finish order; keys on different streams complete in
//    any order.
//
// Errors: a bad call (a length or type other than the key's first Add, a length that is
// not whole elements, Finish without an open round) throws FerryError(kInvalidArgument)
// and changes nothing; a failed CUDA call throws FerryError(kInternal) naming the call;
// a GPU that does not finish within wait_timeout, FerryError(kTimeout).
//
// Builds without CUDA: Create() throws FerryError(kInvalidConfig), "this Ferry was built
// without CUDA".

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "common/reduce/reduce.h"
#include "common/transport/buffer.h"

namespace ferry {

struct GpuSummerOptions {
  int device = 0;   // CUDA device index (FERRY_SERVER_DEVICE=gpu:N)
  int streams = 2;  // CUDA streams the keys are spread over (FERRY_SERVER_GPU_STREAMS)
  // The longest wait for the GPU (a staging block, Drain); then FerryError(kTimeout).
  std::chrono::milliseconds wait_timeout{60000};
  // Runs on a CUDA thread whenever a Finish's sum has reached host memory, so that the
  // engine thread wakes up and calls RunCompletions. It may run on several CUDA threads
  // at once (one per stream) and must only wake the engine (notify a condition
  // variable): no CUDA calls, no blocking. May be empty (then the owner polls
  // RunCompletions or calls Drain).
  std::function<void()> on_ready;
  // Copies a push into pinned staging (dst, src, bytes); empty: std::memcpy on the caller.
  // Must return once the bytes are in dst (the server's: SumPool::Copy).
  std::function<void(void*, const void*, size_t)> copy;
};

class GpuSummer {
 public:
  // Receives a finished round's sum: pinned host memory, the key's length.
  using Done = std::function<void(Buffer sum)>;

  // REQUIRES: CheckGpuAvailable(options.device) passed (server/gpu/gpu_device.h).
  static std::unique_ptr<GpuSummer> Create(const GpuSummerOptions& options);
  // Waits for the GPU work queued so far; sums not yet delivered are dropped.
  virtual ~GpuSummer() = default;

  // Adds `bytes` at `src` (host memory, any alignment) to the key's open round, or
  // opens a round with them as its sum. `src` is copied before Add returns.
  virtual void Add(uint64_t key, const void* src, size_t bytes, DataType type) = 0;
  // Ends the key's open round: its sum goes to `done` from a later RunCompletions (or
  // Drain) on this thread, once it is in host memory. The next Add opens a new round.
  virtual void Finish(uint64_t key, Done done) = 0;
  // Drops the key's open round, if any (the next Add opens a new one). A sum already
  // finished is still delivered.
  virtual void Reset(uint64_t key) = 0;
  // Frees everything the key holds on the device (its tensor was retired: no Add of it
  // comes again); waits first for the work queued on its stream. A sum already finished
  // is still delivered. May throw FerryError (that wait's deadline).
  virtual void Forget(uint64_t key) = 0;
  virtual bool HasOpenRound(uint64_t key) const = 0;

  // Runs `done` of every sum that has reached host memory; returns how many. Never
  // blocks. `done` may call Add, Finish and Reset.
  virtual size_t RunCompletions() = 0;
  // Runs RunCompletions until every Finish so far is delivered, or throws kTimeout.
  virtual void Drain() = 0;
  // Finishes not yet delivered.
  virtual size_t pending() const = 0;

  // Finish, then Drain (so other keys' due sums are delivered too): for tests, tools.
  Buffer FinishAndWait(uint64_t key);
};

}  // namespace ferry
