#ifndef FERRY_WORKER_C_API_H_
#define FERRY_WORKER_C_API_H_

/* The C API of libferry, for framework plugins. One worker per process.
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
int ferry_rank(void);
int ferry_size(void);                       /* machines x FERRY_LOCAL_SIZE */
int ferry_local_rank(void);                 /* FERRY_LOCAL_RANK (0 without a local group) */
int ferry_local_size(void);                 /* FERRY_LOCAL_SIZE (1 without a local group) */
int ferry_declare_tensor(const char* name, int dtype, const int64_t* shape, int ndim);
/* priority: INT32_MIN for the default (-(declaration index)). Returns a handle > 0. */
int64_t ferry_push_pull_async(const char* name, const void* input, void* output, int dtype,
                              uint64_t count, int average, int32_t priority);
/* Sparse rows (Worker::PushPullRowsAsync): `num_rows` row ids of tensor `name`
 * (declared first with its shape [rows, ...]); `values` and `output` hold num_rows rows.
 * Every worker calls it once per round. Returns a handle > 0 for ferry_wait/ferry_poll. */
int64_t ferry_push_pull_rows_async(const char* name, const int64_t* rows, uint64_t num_rows,
                                   const void* values, void* output, int dtype, int average,
                                   int32_t priority);
int ferry_poll(int64_t handle);             /* 1 done, 0 running, < 0 error */
int ferry_wait(int64_t handle);
int ferry_broadcast(const char* name, void* data, int dtype, uint64_t count, int root);
int ferry_barrier(void);
/* Elastic training (FERRY_ELASTIC=1): after a call returned -9 (kMembershipChanged: a node
 * died and the job goes on without it), restore the last committed state, call
 * ferry_reset() (rank and size may change), then take rank 0's state (ferry_broadcast).
 * Worker::Reset in worker/worker.h. */
int ferry_reset(void);
/* Uneven data: this worker has no more batches; returns once every worker joined. */
int ferry_join(void);
/* The end of a training iteration (Worker::StepBoundary): call once per iteration on
 * every worker, with no push_pull in flight. */
int ferry_step_boundary(void);
/* Application compute for the trace (FERRY_TRACE_DIR; Worker::TraceCompute): a span
 * [begin_us, end_us] of ferry_now_us() of the forward (backward = 0) or backward pass's
 * compute belonging to tensor `name`. A no-op without FERRY_TRACE_DIR. */
int ferry_trace_compute(const char* name, int backward, int64_t begin_us, int64_t end_us);
/* Microseconds on the worker's clock (the steady clock, NowUs): for ferry_trace_compute. */
int64_t ferry_now_us(void);
/* Partition size and credit, both in bytes, from the next push_pull on (every worker,
 * between iterations: Worker::SetScheduling). */
int ferry_set_scheduling(int64_t partition_bytes, int64_t credit_bytes);
int ferry_shutdown(void); /* idempotent; concurrent callers take turns */
const char* ferry_last_error(void);

#ifdef __cplusplus
}
#endif

#endif  // FERRY_WORKER_C_API_H_
