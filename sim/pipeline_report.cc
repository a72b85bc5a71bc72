#include "sim/pipeline_report.h"

#include <glog/logging.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/util/strings.h"

namespace ferry::sim {
namespace {

using nlohmann::json;

// A finite number, or null (a ratio over 0).
json Number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json Stages(const PipelineSpec& spec) {
  json stages = json::array();
  for (const PipelineStage& s : spec.stages) {
    uint64_t bytes = 0;
    for (uint64_t t : s.tensors) bytes += t;
    stages.push_back({{"forward_ms", s.forward_ms},
                      {"backward_ms", s.backward_ms},
                      {"tensors", s.tensors.size()},
                      {"bytes", bytes}});
    if (!s.sparse_rows) continue;
    stages.back()["sparse_rows"] = {{"table_rows", s.sparse_rows->table_rows},
                                    {"row_bytes", s.sparse_rows->row_bytes},
                                    {"rows", s.sparse_rows->rows}};
  }
  return stages;
}

bool HasTables(const PipelineSpec& spec) {
  for (const PipelineStage& s : spec.stages) {
    if (s.sparse_rows) return true;
  }
  return false;
}

// The tables' fields (jobs without one have none).
void AddRows(const PipelineOutcome& p, json& j) {
  j["rows_calls"] = p.rows_calls;
  j["rows_ms_p50"] = p.rows_ms_p50;
  j["rows_ms_p99"] = p.rows_ms_p99;
  j["rows_pushed_bytes"] = p.rows_pushed_bytes;
  j["rows_answered_bytes"] = p.rows_answered_bytes;
}

// "rows       ..." (jobs without a table have no such line).
std::string RowsLine(const PipelineOutcome& p) {
  char line[256];
  std::snprintf(line, sizeof(line),
                "rows       %llu push_pull_rows calls: %.2f ms p50, %.2f ms p99 from the call to "
                "every server's answer; %llu bytes of rows pushed, %llu answered\n",
                static_cast<unsigned long long>(p.rows_calls), p.rows_ms_p50, p.rows_ms_p99,
                static_cast<unsigned long long>(p.rows_pushed_bytes),
                static_cast<unsigned long long>(p.rows_answered_bytes));
  return line;
}

json Hosts(const SimResult& r) {
  json hosts = json::array();
  for (const HostUse& h : r.hosts) {
    hosts.push_back({{"name", h.name}, {"up", h.up}, {"down", h.down}});
  }
  return hosts;
}

// "vgg16_pipeline (2 stages x 2 replicas, 8 micro-batches, activations 1605632 bytes,
// stash), 4 workers, 4 colocated servers, 1 Gbit/s, latency 0 us"
std::string DescribePipelineJob(const SimOptions& o, const PipelineOutcome& p) {
  const PipelineSpec& spec = *o.pipeline;
  const ClusterSpec& c = o.cluster;
  std::string servers =
      c.colocate ? StrCat(c.workers, " colocated servers") : StrCat(c.servers, " servers");
  if (c.cpu_servers > 0) servers += StrCat(" + ", c.cpu_servers, " CPU-only");
  char rate[32];
  std::snprintf(rate, sizeof(rate), "%g", c.rate_bits_per_s / 1e9);
  return StrCat(spec.name, " (", p.stages, " stages x ", p.replicas, " replicas, ",
                spec.micro_batches, " micro-batches, activations ", spec.activation_bytes,
                " bytes, ", spec.stash ? "stash" : "no stash", "), ", c.workers, " workers, ",
                servers, ", ", rate, " Gbit/s, latency ", c.latency_us, " us");
}

}  // namespace

std::string FormatPipelineJson(const CliOptions& cli, const SimResult& r, double wall_s) {
  CHECK(r.pipeline && cli.sim.pipeline);
  const SimOptions& o = cli.sim;
  const PipelineSpec& spec = *o.pipeline;
  const PipelineOutcome& p = *r.pipeline;
  json j = {{"program", "ferry-sim"},
            {"pipeline", spec.name},
            {"stages", p.stages},
            {"replicas", p.replicas},
            {"micro_batches", spec.micro_batches},
            {"activation_bytes", spec.activation_bytes},
            {"stash", spec.stash},
            {"stage_list", Stages(spec)},
            {"byte_scale", cli.byte_scale},
            {"compute_scale", cli.compute_scale},
            {"workers", o.cluster.workers},
            {"servers", o.cluster.servers},
            {"colocate", o.cluster.colocate},
            {"cpu_servers", o.cluster.cpu_servers},
            {"rate_bits_per_s", o.cluster.rate_bits_per_s},
            {"latency_us", o.cluster.latency_us},
            {"env", o.env},
            {"policy", r.policy},
            {"partition_bytes", r.partition_bytes},
            {"credit_bytes", r.pipeline->credit_bytes},
            {"network", NetworkModelName(o.model.network)},
            {"seed", o.seed},
            {"jitter", o.model.compute_jitter},
            {"warmup", o.warmup}};
  j["iteration_ms"] = r.median_ms;
  j["p90_ms"] = r.p90_ms;
  j["mean_ms"] = p.mean_ms;
  j["bound_ms"] = p.bound.bound_ms;
  j["over_bound"] = Number(p.mean_ms / p.bound.bound_ms);
  j["t_pipe_ms"] = p.bound.t_pipe_ms;
  j["t_schedule_ms"] = p.bound.t_schedule_ms;
  j["push_pull_ms"] = p.bound.push_pull_ms;
  j["t_link_ms"] = p.bound.t_link_ms;
  j["send_ms_p50"] = p.send_ms_p50;
  j["send_ms_p99"] = p.send_ms_p99;
  j["sends"] = p.sends.size();
  j["link_flows"] = p.link_flows;
  j["link_held"] = p.link_held;
  if (HasTables(spec)) AddRows(p, j);
  j["iterations_ms"] = r.iteration_ms;
  j["hosts"] = Hosts(r);
  j["events"] = r.events;
  j["messages"] = r.messages;
  j["rounds"] = r.rounds;
  j["ack_delay_us_p50"] = r.ack_delay_p50_us;
  j["ack_delay_us_p99"] = r.ack_delay_p99_us;
  j["simulated_ms"] = r.run_ms;
  j["wall_s"] = wall_s;
  return j.dump() + "\n";
}

std::string FormatPipelineText(const CliOptions& cli, const SimResult& r, double wall_s) {
  CHECK(r.pipeline && cli.sim.pipeline);
  const SimOptions& o = cli.sim;
  const PipelineOutcome& p = *r.pipeline;
  const PipelineBound& b = p.bound;
  std::string out =
      StrCat("ferry-sim: pipeline ", DescribePipelineJob(o, p), "; policy ", r.policy,
             ", partitions ", r.partition_bytes, " bytes, credit ", p.credit_bytes, " bytes\n");
  char line[512];
  std::snprintf(line, sizeof(line),
                "iteration  median %.2f ms, p90 %.2f ms, mean %.2f ms (%zu iterations over %d "
                "workers)\n"
                "bound      %.2f ms (mean / bound %.3f): the larger of the schedule, %.2f ms "
                "(T_pipe %.2f ms; a stage's push_pull at least %.2f ms), and the busiest link, "
                "%.2f ms\n"
                "sends      %zu between stages: %.2f ms p50, %.2f ms p99 from handed over to "
                "arrival; %llu flows held %llu messages\n",
                r.median_ms, r.p90_ms, p.mean_ms, r.iteration_ms.size(), o.cluster.workers,
                b.bound_ms, p.mean_ms / b.bound_ms, b.t_schedule_ms, b.t_pipe_ms, b.push_pull_ms,
                b.t_link_ms, p.sends.size(), p.send_ms_p50, p.send_ms_p99,
                static_cast<unsigned long long>(p.link_flows),
                static_cast<unsigned long long>(p.link_held));
  out += line;
  if (HasTables(*o.pipeline)) out += RowsLine(p);
  return out + FormatTextTail(o, r, wall_s);
}

}  // namespace ferry::sim
