#pragma once

// Collective: what a training process talks to. One interface, three implementations,
// picked once by LocalGroup::Create (local/local_group.h) from FERRY_LOCAL_SIZE and
// FERRY_LOCAL_RANK:
//
//   Worker     (worker.h)            one process per DMLC_WORKER_ID (FERRY_LOCAL_SIZE=1)
//   LocalRoot  (local/local_root.h)  local rank 0 of a local group: owns the Worker
//   LocalPeer  (local/local_peer.h)  the other local ranks: reach the servers through it
//
//   std::unique_ptr<ferry::Collective> c = ferry::LocalGroup::Create(config);
//   c->DeclareTensor("fc.weight", DataType::kFloat32, {1000, 512});  // forward order
//   c->PushPull("fc.weight", grad, grad, DataType::kFloat32, n, /*average=*/true);
//   c->Shutdown();
//
// Every call is a collective of the job: every rank makes the same calls in the same order
// per tensor. rank() and size() count every process (machines x local size), and averages
// divide by size(). Each method below is documented once here; an implementation that
// cannot offer one (sparse rows, Join or SetScheduling in a local group, for example)
// throws FerryError (kInvalidArgument) naming the reason. Worker's comments (worker.h)
// give the details of buffers, rounds and asynchronous training.
//
// Thread-safe: any thread may call any method. Errors throw FerryError.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/reduce/reduce.h"
#include "common/types/data_type.h"
#include "common/util/error.h"
#include "common/util/counters.h"
#include "worker/operation_table.h"
#include "worker/partition_scheduling/autotune.h"

namespace ferry {

class Collective {
 public:
  virtual ~Collective() = default;
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const { return 0; }
  virtual int local_size() const { return 1; }
  virtual int num_servers() const = 0;

