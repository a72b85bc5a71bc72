// The NCCL half of the stub (cuda_nccl_stub.h): communicators whose ranks meet in a
// shared-memory segment named by the unique id, and collectives that move real data
// through it on the stub's streams.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "common/reduce/reduce.h"
#include "common/util/mutex.h"
#include "common/util/strings.h"
#include "cuda_nccl_stub.h"
#include "nccl.h"
#include "stub_internal.h"

namespace ferry::cuda_nccl_stub {
namespace {

constexpr int kMaxRanks = 64;
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kSliceBytes = size_t{1} << 20;  // each rank's slot in the segment
constexpr char kNamePrefix[] = "/ferry-nccl-stub-";

// The start of a segment. Zero bytes (a new segment's) are its initial state.
struct Header {
  std::atomic<uint32_t> joined;              // ranks attached so far
  std::atomic<uint64_t> arrived[kMaxRanks];  // each rank's last barrier number reached
};
static_assert(sizeof(Header) <= kHeaderBytes, "the header outgrew its page");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "atomics in shared memory");

// One mapping of a communicator's segment, shared by the ranks of this process.
class Segment {
 public:
  Segment(std::string name, char* base, size_t bytes)
      : name_(std::move(name)), base_(base), bytes_(bytes) {}
  ~Segment() { munmap(base_, bytes_); }
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  const std::string& name() const { return name_; }
  Header& header() { return *reinterpret_cast<Header*>(base_); }
  char* slot(int rank) { return base_ + kHeaderBytes + static_cast<size_t>(rank) * kSliceBytes; }

 private:
  const std::string name_;
  char* const base_;
  const size_t bytes_;
};

// The process's mappings by name, and the last error of a call without a communicator.
struct Globals {
  Mutex mu;  // guards everything below
  std::map<std::string, std::weak_ptr<Segment>> segments GUARDED_BY(mu);
  std::string last_error GUARDED_BY(mu);
  uint64_t ids GUARDED_BY(mu) = 0;
  int abort_latency_ms GUARDED_BY(mu) = 0;  // SetAbortLatency
};

Globals& G() {
  static Globals* g = new Globals;  // never destroyed: streams may outlive static objects
  return *g;
}

ncclResult_t Fail(ncclResult_t r, const std::string& why) {
  MutexLock lock(G().mu);
  G().last_error = why;
  return r;
}

// This process's mapping of segment `name`, made (and the segment created) if needed.
std::shared_ptr<Segment> Attach(const std::string& name, int nranks, std::string* error) {
  MutexLock lock(G().mu);
  if (std::shared_ptr<Segment> s = G().segments[name].lock()) return s;
  const size_t bytes = kHeaderBytes + static_cast<size_t>(nranks) * kSliceBytes;
  const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) {
    *error = StrCat("shm_open ", name, ": ", std::strerror(errno));
    return nullptr;
  }
  struct stat st {};
  void* base = MAP_FAILED;
  // Every rank sizes it alike; growing a file keeps what another rank wrote.
  if (fstat(fd, &st) == 0 &&
      (static_cast<size_t>(st.st_size) >= bytes || ftruncate(fd, static_cast<off_t>(bytes)) == 0)) {
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  const int saved = errno;
  close(fd);
  if (base == MAP_FAILED) {
    *error = StrCat("mapping ", name, ": ", std::strerror(saved));
    return nullptr;
  }
  auto s = std::make_shared<Segment>(name, static_cast<char*>(base), bytes);
  G().segments[name] = s;
  return s;
}

// A communicator's state, shared by its handle and the kernels queued on its streams.
struct CommState {
  std::shared_ptr<Segment> segment;
  int rank = 0;
  int nranks = 0;
  std::atomic<bool> aborted{false};           // ncclCommAbort: its kernels end
  std::atomic<int> async_error{ncclSuccess};  // a kernel's failure
  // Barrier numbers taken by the calls so far: a call takes its kernel's at the call,
  // so the kernels of one communicator, run in call order, agree with the other ranks'.
  std::atomic<uint64_t> phases{0};
  Mutex mu;                               // guards last_error
  std::string last_error GUARDED_BY(mu);  // ncclGetLastError(comm)

