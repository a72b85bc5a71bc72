#pragma once

// ShmSegment: one POSIX shared-memory segment (shm_open + mmap), owned by this object.
//
// Lifetime of the name: the creator makes it (O_EXCL, so never someone else's), the one
// other process that maps it unlinks it right after mapping (it is the last to map), and
// the creator unlinks it too once the other side confirmed, or in its destructor: so a
// name lives only while a mapping is being set up, and a crash on either side leaves no
// segment in /dev/shm beyond that window. The mapping lives until the object is destroyed.

#include <cstddef>
#include <memory>
#include <string>

namespace ferry {

class ShmSegment {
 public:
  // Creates segment `name` ("/ferry-...") of `bytes` and maps it. Throws FerryError.
  static std::unique_ptr<ShmSegment> Create(const std::string& name, size_t bytes);
  // Maps the existing segment `name` of `bytes` and unlinks the name. Throws FerryError.
  static std::unique_ptr<ShmSegment> OpenAndUnlink(const std::string& name, size_t bytes);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Removes the name (idempotent; a name the other side already unlinked is fine).
  void Unlink();
  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  ShmSegment(std::string name, void* data, size_t size, bool linked)
      : name_(std::move(name)), data_(data), size_(size), linked_(linked) {}

  std::string name_;
  void* data_;
  size_t size_;
  bool linked_;  // this object still has to unlink the name
};

}  // namespace ferry
