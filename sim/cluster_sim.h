#pragma once

// Simulate(): one Ferry job in simulated time: W workers replaying a workload against
// servers on a simulated network (docs/simulation.md says what is modelled and how it was
// checked against the emulated cluster).
//
//   SimOptions o;
//   o.workload = ScaleWorkload(LoadWorkload("bench/workloads/vgg16_layers.csv"), 1, 1);
//   o.cluster.workers = 8; o.cluster.colocate = true;
//   o.env["FERRY_SCHEDULING_POLICY"] = "p3";
//   SimResult r = Simulate(o);          // r.median_ms, r.lb1_ms, r.ring_ms, ...
//
// Deterministic: the same options (seed included) give the same result, bit for bit.
// Throws FerryError(kInvalidConfig) for options it cannot simulate, naming the option, and
// FerryError(kInternal) for a job that stops before its end (a deadlock: with backup
// workers catching up, every worker may sit out the same round, which then never closes),
// and FerryError(kMismatch) for one that fails as a real one would (a worker catching up
// sat out a compressed round).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/job.h"
#include "sim/network.h"
#include "sim/pipeline_bound.h"
#include "sim/pipeline_spec.h"
#include "sim/pipeline_worker.h"
#include "sim/workload.h"

namespace ferry::sim {

struct ClusterSpec {
  int workers = 2;
  int servers = 2;        // servers on hosts of their own (none with colocate)
  bool colocate = false;  // one server on every worker's host instead
  int cpu_servers = 0;    // and this many CPU-only servers, each on a host of its own
  double rate_bits_per_s = 1e9;  // every host's link, each direction
  double latency_us = 0;         // one way
  // By worker rank: its host's link, each direction (uneven links); empty: every worker's
  // at rate_bits_per_s. Servers on hosts of their own keep rate_bits_per_s.
  std::vector<double> worker_rates_bits_per_s;
  // Worker `rank`'s link.
  double WorkerRate(int rank) const {
    return worker_rates_bits_per_s.empty() ? rate_bits_per_s
                                           : worker_rates_bits_per_s[static_cast<size_t>(rank)];
  }
  // Whether the workers' links differ.
  bool Uneven() const;
  // The slowest host link.
  double SlowestRate() const;
};

// The model's constants, calibrated once (docs/simulation.md, "Calibration").
struct ModelParams {
  double tcp_efficiency = 0.94;      // goodput / shaped rate on a link
  double message_us = 30;            // per message, added to its delivery
  uint64_t header_bytes = 128;       // per message on a link
  double sum_bytes_per_s = 8e9;      // one engine thread's summation rate
  double local_bytes_per_s = 4e9;    // a copy within a host (the shared-memory lane)
  double loopback_cost = 2.5;        // loopback TCP's cost in copies
  double compute_jitter = 0;         // coefficient of variation of every compute time
  double window_bytes = 0;           // a connection's bytes on the way (0: no limit)
  double interleave_bytes = 1500;    // messages this small go between others' segments
  double segment_bytes = 1 << 20;    // larger messages take turns on a link in these
  NetworkModel network = NetworkModel::kQueued;
};

struct SimOptions {
  Workload workload;  // scaled already (unused with a pipeline)
  // A hybrid pipeline + data-parallel job instead of `workload` (scaled already):
  // cluster.workers must be a multiple of its stages.
  std::optional<PipelineSpec> pipeline;
  // A pipeline job's workers end each iteration with StepBoundary (as DistributedOptimizer
  // .step does; hybrid_bench.py does not).
  bool pipeline_step_boundary = false;
  ClusterSpec cluster;
  // Worker rank -> a factor on every compute time of that worker (one slow GPU; on top of
  // the workload's scale). Ranks not listed compute at 1x.
  std::map<int, double> worker_compute_scale;
  // A straggler that moves: in iteration i, worker i mod workers computes this many times
  // longer (data-parallel jobs; 1: none), as ferry-train-sim's --rotating_slow_factor.
  double rotating_slow_factor = 1;
  // Backup workers (FERRY_BACKUP_WORKERS > 0): how a late worker catches up. Data-parallel
  // jobs; no effect without backup workers.
  CatchUp catch_up = CatchUp::kAllPartitions;
  ModelParams model;
  std::map<std::string, std::string> env;  // FERRY_* variables, as a real worker reads them
  int warmup = 2;
  int iterations = 10;
  uint64_t seed = 1;
  bool record_parts = false;  // SimResult::parts (ferry-sim --parts-out)
};

struct HostUse {
  std::string name;  // "worker 0", "worker 0 + server 0", "server 2 (cpu)"
  double up = 0;     // link utilisation over the whole run, 0..1
  double down = 0;
};

// A pipeline job's own results (SimOptions::pipeline).
struct PipelineOutcome {
  int stages = 0;
  int replicas = 0;
  PipelineBound bound;
  PipelineCluster cluster;  // what the bound was computed from
  // The mean of the timed iterations (a long run's time per iteration, which the bound
  // bounds; with stash a median can fall on either side of it: pipeline_bound.h).
  double mean_ms = 0;
  std::vector<std::vector<double>> starts_ms;  // by worker: every iteration's start, and the end
  std::vector<SendRecord> sends;  // every worker's, by worker
  uint64_t credit_bytes = 0;  // worker 0's credit at the end (FERRY_PARTITION_MS sizes it)
  uint64_t link_flows = 0;  // the fabric's flows and held messages (the Van's counters)
  uint64_t link_held = 0;
  double send_ms_p50 = 0;  // a send from handed over to arrival
  double send_ms_p99 = 0;
  // The tables' push_pull_rows (PipelineRows): calls made, a call from its start to its
  // last answer, and the payload bytes of every ROWS_PUSH and ROWS_RESULT.
  uint64_t rows_calls = 0;
  double rows_ms_p50 = 0;
  double rows_ms_p99 = 0;
  uint64_t rows_pushed_bytes = 0;
  uint64_t rows_answered_bytes = 0;
};

struct SimResult {
  std::vector<double> iteration_ms;  // every worker's timed iterations
  double median_ms = 0;
  double p90_ms = 0;
  // The timed iterations' mean: the job's pace where a worker sits steps out (`sat_out`:
  // its steps, and the others', are then short and long by turns, and the
  // median falls on either).
  double mean_ms = 0;
  double lb1_ms = 0;
  double t_opt_ms = 0;  // one push_pull of the model's bytes
  double ring_ms = 0;   // the ring all-reduce model's iteration
  std::vector<HostUse> hosts;
  std::string policy;
  uint64_t partition_bytes = 0;  // in use at the end
  uint64_t events = 0;
  uint64_t messages = 0;
  uint64_t rounds = 0;  // completed on the servers (frames count each)
  double run_ms = 0;    // simulated time of the whole run
  double ack_delay_p50_us = 0;  // acknowledgements from the server's send to arrival
  double ack_delay_p99_us = 0;
  std::vector<PartRecord> parts;  // worker 0's, with SimOptions::record_parts
  // Backup workers (FERRY_BACKUP_WORKERS): by worker rank, its pushes that came after their
  // round closed without them (the servers' backup.late_pushes); empty without.
  std::vector<uint64_t> late_pushes;
  // Backup workers: by worker rank, the backward passes it sat out to catch up
  // (SimOptions::catch_up; warm-up included); empty without backup workers.
  std::vector<int> sat_out;
  // Uneven links (docs/simulation.md, "Uneven links"): whether partitions were sized per
  // link (FERRY_PARTITION_PER_LINK in force) and cut per layer (FERRY_DECOMPOSE); by worker
  // rank its last pieces by server (empty: never decided) and the layers its last per-layer
  // decision cut; the decisions, over every worker.
  bool per_link = false;
  bool per_layer = false;
  std::vector<std::vector<uint64_t>> link_pieces;
  std::vector<int> layers_cut;
  int link_decisions = 0;
  int layer_decisions = 0;
  // Pipeline jobs only (lb1_ms, t_opt_ms and ring_ms are then 0: data parallel's).
  std::optional<PipelineOutcome> pipeline;
};

// The environment a simulated worker reads: `env` (FERRY_* only, each known to knobs.h
// and not refused) plus the DMLC_* variables the cluster implies.
std::map<std::string, std::string> WorkerEnvironment(const SimOptions& options);

SimResult Simulate(const SimOptions& options);

}  // namespace ferry::sim