  bool Joined() {
    return segment->header().joined.load(std::memory_order_acquire) >=
           static_cast<uint32_t>(nranks);
  }

  // This rank reached barrier `phase`; waits for every rank to reach it. False: aborted.
  bool Barrier(uint64_t phase) {
    Header& h = segment->header();
    h.arrived[rank].store(phase, std::memory_order_release);
    for (int r = 0; r < nranks; ++r) {
      for (int spins = 0; h.arrived[r].load(std::memory_order_acquire) < phase; ++spins) {
        if (aborted.load(std::memory_order_acquire)) return false;
        if (spins < 100) {
          std::this_thread::yield();
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
      }
    }
    return true;
  }

  ncclResult_t Fail(ncclResult_t r, const std::string& why) {
    MutexLock lock(mu);
    last_error = why;
    return r;
  }
};

bool ToDataType(ncclDataType_t t, DataType* out) {
  switch (t) {
    case ncclFloat32:
      *out = DataType::kFloat32;
      return true;
    case ncclFloat16:
      *out = DataType::kFloat16;
      return true;
    case ncclBfloat16:
      *out = DataType::kBFloat16;
      return true;
    case ncclFloat64:
      *out = DataType::kFloat64;
      return true;
    case ncclInt32:
      *out = DataType::kInt32;
      return true;
    case ncclInt64:
      *out = DataType::kInt64;
      return true;
    default:
      return false;
  }
}

// One collective: for each slice of at most kSliceBytes, `put(offset, bytes)` fills this
// rank's slot, the ranks meet, `take(offset, bytes)` reads the slots, and the ranks meet
// again before the slots are written anew.
struct Collective {
  std::shared_ptr<CommState> comm;
  size_t bytes = 0;
  size_t slice = 0;  // whole elements
  uint64_t first_phase = 0;
  std::function<void(size_t offset, size_t bytes)> put, take;

  size_t Slices() const { return (bytes + slice - 1) / slice; }

  void Run() {
    uint64_t phase = first_phase;
    for (size_t off = 0; off < bytes; off += slice) {
      const size_t n = std::min(slice, bytes - off);
      put(off, n);
      if (!comm->Barrier(++phase)) return Aborted();
      take(off, n);
      if (!comm->Barrier(++phase)) return Aborted();
    }
  }
  void Aborted() {
    int latency_ms = 0;
    {
      MutexLock lock(G().mu);
      latency_ms = G().abort_latency_ms;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(latency_ms));
    comm->async_error.store(ncclSystemError);
  }
};

struct Call {
  const char* name;
  ncclComm_t comm;
  size_t count;
  ncclDataType_t datatype;
  ncclRedOp_t op;
  int root;
};

}  // namespace
}  // namespace ferry::cuda_nccl_stub

struct ncclComm {
  std::shared_ptr<ferry::cuda_nccl_stub::CommState> state;
};

