#include "sim/cluster_sim.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "common/util/error.h"
#include "common/config/scheduling_policy.h"
#include "scheduler/scheduler.h"
#include "sim/bounds.h"
#include "sim/job.h"
#include "sim/knobs.h"
#include "sim/lower_bound.h"
#include "sim/pipeline_bound.h"
#include "sim/pipeline_rows.h"
#include "sim/pipeline_worker.h"
#include "sim/sim_server.h"
#include "sim/sim_worker.h"
#include "worker/tensor_catalog.h"

namespace ferry::sim {

bool ClusterSpec::Uneven() const {
  for (double rate : worker_rates_bits_per_s) {
    if (rate != worker_rates_bits_per_s.front()) return true;
  }
  return false;
}

double ClusterSpec::SlowestRate() const {
  double slowest = rate_bits_per_s;
  for (double rate : worker_rates_bits_per_s) slowest = std::min(slowest, rate);
  // Colocated, every host is a worker's: --rate is then no host's.
  if (colocate && cpu_servers == 0 && !worker_rates_bits_per_s.empty()) {
    slowest = *std::min_element(worker_rates_bits_per_s.begin(), worker_rates_bits_per_s.end());
  }
  return slowest;
}

namespace {

// Nearest rank, as Summarize (sim/workload.h).
double Percentile(std::vector<double> v, double q) {
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(rank), v.end());
  return v[rank];
}

void Validate(const SimOptions& o) {
  const ClusterSpec& c = o.cluster;
  FERRY_ENFORCE(c.worker_rates_bits_per_s.empty() ||
                    c.worker_rates_bits_per_s.size() == static_cast<size_t>(c.workers),
                ErrorCode::kInvalidConfig, "--worker-link-rates: ",
                c.worker_rates_bits_per_s.size(), " rates for ", c.workers, " workers (--workers)");
  for (double rate : c.worker_rates_bits_per_s) {
    FERRY_ENFORCE(rate > 0 && std::isfinite(rate), ErrorCode::kInvalidConfig,
                  "--worker-link-rates: every rate must be > 0, got ", rate);
  }
  const auto decompose = o.env.find("FERRY_DECOMPOSE");
  FERRY_ENFORCE(!o.pipeline || decompose == o.env.end() || decompose->second == "off",
                ErrorCode::kInvalidConfig,
                "FERRY_DECOMPOSE=per-layer is modelled for data-parallel jobs, not with a "
                "pipeline");
  FERRY_ENFORCE(c.workers >= 1, ErrorCode::kInvalidConfig, "need at least one worker, got ",
                c.workers);
  FERRY_ENFORCE(c.servers >= 0 && c.cpu_servers >= 0, ErrorCode::kInvalidConfig,
                "server counts must be >= 0, got ", c.servers, " and ", c.cpu_servers);
  FERRY_ENFORCE(c.colocate || c.servers + c.cpu_servers >= 1, ErrorCode::kInvalidConfig,
                "need at least one server (--servers, --colocate or --cpu-servers)");
  FERRY_ENFORCE(c.rate_bits_per_s > 0 && c.latency_us >= 0, ErrorCode::kInvalidConfig,
                "need a rate > 0 and a latency >= 0");
  FERRY_ENFORCE(o.warmup >= 0 && o.iterations >= 1, ErrorCode::kInvalidConfig,
                "need --iterations >= 1 and a warm-up >= 0");
  for (const auto& [rank, factor] : o.worker_compute_scale) {
    FERRY_ENFORCE(rank >= 0 && rank < c.workers && factor > 0 && std::isfinite(factor),
                  ErrorCode::kInvalidConfig, "--worker-compute-scale ", rank, ":", factor,
                  ": needs a worker rank from 0 to ", c.workers - 1, " and a factor > 0");
  }
  FERRY_ENFORCE(o.rotating_slow_factor > 0 && std::isfinite(o.rotating_slow_factor),
                ErrorCode::kInvalidConfig, "--rotating-slow-factor ", o.rotating_slow_factor,
                ": needs a factor > 0");
  FERRY_ENFORCE(!o.pipeline || o.rotating_slow_factor == 1, ErrorCode::kInvalidConfig,
                "--rotating-slow-factor: only for data-parallel jobs, not with a pipeline");
  if (o.pipeline) {
    const int stages = o.pipeline->num_stages();
    FERRY_ENFORCE(stages >= 1 && o.pipeline->micro_batches >= 1, ErrorCode::kInvalidConfig,
                  "the pipeline ", o.pipeline->name, " needs a stage and a micro-batch");
    FERRY_ENFORCE(c.workers % stages == 0, ErrorCode::kInvalidConfig, "--workers ", c.workers,
                  " is not a multiple of the ", stages, " stages of the pipeline ",
                  o.pipeline->name);
    for (int s = 0; s < stages; ++s) {
      const std::optional<SparseRows>& t = o.pipeline->stages[static_cast<size_t>(s)].sparse_rows;
      FERRY_ENFORCE(
          !t || (t->table_rows >= 1 && t->rows >= 1 && t->row_bytes >= 4 && t->row_bytes % 4 == 0),
          ErrorCode::kInvalidConfig, "the pipeline ", o.pipeline->name, ": stages[", s,
          "].sparse_rows needs table_rows and rows >= 1 and row_bytes a positive multiple of 4");
    }
  } else {
    FERRY_ENFORCE(!o.workload.layers.empty(), ErrorCode::kInvalidConfig, "the workload is empty");
  }
  const ModelParams& m = o.model;
  FERRY_ENFORCE(m.tcp_efficiency > 0 && m.tcp_efficiency <= 1 && m.message_us >= 0 &&
                    m.sum_bytes_per_s > 0 && m.local_bytes_per_s > 0 && m.loopback_cost >= 0 &&
                    m.compute_jitter >= 0,
                ErrorCode::kInvalidConfig, "a model constant is out of range");
}

}  // namespace

