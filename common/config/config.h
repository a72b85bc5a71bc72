#pragma once

// Config: every setting of a Ferry process, read once from the environment.
//
// Sources: DMLC_* (BytePS/ps-lite compatible), FERRY_*, and the BYTEPS_* aliases that
// mean the same thing in the same units. A FERRY_* value wins over its alias, with a
// warning. Every value is validated here; a bad one throws FerryError(kInvalidConfig)
// whose message names the variable, its value and what is allowed. Roles exit with
// code 2 on that error. docs/configuration.md lists every variable.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/compress/compression_spec.h"
#include "common/config/scheduling_policy.h"

namespace ferry {

enum class NodeRole { kScheduler, kServer, kWorker };
const char* NodeRoleName(NodeRole role);

// What a server sums on (FERRY_SERVER_DEVICE).
enum class ServerDevice { kCpu, kGpu };

// The runtime behind a worker's device tensors (FERRY_DEVICE_API, worker/device/): CUDA, or
// the fake device (host memory standing in for device memory, fake_device.h) with which
// the bindings send host tensors through the device path, to test it without a GPU.
enum class DeviceApiKind { kCuda, kFake };

// Reads a variable; returns nullptr when unset. Tests inject their own environment.
using EnvLookup = std::function<const char*(const char* name)>;
EnvLookup ProcessEnvironment();
EnvLookup MapEnvironment(const std::map<std::string, std::string>& env);

struct Config {
  NodeRole role = NodeRole::kWorker;

  // Who is in the job, and how long to wait for the others.
  struct Cluster {
    int num_workers = 0;    // DMLC_NUM_WORKER: machines (see Local)
    int num_servers = 0;    // DMLC_NUM_SERVER
    int worker_id = -1;     // DMLC_WORKER_ID; -1 = rank by join order
    std::string node_kind;  // FERRY_NODE_KIND: "", "colocated" or "cpu"
    int64_t connect_timeout_ms = 120000;
    int64_t heartbeat_interval_ms = 1000;
    int64_t heartbeat_timeout_ms = 10000;
    int64_t op_timeout_ms = 600000;      // one push_pull, barrier or broadcast
    int64_t join_timeout_ms = 86400000;  // Worker::Join: waiting for the other workers
    // The stall check (scheduler/stall_check.h), read by the scheduler: a worker operation
    // that waits this long for ranks that never submitted it is named, with those ranks, on
    // every waiting worker (and again every as long); 0 = off. FERRY_STALL_WARNING_MS.
    int64_t stall_warning_ms = 60000;
    // ... and after this long the job ends with that message; 0 = never (the operation's
    // FERRY_OP_TIMEOUT_MS still applies). FERRY_STALL_SHUTDOWN_MS.
    int64_t stall_shutdown_ms = 0;
    // Elastic training (docs/reliability.md, "Elastic training"): a dead server or worker
    // starts a new membership epoch instead of ending the job. FERRY_ELASTIC.
    bool elastic = false;
    // FERRY_SPARE (servers of an elastic job): wait, registered, for a dead server's slot.
    bool spare = false;
    // FERRY_MIN_WORKERS: below this many live workers the scheduler waits for new ones,
    // at most min_workers_timeout_ms (FERRY_MIN_WORKERS_TIMEOUT_MS), then fails the job.
    int min_workers = 1;
    int64_t min_workers_timeout_ms = 600000;
    // FERRY_MAX_WORKERS: the most workers an elastic job takes (default DMLC_NUM_WORKER).
    int max_workers = 0;
    // FERRY_SCHEDULER_TIMEOUT_MS: how long servers and workers train on without any
    // scheduler answering (one restarted, or a standby, adopts the job meanwhile:
    // scheduler/adoption.h); then every node ends, naming the scheduler. Unset: 60 s, or
    // the heartbeat timeout when that is longer.
    int64_t scheduler_timeout_ms = 60000;
  };
  Cluster cluster;

