#pragma once

// PinnedPool: pinned (page-locked) host memory for the sums coming back from the GPU,
// handed out as Buffers (CUDA builds only).
//
// A sum is copied from the GPU into a pinned block and the block is sent to the
// workers as it is: the Buffer's owner returns the block to the pool when the last
// holder lets go (the server's last_sum, ZeroMQ's release hook after the last reply),
// from whatever thread that is. Pinning is slow (cudaHostAlloc maps and locks pages),
// so blocks are kept and reused, by exact size: partitions come in few sizes.
//
// Ownership invariant: a block is either free (in the pool, nobody else holds it) or
// out (exactly one chain of Buffer copies holds it). Acquire hands out only free
// blocks, so a block the GPU writes into is never one that ZeroMQ may still be
// sending or a server still keeps as last_sum. The pool lives as long as any block
// it handed out (each Buffer's owner holds the pool).

#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/transport/buffer.h"

namespace ferry {
namespace gpu {

class PinnedPool : public std::enable_shared_from_this<PinnedPool> {
 public:
  static std::shared_ptr<PinnedPool> Create();
  ~PinnedPool();  // frees the free blocks; every block out has come back by then

  // A block of exactly `bytes` (an empty Buffer for 0), reused if one is free.
  // Thread-safe. Throws FerryError(kInternal) if pinned memory cannot be allocated.
  Buffer Acquire(size_t bytes);

  // Blocks ever allocated, and blocks now free. Thread-safe.
  size_t allocated() const;
  size_t free_blocks() const;

 private:
  PinnedPool() = default;
  void Release(void* block, size_t bytes);  // any thread

  mutable std::mutex mu_;  // guards free_ and allocated_
  std::unordered_map<size_t, std::vector<void*>> free_;  // by size
  size_t allocated_ = 0;
};

}  // namespace gpu
}  // namespace ferry
