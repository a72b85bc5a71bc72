#pragma once

// Summation: what adds a round's pushes together for one engine thread: the CPU
// (common/reduce through the SumPool) or a GPU (server/gpu/gpu_summer.h,
// FERRY_SERVER_DEVICE=gpu). The one seam between the server's round bookkeeping
// (server.cc, key_state.h: which pushes count, in which order, who is answered) and the
// device: the server decides, the Summation only adds. The server holds a Summation per
// engine and never asks which device it is.
//
// What differs, and the whole of it:
//  - CPU: Add adopts the round's first push frame as `state.sum` and adds later pushes
//    into it (exactly what the server did before this seam existed); Finish returns
//    true: the sum is in `state.sum` now.
//  - GPU: Add copies the push to the GPU (the frame may be dropped when Add returns) and
//    leaves `state.sum` empty; Finish returns false: the sum reaches host memory later
//    and is handed to the SumReady callback, on the engine thread, from a later
//    RunCompletions.
//
// Round generations: Finish passes `state.generation` (at the time of Finish) to
// SumReady with the sum. The server bumps a key's generation whenever it abandons the
// key's round (a join restart, a failed key), so a sum that arrives for an abandoned
// round is recognised and dropped (server.cc, OnSumReady).
//
// Not thread-safe: one engine thread calls everything, and SumReady runs on it.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "common/transport/buffer.h"
#include "server/gpu/gpu_summer.h"
#include "server/key_state.h"
#include "server/sum_pool.h"

namespace ferry {

class Summation {
 public:
  // A finished round's sum (the key's length in bytes), for the round of `key` whose
  // generation was `generation` at Finish.
  using SumReady = std::function<void(uint64_t key, uint64_t generation, Buffer sum)>;

  virtual ~Summation() = default;

  // Adds `push` (state.length bytes of state.dtype) to the key's open round; the first
  // push of a round opens it. REQUIRES: the key is defined (KeyState::Classify).
  // GPU: may throw FerryError (a failed CUDA call, a GPU past its deadline).
  virtual void Add(uint64_t key, KeyState& state, Buffer push) = 0;
  // Ends the key's open round. Returns true when its sum is in `state.sum` now (CPU);
  // false when it will go to SumReady(key, state.generation, sum) from a later
  // RunCompletions (GPU). REQUIRES: at least one Add since the round opened.
  virtual bool Finish(uint64_t key, KeyState& state) = 0;
  // Drops the key's open round, if any; a sum already finished is still delivered
  // (with its old generation). Never throws.
  virtual void Reset(uint64_t key) = 0;
  // Hands every finished sum that has reached host memory to SumReady; returns how
  // many. Never blocks. GPU: may throw FerryError.
  virtual size_t RunCompletions() = 0;
};

// Sums in host memory on the calling thread, large sums split across `pool` (which must
// outlive every call; the server's engine threads end before its pool).
std::unique_ptr<Summation> MakeCpuSummation(SumPool* pool);

// Sums on the GPU with `summer` (owned; its on_ready must wake the engine thread that
// calls RunCompletions). `ready` receives each sum on that thread.
std::unique_ptr<Summation> MakeGpuSummation(std::unique_ptr<GpuSummer> summer,
                                            Summation::SumReady ready);

// Creates an engine's GpuSummer: GpuSummer::Create in ferry-server; tests pass a CPU
// stand-in that keeps the same contract (tests/server/fake_gpu_summer.h).
using GpuSummerFactory = std::function<std::unique_ptr<GpuSummer>(const GpuSummerOptions&)>;

}  // namespace ferry
