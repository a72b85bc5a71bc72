#pragma once

// Summation: what adds a round's pushes together for one engine thread: the CPU
// (common/reduce through the SumPool) or a GPU (server/gpu/gpu_summer.h,
// FERRY_SERVER_DEVICE=gpu). The one seam between the server's round bookkeeping
// (key_protocol.h, key_state.h: which pushes count, in which order, who is answered) and the
// device: the protocols decide (server/key_protocol.h), the Summation only adds. Each engine
// holds one Summation, shared by its dense protocol (RoundProtocol adds a round's pushes,
// ParamProtocol a delta and the parameters), and never asks which device it is.
//
// What differs, and the whole of it:
//  - CPU: Add adopts the first push frame of a sum as `sum` and adds later pushes into it
//    (exactly what the server did before this seam existed); Finish returns true: the
//    sum is in `sum` now. A first push lent through the shared-memory lane (Buffer::lent:
//    a worker's slot, which must go back) is adopted only until the next push, which is
//    summed with it in one pass into the round's own buffer (in the shared arena when
//    there is room); Finish copies a sum of one lent push out.
//  - Both: Finish(key, generation, sum) takes the caller's `sum` (the CPU may replace it).
//  - GPU: Add copies the push to the GPU (the frame may be dropped when Add returns) and
//    leaves `sum` empty; Finish returns false: the sum reaches host memory later and is
//    handed to the SumReady callback, on the engine thread, from a later RunCompletions.
//
// Generations: Finish passes the key's `generation` to SumReady with the sum. A protocol
// bumps a key's generation whenever it abandons the key's open sum (a join restart, a
// failed key), so a sum that arrives for an abandoned round is recognised and dropped
// (RoundProtocol::OnSumReady, ParamProtocol::OnSumReady).
//
// Not thread-safe: one engine thread calls everything, and SumReady runs on it.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "common/reduce/reduce.h"
#include "common/transport/buffer.h"
#include "server/gpu/gpu_summer.h"
#include "server/sum_pool.h"

namespace ferry {

class Summation {
 public:
  // A finished round's sum (the key's length in bytes), for the round of `key` whose
  // generation was `generation` at Finish.
  using SumReady = std::function<void(uint64_t key, uint64_t generation, Buffer sum)>;

  virtual ~Summation() = default;

  // Adds `push` (`length` bytes of `dtype`, the key's definition) to the key's open sum;
  // the first push of a sum opens it. CPU: the running sum is `sum` (the caller's, kept
  // between calls); GPU: `sum` stays empty. GPU: may throw FerryError (a failed CUDA call,
  // a GPU past its deadline). `op` other than kSum combines by min, max or product
  // instead (CPU only: the GPU throws FerryError for it).
  virtual void Add(uint64_t key, DataType dtype, uint64_t length, Buffer& sum, Buffer push,
                   ReduceOp op = ReduceOp::kSum) = 0;
  // Ends the key's open sum. Returns true when it is in `sum` (the one given to Add) now
  // (CPU; never lent then); false when it will go to SumReady(key, generation, sum) from a later RunCompletions
  // (GPU). REQUIRES: at least one Add since the sum opened.
  virtual bool Finish(uint64_t key, uint64_t generation, Buffer& sum) = 0;
  // Drops the key's open round, if any; a sum already finished is still delivered
  // (with its old generation). Never throws.
  virtual void Reset(uint64_t key) = 0;
  // The key's tensor was retired (no Add of it comes again): frees what the summation
  // keeps for it (GPU: its device memory). CPU: nothing to free. GPU: may throw FerryError.
  virtual void Forget(uint64_t key) = 0;
  // Hands every finished sum that has reached host memory to SumReady; returns how
  // many. Never blocks. GPU: may throw FerryError.
  virtual size_t RunCompletions() = 0;
};

// Sums in host memory on the calling thread, large sums split across `pool` (which must
// outlive every call; the server's engine threads end before its pool). A round whose first
// push came through the shared-memory lane (Buffer::lent) gets its sum from
// `allocate_shared` (Van::AllocateShared: same-host workers then read it without a copy)
// when that gives one, else from the heap.
using SharedAllocator = std::function<Buffer(uint64_t bytes)>;
std::unique_ptr<Summation> MakeCpuSummation(SumPool* pool, SharedAllocator allocate_shared = nullptr);

// Sums on the GPU with `summer` (owned; its on_ready must wake the engine thread that
// calls RunCompletions). `ready` receives each sum on that thread.
std::unique_ptr<Summation> MakeGpuSummation(std::unique_ptr<GpuSummer> summer,
                                            Summation::SumReady ready);

// Creates an engine's GpuSummer: GpuSummer::Create in ferry-server; tests pass a CPU
// stand-in that keeps the same contract (tests/server/fake_gpu_summer.h).
using GpuSummerFactory = std::function<std::unique_ptr<GpuSummer>(const GpuSummerOptions&)>;

}  // namespace ferry
