#include "server/gpu/pinned_pool.h"

#include <cuda_runtime_api.h>

#include "server/gpu/cuda_check.h"

namespace ferry {
namespace gpu {

void* PinnedBlocks::Allocate(size_t bytes) {
  void* block = nullptr;
  FERRY_CUDA_CHECK(cudaHostAlloc(&block, bytes, cudaHostAllocPortable));
  return block;
}

void PinnedBlocks::Free(void* block) { cudaFreeHost(block); }

}  // namespace gpu
}  // namespace ferry