  // Addresses, ports and the links between processes.
  struct Transport {
    std::string root_uri;   // as given (IP or host name)
    std::string root_host;  // resolved IPv4 address of the scheduler
    int root_port = 0;
    // Every scheduler of the job (FERRY_SCHEDULERS; default: the one above), the first
    // being DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT; nodes follow whichever leads
    // (common/cluster/scheduler_link.h). `scheduler_index`: a scheduler's own entry (its
    // DMLC_NODE_HOST and DMLC_PORT; default the first); 0 on other roles.
    struct Endpoint {
      std::string host;  // resolved IPv4 address
      int port = 0;
      std::string ZmqEndpoint() const;  // tcp://host:port
    };
    std::vector<Endpoint> schedulers;
    int scheduler_index = 0;
    std::string node_host;  // address this node advertises (resolved IP)
    std::string bind_host;  // address this node binds (FERRY_BIND_ADDR, default node_host)
    int node_port = 0;      // DMLC_PORT; 0 = any free port
    int64_t max_message_bytes = 1LL << 30;
    // A push without an answer (acknowledgement or sum) for this long is sent again
    // (after the acknowledgement, only a header-only RESEND_SUM for its sum); servers drop
    // the duplicates. 0 turns resending off. Doubles per attempt up to 32x.
    int64_t resend_timeout_ms = 2000;
    // ZeroMQ heartbeats on every connection: a connection silent this long is closed and
    // reconnected (what it carried is resent by the above). 0 = rely on TCP alone.
    int64_t link_timeout_ms = 5000;
    // An accepted connection that has not completed its handshake this long is closed
    // (a flood of silent connections holds descriptors no longer). FERRY_HANDSHAKE_TIMEOUT_MS.
    int64_t handshake_timeout_ms = 10000;
    // Workers open a second connection to each server for control messages (acks,
    // errors, JOIN_ACK, RESEND_SUM), and servers answer them there, so they never wait
    // behind tensor bytes (common/transport/van.h, "Lanes"). FERRY_CONTROL_LANE; off by
    // default: it costs small push_pulls 15% on loopback and has not yet moved an
    // iteration time (docs/benchmarks.md, "Control lane").
    bool control_lane = false;
    // TCP_NOTSENT_LOWAT of the data connections (workers' to servers, servers' accepted
    // ones): unsent bytes the kernel holds per connection; 0 = the kernel's default
    // (unlimited up to the send buffer). FERRY_TCP_NOTSENT_LOWAT.
    int64_t tcp_notsent_lowat = 0;
    // Pushes (workers) and sums (servers) wait in a priority queue per destination node
    // and go to ZeroMQ while less than this many of their bytes to that node are
    // unreleased (van.h, "Order"); 0 = at once, in order. FERRY_TRANSPORT_WATERMARK_BYTES.
    int64_t watermark_bytes = 0;
    // Workers send a partition larger than this as frames of this many bytes (the last
    // one shorter), each acknowledged and summed on its own, and servers send each frame's
    // sum as soon as every worker's frame is in (streaming aggregation; server/key_state.h,
    // "Frames"); 0 = whole partitions. A multiple of 8 in [4096, FERRY_MAX_MESSAGE_BYTES].
    // Not in asynchronous mode (FERRY_ENABLE_ASYNC: whole keys). FERRY_FRAME_BYTES.
    int64_t frame_bytes = 0;
    // The shared-memory lane (common/transport/shm_lane.h): a worker and a server proven to
    // share a host (and network namespace) move tensor bytes through shared memory; the
    // sockets carry descriptors. FERRY_SHM; on by default.
    bool shm = true;
    // What a node may reserve for its lanes' segments, all peers together; a payload that
    // finds no room goes over TCP. FERRY_SHM_BYTES.
    int64_t shm_bytes = 512LL << 20;
    // FERRY_SECRET or the contents of FERRY_SECRET_FILE: the cluster secret (CURVE).
    // Never logged.
    std::string secret;
    // Fault injection, for tests only: drop this percentage of received data messages
    // (PUSH, PUSH_FUSED, PUSH_ACK, PUSH_RESULT, RESEND_SUM); hold every received message
    // this long.
    double test_drop_percent = 0.0;
    int64_t test_delay_ms = 0;
  };
  Transport transport;

