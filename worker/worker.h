#pragma once

// Worker: the libferry side of a training process (one implementation of Collective,
// collective.h; LocalGroup::Create picks it when FERRY_LOCAL_SIZE=1).
//
// Parts (each with its contract in its header), sharing WorkerContext (worker_context.h:
// the transport, the counters and the one lock): TensorCatalog (declarations, layouts,
// cuts, rounds), OperationTable (handles, deadlines, waits, completion callbacks),
// Sequencer (one operation per tensor at a time) and the kinds of operation DensePushPull
// and RowsPushPull (operation_kind.h), JoinProtocol, MembershipEpochs (elastic epochs,
// suspension, the job's failure), SchedulingControl (iterations, autotune,
// re-partitioning) and the Sender thread. The Worker validates calls and routes replies.
//
//   auto worker = ferry::Worker::Create(ferry::Config::FromEnvironment(...));
//   worker->DeclareTensor("fc.weight", DataType::kFloat32, {1000, 512});  // forward order
//   auto h = worker->PushPullAsync("fc.weight", grad, grad, DataType::kFloat32, n, true);
//   worker->Wait(h);    // grad now holds the average over all workers
//   worker->Shutdown();
//
// Tensors are declared up front in forward (model) order, identically on every worker:
// the declaration index is the tensor id, and the default priority is -(index), so
// layers near the input go first. A tensor first seen in PushPullAsync is declared
// then. Each tensor is cut into partitions placed on servers by bytes (placement.h);
// the partitions go out through the scheduled queue in the order the scheduling policy
// (FERRY_SCHEDULING_POLICY, worker/partition_scheduling/policies.h) decides.
//
// Iterations: call StepBoundary() once per training iteration, at a point where this
// worker has no push_pull in flight (after the optimizer step; ferry.torch's
// DistributedOptimizer and ferry-train-sim do). It times the iterations, drives
// FERRY_AUTOTUNE and marks the trace (FERRY_TRACE_DIR). TraceCompute() puts the
// application's own compute in that trace (what ferry-sim replays).
//
// Re-partitioning: SetScheduling() changes the partition size and the credit between
// iterations (a fixed credit: with FERRY_WINDOW=bdp the window stops applying; the frame
// size stays). A tensor cut with another partition size uses fresh keys (a layout
// generation in the key, common/transport/message.h), because a server fixes a key's
// length at its first push; every worker computes the same cut and placement for each
// partition size, and keeps each cut's rounds, so switching back reuses its keys.
//
// Buffers: `input` is sent without a copy, so it must stay unchanged until the
// operation completes; `output` receives the sum (it may equal `input`). An operation
// completes only after every partition's sum arrived AND ZeroMQ released every
// partition of `input` (its release hook fired), so the caller may reuse both buffers
// as soon as Wait() returns.
//
// Buffers of an operation must live until the operation finished (Wait, or Poll true).
// After a failure (Wait throws), `output` is no longer written once Wait returns, but
// ZeroMQ may still hold partitions of `input` queued for a dead peer until Shutdown():
// the job is over at that point, so end it before freeing inputs still in flight.
//
// Operations on one tensor run one at a time in call order; different tensors overlap.
// Thread-safe: any thread may call any method. Errors throw FerryError.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/cluster/cluster_client.h"
#include "common/config/config.h"
#include "common/reduce/reduce.h"
#include "common/transport/van.h"
#include "common/util/mutex.h"
#include "worker/collective.h"
#include "worker/dense_push_pull.h"
#include "worker/join_protocol.h"
#include "worker/membership_epochs.h"
#include "worker/local/local_nccl.h"
#include "worker/sequencer.h"
#include "worker/worker_context.h"
#include "worker/operation_table.h"
#include "worker/point_to_point.h"
#include "worker/process_sets.h"
#include "worker/rows_push_pull.h"
#include "worker/partition_scheduling/autotune.h"
#include "worker/partition_scheduling/scheduled_queue.h"
#include "worker/reserved_tensor_names.h"
#include "worker/scheduling_control.h"
#include "worker/sender.h"
#include "worker/tensor_catalog.h"
#include "worker/trace.h"

