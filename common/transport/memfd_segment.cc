#include "common/transport/memfd_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/util/error.h"
#include "common/util/strings.h"

namespace ferry {

namespace {

constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

size_t PageRounded(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

std::string MiB(size_t bytes) { return StrCat(bytes >> 20, " MiB"); }

// MemAvailable of /proc/meminfo in bytes; 0 if unknown. A memfd lives in the kernel's
// internal tmpfs, which has no size limit of its own: reserving more than the memory there
// is would run the machine into the OOM killer instead of failing.
uint64_t AvailableMemory() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  uint64_t kib = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "MemAvailable: %lu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024;
}

uint8_t* MapShared(int fd, size_t bytes, const std::string& what) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    close(fd);
    throw FerryError(ErrorCode::kInternal,
                     StrCat("mmap of ", what, " (", bytes, " bytes) failed: ", strerror(err)));
  }
  return static_cast<uint8_t*>(p);
}

}  // namespace

std::unique_ptr<MemfdSegment> MemfdSegment::Create(const std::string& label, size_t bytes) {
  FERRY_ENFORCE(bytes > 0, ErrorCode::kInvalidArgument, "shared memory '", label,
                "': a segment needs at least one byte");
  const size_t size = PageRounded(bytes);
  const uint64_t available = AvailableMemory();
  FERRY_ENFORCE(available == 0 || size <= available, ErrorCode::kInternal, "shared memory '",
                label, "': ", MiB(size), " is more than the available memory (", MiB(available),
                "); see FERRY_SHM_BYTES");
  const int fd = memfd_create(label.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  FERRY_ENFORCE(fd >= 0, ErrorCode::kInternal, "memfd_create of shared memory '", label,
                "' failed: ", strerror(errno));
  auto fail = [&](const std::string& why) {
    close(fd);
    throw FerryError(ErrorCode::kInternal, StrCat("shared memory '", label, "': ", why));
  };
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    fail(StrCat("cannot size it to ", size, " bytes: ", strerror(errno)));
  }
  // Reserved now: a tmpfs without room says so here, not with a SIGBUS on a later write.
  if (const int err = posix_fallocate(fd, 0, static_cast<off_t>(size)); err != 0) {
    fail(StrCat("no space for ", MiB(size), " of shared memory (", strerror(err),
                "): the memory for shared segments is short; see FERRY_SHM_BYTES"));
  }
  if (fcntl(fd, F_ADD_SEALS, kSeals) != 0) fail(StrCat("cannot seal it: ", strerror(errno)));
  return std::unique_ptr<MemfdSegment>(
      new MemfdSegment(fd, MapShared(fd, size, "shared memory '" + label + "'"), size));
}

std::unique_ptr<MemfdSegment> MemfdSegment::Map(int fd, size_t bytes) {
  auto refuse = [fd](const std::string& why) {
    close(fd);
    throw FerryError(ErrorCode::kBadMessage, StrCat("a shared-memory segment was refused: ", why));
  };
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) refuse(StrCat("it is not a memfd (", strerror(errno), ")"));
  if ((seals & kSeals) != kSeals) refuse("it is not sealed against resizing");
  struct stat st;
  if (fstat(fd, &st) != 0) refuse(StrCat("fstat failed: ", strerror(errno)));
  if (bytes == 0 || static_cast<uint64_t>(st.st_size) < bytes) {
    refuse(StrCat("it holds ", st.st_size, " bytes, not the ", bytes, " announced"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  return std::unique_ptr<MemfdSegment>(
      new MemfdSegment(fd, MapShared(fd, size, "a peer's shared memory"), size));
}

MemfdSegment::~MemfdSegment() {
  munmap(data_, size_);
  close(fd_);
}

}  // namespace ferry
