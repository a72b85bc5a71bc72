#pragma once

// MemfdSegment: anonymous shared memory (memfd_create) mapped read-write, for the shared-
// memory lane between processes of one host (docs/design/shm-lane.md). A segment
// has no name: it exists while some process holds its file descriptor or a mapping, so
// nothing is left behind on any exit path, kill -9 included, and nobody can open it by
// guessing. A peer gets it only as a file descriptor passed over an FdChannel
// (fd_channel.h).
//
// Space is reserved when the segment is made (posix_fallocate): a full tmpfs is an error
// then, with the reason, never a SIGBUS on a later write. A memfd lives in the kernel's
// internal tmpfs, which has no limit of its own (and is not /dev/shm: a container's small
// /dev/shm does not bound it; its memory cgroup does): Create refuses more than the
// machine's available memory, and the lane's arena bounds the total (FERRY_SHM_BYTES). The creator seals the segment
// against shrinking and growing (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), so a mapping
// of its size stays valid whatever the other side does; Map refuses an fd without those
// seals, or smaller than the mapping asked for.
//
// Not thread-safe to destroy while another thread reads the bytes; data() itself is a
// plain pointer into the mapping.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ferry {

class MemfdSegment {
 public:
  // Makes a segment of `bytes` (> 0; rounded up to whole pages), reserves its space and
  // maps it. `label` names it in /proc/<pid>/fd and in errors. Throws FerryError
  // (kInternal) with the reason, e.g. "no space for 64 MiB of shared memory".
  static std::unique_ptr<MemfdSegment> Create(const std::string& label, size_t bytes);
  // Maps a segment a peer made, from its file descriptor (taken: closed with the segment,
  // or at once when refused). Throws FerryError (kBadMessage) when `fd` is not a memfd
  // sealed as Create seals them, or is smaller than `bytes`.
  static std::unique_ptr<MemfdSegment> Map(int fd, size_t bytes);
  ~MemfdSegment();
  MemfdSegment(const MemfdSegment&) = delete;
  MemfdSegment& operator=(const MemfdSegment&) = delete;

  int fd() const { return fd_; }  // to pass to a peer (FdChannel::Send does not take it)
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Whether [offset, offset + length) lies inside the segment: a descriptor's check, safe
  // against overflow.
  bool Contains(uint64_t offset, uint64_t length) const {
    return offset <= size_ && length <= size_ - offset;
  }

 private:
  MemfdSegment(int fd, uint8_t* data, size_t size) : fd_(fd), data_(data), size_(size) {}

  int fd_;
  uint8_t* data_;
  size_t size_;
};

}  // namespace ferry