namespace ferry {

class Worker : public Collective {
 public:
  // Registers with the scheduler and connects to every server. Throws on failure.
  static std::unique_ptr<Worker> Create(const Config& config);
  ~Worker() override;

  int rank() const override { return ctx_.rank; }
  int size() const override { return ctx_.num_workers; }
  int num_servers() const override { return ctx_.num_servers; }

  // Declares a tensor; returns its id (the declaration index). Declaring the same
  // name again with the same dtype and element count returns the same id. Another dtype
  // or element count declares the name anew (a new id and keys; tensor_catalog.h,
  // "Re-declarations"): operations already submitted under the old declaration finish on
  // its keys, and then the servers free them. Every worker must re-declare at the same
  // point; a server that sees workers disagree fails the tensor with the reason, and the
  // refused declaration is undone. In asynchronous training a different layout throws.
  // `priority`: empty = -(id) (a re-declaration keeps the name's). Names starting with
  // "__ferry__/" are Ferry's own (reserved_tensor_names.h): this and every operation
  // below refuse them.
  int DeclareTensor(const std::string& name, DataType dtype, const std::vector<int64_t>& shape,
                    std::optional<int> priority = std::nullopt) override;

  // Sums `count` elements of `input` over all workers into `output` (averaged when
  // `average`). Returns at once; see the class comment for buffer lifetimes.
  // Asynchronous training (FERRY_ENABLE_ASYNC=1): the servers hold the parameters. The
  // first push_pull of a tensor sends the initial parameters (the first worker's to
  // arrive are kept, the others' ignored); every later one sends a delta that the
  // servers add at once, without waiting for other workers, and `output` receives the
  // parameters with it applied (and whatever other workers applied meanwhile).
  // `average` is refused there (the reply is not a sum), as are Broadcast and Join.
  // `done` (optional): runs once the operation finished, instead of a Wait (the handle
  // is released then; see operation_table.h for the thread it runs on and its contract:
  // it must not block). An operation with a callback fails with a timeout
  // FERRY_OP_TIMEOUT_MS after this call if it has not finished by then.
  Handle PushPullAsync(const std::string& name, const void* input, void* output, DataType dtype,
                       uint64_t count, bool average, std::optional<int> priority = std::nullopt,
                       CompletionCallback done = nullptr) override;
  // As PushPullAsync without averaging, the pushes combined by `op` instead of summed
  // (min, max, product; kSum is a push_pull). Every worker must name the same op for one
  // operation: a server that sees two fails the tensor with the reason, on every worker.
  // Workers that joined take no part (as in a sum). Not in asynchronous training.
  Handle ReduceAsync(const std::string& name, const void* input, void* output, DataType dtype,
                     uint64_t count, ReduceOp op, std::optional<int> priority = std::nullopt,
                     CompletionCallback done = nullptr) override {
    CheckUserTensorName("reduce", name);
    CheckReduceOp(name, op, false);
    return StartPushPull(name, input, output, dtype, count, false, priority, std::move(done), op);
  }
  // Staged input (the device path, worker/device/device_staging.h): as PushPullAsync, but
  // partition i of `input` is sent only once ReleasePartition(handle, i) says its bytes
  // are there, so a caller filling `input` piece by piece (device-to-host copies, in
  // priority order) sends each piece as soon as it lands, among other tensors' partitions
  // in the scheduling policy's order. `parts` receives the partitions (offset and bytes, by
  // index). Every partition must be released; until then the operation waits, bounded by
  // its deadline (FERRY_OP_TIMEOUT_MS) as any other. `part_summed` (optional): called with
  // a partition's index once its whole sum is in `output`, before the operation completes
  // (on a transport thread; it must not block: queue a copy, say). `reduce`: as
  // ReduceAsync's op (then `average` must be false).
  Handle PushPullStagedAsync(const std::string& name, const void* input, void* output,
                             DataType dtype, uint64_t count, bool average,
                             std::vector<PartitionSpec>* parts,
                             std::optional<int> priority = std::nullopt,
                             CompletionCallback done = nullptr,
                             std::function<void(uint32_t)> part_summed = nullptr,
                             ReduceOp reduce = ReduceOp::kSum) EXCLUDES(ctx_.mu);
  // Partition `part` of staged operation `handle` may go. Any thread (a device's host
  // callback included: it takes the Worker's lock briefly and sends what the queue lets
  // out). Ignored once the operation finished or failed. Throws FerryError
  // (kInvalidArgument) for a handle that is not a staged operation with that partition.
  void ReleasePartition(Handle handle, uint32_t part) EXCLUDES(ctx_.mu);
  // Sparse rows: sums rows of a tensor declared [R, ...] (R rows of shape[1] x ...
  // elements each) over all workers, moving only the rows listed. `rows`: num_rows row
  // ids in [0, R), in any order, duplicates allowed; `values`: num_rows rows, row j for
  // rows[j]. When every worker has made its call of this round (each worker calls once
  // per round, possibly with num_rows 0), `output` row j receives the sum over all
  // workers' pushes of this round of row rows[j] (a duplicate id within one push counts
  // each time; averaged over the workers when `average`). Rows nobody pushed are never
  // materialised anywhere. Sums are added in worker-rank order: bit-identical whatever
  // the arrival order. The rows travel to the server owning their first byte in the
  // dense placement (one message per server per call, also with no rows).
  // REQUIRES: the tensor was declared (DeclareTensor) with its shape; same dtype.
  // `values` is copied before the call returns; `output` (num_rows rows) must live
  // until the operation finished. Throws FerryError (kInvalidArgument) on a row id out
  // of range, naming it; a server that sees inconsistent pushes fails the tensor's rows
  // with a reason naming the workers (Wait throws it). Runs in order with the tensor's
  // other operations; not in asynchronous training.
  // `done`: as for PushPullAsync.
  Handle PushPullRowsAsync(const std::string& name, const int64_t* rows, uint64_t num_rows,
                           const void* values, void* output, DataType dtype, bool average,
                           std::optional<int> priority = std::nullopt,
                           CompletionCallback done = nullptr) override;
  // Process sets (process_sets.h; Collective's comments).
  int AddProcessSet(const std::vector<int>& ranks, int id = 0) override EXCLUDES(ctx_.mu);
  void RemoveProcessSet(int set) override EXCLUDES(ctx_.mu);
  uint32_t DeclareInProcessSet(int set, const std::string& name, DataType dtype,
                          const std::vector<int64_t>& shape,
                          std::optional<int> priority = std::nullopt) override EXCLUDES(ctx_.mu);
  // Point-to-point (point_to_point.h; Collective's comments).
  Handle SendAsync(const void* data, uint64_t count, DataType dtype, int dst, int tag,
                   int32_t priority = PointToPoint::kLearnedPriority,
                   CompletionCallback done = nullptr) override {
    return p2p_->Send(data, count, dtype, dst, tag, priority, std::move(done));
  }
  Handle RecvAsync(void* data, uint64_t count, DataType dtype, int src, int tag,
                   CompletionCallback done = nullptr) override {
    return p2p_->Recv(data, count, dtype, src, tag, std::move(done));
  }
  // A tensor in CUDA device memory: the NCCL backend (local/local_nccl.h) of this one
  // rank copies it to pinned host memory, push_pulls it (asynchronously: other threads'
  // device push_pulls overlap, in the scheduling queue's order), copies the result back.
  // Blocks. Throws FerryError, e.g. in a build without NCCL.
  void PushPullDevice(const std::string& name, const void* input, void* output, DataType dtype,
                      uint64_t count, bool average, void* stream = nullptr) override;
  // Every worker's `data` becomes root's. Call on every worker with the same name.
  void Broadcast(const std::string& name, void* data, DataType dtype, uint64_t count,
                 int root) override;
  // Blocks until every worker called Barrier.
  void Barrier() override;
  // The end of a training iteration. REQUIRES: every worker calls it the same number of
  // times, at the same point of its sequence of push_pulls. Records the iteration's time
  // (and a trace mark); with FERRY_AUTOTUNE=1 it switches to the tuner's next candidate
  // (first waiting, deadline FERRY_OP_TIMEOUT_MS, for this worker's operations in
  // flight: best called where there are none), or after the last candidate sums every
  // worker's timings (a push_pull, so every worker must be here) and applies and logs
  // the best. Without a switch it never waits. (SchedulingControl does the work.)
  void StepBoundary() override;
  // Application compute, for the trace (FERRY_TRACE_DIR; worker/trace.h, cat "compute"):
  // a span [begin_us, end_us] on NowUs()'s clock (common/util/clock.h: the steady clock)
  // of compute that belongs to `tensor` (a name as declared, the layer whose parameters
  // the compute uses), in the forward or the backward pass. A backward span should end
  // when the tensor's gradient is ready (before its push_pull), and start at the previous
  // gradient-ready event (or the end of forward): ferry-sim --workload TRACE_DIR reads
  // them as the layers' fwd_ms and bwd_ms (sim/trace_workload.h). Spans of one phase may
  // be reported for a tensor several times per iteration (they add up). A no-op without
  // FERRY_TRACE_DIR; cheap (one line written under the trace's lock) with it.
  void TraceCompute(const std::string& tensor, bool backward, int64_t begin_us,
                    int64_t end_us) override {
    if (trace_) trace_->Compute(tensor, backward, begin_us, end_us);
  }
  // Changes the partition size (bytes, 1024..FERRY_MAX_MESSAGE_BYTES-4096) and the
  // credit (bytes, >= 1; used by the credit policy) for the operations started from now
  // on. Waits for this worker's operations first (deadline FERRY_OP_TIMEOUT_MS): the
  // partitions of a tensor change only with nothing in flight. REQUIRES: every worker
  // makes the same call at the same point of its sequence of push_pulls (between
  // iterations), or their keys differ and the sums never complete. At most 256
  // different partition sizes per job. During an autotune search the tuner overrides it.
  void SetScheduling(int64_t partition_bytes, int64_t credit_bytes) override {
    scheduling_->Set(partition_bytes, credit_bytes);
  }
  // What new operations use now.
  SchedulingChoice scheduling() const override { return scheduling_->current(); }
  // The queue's policy, or trirace once the default took trirace's transport.
  std::string scheduling_policy() const override {
    return scheduling_->trirace() ? "trirace" : queue_.policy_name();
  }
  // For uneven data (Horovod's join): this worker has no more batches. Its operations
  // finish, the servers stop waiting for it (sums from then on are over the workers
  // still pushing, as if the joined ones pushed zeros; averages still divide by size(),
  // as Horovod's, also for names first declared meanwhile (join_protocol.h); a broadcast
  // fails meanwhile, as Horovod's), and the call blocks until every worker has joined
  // (deadline FERRY_JOIN_TIMEOUT_MS); it returns the rank that joined last. Then every
  // worker may push again (the next epoch), all starting over at round 0.
  int Join() override {
    RefuseWithProcessSets("join()");
    return join_->Join();
  }
  // Waits for this worker's operations, tells the scheduler this worker is done, and
  // waits until every worker is (then the servers and scheduler exit). Idempotent; ends a
  // suspension too.
  void Shutdown() override;
  // Re-initialisation (collective.h): Suspend() waits for this worker's operations
  // (deadline FERRY_OP_TIMEOUT_MS), undoes every declaration (the servers free the keys:
  // RETIRE), refuses new operations (kShutdown) and tells the scheduler (SUSPEND); the
  // connections and heartbeats stay. Resume() tells the scheduler (RESUME) and accepts
  // operations again: the same rank, the names declared afresh (new ids, round 0), the
  // scheduling choice kept. Both are no-ops when there is nothing to do.
  // Not in asynchronous training: the servers' parameters go with the keys, and a worker
  // still training there would be refused the retired tensors.
  bool CanSuspend() const override { return !config_.server.async; }
  void Suspend() override {
    RefuseWithProcessSets("shutdown() before init() again");
    epochs_->Suspend();
  }
  void Resume() override { epochs_->Resume(); }
  // Elastic training (FERRY_ELASTIC=1; docs/reliability.md, "Elastic training"). When the
  // job's membership changes (a server or worker died), every unfinished operation of this
  // worker fails with kMembershipChanged, what it had in flight is dropped, and every new
  // operation (and barrier) fails the same way until the application calls Reset(), which
  // takes the new membership: rank() and size() may change, rounds start over at 0, and
  // the partitions of a server that left without a spare are placed again over the live
  // ones (the same on every worker: TensorCatalog::SetServerWeights). The application must
  // then restore its state from its last commit and take rank 0's (Horovod Elastic's
  // restore() and sync(); ferry.torch.elastic does both), because a sum some workers
  // applied before the change may not have reached the others. Reset() with no change
  // pending does nothing; it throws the job's failure if the job failed for good, and
  // kInvalidArgument without FERRY_ELASTIC=1. Buffers of the abandoned operations: as
  // after any failure (see the class comment), ZeroMQ may still read an input queued for a
  // dead server; keep input buffers alive (reusing them is fine).
  void Reset() override { epochs_->Reset(); }
  // Elastic joins: at a commit, every worker calls it at the same point of its sequence of
  // operations (a one-element push_pull: every worker learns whether any saw workers
  // waiting to join, so all agree). True: the application raises Horovod's
  // HostsUpdatedInterrupt (no rollback: the state was just committed) and calls Reset(),
  // which admits the waiting workers (rank 0 sends its tensor catalog, which they start
  // from: TensorCatalog::Load) and takes the epoch with them; then every worker takes rank
  // 0's state, as after a failure. Throws as an operation does (kMembershipChanged).
  bool HostsUpdated() override { return epochs_->HostsUpdated(); }
  // The membership epoch this worker's operations belong to (0 until the first Reset()).
  uint32_t epoch() const override { return ctx_.epoch.load(); }
  // The scheduler ended the job (every worker shut down or suspended, one for good): a
  // suspended worker can no longer Resume().
  bool JobEnded() const { return cluster_.shut_down(); }

