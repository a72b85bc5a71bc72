#pragma once

// Buffer: a view of bytes plus a shared owner that keeps them alive.
//
// This is how bytes travel without copies (like ps-lite's SArray): the user's tensor,
// the worker's queue, ZeroMQ's send path and the server's summation all hold the same
// bytes through Buffers. The bytes are released when the last holder lets go; a
// holder can be ZeroMQ itself (Van::Send hands the owner to zmq_msg_init_data and the
// release hook drops it once the bytes are on the wire).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace ferry {

class Buffer {
 public:
  Buffer() = default;
  // Shares `owner`; `data` must stay valid while any copy of `owner` lives.
  Buffer(void* data, size_t size, std::shared_ptr<void> owner)
      : data_(data), size_(size), owner_(std::move(owner)) {}

  // Fresh bytes, 64-byte aligned, contents unspecified.
  static Buffer Allocate(size_t size);
  // A Buffer that owns a copy of [data, data + size).
  static Buffer CopyOf(const void* data, size_t size);
  // Borrowed bytes: the caller guarantees they outlive every holder, and `on_release`
  // (may be empty) runs when the last holder lets go.
  static Buffer Borrow(void* data, size_t size, std::function<void()> on_release);
  // Bytes a peer lent through shared memory (shm_lane.h), kept alive by `owner`: a holder
  // may read and write them while it handles the message, but must not keep them (the peer
  // reuses them once every holder let go): one that would (the CPU summation adopting a
  // round's first push as its sum) copies them instead.
  static Buffer Lent(void* data, size_t size, std::shared_ptr<void> owner);

  void* data() const { return data_; }
  uint8_t* bytes() const { return static_cast<uint8_t*>(data_); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool lent() const { return lent_; }  // see Lent
  const std::shared_ptr<void>& owner() const { return owner_; }
  // Number of holders of the bytes (this one included); 0 for an empty Buffer.
  long use_count() const { return owner_.use_count(); }
  // A view of [offset, offset + size) sharing the same owner (lent if this one is).
  Buffer Slice(size_t offset, size_t size) const;

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<void> owner_;
  bool lent_ = false;
};

}  // namespace ferry

namespace ferry {

// Keeps large message buffers in the heap: glibc serves allocations above its mmap
// threshold (128 KiB at first) with fresh mmap()ed pages, so every received 4 MiB
// frame would page-fault on first touch and be unmapped when freed. Raising the
// threshold (to 32 MiB, glibc's maximum) and the trim threshold lets the frames of
// one round reuse the memory of the last. Process-wide; called by the server and the
// worker library at start-up. Measured: see docs/benchmarks.md.
void KeepLargeBuffersInHeap();

}  // namespace ferry