namespace ferry::cuda_nccl_stub {
namespace {

// Checks a collective's arguments (`buffers`: the device buffers it reads or writes on
// this rank) and queues its kernel on `stream`.
ncclResult_t Launch(const Call& c, std::initializer_list<const void*> buffers, cudaStream_t stream,
                    std::function<void(size_t, size_t)> put,
                    std::function<void(size_t, size_t)> take) {
  if (c.comm == nullptr) return Fail(ncclInvalidArgument, StrCat(c.name, ": null communicator"));
  CommState& s = *c.comm->state;
  std::string why;
  DataType type = DataType::kFloat32;
  if (TakeInjectedFailure(c.name, s.rank, &why)) return s.Fail(ncclSystemError, why);
  if (!ToDataType(c.datatype, &type)) {
    return s.Fail(ncclInvalidArgument,
                  StrCat(c.name, ": data type ", c.datatype, " is not one the stub sums"));
  }
  if (c.op != ncclSum) return s.Fail(ncclInvalidArgument, StrCat(c.name, ": only ncclSum"));
  if (c.root < 0 || c.root >= s.nranks) {
    return s.Fail(ncclInvalidArgument, StrCat(c.name, ": root ", c.root, " of ", s.nranks));
  }
  const size_t bytes = c.count * DataTypeSize(type);
  for (const void* p : buffers) {
    if (bytes > 0 && !IsDeviceMemory(p, bytes)) {
      return s.Fail(ncclInvalidArgument,
                    StrCat(c.name, ": buffer ", p, " of ", bytes, " bytes is not device memory"));
    }
  }
  if (bytes == 0) return ncclSuccess;
  Collective k;
  k.comm = c.comm->state;
  k.bytes = bytes;
  k.slice = kSliceBytes / DataTypeSize(type) * DataTypeSize(type);
  k.first_phase = s.phases.fetch_add(2 * k.Slices());
  k.put = std::move(put);
  k.take = std::move(take);
  if (Enqueue(stream, [k = std::move(k)]() mutable { k.Run(); }) != cudaSuccess) {
    return s.Fail(ncclUnhandledCudaError, StrCat(c.name, ": the stream was destroyed"));
  }
  return ncclSuccess;
}

// The slots summed in rank order into dst.
void SumSlots(CommState& s, char* dst, size_t offset, size_t bytes, ncclDataType_t datatype) {
  DataType type = DataType::kFloat32;
  ToDataType(datatype, &type);
  std::memcpy(dst + offset, s.segment->slot(0), bytes);
  for (int r = 1; r < s.nranks; ++r) {
    SumInto(dst + offset, s.segment->slot(r), bytes / DataTypeSize(type), type);
  }
}

}  // namespace

void SetAbortLatency(int ms) {
  MutexLock lock(G().mu);
  G().abort_latency_ms = ms;
}

}  // namespace ferry::cuda_nccl_stub

namespace stub = ferry::cuda_nccl_stub;
using ferry::MutexLock;
using ferry::StrCat;

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  if (unique_id == nullptr) return stub::Fail(ncclInvalidArgument, "ncclGetUniqueId: null id");
  uint64_t n = 0;
  {
    MutexLock lock(stub::G().mu);
    n = ++stub::G().ids;
  }
  const std::string name = StrCat(stub::kNamePrefix, getpid(), "-", n, "-", std::random_device()());
  *unique_id = ncclUniqueId{};
  std::memcpy(unique_id->internal, name.data(), name.size());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank,
                                    ncclConfig_t* config) {
  const std::string name(comm_id.internal, strnlen(comm_id.internal, NCCL_UNIQUE_ID_BYTES));
  if (comm == nullptr || nranks < 1 || nranks > stub::kMaxRanks || rank < 0 || rank >= nranks) {
    return stub::Fail(ncclInvalidArgument, StrCat("ncclCommInitRank: rank ", rank, " of ", nranks,
                                                  " (the stub: 1 to ", stub::kMaxRanks, " ranks)"));
  }
  if (name.rfind(stub::kNamePrefix, 0) != 0 || name.size() == NCCL_UNIQUE_ID_BYTES) {
    return stub::Fail(ncclInvalidArgument, "ncclCommInitRank: not a unique id of ncclGetUniqueId");
  }
  std::string why;
  if (stub::TakeInjectedFailure("ncclCommInitRankConfig", rank, &why)) {
    return stub::Fail(ncclSystemError, why);
  }
  auto s = std::make_shared<stub::CommState>();
  s->segment = stub::Attach(name, nranks, &why);
  if (!s->segment) return stub::Fail(ncclSystemError, StrCat("ncclCommInitRank: ", why));
  s->rank = rank;
  s->nranks = nranks;
  // The last rank to attach removes the name: every rank holds its mapping by then.
  if (s->segment->header().joined.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<uint32_t>(nranks)) {
    shm_unlink(name.c_str());
  }
  *comm = new ncclComm{s};
  const bool blocking = config == nullptr || config->blocking != 0;
  while (blocking && !s->Joined()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  return s->Joined() ? ncclSuccess : ncclInProgress;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, comm_id, rank, nullptr);
}