  // Declares a tensor (forward order, identically on every rank); returns its id. The
  // same name again with the same dtype and element count returns the same id; another
  // declares the name anew (Worker::DeclareTensor). `priority`: empty = -(id).
  virtual int DeclareTensor(const std::string& name, DataType dtype,
                            const std::vector<int64_t>& shape,
                            std::optional<int> priority = std::nullopt) = 0;
  // Sums `count` elements of `input` over every rank into `output` (averaged when
  // `average`). Returns at once; `output` must live until the operation finished.
  // `done` (optional): runs once the operation finished, instead of a Wait (the handle is
  // released then); see operation_table.h for its thread and contract (it must not block).
  virtual Handle PushPullAsync(const std::string& name, const void* input, void* output,
                               DataType dtype, uint64_t count, bool average,
                               std::optional<int> priority = std::nullopt,
                               CompletionCallback done = nullptr) = 0;
  // The pushes combined by `op` (min, max, product) instead of summed (worker.h). A local
  // group (FERRY_LOCAL_SIZE > 1) reduces by sums only: the default refuses it.
  virtual Handle ReduceAsync(const std::string& name, const void* input, void* output,
                             DataType dtype, uint64_t count, ReduceOp op,
                             std::optional<int> priority = std::nullopt,
                             CompletionCallback done = nullptr) {
    (void)input, (void)output, (void)dtype, (void)count, (void)priority, (void)done;
    throw FerryError(ErrorCode::kInvalidArgument,
                     StrCat("reduce of '", name, "' by ", ReduceOpName(op),
                            ": a local group (FERRY_LOCAL_SIZE > 1) reduces by sums only"));
  }
  // Sparse rows of a tensor declared [R, ...] (worker.h).
  virtual Handle PushPullRowsAsync(const std::string& name, const int64_t* rows, uint64_t num_rows,
                                   const void* values, void* output, DataType dtype, bool average,
                                   std::optional<int> priority = std::nullopt,
                                   CompletionCallback done = nullptr) = 0;
  // The compression of declared tensor `name`'s push_pulls from now on ("onebit+ef", "none";
  // common/compress/compression_spec.h), over FERRY_COMPRESSION. Every rank sets the
  // same. Only a Worker: a local group's ranks follow FERRY_COMPRESSION alone.
  virtual void SetCompression(const std::string& name, const std::string& compression) {
    (void)compression;
    throw FerryError(ErrorCode::kInvalidArgument,
                     StrCat("compression of tensor '", name, "': a local group "
                            "(FERRY_LOCAL_SIZE > 1) follows FERRY_COMPRESSION alone"));
  }
  // Process sets (worker/process_sets.h; Horovod's): AddProcessSet registers worker ranks
  // `ranks` as a set and returns its id (every rank adds the same sets in the same order,
  // members or not); a tensor declared in a set (DeclareInProcessSet, on its members only)
  // is then summed over its members, and averaged over their number, by every operation
  // on its name. Only a Worker.
  // `id`: 0 (the next in order) or a named id (ProcessSets::Add).
  virtual int AddProcessSet(const std::vector<int>& ranks, int id = 0) {
    (void)ranks, (void)id;
    throw FerryError(ErrorCode::kInvalidArgument, "process sets need one worker process per "
                     "Ferry worker (FERRY_LOCAL_SIZE=1)");
  }
  virtual void RemoveProcessSet(int set) { (void)set; }
  virtual uint32_t DeclareInProcessSet(int set, const std::string& name, DataType dtype,
                                  const std::vector<int64_t>& shape,
                                  std::optional<int> priority = std::nullopt) {
    (void)dtype, (void)shape, (void)priority;
    throw FerryError(ErrorCode::kInvalidArgument,
                     StrCat("tensor '", name, "' in process set ", set, ": process sets need "
                            "one worker process per Ferry worker (FERRY_LOCAL_SIZE=1)"));
  }
  // Point-to-point (worker/point_to_point.h): sends `count` elements of `dtype` at `data` to
  // rank `dst` under `tag`, for its matching RecvAsync; finished once that receive took
  // them (then `data` may be reused). Delivery keeps the call order per (source,
  // destination, tag). `priority` orders this worker's sends among themselves (larger
  // first; they all go before its tensors' bytes on the links they share: van.h, Links);
  // INT32_MIN: the order the receiver's receives taught (point_to_point.h, "Learned order").
  // Only a Worker: a local group's ranks share one worker process.
  virtual Handle SendAsync(const void* data, uint64_t count, DataType dtype, int dst, int tag,
                           int32_t priority = std::numeric_limits<int32_t>::min(),
                           CompletionCallback done = nullptr) {
    (void)data, (void)count, (void)dtype, (void)tag, (void)priority, (void)done;
    throw FerryError(ErrorCode::kInvalidArgument,
                     StrCat("send to rank ", dst, ": point-to-point needs one worker process per "
                            "Ferry worker (FERRY_LOCAL_SIZE=1)"));
  }
  // Receives the next send from rank `src` under `tag` into `data` (`count` elements of
  // `dtype`: the sender's must agree, or both fail naming the other's).
  virtual Handle RecvAsync(void* data, uint64_t count, DataType dtype, int src, int tag,
                           CompletionCallback done = nullptr) {
    (void)data, (void)count, (void)dtype, (void)tag, (void)done;
    throw FerryError(ErrorCode::kInvalidArgument,
                     StrCat("recv from rank ", src, ": point-to-point needs one worker process "
                            "per Ferry worker (FERRY_LOCAL_SIZE=1)"));
  }
  // A push_pull of a tensor in CUDA device memory through the NCCL backend
  // (local/local_nccl.h). `stream`: the cudaStream_t the input was written on (null: the
  // default stream). Blocks until `output` holds the result.
  virtual void PushPullDevice(const std::string& name, const void* input, void* output,
                              DataType dtype, uint64_t count, bool average,
                              void* stream = nullptr) = 0;
  // True once the operation finished (successfully or not). Unknown handle: throws.
  bool Poll(Handle handle) { return table_.Poll(handle); }
  // Blocks until the operation finished (deadline FERRY_OP_TIMEOUT_MS from the first
  // wait); throws its error. The handle is released.
  void Wait(Handle handle) { table_.Wait(handle); }
  // Waits at most `timeout_ms`: true (handle released) once finished, false if not yet.
  // Throws like Wait, also once the deadline passed, however the wait is sliced.
  bool WaitFor(Handle handle, int64_t timeout_ms) { return table_.WaitFor(handle, timeout_ms); }
  // The first finished of `handles` in the list (Wait on it next: it throws its error),
  // or 0 if none finished within `timeout_ms`.
  Handle WaitAny(const std::vector<Handle>& handles, int64_t timeout_ms) {
    return table_.WaitAny(handles, timeout_ms);
  }
  // Every rank's `data` becomes rank `root`'s.
  virtual void Broadcast(const std::string& name, void* data, DataType dtype, uint64_t count,
                         int root) = 0;
  // Blocks until every rank called Barrier.
  virtual void Barrier() = 0;
  // The end of a training iteration (timing, FERRY_AUTOTUNE, trace marks; worker.h).
  virtual void StepBoundary() = 0;
  // A span of the application's compute for the trace (FERRY_TRACE_DIR; worker.h). Only a
  // Worker traces: elsewhere (a local group's ranks) a no-op.
  virtual void TraceCompute(const std::string& tensor, bool backward, int64_t begin_us,
                            int64_t end_us) {
    (void)tensor, (void)backward, (void)begin_us, (void)end_us;
  }
  // Partition size and credit for the operations started from now on (worker.h).
  virtual void SetScheduling(int64_t partition_bytes, int64_t credit_bytes) = 0;
  virtual SchedulingChoice scheduling() const = 0;
  virtual std::string scheduling_policy() const = 0;
  // Uneven data (Horovod's join; worker.h). Returns the rank that joined last.
  virtual int Join() = 0;
  // Waits for this rank's operations and leaves the job for good. Idempotent; also ends a
  // suspension.
  virtual void Shutdown() = 0;
  // Re-initialisation (ferry.torch's shutdown() then init(); binding_core.h): Suspend()
  // waits for this rank's operations, drops every declaration (the servers free their
  // keys) and refuses new operations (kShutdown) until Resume(); the rank stays in the job.
  // Only where CanSuspend() (a Worker; not a local group): elsewhere both throw
  // kInvalidArgument.
  virtual bool CanSuspend() const { return false; }
  virtual void Suspend() { RefuseSuspend(); }
  virtual void Resume() { RefuseSuspend(); }
  // Elastic training (FERRY_ELASTIC=1): takes the job's new membership after an operation
  // failed with kMembershipChanged (Worker::Reset, worker.h). Only a Worker: a local group
  // refuses FERRY_ELASTIC=1 at start.
  virtual void Reset() {
    throw FerryError(ErrorCode::kInvalidArgument,
                     "reset(): elastic training needs one worker process per Ferry worker");
  }
  // Elastic joins (Worker::HostsUpdated): whether workers wait to join; every rank must
  // call it at the same point (a commit). False where there is no elasticity.
  virtual bool HostsUpdated() { return false; }
  // The membership epoch this rank's operations belong to (0 without elasticity; above 0
  // from the start for a worker that joined a running job).
  virtual uint32_t epoch() const { return 0; }
  // Every counter of this rank by name (what FERRY_STATS_FILE receives at Shutdown).
  virtual CounterValues Counters() const = 0;
  // Backup workers (FERRY_BACKUP_WORKERS > 0; server/stragglers.h): the average of the next
  // round of float tensor `name` into `output`, as PushPullAsync with average gives it, but
  // without contributing to it: a header-only push the servers do not wait for. A worker
  // whose pushes came late (Contributors leaves it out) may skip its next step's compute and
  // take that step's sums this way, to catch up with the others; it still applies every
  // step's update, so every replica stays the same. Throws kInvalidArgument without backup
  // workers, for integer dtypes, and where not supported (a local group).
  virtual Handle PullAverageAsync(const std::string& name, void* output, DataType dtype,
                                  uint64_t count, CompletionCallback done = nullptr) {
    (void)name, (void)output, (void)dtype, (void)count, (void)done;
    throw FerryError(ErrorCode::kInvalidArgument,
                     "pull_average: backup workers need one worker process per Ferry worker");
  }
  // Backup workers (FERRY_BACKUP_WORKERS; server/stragglers.h): the ranks whose pushes are
  // in the last completed push_pull of `name` (in every partition's sum), or, `name`
  // empty, in every sum completed between the last two StepBoundary() calls (before the
  // first: since the start). Without backup workers, or where no round closed early: every
  // rank. Throws kInvalidArgument for a name never declared.
  virtual std::vector<int> Contributors(const std::string& name) {
    (void)name;
    std::vector<int> all(static_cast<size_t>(size()));
    for (int r = 0; r < size(); ++r) all[static_cast<size_t>(r)] = r;
    return all;
  }

  // PushPullAsync + Wait.
  void PushPull(const std::string& name, const void* input, void* output, DataType dtype,
                uint64_t count, bool average) {
    Wait(PushPullAsync(name, input, output, dtype, count, average));
  }
  // PushPullRowsAsync + Wait.
  void PushPullRows(const std::string& name, const int64_t* rows, uint64_t num_rows,
                    const void* values, void* output, DataType dtype, bool average) {
    Wait(PushPullRowsAsync(name, rows, num_rows, values, output, dtype, average));
  }

 protected:
  // `timeout_message`: the table's (operation_table.h), naming what an operation waits
  // for; it may use the derived object, whose destructor closes the table first.
  Collective(int64_t op_timeout_ms, TimeoutMessageFn timeout_message)
      : table_(op_timeout_ms, std::move(timeout_message)) {}

  // Every handle of this rank (one table per process role); its own lock.
  OperationTable table_;

 private:
  [[noreturn]] static void RefuseSuspend() {
    throw FerryError(ErrorCode::kInvalidArgument,
                     "re-initialisation (shutdown() then init()) needs one worker process per "
                     "Ferry worker; a local group (FERRY_LOCAL_SIZE > 1) shuts down for good");
  }
};

}  // namespace ferry
