#pragma once

// PinnedPool: pinned (page-locked) host memory for the sums coming back from the GPU,
// handed out as Buffers (CUDA builds only).
//
// A sum is copied from the GPU into a pinned block and the block is sent to the
// workers as it is: the Buffer's owner returns the block to the pool when the last
// holder lets go (the server's last_sum, ZeroMQ's release hook after the last reply),
// from whatever thread that is. Pinning is slow (cudaHostAlloc maps and locks pages),
// so blocks are kept and reused, by exact size: partitions come in few sizes. The
// ownership invariant (a block the GPU writes into is never one still sent or kept) is
// BlockPool's (block_pool.h).

#include <cstddef>

#include "server/gpu/block_pool.h"

namespace ferry {
namespace gpu {

// Pinned blocks: Allocate throws FerryError(kInternal) if pinned memory cannot be
// allocated.
struct PinnedBlocks {
  static void* Allocate(size_t bytes);
  static void Free(void* block);  // errors ignored: may run at exit
  static void Released(void*, size_t) {}
};

using PinnedPool = BlockPool<PinnedBlocks>;

}  // namespace gpu
}  // namespace ferry
