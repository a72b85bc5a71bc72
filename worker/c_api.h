#ifndef FERRY_WORKER_C_API_H_
#define FERRY_WORKER_C_API_H_

/* The C API of libferry, for framework plugins (ferry.torch goes through it with ctypes:
 * plugins/ferry/_core.py). One worker per process.
 *
 * Functions return 0 (or a non-negative value) on success and a negative ferry error
 * code (-ErrorCode, common/util/error.h) on failure; ferry_last_error() then gives the
 * message (thread-local, valid until the thread's next call).
 *
 * With FERRY_LOCAL_SIZE > 1 the calls go through the machine's local group
 * (worker/local/local_group.h): rank and size count processes, ferry_join is refused,
 * and ferry_set_scheduling works on local rank 0 only.
 *
 * One owner (worker/binding_core.h, shared with the Python extension): every function is
 * thread-safe, and each holds the worker for its whole call, so ferry_shutdown() on one
 * thread never destroys it under a call still running on another (that call finishes or
 * returns its error). Before ferry_init() calls return -7 (kInvalidArgument, "not
 * initialised"); after ferry_shutdown() they return -6 (kShutdown, "ferry was shut
 * down"), ferry_init() included. DMLC_ROLE may be unset (else: worker). */

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dtype values: 0 float32, 1 float16, 2 bfloat16, 3 float64, 4 int32, 5 int64. */

int ferry_init(void);                       /* reads the environment, joins the cluster */
int ferry_is_initialized(void);             /* 1 between ferry_init and ferry_shutdown */
int ferry_num_servers(void);
/* 1 if the launcher gave the local group's shape (FERRY_LOCAL_SIZE or BYTEPS_LOCAL_SIZE). */
int ferry_local_size_from_environment(void);
int ferry_rank(void);
int ferry_size(void);                       /* machines x FERRY_LOCAL_SIZE */
int ferry_local_rank(void);                 /* FERRY_LOCAL_RANK (0 without a local group) */
int ferry_local_size(void);                 /* FERRY_LOCAL_SIZE (1 without a local group) */
int ferry_declare_tensor(const char* name, int dtype, const int64_t* shape, int ndim);
/* Process sets (worker/process_sets.h): registers worker ranks `ranks[0..n)` as a set and
 * returns its id (> 0); every worker adds the same sets in the same order (`id` 0), or every
 * member adds it under the same `id` (128..255: a torch.distributed group). A tensor declared
 * in a set (on its members) is summed over them by every operation on its name. */
int ferry_add_process_set(const int32_t* ranks, int n, int id);
int ferry_remove_process_set(int set);
/* Declares tensor `name` in set `set` (on a member); returns 0. */
int ferry_declare_tensor_in_set(int set, const char* name, int dtype, const int64_t* shape,
                                int ndim);
/* priority: INT32_MIN for the default (-(declaration index)). Returns a handle > 0. */
int64_t ferry_push_pull_async(const char* name, const void* input, void* output, int dtype,
                              uint64_t count, int average, int32_t priority);
/* Sparse rows (Worker::PushPullRowsAsync): `num_rows` row ids of tensor `name`
 * (declared first with its shape [rows, ...]); `values` and `output` hold num_rows rows.
 * Every worker calls it once per round. Returns a handle > 0 for ferry_wait/ferry_poll. */
int64_t ferry_push_pull_rows_async(const char* name, const int64_t* rows, uint64_t num_rows,
                                   const void* values, void* output, int dtype, int average,
                                   int32_t priority);
/* Backup workers (Worker::PullAverageAsync): the average of the next round of float tensor
 * `name` into `output`, without contributing to it (the servers do not wait for this
 * worker). Returns a handle > 0. */
int64_t ferry_pull_average_async(const char* name, void* output, int dtype, uint64_t count);
/* As ferry_push_pull_async, the pushes combined by `op` (1 min, 2 max, 3 product:
 * common/reduce/reduce.h's ReduceOp) instead of summed. */
int64_t ferry_reduce_async(const char* name, const void* input, void* output, int dtype,
                           uint64_t count, int op, int32_t priority);
/* Point-to-point (worker/point_to_point.h): `count` elements of `dtype` at `data` to worker
 * rank `dst` under `tag`, for its matching ferry_recv_async; the handle finishes once that
 * receive took them. Delivery keeps the call order per (source, destination, tag).
 * `priority` orders this worker's sends among themselves, larger first; INT32_MIN: the order
 * in which the receiver first asked for each tag, learned from its earlier receives. */
int64_t ferry_send_async(const void* data, uint64_t count, int dtype, int dst, int tag,
                         int32_t priority);
/* The next send from rank `src` under `tag` into `data` (`count` elements of `dtype`). */
int64_t ferry_recv_async(void* data, uint64_t count, int dtype, int src, int tag);
/* The compression of declared tensor `name`'s later push_pulls ("onebit+ef", "topk:0.01",
 * "none"...; docs/compression.md), over FERRY_COMPRESSION ("": FERRY_COMPRESSION decides
 * again). Every worker sets the same. */
