#include "worker/local/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/util/status.h"

namespace ferry {
namespace {

// Maps `fd` (closed here) of `bytes`; throws naming `name` and `what` on failure.
void* MapFd(int fd, size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  FERRY_ENFORCE(p != MAP_FAILED, ErrorCode::kInternal, "mmap of shared memory ", name, " (", bytes,
                " bytes): ", std::strerror(err));
  return p;
}

}  // namespace

std::unique_ptr<ShmSegment> ShmSegment::Create(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  FERRY_ENFORCE(fd >= 0, ErrorCode::kInternal, "shm_open(", name,
                ") to create: ", std::strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    throw FerryError(ErrorCode::kInternal,
                     StrCat("ftruncate of shared memory ", name, " to ", bytes,
                            " bytes: ", std::strerror(err), " (is /dev/shm large enough?)"));
  }
  void* p = nullptr;
  try {
    p = MapFd(fd, bytes, name);
  } catch (...) {
    shm_unlink(name.c_str());
    throw;
  }
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, p, bytes, true));
}

std::unique_ptr<ShmSegment> ShmSegment::OpenAndUnlink(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  FERRY_ENFORCE(fd >= 0, ErrorCode::kInternal, "shm_open(", name,
                ") to map: ", std::strerror(errno));
  shm_unlink(name.c_str());  // both sides have it mapped (or open) now
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
    close(fd);
    throw FerryError(ErrorCode::kBadMessage, StrCat("shared memory ", name, " holds ", st.st_size,
                                                    " bytes, expected ", bytes));
  }
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, MapFd(fd, bytes, name), bytes, false));
}

ShmSegment::~ShmSegment() {
  Unlink();
  munmap(data_, size_);
}

void ShmSegment::Unlink() {
  if (!linked_) return;
  shm_unlink(name_.c_str());  // ENOENT: the other side did it already
  linked_ = false;
}

}  // namespace ferry