std::map<std::string, std::string> WorkerEnvironment(const SimOptions& o) {
  std::map<std::string, std::string> env;
  for (const auto& [name, value] : o.env) {
    const Knob* knob = FindKnob(name);
    FERRY_ENFORCE(knob, ErrorCode::kInvalidConfig, "--env ", name, ": ",
                  name.rfind("FERRY_", 0) == 0
                      ? "not a variable Ferry reads (docs/configuration.md)"
                      : "only FERRY_* variables; the cluster comes from --workers, --servers, "
                        "--colocate and --cpu-servers");
    FERRY_ENFORCE(knob->use != KnobUse::kRefused, ErrorCode::kInvalidConfig, "--env ", name,
                  ": ferry-sim cannot model it: ", knob->note);
    env[name] = value;
  }
  const ClusterSpec& c = o.cluster;
  const int servers = (c.colocate ? c.workers : c.servers) + c.cpu_servers;
  env["DMLC_ROLE"] = "worker";
  env["DMLC_NUM_WORKER"] = std::to_string(c.workers);
  env["DMLC_NUM_SERVER"] = std::to_string(servers);
  env["DMLC_PS_ROOT_URI"] = "127.0.0.1";
  env["DMLC_PS_ROOT_PORT"] = "9000";
  return env;
}