  // Every counter of this worker by name (its own, then the transport's "van.*"): what
  // FERRY_STATS_FILE receives at Shutdown. Meanings: WorkerCounters (worker_counters.h).
  CounterValues Counters() const override;
  std::vector<int> Contributors(const std::string& name) override;  // collective.h
  Handle PullAverageAsync(const std::string& name, void* output, DataType dtype, uint64_t count,
                          CompletionCallback done = nullptr) override;  // collective.h
  // A binding's compression of tensor `name` (collective.h): wins over FERRY_COMPRESSION
  // for its later push_pulls ("" gives the choice back to FERRY_COMPRESSION). Throws kInvalidArgument for a bad spec, an undeclared or
  // non-float tensor, or asynchronous training.
  void SetCompression(const std::string& name, const std::string& compression) override;
  // For tests of the transport (e.g. Van::HoldDataReadsForTest).
  Van& van_for_test() { return van_; }
  // Bytes placed on each server so far (by rank), from this worker's placement.
  std::vector<uint64_t> PlacedBytes() const;

 private:
  explicit Worker(const Config& config);
  void Start();
  void OnMessage(Message&& m, const Origin& origin);  // IO thread
  // A point-to-point send or its acknowledgement, from another worker (IO thread).
  void OnPointToPoint(Message&& m, const Origin& origin);
  // PushPullAsync without the reserved-name check: for Ferry's own tensors. Submits, then
  // sends what the queue lets out from this thread (DensePushPull::SendReady).
  // `staged`, `part_summed`: as SubmitPushPull's.
  // `sit_out`: PullAverageAsync's (no input; the servers do not wait for this worker).
  Handle StartPushPull(const std::string& name, const void* input, void* output, DataType dtype,
                       uint64_t count, bool average, std::optional<int> priority,
                       CompletionCallback done, ReduceOp reduce = ReduceOp::kSum,
                       std::vector<PartitionSpec>* staged = nullptr,
                       std::function<void(uint32_t)> part_summed = nullptr,
                       bool sit_out = false) EXCLUDES(ctx_.mu);
  // How an operation of `t` combined by `reduce` is compressed (push_compression.h).
  CompressionSpec CompressionOf(const TensorInfo& t, ReduceOp reduce) const REQUIRES(ctx_.mu);
  // Throws FerryError(kInvalidArgument) unless `op` may combine `name`'s pushes here.
  void CheckReduceOp(const std::string& name, ReduceOp op, bool average) const;
  // The operation, checked and queued behind its tensor's earlier ones.
  // `staged` (PushPullStagedAsync): receives the partitions; the operation waits for their
  // releases.
  Handle SubmitPushPull(const std::string& name, const void* input, void* output, DataType dtype,
                        uint64_t count, bool average, std::optional<int> priority,
                        CompletionCallback done, ReduceOp reduce,
                        std::vector<PartitionSpec>* staged = nullptr,
                        std::function<void(uint32_t)> part_summed = nullptr,
                        bool sit_out = false) EXCLUDES(ctx_.mu);
  // A new operation of tensor `t`, registered in the table.
  // `label`: the stall check's (operation_table.h, "Labels").
  std::shared_ptr<Operation> NewOperation(const std::shared_ptr<TensorInfo>& tensor, bool average,
                                          std::optional<int> priority, CompletionCallback done,
                                          const std::string& label) REQUIRES(ctx_.mu);
  // TensorCatalog::Declare, and a superseded declaration handed to the sequencer.
  std::shared_ptr<TensorInfo> Declare(const std::string& name, DataType dtype,
                                      const std::vector<int64_t>& shape,
                                      std::optional<int> priority) REQUIRES(ctx_.mu);
  // The catalog of tensor `name`'s set (declared in a process set or not), or of
  // declaration `id`.
  TensorCatalog& CatalogOf(const std::string& name) REQUIRES(ctx_.mu);
  // Throws FerryError (kInvalidArgument) naming `what` while a process set is registered.
  void RefuseWithProcessSets(const char* what) EXCLUDES(ctx_.mu);
  TensorCatalog& CatalogOfId(uint32_t id) REQUIRES(ctx_.mu);
  // Tells every server that this worker is done with a retired declaration's keys (RETIRE).
  void RetireOnServers(uint32_t tensor_id);
  // The membership part once Start() made it, else null (a callback before it ignores).
  MembershipEpochs* epochs() EXCLUDES(ctx_.mu);
  // The list of kinds once Start() made it, else null (a reply before it is dropped).
  OperationKinds* kinds() EXCLUDES(ctx_.mu);