  // How a worker cuts and paces its tensors (worker/partition_scheduling/policies.h;
  // docs/configuration.md).
  struct Scheduling {
    SchedulingPolicy policy = SchedulingPolicy::kCredit;
    int64_t partition_bytes = 1048576;
    int credit = 4;                   // partitions in flight per worker
    int64_t credit_bytes = 0;         // if > 0, the credit in bytes instead
    // FERRY_WINDOW=bdp: the `credit` policy's credit follows the measured bandwidth-delay
    // product (worker/partition_scheduling/window_estimator.h), starting from the credit above;
    // false (`fixed`, the default): the credit stays. Not the default: measured against the fixed 4 x 1 MiB, it is 2-6%
    // slower on the train-sim models and ~5% faster on the unified cluster
    // (docs/benchmarks.md, "The BDP window").
    bool window_bdp = false;
    double window_gain = 2.0;                // FERRY_WINDOW_GAIN
    int64_t window_min_bytes = 1 << 20;      // FERRY_WINDOW_MIN_BYTES
    int64_t window_max_bytes = 64LL << 20;   // FERRY_WINDOW_MAX_BYTES
    int64_t fusion_bytes = 262144;    // credit: fuse small partitions up to this; 0 = never
    int64_t p3_slice_bytes = 160000;  // p3: the partition size
    int64_t bucket_bytes = 26214400;  // fifo-bucket: a bucket goes once it holds this much
    int64_t bucket_timeout_ms = 5;    // fifo-bucket: ... or when no tensor came for this long
    // FERRY_PARTITION_MS: > 0: after two iterations, partitions shrink to what the
    // workers' measured link rate sends in this many ms (worker/scheduling_control.h);
    // 0: partitions stay partition_bytes. Unset: kDefaultPartitionMs, or 0 when
    // FERRY_PARTITION_BYTES or FERRY_AUTOTUNE chooses the size; the default (not a set
    // value) also stands aside when every server is on loopback (one machine, where the
    // measured rate is the CPU's, not a link's).
    static constexpr double kDefaultPartitionMs = 2;
    double partition_ms = 0;
    bool partition_ms_set = false;  // FERRY_PARTITION_MS was set
    // FERRY_PARTITION_PER_LINK=1: where partitions are sized by time, each worker cuts its
    // pushes to each server in pieces sized by its own measured path
    // (worker/partition_scheduling/link_sizing.h), decided again when a rate moves by more
    // than repartition_threshold (FERRY_REPARTITION_THRESHOLD, a fraction). Off by default:
    // it measured 0.4-0.9% slower with one link at a quarter rate (docs/benchmarks.md).
    bool partition_per_link = false;
    double repartition_threshold = 0.2;
    // FERRY_DECOMPOSE=per-layer: each worker cuts each layer's pushes in the pieces
    // DecomposeLayers chooses from its measured backward compute and rate
    // (worker/partition_scheduling/layer_decomposition.h); off: the link's pieces.
    bool decompose_per_layer = false;
    bool autotune = false;            // search partition size and credit online
    int autotune_steps = 3;           // iterations per candidate; the first is not scored
    std::vector<int64_t> autotune_partition_bytes;  // empty: partition/4, partition, 4 x partition
    std::vector<int64_t> autotune_credits;          // in partitions; empty: C/2, C, 2C
    std::vector<double> autotune_window_gains;      // window gains; empty: G/2, G, 2G
    std::vector<int64_t> autotune_frame_bytes;      // frame sizes (0: none); empty: F/2, F, 2F if F
    // What a worker takes of `trirace` once point-to-point sends are seen, under the default
    // policy (FERRY_SCHEDULING_POLICY unset): its Van the watermark and TCP_NOTSENT_LOWAT
    // from its first send on, every worker the frames at the sizing boundary when any
    // worker sent (worker/scheduling_control.h). Each is what `trirace` would use (a value
    // set stays); all zero when the policy was set, or the transport already has them.
    struct SendsTransport {
      int64_t frame_bytes = 0;
      int64_t watermark_bytes = 0;
      int64_t tcp_notsent_lowat = 0;
      bool any() const { return frame_bytes > 0 || watermark_bytes > 0 || tcp_notsent_lowat > 0; }
      // Sets in `t` each value above that is not zero.
      void ApplyTo(Transport& t) const;
    };
    SendsTransport trirace_on_sends;
    // The partition size a worker starts with: the slice size under p3, else partition_bytes.
    int64_t InitialPartitionBytes() const;
    // The credit in bytes with partitions of `partition` bytes: credit_bytes if set, else
    // `credit` partitions' worth (BytePS counts credit in partitions).
    int64_t CreditBytesFor(int64_t partition) const;
  };
  Scheduling scheduling;

