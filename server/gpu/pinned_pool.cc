#include "server/gpu/pinned_pool.h"

#include <cuda_runtime_api.h>

#include "server/gpu/cuda_check.h"

namespace ferry {
namespace gpu {

std::shared_ptr<PinnedPool> PinnedPool::Create() {
  return std::shared_ptr<PinnedPool>(new PinnedPool());
}

PinnedPool::~PinnedPool() {
  for (auto& [bytes, blocks] : free_) {
    for (void* b : blocks) cudaFreeHost(b);  // errors ignored: may run at exit
  }
}

Buffer PinnedPool::Acquire(size_t bytes) {
  if (bytes == 0) return Buffer();
  void* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(bytes);
    if (it != free_.end() && !it->second.empty()) {
      block = it->second.back();
      it->second.pop_back();
    }
  }
  if (block == nullptr) {
    FERRY_CUDA_CHECK(cudaHostAlloc(&block, bytes, cudaHostAllocPortable));
    std::lock_guard<std::mutex> lock(mu_);
    ++allocated_;
  }
  std::shared_ptr<PinnedPool> self = shared_from_this();
  std::shared_ptr<void> owner(block, [self, bytes](void* b) { self->Release(b, bytes); });
  return Buffer(block, bytes, std::move(owner));
}

void PinnedPool::Release(void* block, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  free_[bytes].push_back(block);
}

size_t PinnedPool::allocated() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_;
}

size_t PinnedPool::free_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [bytes, blocks] : free_) n += blocks.size();
  return n;
}

}  // namespace gpu
}  // namespace ferry