  Config config_;
  Van van_;
  ClusterClient cluster_;
  ScheduledQueue queue_;
  std::unique_ptr<Trace> trace_;  // FERRY_TRACE_DIR; null when off
  WorkerCounters counters_;
  // The parts' shared state and their one lock (worker_context.h). Collective::table_
  // holds every handle; its lock is taken inside the context's (never around it).
  WorkerContext ctx_{config_, van_, cluster_, table_, counters_};
  std::unique_ptr<TensorCatalog> catalog_ PT_GUARDED_BY(ctx_.mu);  // made once the servers are known
  std::unique_ptr<ProcessSets> sets_ PT_GUARDED_BY(ctx_.mu);  // made with the catalog
  // The parts, made in Start() in this order (each uses the ones above it).
  std::unique_ptr<Sequencer> sequencer_;  // one operation per tensor at a time
  std::unique_ptr<DensePushPull> dense_;
  std::unique_ptr<RowsPushPull> rows_;
  std::unique_ptr<JoinProtocol> join_;
  // Set once in Start() before kinds_ (under ctx_.mu); used once kinds() is non-null.
  std::unique_ptr<PointToPoint> p2p_;
  // Every kind above in one list (operation_kind.h). Set once in Start() under ctx_.mu;
  // van-io reads it under ctx_.mu (kinds()), since a reply may come before it exists.
  std::unique_ptr<OperationKinds> kinds_;
  // Set once in Start() under ctx_.mu; the membership callbacks (van-io) read it under
  // ctx_.mu, since they may come before it exists (epochs()).
  std::unique_ptr<MembershipEpochs> epochs_;
  std::unique_ptr<SchedulingControl> scheduling_;
  std::unique_ptr<LocalNccl> nccl_ GUARDED_BY(ctx_.mu);  // made at the first device push_pull
  // Staged operations with partitions not yet released (PushPullStagedAsync).
  std::unordered_map<Handle, std::shared_ptr<Operation>> staged_ GUARDED_BY(ctx_.mu);
  std::unique_ptr<Sender> sender_;                   // the "sender" thread; destroyed first
};

}  // namespace ferry
