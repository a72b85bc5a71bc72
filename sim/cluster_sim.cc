#include "sim/cluster_sim.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/util/error.h"
#include "scheduler/scheduler.h"
#include "sim/bounds.h"
#include "sim/job.h"
#include "sim/knobs.h"
#include "sim/lower_bound.h"
#include "sim/sim_server.h"
#include "sim/sim_worker.h"

namespace ferry::sim {
namespace {

// Nearest rank, as Summarize (sim/workload.h).
double Percentile(std::vector<double> v, double q) {
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(rank), v.end());
  return v[rank];
}

void Validate(const SimOptions& o) {
  const ClusterSpec& c = o.cluster;
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
  FERRY_ENFORCE(!o.workload.layers.empty(), ErrorCode::kInvalidConfig, "the workload is empty");
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

SimResult Simulate(const SimOptions& o) {
  Validate(o);
  const ClusterSpec& c = o.cluster;
  const NodeRole worker_role = NodeRole::kWorker;
  Config config = Config::FromEnvironment(MapEnvironment(WorkerEnvironment(o)), &worker_role);
  FERRY_ENFORCE(PolicyModelled(config.scheduling.policy), ErrorCode::kInvalidConfig,
                "policy ", SchedulingPolicyName(config.scheduling.policy), " is not modelled");

  // Hosts: workers' first; then servers of their own; then CPU-only servers.
  const int W = c.workers;
  const int own = c.colocate ? 0 : c.servers;
  const int S = (c.colocate ? W : c.servers) + c.cpu_servers;
  Placing placing;
  std::vector<bool> colocated;
  std::vector<std::string> host_names;
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
  const int hosts = static_cast<int>(host_names.size());

  SimJob job;
  job.config = config;
  job.workload = o.workload;
  job.num_workers = W;
  job.num_servers = S;
  job.weights = placing.weights;
  job.sum_bytes_per_us = o.model.sum_bytes_per_s / 1e6;
  job.codec = CodecRatesOf(job.config.compression.spec);
  NetworkParams net;
  net.link_bytes_per_us = c.rate_bits_per_s / 8 / 1e6 * o.model.tcp_efficiency;
  net.latency_us = c.latency_us;
  net.message_us = o.model.message_us;
  net.local_bytes_per_us = o.model.local_bytes_per_s / 1e6;
  net.header_bytes = o.model.header_bytes;
  net.window_bytes = o.model.window_bytes;
  net.interleave_bytes = o.model.interleave_bytes;
  net.segment_bytes = o.model.segment_bytes;
  job.network = MakeNetwork(o.model.network, job.events, net, hosts);
  std::vector<int> host_of_node = placing.host_of_server;
  host_of_node.insert(host_of_node.end(), placing.host_of_worker.begin(),
                      placing.host_of_worker.end());
  FabricOptions fabric;
  fabric.control_lane = config.transport.control_lane;
  fabric.watermark_bytes = static_cast<uint64_t>(config.transport.watermark_bytes);
  fabric.shm = config.transport.shm;
  fabric.loopback_cost = o.model.loopback_cost;
  job.fabric = std::make_unique<Fabric>(*job.network, host_of_node, fabric);

  std::vector<std::unique_ptr<SimServer>> servers;
  std::vector<SimServer*> server_ptrs;
  for (int s = 0; s < S; ++s) {
    servers.push_back(std::make_unique<SimServer>(job, s));
    server_ptrs.push_back(servers.back().get());
  }
  std::vector<std::unique_ptr<SimWorker>> workers;
  for (int w = 0; w < W; ++w) {
    workers.push_back(
        std::make_unique<SimWorker>(job, w, server_ptrs, o.model.compute_jitter, o.seed));
    job.workers.push_back(workers.back().get());
  }
  if (o.record_parts) workers.front()->RecordParts();
  for (auto& w : workers) w->Start(o.warmup, o.iterations);
  job.events.Run();
  for (const auto& w : workers) {
    FERRY_ENFORCE(w->finished(), ErrorCode::kInternal,
                  "the simulated job stopped with nothing left to happen (a deadlock): ",
                  w->Describe());
  }

  SimResult r;
  for (const auto& w : workers) {
    std::vector<double> ms = w->IterationMs();
    r.iteration_ms.insert(r.iteration_ms.end(), ms.begin(), ms.end());
  }
  std::vector<double> acks;
  for (const auto& w : workers) {
    acks.insert(acks.end(), w->ack_delays_us().begin(), w->ack_delays_us().end());
  }
  if (!acks.empty()) {
    r.ack_delay_p50_us = Percentile(acks, 0.5);
    r.ack_delay_p99_us = Percentile(acks, 0.99);
  }
  const IterationSummary summary = Summarize(r.iteration_ms);
  r.median_ms = summary.median_ms;
  r.p90_ms = summary.p90_ms;
  uint64_t model_bytes = 0;
  for (const Layer& l : o.workload.layers) model_bytes += l.bytes;
  const double t_opt_us = TOptUs(placing, model_bytes, net.link_bytes_per_us);
  r.t_opt_ms = t_opt_us / 1000;
  // LB1 with B_eff = M / T_opt (the PS's min(B, S B / N) on servers of their own).
  const double b_eff = t_opt_us > 0 ? static_cast<double>(model_bytes) / t_opt_us * 1e6
                                    : std::numeric_limits<double>::max();
  r.lb1_ms = ComputeLowerBound(o.workload.layers, b_eff).lb1_ms;
  r.ring_ms = RingIterationMs(o.workload, W, net.link_bytes_per_us,
                              c.latency_us + o.model.message_us,
                              static_cast<uint64_t>(config.scheduling.bucket_bytes));
  r.policy = SchedulingPolicyName(config.scheduling.policy);
  r.partition_bytes = workers.front()->partition_bytes();
  r.events = job.events.events_run();
  r.messages = job.fabric->messages();
  for (const auto& s : servers) r.rounds += s->rounds();
  r.run_ms = job.events.now() / 1000;
  r.parts = workers.front()->parts();
  const LinkBytes carried = job.network->link_bytes();
  const double capacity = net.link_bytes_per_us * job.events.now();
  for (int h = 0; h < hosts; ++h) {
    r.hosts.push_back(HostUse{host_names[h], capacity > 0 ? carried.up[h] / capacity : 0,
                              capacity > 0 ? carried.down[h] / capacity : 0});
  }
  return r;
}

}  // namespace ferry::sim