namespace {

// What both kinds of job run on: the hosts, the network, the fabric and the servers.
struct Cluster {
  Placing placing;
  std::vector<std::string> host_names;
  NetworkParams net;
  std::vector<std::unique_ptr<SimServer>> servers;
  std::vector<SimServer*> server_ptrs;
};

void SetUpHosts(const ClusterSpec& c, Cluster& cluster) {
  // Hosts: workers' first; then servers of their own; then CPU-only servers.
  const int W = c.workers;
  const int own = c.colocate ? 0 : c.servers;
  const int S = (c.colocate ? W : c.servers) + c.cpu_servers;
  Placing& placing = cluster.placing;
  std::vector<bool> colocated;
  std::vector<std::string>& host_names = cluster.host_names;
  for (int w = 0; w < W; ++w) {
    placing.host_of_worker.push_back(w);
    host_names.push_back(c.colocate ? StrCat("worker ", w, " + server ", w) : StrCat("worker ", w));
  }
  for (int s = 0; s < S; ++s) {
    const bool on_worker = c.colocate && s < W;
    colocated.push_back(on_worker);
    if (on_worker) {
      placing.host_of_server.push_back(s);
      continue;
    }
    placing.host_of_server.push_back(static_cast<int>(host_names.size()));
    host_names.push_back(StrCat("server ", s, s >= (c.colocate ? W : own) ? " (cpu)" : ""));
  }
  placing.weights = ServerWeights(colocated);
}

// The config a job runs under: `given`, but with the default policy a pipeline (whose
// stages send to each other) runs under trirace's frames and watermark, which a worker takes
// once sends are seen (config.h, trirace_on_sends): here from the start, where a real job
// switches at its third iteration (the warm-up's).
Config RunningConfig(const SimOptions& o, const Config& given) {
  Config c = given;
  if (o.pipeline && o.pipeline->stages.size() >= 2) {
    c.scheduling.trirace_on_sends.ApplyTo(c.transport);
  }
  return c;
}

// The job's config, network, fabric and servers; `cluster` gets the hosts and servers.
void SetUp(const SimOptions& o, const Config& given, SimJob& job, Cluster& cluster) {
  const ClusterSpec& c = o.cluster;
  SetUpHosts(c, cluster);
  const Placing& placing = cluster.placing;
  const int W = c.workers;
  const int S = static_cast<int>(placing.host_of_server.size());
  job.config = RunningConfig(o, given);
  const Config& config = job.config;
  job.workload = o.workload;
  job.num_workers = W;
  job.num_servers = S;
  job.weights = placing.weights;
  job.sum_bytes_per_us = o.model.sum_bytes_per_s / 1e6;
  job.codec = CodecRatesOf(job.config.compression.spec);
  NetworkParams& net = cluster.net;
  net.link_bytes_per_us = c.rate_bits_per_s / 8 / 1e6 * o.model.tcp_efficiency;
  if (!c.worker_rates_bits_per_s.empty()) {
    net.host_bytes_per_us.assign(cluster.host_names.size(), 0.0);
    for (int w = 0; w < W; ++w) {
      net.host_bytes_per_us[static_cast<size_t>(placing.host_of_worker[w])] =
          c.WorkerRate(w) / 8 / 1e6 * o.model.tcp_efficiency;
    }
  }
  net.latency_us = c.latency_us;
  net.message_us = o.model.message_us;
  net.local_bytes_per_us = o.model.local_bytes_per_s / 1e6;
  net.header_bytes = o.model.header_bytes;
  net.window_bytes = o.model.window_bytes;
  net.interleave_bytes = o.model.interleave_bytes;
  net.segment_bytes = o.model.segment_bytes;
  job.network = MakeNetwork(o.model.network, job.events, net,
                            static_cast<int>(cluster.host_names.size()));
  std::vector<int> host_of_node = placing.host_of_server;
  host_of_node.insert(host_of_node.end(), placing.host_of_worker.begin(),
                      placing.host_of_worker.end());
  FabricOptions fabric;
  fabric.control_lane = config.transport.control_lane;
  fabric.watermark_bytes = static_cast<uint64_t>(config.transport.watermark_bytes);
  fabric.shm = config.transport.shm;
  fabric.loopback_cost = o.model.loopback_cost;
  // The workers' Vans schedule links (the servers' never do): nodes S.. are workers.
  fabric.link_scheduling.assign(host_of_node.size(), false);
  for (int w = 0; w < W; ++w) {
    fabric.link_scheduling[job.WorkerNode(w)] = SchedulesLinks(config.scheduling.policy);
  }
  job.fabric = std::make_unique<Fabric>(*job.network, host_of_node, fabric);
  for (int s = 0; s < S; ++s) {
    cluster.servers.push_back(std::make_unique<SimServer>(job, s));
    cluster.server_ptrs.push_back(cluster.servers.back().get());
  }
}

// Worker `rank`'s factor on its compute times (SimOptions::worker_compute_scale).
double ComputeScaleOf(const SimOptions& o, int rank) {
  const auto it = o.worker_compute_scale.find(rank);
  return it == o.worker_compute_scale.end() ? 1.0 : it->second;
}

Config WorkerConfig(const SimOptions& o) {
  const NodeRole worker_role = NodeRole::kWorker;
  Config config = Config::FromEnvironment(MapEnvironment(WorkerEnvironment(o)), &worker_role);
  FERRY_ENFORCE(PolicyModelled(config.scheduling.policy), ErrorCode::kInvalidConfig,
                "policy ", SchedulingPolicyName(config.scheduling.policy), " is not modelled");
  return config;
}

// Every worker's timed iterations, in rank order, once the event queue ran dry. Throws
// FerryError(kInternal) naming the first worker that did not finish (a deadlock).
template <typename Worker>
std::vector<double> FinishedIterationsMs(const std::vector<std::unique_ptr<Worker>>& workers) {
  std::vector<double> iteration_ms;
  for (const auto& w : workers) {
    FERRY_ENFORCE(w->finished(), ErrorCode::kInternal,
                  "the simulated job stopped with nothing left to happen (a deadlock): ",
                  w->Describe());
    std::vector<double> ms = w->IterationMs();
    iteration_ms.insert(iteration_ms.end(), ms.begin(), ms.end());
  }
  return iteration_ms;
}

// What every job reports alike: the iterations, the ack delays, the counts and the links.
void Report(const SimJob& job, const Cluster& cluster, const std::vector<const SimSender*>& senders,
            std::vector<double> iteration_ms, SimResult& r) {
  r.iteration_ms = std::move(iteration_ms);
  std::vector<double> acks;
  for (const SimSender* s : senders) {
    acks.insert(acks.end(), s->ack_delays_us().begin(), s->ack_delays_us().end());
  }
  if (!acks.empty()) {
    r.ack_delay_p50_us = Percentile(acks, 0.5);
    r.ack_delay_p99_us = Percentile(acks, 0.99);
  }
  const IterationSummary summary = Summarize(r.iteration_ms);
  r.median_ms = summary.median_ms;
  r.p90_ms = summary.p90_ms;
  r.mean_ms = summary.mean_ms;
  r.policy = SchedulingPolicyName(job.config.scheduling.policy);
  r.events = job.events.events_run();
  r.messages = job.fabric->messages();
  for (const auto& s : cluster.servers) r.rounds += s->rounds();
  r.run_ms = job.events.now() / 1000;
  r.parts = senders.front()->parts();
  for (const auto& s : cluster.servers) {
    const std::vector<uint64_t> late = s->late_pushes();
    r.late_pushes.resize(late.size(), 0);
    for (size_t w = 0; w < late.size(); ++w) r.late_pushes[w] += late[w];
  }
  const LinkBytes carried = job.network->link_bytes();
  for (size_t h = 0; h < cluster.host_names.size(); ++h) {
    const double capacity = cluster.net.RateOf(static_cast<int>(h)) * job.events.now();
    r.hosts.push_back(HostUse{cluster.host_names[h], capacity > 0 ? carried.up[h] / capacity : 0,
                              capacity > 0 ? carried.down[h] / capacity : 0});
  }
}

SimResult SimulateDataParallel(const SimOptions& o) {
  const ClusterSpec& c = o.cluster;
  const Config config = WorkerConfig(o);
  SimJob job;
  Cluster cluster;
  SetUp(o, config, job, cluster);
  // As SchedulingControl: per link where partitions are sized by time, without backup
  // workers (FERRY_AUTOTUNE and asynchronous training are refused above).
  const Config::Scheduling& sc = job.config.scheduling;
  job.per_link = sc.partition_per_link && job.SizesPartitionsByTime() &&
                 job.config.server.backup_workers == 0;
  job.per_layer = sc.decompose_per_layer;
  std::vector<std::unique_ptr<SimWorker>> workers;
  std::vector<const SimSender*> senders;
  for (int w = 0; w < c.workers; ++w) {
    workers.push_back(std::make_unique<SimWorker>(job, w, cluster.server_ptrs,
                                                  o.model.compute_jitter, o.seed));
    workers.back()->ScaleCompute(ComputeScaleOf(o, w));
    workers.back()->RotateStraggler(o.rotating_slow_factor);
    workers.back()->SetCatchUp(o.catch_up);
    job.senders.push_back(&workers.back()->sender());
    senders.push_back(&workers.back()->sender());
  }
  if (o.record_parts) workers.front()->sender().RecordParts();
  for (auto& w : workers) w->Start(o.warmup, o.iterations);
  job.events.Run();
  const bool stopped = std::any_of(workers.begin(), workers.end(),
                                   [](const auto& w) { return !w->finished(); });
  for (const auto& s : cluster.servers) {
    const std::string round = stopped ? s->Starved() : "";
    FERRY_ENFORCE(round.empty(), ErrorCode::kInternal,
                  "the simulated job stopped: every worker sat out ", round,
                  " (catching up, --catch-up ", CatchUpName(o.catch_up),
                  "), so that round has no push to sum and never closes (a real job hangs "
                  "there)");
  }
  SimResult r;
  Report(job, cluster, senders, FinishedIterationsMs(workers), r);
  if (!r.late_pushes.empty()) {  // backup workers
    for (const auto& w : workers) r.sat_out.push_back(w->sat_out());
  }
  uint64_t model_bytes = 0;
  for (const Layer& l : o.workload.layers) model_bytes += l.bytes;
  // The bounds at the slowest link: every sum holds that worker's bytes.
  const double slowest = c.SlowestRate() / 8 / 1e6 * o.model.tcp_efficiency;
  const double t_opt_us = TOptUs(cluster.placing, model_bytes, slowest);
  r.t_opt_ms = t_opt_us / 1000;
  // LB1 with B_eff = M / T_opt (the PS's min(B, S B / N) on servers of their own).
  const double b_eff = t_opt_us > 0 ? static_cast<double>(model_bytes) / t_opt_us * 1e6
                                    : std::numeric_limits<double>::max();
  r.lb1_ms = ComputeLowerBound(o.workload.layers, b_eff).lb1_ms;
  r.ring_ms = RingIterationMs(o.workload, c.workers, slowest,
                              c.latency_us + o.model.message_us,
                              static_cast<uint64_t>(config.scheduling.bucket_bytes));
  r.partition_bytes = workers.front()->partition_bytes();
  r.per_link = job.per_link;
  r.per_layer = job.per_layer;
  for (const auto& w : workers) {
    const PieceSizing& p = w->pieces();
    r.link_pieces.push_back(p.link_pieces());
    r.link_decisions += p.link_decisions();
    r.layer_decisions += p.layer_decisions();
    r.layers_cut.push_back(p.layers_cut());
  }
  return r;
}

// The job's tables (PipelineRows), in stage order, each as urgent as the first tensor of
// its stage's set (the catalog's default priority, -id). They are the global set's
// tensors: `job`'s workload becomes them.
std::vector<RowsTable> Tables(const PipelineSpec& spec, const std::vector<int>& sets, SimJob& job) {
  std::vector<RowsTable> tables;
  job.workload = Workload{spec.name, {}};
  for (int s = 0; s < spec.num_stages(); ++s) {
    const std::optional<SparseRows>& rows = spec.stages[static_cast<size_t>(s)].sparse_rows;
    if (!rows) continue;
    const uint64_t id = ProcessSetFirstId(sets[static_cast<size_t>(s)]);
    tables.push_back(RowsTable{s, *rows, -static_cast<int>(std::min<uint64_t>(id, INT32_MAX))});
    job.workload.layers.push_back(
        Layer{StrCat("stage ", s, " table"), rows->table_rows * rows->row_bytes, 0, 0});
  }
  return tables;
}

// One replica's push_pull_rows of each stage's table in one iteration, for every cut of the
// global set the run used (PipelineCluster::rows_by_cut).
std::vector<std::vector<PipelineCluster::Rows>> RowsByCut(const SimJob& job, PipelineRows& rows,
                                                          int stages) {
  std::vector<std::vector<PipelineCluster::Rows>> cuts;
  for (const auto& cut : job.layouts) {
    std::vector<PipelineCluster::Rows> by_stage(static_cast<size_t>(stages));
    for (size_t t = 0; t < rows.tables(); ++t) {
      const SparseRows& table = rows.table(t).rows;
      const std::vector<uint64_t>& to = rows.RowsPerServer(t, cut.first);
      for (size_t server = 0; server < to.size(); ++server) {
        by_stage[static_cast<size_t>(rows.table(t).stage)].push_back(PipelineCluster::RowsShare{
            static_cast<int>(server), to[server] * (kRowIdBytes + table.row_bytes),
            to[server] * table.row_bytes});
      }
    }
    cuts.push_back(std::move(by_stage));
  }
  return cuts;
}

// What the pipeline's bound needs of this cluster: the hosts and the stages' layouts (set
// s + 1 is stage s's; its tensors' two versions one after the other), for every partition
// size the run used (every set switches with the global set: each has a layout of each).
PipelineCluster BoundInputs(const SimOptions& o, const SimJob& job, const Cluster& cluster) {
  PipelineCluster pc;
  pc.host_of_worker = cluster.placing.host_of_worker;
  pc.host_of_server = cluster.placing.host_of_server;
  pc.hosts = static_cast<int>(cluster.host_names.size());
  for (const auto& cut : job.sets.at(1).layouts) {
    std::vector<std::vector<PipelineCluster::Parts>> by_stage;
    for (int s = 0; s < o.pipeline->num_stages(); ++s) {
      const Layout& layout = *job.sets[static_cast<size_t>(s) + 1].layouts.at(cut.first);
      const size_t tensors = layout.parts.size() / 2;
      std::vector<PipelineCluster::Parts> versions(2);
      for (size_t t = 0; t < layout.parts.size(); ++t) {
        for (const SimPart& p : layout.parts[t]) {
          versions[t / std::max<size_t>(tensors, 1)].emplace_back(p.server, p.wire_bytes);
        }
      }
      by_stage.push_back(std::move(versions));
    }
    pc.parts_by_cut.push_back(std::move(by_stage));
  }
  return pc;
}

// A finished pipeline job's own results (but the bound): what each worker did.
PipelineOutcome PipelineResults(const SimJob& job,
                                const std::vector<std::unique_ptr<PipelineWorker>>& workers,
                                std::vector<double>* iteration_ms) {
  *iteration_ms = FinishedIterationsMs(workers);
  PipelineOutcome p;
  for (const auto& w : workers) {
    p.sends.insert(p.sends.end(), w->sends().begin(), w->sends().end());
    std::vector<double> starts;
    for (SimTime us : w->starts()) starts.push_back(us / 1000);
    p.starts_ms.push_back(std::move(starts));
  }
  p.credit_bytes = workers.front()->sender().core().credit_bytes();
  p.link_flows = job.fabric->flows_opened();
  p.link_held = job.fabric->held_messages();
  std::vector<double> delays;
  for (const SendRecord& s : p.sends) delays.push_back(s.arrived_us - s.sent_us);
  if (!delays.empty()) {
    p.send_ms_p50 = Percentile(delays, 0.5) / 1000;
    p.send_ms_p99 = Percentile(delays, 0.99) / 1000;
  }
  return p;
}

// The tables' calls (push_pull_rows) of a finished pipeline job.
void AddRowsResults(const PipelineRows& rows, PipelineOutcome& p) {
  p.rows_calls = rows.call_us().size();
  p.rows_pushed_bytes = rows.pushed_bytes();
  p.rows_answered_bytes = rows.answered_bytes();
  if (rows.call_us().empty()) return;
  p.rows_ms_p50 = Percentile(rows.call_us(), 0.5) / 1000;
  p.rows_ms_p99 = Percentile(rows.call_us(), 0.99) / 1000;
}

SimResult SimulatePipeline(const SimOptions& o) {
  const PipelineSpec& spec = *o.pipeline;
  const int W = o.cluster.workers;
  const int replicas = W / spec.num_stages();
  const Config config = WorkerConfig(o);
  SimJob job;
  Cluster cluster;
  SetUp(o, config, job, cluster);
  // The sets start in the first partition size and switch with the global set's
  // (worker/process_sets.h; PipelineWorker).
  const auto partition = static_cast<uint64_t>(config.scheduling.InitialPartitionBytes());
  // Each stage's set holds two versions of its tensors, declared one after the other.
  std::vector<int> sets;
  for (const PipelineStage& stage : spec.stages) {
    std::vector<uint64_t> versions = stage.tensors;
    versions.insert(versions.end(), stage.tensors.begin(), stage.tensors.end());
    sets.push_back(job.AddProcessSet(replicas, versions, partition));
  }
  PipelineRows rows(job, Tables(spec, sets, job), cluster.server_ptrs, replicas);
  for (size_t t = 0; t < rows.tables(); ++t) rows.RowsPerServer(t, partition);  // refusals first
  std::vector<std::unique_ptr<PipelineWorker>> workers;
  std::vector<PipelineWorker*> peers;
  std::vector<const SimSender*> senders;
  for (int w = 0; w < W; ++w) {
    workers.push_back(std::make_unique<PipelineWorker>(
        job, spec, w, sets[static_cast<size_t>(w / replicas)], cluster.server_ptrs, peers, rows,
        o.model.compute_jitter, o.seed, o.pipeline_step_boundary));
    workers.back()->ScaleCompute(ComputeScaleOf(o, w));
    peers.push_back(workers.back().get());
    job.senders.push_back(&workers.back()->sender());
    senders.push_back(&workers.back()->sender());
  }
  if (o.record_parts) workers.front()->sender().RecordParts();
  for (auto& w : workers) w->Start(o.warmup, o.iterations);
  job.events.Run();
  std::vector<double> iteration_ms;
  PipelineOutcome p = PipelineResults(job, workers, &iteration_ms);
  SimResult r;
  Report(job, cluster, senders, std::move(iteration_ms), r);
  r.partition_bytes = workers.front()->partition_bytes();
  p.stages = spec.num_stages();
  p.replicas = replicas;
  p.mean_ms = Summarize(r.iteration_ms).mean_ms;
  AddRowsResults(rows, p);
  p.cluster = BoundInputs(o, job, cluster);
  p.cluster.rows_by_cut = RowsByCut(job, rows, spec.num_stages());
  p.bound = ComputePipelineBound(spec, p.cluster, o.cluster.rate_bits_per_s, o.cluster.latency_us);
  r.pipeline = std::move(p);
  return r;
}

}  // namespace

SimResult Simulate(const SimOptions& o) {
  Validate(o);
  return o.pipeline ? SimulatePipeline(o) : SimulateDataParallel(o);
}

}  // namespace ferry::sim
