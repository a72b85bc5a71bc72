#include "common/transport/buffer.h"

#include <glog/logging.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace ferry {

Buffer Buffer::Allocate(size_t size) {
  size_t rounded = ((size + 63) / 64) * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) throw std::bad_alloc();
  return Buffer(p, size, std::shared_ptr<void>(p, [](void* q) { std::free(q); }));
}

Buffer Buffer::CopyOf(const void* data, size_t size) {
  Buffer b = Allocate(size);
  if (size) std::memcpy(b.data(), data, size);
  return b;
}

Buffer Buffer::Borrow(void* data, size_t size, std::function<void()> on_release) {
  // The owner is a token; its deleter is the release notification.
  struct Token {};
  auto release = std::move(on_release);
  return Buffer(data, size, std::shared_ptr<void>(new Token, [release](void* t) {
                  delete static_cast<Token*>(t);
                  if (release) release();
                }));
}

Buffer Buffer::Lent(void* data, size_t size, std::shared_ptr<void> owner) {
  Buffer b(data, size, std::move(owner));
  b.lent_ = true;
  return b;
}

Buffer Buffer::Slice(size_t offset, size_t size) const {
  CHECK_LE(offset + size, size_) << "slice out of range";
  Buffer b(bytes() + offset, size, owner_);
  b.lent_ = lent_;
  return b;
}

}  // namespace ferry

#include <malloc.h>

namespace ferry {

void KeepLargeBuffersInHeap() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace ferry
