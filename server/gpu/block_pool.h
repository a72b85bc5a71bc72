#pragma once

// BlockPool: host memory for sums, handed out as Buffers and reused by exact size once
// the last holder lets go. Device-independent: PinnedPool (pinned_pool.h) is the CUDA
// one; the tests' CPU stand-in for the GPU (tests/server/fake_gpu_summer.h) keeps the
// same invariant with plain blocks that it poisons on release.
//
// Ownership invariant: a block is either free (in the pool, nobody else holds it) or
// out (exactly one chain of Buffer copies holds it). Acquire hands out only free
// blocks, so a block that is written into is never one that ZeroMQ may still be
// sending or a server still keeps as last_sum. The pool lives as long as any block it
// handed out (each Buffer's owner holds the pool).
//
// `Blocks` says how a block is made and freed (static or member functions: the pool holds
// a Blocks, given to Create, so an allocator may carry state, such as its device):
//   void* Allocate(size_t bytes);  // never null: throws (or CHECKs) instead
//   void Free(void* block);        // at the pool's end; must not throw
//   void Released(void* block, size_t bytes);  // back from its last holder

#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/transport/buffer.h"

namespace ferry {
namespace gpu {

template <typename Blocks>
class BlockPool : public std::enable_shared_from_this<BlockPool<Blocks>> {
 public:
  static std::shared_ptr<BlockPool> Create(Blocks blocks = Blocks()) {
    return std::shared_ptr<BlockPool>(new BlockPool(std::move(blocks)));
  }
  ~BlockPool() {  // frees the free blocks; every block out has come back by then
    for (auto& [bytes, blocks] : free_) {
      for (void* b : blocks) blocks_.Free(b);
    }
  }

  // A block of exactly `bytes` (an empty Buffer for 0), reused if one is free.
  // Thread-safe. Throws what Blocks::Allocate throws.
  Buffer Acquire(size_t bytes) {
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
      block = blocks_.Allocate(bytes);
      std::lock_guard<std::mutex> lock(mu_);
      ++allocated_;
    }
    std::shared_ptr<BlockPool> self = this->shared_from_this();
    std::shared_ptr<void> owner(block, [self, bytes](void* b) { self->Release(b, bytes); });
    return Buffer(block, bytes, std::move(owner));
  }

  // Blocks ever allocated (a reused block is not counted again), and blocks now free.
  // Thread-safe.
  size_t allocated() const {
    std::lock_guard<std::mutex> lock(mu_);
    return allocated_;
  }
  size_t free_blocks() const {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& [bytes, blocks] : free_) n += blocks.size();
    return n;
  }

 private:
  explicit BlockPool(Blocks blocks) : blocks_(std::move(blocks)) {}
  void Release(void* block, size_t bytes) {  // any thread
    blocks_.Released(block, bytes);
    std::lock_guard<std::mutex> lock(mu_);
    free_[bytes].push_back(block);
  }

  Blocks blocks_;                                        // its calls are thread-safe
  mutable std::mutex mu_;                                // guards free_ and allocated_
  std::unordered_map<size_t, std::vector<void*>> free_;  // by size
  size_t allocated_ = 0;
};

}  // namespace gpu
}  // namespace ferry