int ferry_set_compression(const char* name, const char* compression);
/* A push_pull of a tensor in device memory (worker/device/device_binding.h): `input` and
 * `output` on device `device` (a CUDA index), written and read by the work queued on the
 * runtime's stream `stream` (a cudaStream_t; 0: the default stream) before and after the
 * call. The partitions are copied to pinned memory after the stream's earlier work, each
 * sent as soon as it landed; the sums are copied back on a stream of Ferry's, and once
 * ferry_wait returned, `stream`'s later work sees them (the host thread never waits for
 * the device). `op`: 0 sum (averaged if `average`), or as ferry_reduce_async's. Returns a
 * handle > 0 for ferry_wait and the others. With FERRY_LOCAL_SIZE > 1: the NCCL backend,
 * which returns once `output` holds the result. Fails (kInvalidArgument) in a build
 * without CUDA (see ferry_cuda_built). */
int64_t ferry_push_pull_device_async(const char* name, const void* input, void* output,
                                     int dtype, uint64_t count, int average, int op,
                                     int32_t priority, int device, uintptr_t stream);
/* 1 if this libferry has the CUDA data path (built where nvcc was found), GPU or not. */
int ferry_cuda_built(void);
int ferry_poll(int64_t handle);             /* 1 done, 0 running, < 0 error */
int ferry_wait(int64_t handle);
/* Waits at most timeout_ms: 1 once finished (the handle is released), 0 if not yet. */
int ferry_wait_for(int64_t handle, int64_t timeout_ms);
/* Waits at most timeout_ms for any of `count` handles: the first finished one in the list
 * (wait on it next: that returns its error), or 0 if none finished in time. */
int64_t ferry_wait_any(const int64_t* handles, int count, int64_t timeout_ms);
int ferry_broadcast(const char* name, void* data, int dtype, uint64_t count, int root);
int ferry_barrier(void);
/* Elastic training (FERRY_ELASTIC=1): after a call returned -9 (kMembershipChanged: a node
 * died and the job goes on without it), restore the last committed state, call
 * ferry_reset() (rank and size may change), then take rank 0's state (ferry_broadcast).
 * Worker::Reset in worker/worker.h. */
int ferry_reset(void);
/* The membership epoch of this worker's operations (elastic training; 0 otherwise). */
int64_t ferry_epoch(void);
/* Elastic training, at a commit on every worker: 1 if workers wait to join (then reset). */
int ferry_hosts_updated(void);
/* Uneven data: this worker has no more batches; returns once every worker joined, with
 * the rank that joined last. */
int ferry_join(void);
/* The end of a training iteration (Worker::StepBoundary): call once per iteration on
 * every worker, with no push_pull in flight. */
int ferry_step_boundary(void);
/* Backup workers (FERRY_BACKUP_WORKERS; Worker::Contributors): writes to `ranks` (room for
 * `capacity`) the ranks whose pushes are in the last completed push_pull of `name`, or of
 * the last step with `name` "" ; returns how many (at most size()). */
int ferry_contributors(const char* name, int32_t* ranks, int capacity);
/* Application compute for the trace (FERRY_TRACE_DIR; Worker::TraceCompute): a span
 * [begin_us, end_us] of ferry_now_us() of the forward (backward = 0) or backward pass's
 * compute belonging to tensor `name`. A no-op without FERRY_TRACE_DIR. */
int ferry_trace_compute(const char* name, int backward, int64_t begin_us, int64_t end_us);
/* Microseconds on the worker's clock (the steady clock, NowUs): for ferry_trace_compute. */
int64_t ferry_now_us(void);
/* Partition size and credit, both in bytes, from the next push_pull on (every worker,
 * between iterations: Worker::SetScheduling). */
int ferry_set_scheduling(int64_t partition_bytes, int64_t credit_bytes);
/* The scheduling in force: partition and credit bytes, the window's gain (0: a fixed
 * credit), the frame size (0: whole partitions) and the policy's name (written into
 * `policy`, `policy_size` bytes with its terminating 0, cut if longer). */
int ferry_scheduling(int64_t* partition_bytes, int64_t* credit_bytes, double* window_gain,
                     int64_t* frame_bytes, char* policy, uint64_t policy_size);
/* Every counter of the worker's registry as lines "name value\n" into `text` (`size`
 * bytes with the terminating 0). Returns the bytes the whole text needs (without the 0):
 * call again with a larger buffer if that is not less than `size`. */
int64_t ferry_counters(char* text, uint64_t size);
/* The name of the tensor a binding's host ids travel under (a reserved name). */
const char* ferry_host_ids_tensor_name(void);
int ferry_shutdown(void); /* idempotent; concurrent callers take turns */
/* Leaves the job for now: the rank stays, every declaration is dropped, and ferry_init()
 * joins again under the same rank (a local group or asynchronous training: as
 * ferry_shutdown). The job ends once every worker left and one shut down for good. */
int ferry_suspend(void);
const char* ferry_last_error(void);
/* The name of a ferry error code ("timeout"), for messages; "unknown error" for others. */
const char* ferry_error_code_name(int code);

#ifdef __cplusplus
}
#endif

#endif  // FERRY_WORKER_C_API_H_