// Destroy lets the queued kernels finish (they hold the state); Abort ends them.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  comm->state->aborted.store(true, std::memory_order_release);
  // A rank that never attached would leave the segment behind: no rank attaches now.
  if (!comm->state->Joined()) shm_unlink(comm->state->segment->name().c_str());
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr) return ncclInvalidArgument;
  stub::CommState& s = *comm->state;
  const int e = s.async_error.load();
  *async_error = e != ncclSuccess ? static_cast<ncclResult_t>(e)
                 : s.Joined()     ? ncclSuccess
                                  : ncclInProgress;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = comm->state->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->state->rank;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  thread_local std::string text;  // valid until this thread's next call
  if (comm != nullptr) {
    MutexLock lock(comm->state->mu);
    text = comm->state->last_error;
  } else {
    MutexLock lock(stub::G().mu);
    text = stub::G().last_error;
  }
  return text.c_str();
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  const stub::Call c{"ncclReduce", comm, count, datatype, op, root};
  if (comm == nullptr) return stub::Launch(c, {}, stream, nullptr, nullptr);
  stub::CommState* s = comm->state.get();  // lives as long as the kernel (Collective::comm)
  const bool at_root = s->rank == root;
  auto put = [s, sendbuff](size_t off, size_t n) {
    std::memcpy(s->segment->slot(s->rank), static_cast<const char*>(sendbuff) + off, n);
  };
  auto take = [s, at_root, recvbuff, datatype](size_t off, size_t n) {
    if (at_root) stub::SumSlots(*s, static_cast<char*>(recvbuff), off, n, datatype);
  };
  if (at_root) return stub::Launch(c, {sendbuff, recvbuff}, stream, put, take);
  return stub::Launch(c, {sendbuff}, stream, put, take);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  const stub::Call c{"ncclBroadcast", comm, count, datatype, ncclSum, root};
  if (comm == nullptr) return stub::Launch(c, {}, stream, nullptr, nullptr);
  stub::CommState* s = comm->state.get();
  const bool at_root = s->rank == root;
  auto put = [s, at_root, sendbuff](size_t off, size_t n) {
    if (at_root)
      std::memcpy(s->segment->slot(s->rank), static_cast<const char*>(sendbuff) + off, n);
  };
  auto take = [s, root, recvbuff, sendbuff](size_t off, size_t n) {
    if (recvbuff != sendbuff || s->rank != root) {
      std::memcpy(static_cast<char*>(recvbuff) + off, s->segment->slot(root), n);
    }
  };
  if (at_root) return stub::Launch(c, {sendbuff, recvbuff}, stream, put, take);
  return stub::Launch(c, {recvbuff}, stream, put, take);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  const stub::Call c{"ncclAllReduce", comm, count, datatype, op, 0};
  if (comm == nullptr) return stub::Launch(c, {}, stream, nullptr, nullptr);
  stub::CommState* s = comm->state.get();
  auto put = [s, sendbuff](size_t off, size_t n) {
    std::memcpy(s->segment->slot(s->rank), static_cast<const char*>(sendbuff) + off, n);
  };
  auto take = [s, recvbuff, datatype](size_t off, size_t n) {
    stub::SumSlots(*s, static_cast<char*>(recvbuff), off, n, datatype);
  };
  return stub::Launch(c, {sendbuff, recvbuff}, stream, put, take);
}

}  // extern "C"