  // How a server sums (docs/servers.md).
  struct Server {
    int engine_threads = 4;
    bool async = false;  // FERRY_ENABLE_ASYNC: the servers hold the parameters
    // deterministic: sum a round's pushes in worker-rank order (bitwise reproducible
    // floats). split_bytes: a sum of at least this many bytes is cut into slices summed
    // by several threads; 0 = never.
    bool deterministic = false;
    int64_t split_bytes = 1 << 20;
    // FERRY_BACKUP_WORKERS: a round of averaged floating-point push_pulls closes once all
    // but this many workers pushed (server/stragglers.h); 0: every round waits for every
    // worker. Workers send it with every push, servers refuse a push with another value.
    int backup_workers = 0;
    // CPU engines: a push of at most this many bytes that arrives while its engine is idle
    // (nothing queued, nothing running) is summed and answered on the IO thread, saving
    // two thread hand-offs; 0 = never. FERRY_SERVER_INLINE_BYTES.
    int64_t inline_bytes = 65536;
    // The summation device: FERRY_SERVER_DEVICE=cpu (common/reduce), gpu or gpu:N
    // (server/gpu/, on CUDA device N, default 0), with FERRY_SERVER_GPU_STREAMS CUDA
    // streams per engine thread. Only the syntax is checked here; whether the GPU exists
    // and can run Ferry's kernels is checked at server start-up (CheckGpuAvailable).
    ServerDevice device = ServerDevice::kCpu;
    int gpu = 0;
    int gpu_streams = 2;
  };
  Server server;

  // Gradient compression (common/compress/; docs/compression.md): the compressor of every
  // floating-point push_pull of at least min_bytes (FERRY_COMPRESSION,
  // FERRY_COMPRESSION_MIN_BYTES), unless a binding chose one for the tensor. Never
  // integers, broadcasts, allgathers, sparse rows, other reductions than the sum, nor
  // asynchronous training.
  struct Compression {
    CompressionSpec spec;
    int64_t min_bytes = 65536;
  };
  Compression compression;

  // Intra-machine reduction (worker/local/local_group.h). `size` processes on one
  // machine share its DMLC_WORKER_ID; only local rank 0 registers with the scheduler.
  // cluster.num_workers (DMLC_NUM_WORKER) counts machines. socket: the abstract ipc
  // socket name of the machine's local group (FERRY_LOCAL_SOCKET; empty = derived from
  // the scheduler address, port and DMLC_WORKER_ID, see LocalSocketName()).
  struct Local {
    int size = 1;        // FERRY_LOCAL_SIZE / BYTEPS_LOCAL_SIZE
    int rank = 0;        // FERRY_LOCAL_RANK / BYTEPS_LOCAL_RANK
    std::string socket;  // FERRY_LOCAL_SOCKET
  };
  Local local;

  DeviceApiKind device_api = DeviceApiKind::kCuda;  // FERRY_DEVICE_API: cuda or fake

  // Logs, counters and traces.
  struct Diagnostics {
    int log_level = 0;       // glog minloglevel: 0 INFO, 1 WARNING, 2 ERROR
    int log_verbosity = 0;   // glog v: 1 DEBUG, 2 TRACE
    std::string stats_file;  // FERRY_STATS_FILE: counters as JSON at exit (%r)
    std::string trace_dir;   // non-empty: a Chrome-trace timeline per worker there
    // Live metrics (scheduler/cluster_metrics.h): the scheduler serves the cluster's
    // Prometheus series, /api/status and a status page on metrics_bind:metrics_port
    // (port 0: off); the nodes then report their counters with their heartbeats.
    int metrics_port = 0;                   // FERRY_METRICS_PORT
    std::string metrics_bind = "127.0.0.1";  // FERRY_METRICS_BIND: an IPv4 address
    int64_t metrics_linger_ms = 0;  // FERRY_METRICS_LINGER_MS: serving after the job's end
  };
  Diagnostics diagnostics;

  // Warnings found while reading (aliases overridden, ...), to log once logging is up.
  std::vector<std::string> warnings;

  // Reads and validates. `role_from_env`: read DMLC_ROLE; otherwise `role` is given
  // by the caller (a binary that is one role) and DMLC_ROLE, if set, must agree.
  static Config FromEnvironment(const EnvLookup& env, const NodeRole* fixed_role = nullptr);

  // The name of this machine's local group socket (Linux abstract namespace, so no file
  // to clean up): local.socket if set, else one derived from the scheduler's address and
  // port and DMLC_WORKER_ID, so two jobs (or two machines of one job on loopback) on one
  // host do not collide.
  std::string LocalSocketName() const;
  // One line describing the settings, for the start-up log.
  std::string Summary() const;
};

// Resolves a host name or IP to an IPv4 address; throws FerryError(kInvalidConfig)
// naming `variable` if it cannot be resolved.
std::string ResolveHost(const std::string& variable, const std::string& host);

// The local address used to reach `remote_ip` (no packet is sent).
std::string LocalAddressFor(const std::string& remote_ip);

}  // namespace ferry
