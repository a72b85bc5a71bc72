#pragma once

// FakeGpuSummer: GpuSummer's contract (server/gpu/gpu_summer.h) kept on the CPU, so that
// the server's GPU path (server/summation.h; OnSumReady, resends while a sum is on its
// way, joins, generations) runs and is tested on machines without a GPU.
//
// What it keeps of the contract, and checks:
//  - Add copies `src` before it returns (into the key's accumulator, or adds it there
//    with common/reduce, in call order: the same arithmetic as the GPU kernels), with
//    the same refusals (another length or type, not whole elements).
//  - Finish hands the sum to `done` only from a later RunCompletions (never from inside
//    Finish), after a delay, in Finish order per stream (keys on streams round robin);
//    `on_ready` runs on another thread (the "CUDA" thread here) once a sum is due.
//  - Sums are handed out in blocks from a pool that reuses a block as soon as the last
//    holder of its Buffer lets go, and fills it with 0xFF bytes (NaN for the float
//    types) at that moment: a server that sent or kept bytes it no longer holds would
//    send garbage, and the workers' exact checks would see it.
//  - One thread only: every call must come from the thread that made the first (a
//    CHECK failure otherwise).
//
// Faults, for tests: delays (each sum due after a pseudo-random delay up to
// `max_delay_us`, every `slow_every`-th after `slow_ms`), and failure (the
// `fail_after_adds`-th Add throws FerryError(kInternal), and every call after it, as a
// broken CUDA context would).

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "server/gpu/block_pool.h"
#include "server/gpu/gpu_keys.h"
#include "server/gpu/gpu_summer.h"

namespace ferry {
namespace testing {

struct FakeGpuFaults {
  int max_delay_us = 2000;  // each sum is due 0..max_delay_us after Finish
  int slow_every = 0;       // every Nth Finish is due after slow_ms instead (0: none)
  int slow_ms = 0;
  int fail_after_adds = 0;  // the Nth Add and every call after it throw (0: never)
};

class FakeGpuSummer : public GpuSummer {
 public:
  FakeGpuSummer(const GpuSummerOptions& options, const FakeGpuFaults& faults);
  ~FakeGpuSummer() override;

  void Add(uint64_t key, const void* src, size_t bytes, DataType type) override;
  void Finish(uint64_t key, Done done) override;
  void Reset(uint64_t key) override;
  void Forget(uint64_t key) override;
  bool HasOpenRound(uint64_t key) const override;
  size_t RunCompletions() override;
  void Drain() override;
  size_t pending() const override;

  // Pool blocks ever allocated (a reused block is not counted again).
  size_t blocks_allocated() const;

 private:
  using Clock = std::chrono::steady_clock;
  // Sums' blocks: plain memory, filled with 0xFF when the last holder lets go.
  struct PoisonedBlocks {
    static void* Allocate(size_t bytes);
    static void Free(void* block);
    static void Released(void* block, size_t bytes);
  };
  using Pool = gpu::BlockPool<PoisonedBlocks>;
  using Keys = gpu::GpuKeys<Buffer>;  // a key's sum builds up in a host Buffer
  struct PendingSum {
    Clock::time_point due;
    bool notified = false;  // on_ready has run since it fell due
    Buffer sum;
    Done done;
  };

  void CheckThread();
  void CheckFailed() const;
  void TimerLoop();  // the "CUDA" thread: runs on_ready when sums fall due

  const GpuSummerOptions options_;
  std::vector<uint8_t> staging_;  // the last push, as CudaSummer's pinned staging
  const FakeGpuFaults faults_;
  std::shared_ptr<Pool> pool_;
  std::thread::id owner_;  // the thread of the first call
  Keys keys_;              // owner thread only
  uint64_t adds_ = 0, finishes_ = 0;
  std::string failure_;  // non-empty: every call throws it
  std::mt19937 rng_{12345};

  mutable std::mutex mu_;                      // guards lanes_, pending_ and stop_
  std::condition_variable cv_;                 // signalled on a new pending sum or stop
  std::vector<std::deque<PendingSum>> lanes_;  // per stream, in Finish order, due ascending
  size_t pending_ = 0;
  bool stop_ = false;
  std::thread timer_;
};

}  // namespace testing
}  // namespace ferry
